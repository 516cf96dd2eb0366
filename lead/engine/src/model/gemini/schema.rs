//! A tool's JSON schema turned into the OpenAPI subset Gemini's `functionDeclarations`
//! accept (the `Schema` object of the Gemini API). The conversion is pure and total:
//! whatever a tool declares, a schema Gemini takes comes out, and what Gemini cannot
//! express is dropped, as listed here.
//!
//! Kept: `type` (upper case: `STRING`, `NUMBER`, `INTEGER`, `BOOLEAN`, `ARRAY`, `OBJECT`),
//! `description`, `title`, `properties`, `required` (only names that are properties),
//! `items`, `enum`, `nullable`, `anyOf`, `minItems`/`maxItems`,
//! `minLength`/`maxLength`, `minimum`/`maximum`, `minProperties`/`maxProperties`,
//! `pattern`, and the formats Gemini knows (`date-time` and `enum` on strings, `float`
//! and `double` on numbers, `int32` and `int64` on integers).
//!
//! Rewritten:
//! - `$ref` to `#/$defs/…` or `#/definitions/…` is inlined; a reference that recurses
//!   (or goes deeper than [`MAX_DEPTH`]) becomes a bare `{"type": "OBJECT"}` with the
//!   reference's description, so recursive structures lose their inner shape;
//! - a `type` array becomes its one non-null type with `nullable: true`, or an `anyOf`
//!   of one schema per type;
//! - `oneOf` becomes `anyOf` (exclusivity is lost); an `anyOf` member `{"type": "null"}`
//!   becomes `nullable: true`, and an `anyOf` left with one member is that member;
//! - `allOf` is merged into one schema (properties and `required` united, the first
//!   value of any other keyword wins);
//! - `const` becomes a one-value `enum`;
//! - `enum` values become strings and the type `STRING` (Gemini takes enums on strings
//!   only): a numeric or boolean enum comes back from the model as a string, and a null
//!   member becomes `nullable: true`;
//! - a schema without `type` gets `OBJECT` when it has `properties`, `ARRAY` when it has
//!   `items`, `STRING` when it has an `enum`; otherwise it stays without one (any value).
//!
//! Lost (dropped): `additionalProperties` (closed and map-like objects alike: a map's
//! value schema is gone), `patternProperties`, `$schema`, `$id`, `$defs`/`definitions`
//! (after inlining), `default`, `examples`/`example`, `not`, `if`/`then`/`else`,
//! `dependentRequired`/`dependentSchemas`, `uniqueItems`, `multipleOf`,
//! `exclusiveMinimum`/`exclusiveMaximum`, `prefixItems` (tuples), `contains`,
//! `readOnly`/`writeOnly`/`deprecated`, `contentEncoding`/`contentMediaType`, every other
//! format (`email`, `uri`, `uuid`, `date`, ...), and any other key.

use serde_json::{Map, Value};

/// How deep a schema is followed (nesting and `$ref` chains); deeper parts become a
/// bare object.
pub const MAX_DEPTH: usize = 32;

/// The keywords copied as they are (after their values are converted).
const NUMERIC_KEYWORDS: &[&str] = &[
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "minProperties",
    "maxProperties",
];

/// A tool's `parameters` as Gemini's `parameters` (`None`: the tool takes no arguments,
/// and the declaration has no `parameters`, as Gemini wants for an empty object).
pub fn function_parameters(schema: &Value) -> Option<Value> {
    let converted = convert(schema);
    let empty_object = converted.get("type").and_then(Value::as_str) == Some("OBJECT")
        && converted
            .get("properties")
            .and_then(Value::as_object)
            .is_none_or(Map::is_empty);
    (!empty_object).then_some(converted)
}

/// One JSON schema in Gemini's subset (the root's `$defs`/`definitions` resolve its
/// `$ref`s).
pub fn convert(schema: &Value) -> Value {
    let converter = Converter { root: schema };
    Value::Object(converter.schema(schema, 0, &mut Vec::new()))
}

struct Converter<'a> {
    root: &'a Value,
}

impl Converter<'_> {
    /// `refs` holds the references being inlined above this schema (to stop recursion).
    fn schema(&self, schema: &Value, depth: usize, refs: &mut Vec<String>) -> Map<String, Value> {
        let Some(object) = schema.as_object() else {
            // `true` or `{}`-like: any value.
            return Map::new();
        };
        if depth > MAX_DEPTH {
            return bare_object(object);
        }
        if let Some(reference) = object.get("$ref").and_then(Value::as_str) {
            return self.reference(reference, object, depth, refs);
        }
        if let Some(Value::Array(parts)) = object.get("allOf") {
            let merged = merge_all_of(object, parts);
            return self.schema(&Value::Object(merged), depth + 1, refs);
        }

        let mut out = Map::new();
        let mut nullable = object.get("nullable").and_then(Value::as_bool) == Some(true);
        let mut types: Vec<String> = match object.get("type") {
            Some(Value::String(t)) => vec![t.clone()],
            Some(Value::Array(ts)) => ts
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            _ => Vec::new(),
        };
        if types.iter().any(|t| t == "null") {
            nullable = true;
            types.retain(|t| t != "null");
        }

        for key in ["description", "title", "pattern"] {
            if let Some(Value::String(text)) = object.get(key) {
                out.insert(key.to_owned(), Value::String(text.clone()));
            }
        }
        for key in NUMERIC_KEYWORDS {
            if let Some(value @ Value::Number(_)) = object.get(*key) {
                out.insert((*key).to_owned(), value.clone());
            }
        }

        // `enum` (and `const`) as strings on a string.
        let values = match (object.get("enum"), object.get("const")) {
            (Some(Value::Array(values)), _) => Some(values.clone()),
            (None, Some(value)) => Some(vec![value.clone()]),
            _ => None,
        };
        if let Some(values) = values {
            if values.iter().any(Value::is_null) {
                nullable = true;
            }
            let strings: Vec<Value> = values
                .iter()
                .filter(|v| !v.is_null())
                .map(|v| match v {
                    Value::String(s) => Value::String(s.clone()),
                    other => Value::String(other.to_string()),
                })
                .collect();
            if !strings.is_empty() {
                out.insert("enum".to_owned(), Value::Array(strings));
                types = vec!["string".to_owned()];
            }
        }

        let properties = object.get("properties").and_then(Value::as_object);
        let items = object
            .get("items")
            .filter(|i| i.is_object() || i.is_boolean());
        if types.is_empty() {
            if properties.is_some() {
                types.push("object".to_owned());
            } else if items.is_some() {
                types.push("array".to_owned());
            }
        }

        // Alternatives: `anyOf`/`oneOf`, or several types.
        let alternatives = object
            .get("anyOf")
            .or_else(|| object.get("oneOf"))
            .and_then(Value::as_array);
        if let Some(alternatives) = alternatives {
            let mut members = Vec::new();
            for member in alternatives {
                if member.get("type").and_then(Value::as_str) == Some("null") {
                    nullable = true;
                    continue;
                }
                members.push(Value::Object(self.schema(member, depth + 1, refs)));
            }
            match members.len() {
                0 => {}
                1 => {
                    if let Some(Value::Object(only)) = members.pop() {
                        // The member's own keys, under the outer description and title.
                        for (key, value) in only {
                            out.entry(key).or_insert(value);
                        }
                    }
                }
                _ => {
                    out.insert("anyOf".to_owned(), Value::Array(members));
                }
            }
        }
        if types.len() > 1 {
            let members = types
                .iter()
                .map(|t| {
                    let mut one = object.clone();
                    one.insert("type".to_owned(), Value::String(t.clone()));
                    one.remove("description");
                    one.remove("title");
                    Value::Object(self.schema(&Value::Object(one), depth + 1, refs))
                })
                .collect();
            out.insert("anyOf".to_owned(), Value::Array(members));
            types.clear();
        }

        if let Some(t) = types.first() {
            let gemini_type = t.to_ascii_uppercase();
            if let Some(Value::String(format)) = object.get("format") {
                if format_kept(&gemini_type, format) {
                    out.insert("format".to_owned(), Value::String(format.clone()));
                }
            }
            if gemini_type == "OBJECT" {
                let mut converted = Map::new();
                for (name, property) in properties.into_iter().flatten() {
                    converted.insert(
                        name.clone(),
                        Value::Object(self.schema(property, depth + 1, refs)),
                    );
                }
                let required: Vec<Value> = object
                    .get("required")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .filter(|name| converted.contains_key(*name))
                    .map(|name| Value::String(name.to_owned()))
                    .collect();
                if !converted.is_empty() {
                    out.insert("properties".to_owned(), Value::Object(converted));
                }
                if !required.is_empty() {
                    out.insert("required".to_owned(), Value::Array(required));
                }
            }
            if gemini_type == "ARRAY" {
                let item = items.map_or_else(Map::new, |i| self.schema(i, depth + 1, refs));
                out.insert("items".to_owned(), Value::Object(item));
            }
            out.insert("type".to_owned(), Value::String(gemini_type));
        }
        if nullable {
            out.insert("nullable".to_owned(), Value::Bool(true));
        }
        out
    }

    fn reference(
        &self,
        reference: &str,
        at: &Map<String, Value>,
        depth: usize,
        refs: &mut Vec<String>,
    ) -> Map<String, Value> {
        let target = reference
            .strip_prefix("#/$defs/")
            .map(|name| ("$defs", name))
            .or_else(|| {
                reference
                    .strip_prefix("#/definitions/")
                    .map(|name| ("definitions", name))
            })
            .and_then(|(defs, name)| self.root.get(defs)?.get(name));
        let Some(target) = target else {
            // An external or malformed reference: any value, with what it says of itself.
            return bare(at);
        };
        if refs.iter().any(|r| r == reference) {
            return bare_object(at);
        }
        refs.push(reference.to_owned());
        let mut out = self.schema(target, depth + 1, refs);
        refs.pop();
        // Keywords beside the `$ref` (a description, say) win over the target's.
        for key in ["description", "title"] {
            if let Some(Value::String(text)) = at.get(key) {
                out.insert(key.to_owned(), Value::String(text.clone()));
            }
        }
        if at.get("nullable").and_then(Value::as_bool) == Some(true) {
            out.insert("nullable".to_owned(), Value::Bool(true));
        }
        out
    }
}

/// The schema's description and title only.
fn bare(object: &Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    for key in ["description", "title"] {
        if let Some(Value::String(text)) = object.get(key) {
            out.insert(key.to_owned(), Value::String(text.clone()));
        }
    }
    out
}

/// An object of unknown shape (a recursive reference, or too deep).
fn bare_object(object: &Map<String, Value>) -> Map<String, Value> {
    let mut out = bare(object);
    out.insert("type".to_owned(), Value::String("OBJECT".to_owned()));
    out
}

/// `allOf` members merged into the schema that holds them.
fn merge_all_of(object: &Map<String, Value>, parts: &[Value]) -> Map<String, Value> {
    let mut merged = object.clone();
    merged.remove("allOf");
    for part in parts.iter().filter_map(Value::as_object) {
        for (key, value) in part {
            match (key.as_str(), merged.get_mut(key), value) {
                ("properties", Some(Value::Object(into)), Value::Object(more)) => {
                    for (name, schema) in more {
                        into.entry(name.clone()).or_insert_with(|| schema.clone());
                    }
                }
                ("required", Some(Value::Array(into)), Value::Array(more)) => {
                    for name in more {
                        if !into.contains(name) {
                            into.push(name.clone());
                        }
                    }
                }
                (_, Some(_), _) => {}
                (_, None, _) => {
                    merged.insert(key.clone(), value.clone());
                }
            }
        }
    }
    merged
}

/// Whether Gemini knows `format` on `gemini_type`.
fn format_kept(gemini_type: &str, format: &str) -> bool {
    matches!(
        (gemini_type, format),
        ("STRING", "date-time" | "enum")
            | ("NUMBER", "float" | "double")
            | ("INTEGER", "int32" | "int64")
    )
}
