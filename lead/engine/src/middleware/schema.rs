//! Whether a tool call's arguments fit the JSON schema of the tool's `parameters`, before
//! the call runs. It checks the keywords tool schemas use (`type`, `properties`,
//! `required`, `additionalProperties`, `enum`, `const`, `items`, lengths, ranges,
//! `anyOf`/`oneOf`/`allOf`, local `$ref`s); a keyword it does not know passes, so a call
//! is refused only for a reason it can name. The reason names the path in the arguments.

use serde_json::{Map, Value};

/// Deepest nesting followed (a `$ref` cycle ends here, passing).
const MAX_DEPTH: usize = 32;

/// Whether `args` fit `schema`; the first reason they do not, as the model should read it.
pub fn validate(schema: &Value, args: &Value) -> Result<(), String> {
    Validator { root: schema }.check(schema, args, "", 0)
}

struct Validator<'a> {
    root: &'a Value,
}

impl<'a> Validator<'a> {
    fn check(
        &self,
        schema: &'a Value,
        value: &Value,
        at: &str,
        depth: usize,
    ) -> Result<(), String> {
        let Some(schema) = schema.as_object() else {
            // `true`/`false` schemas: false refuses everything.
            return match schema {
                Value::Bool(false) => Err(format!("{} is not allowed", place(at))),
                _ => Ok(()),
            };
        };
        if depth > MAX_DEPTH {
            return Ok(());
        }
        if let Some(target) = schema.get("$ref").and_then(Value::as_str) {
            if let Some(resolved) = self.resolve(target) {
                self.check(resolved, value, at, depth + 1)?;
            }
        }
        if let Some(kind) = schema.get("type") {
            check_type(kind, value, at)?;
        }
        if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
            if !allowed.iter().any(|a| same(a, value)) {
                let listed: Vec<String> = allowed.iter().map(Value::to_string).collect();
                return Err(format!(
                    "{} must be one of [{}], not {}",
                    place(at),
                    listed.join(", "),
                    shown(value)
                ));
            }
        }
        if let Some(constant) = schema.get("const") {
            if !same(constant, value) {
                return Err(format!("{} must be {constant}", place(at)));
            }
        }
        match value {
            Value::Object(object) => self.check_object(schema, object, at, depth)?,
            Value::Array(items) => self.check_array(schema, items, at, depth)?,
            Value::String(text) => check_length(schema, text.chars().count(), at)?,
            Value::Number(_) => check_range(schema, value, at)?,
            _ => {}
        }
        if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
            for sub in all {
                self.check(sub, value, at, depth + 1)?;
            }
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(options) = schema.get(key).and_then(Value::as_array) {
                let mut first_error = None;
                let fits = options
                    .iter()
                    .any(|sub| match self.check(sub, value, at, depth + 1) {
                        Ok(()) => true,
                        Err(e) => {
                            first_error.get_or_insert(e);
                            false
                        }
                    });
                if !fits && !options.is_empty() {
                    return Err(match (options.len(), first_error) {
                        (1, Some(e)) => e,
                        _ => format!("no allowed shape fits {}", place(at)),
                    });
                }
            }
        }
        Ok(())
    }

    fn check_object(
        &self,
        schema: &'a Map<String, Value>,
        object: &Map<String, Value>,
        at: &str,
        depth: usize,
    ) -> Result<(), String> {
        let properties = schema.get("properties").and_then(Value::as_object);
        for name in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !object.contains_key(name) {
                return Err(format!("`{}` is a required property", join(at, name)));
            }
        }
        for (name, value) in object {
            let path = join(at, name);
            match properties.and_then(|p| p.get(name)) {
                Some(sub) => self.check(sub, value, &path, depth + 1)?,
                None => match schema.get("additionalProperties") {
                    Some(Value::Bool(false)) => {
                        let known: Vec<&str> = properties
                            .map(|p| p.keys().map(String::as_str).collect())
                            .unwrap_or_default();
                        return Err(format!(
                            "`{path}` is not a known property (expected: {})",
                            if known.is_empty() {
                                "none".to_owned()
                            } else {
                                known.join(", ")
                            }
                        ));
                    }
                    Some(sub @ Value::Object(_)) => self.check(sub, value, &path, depth + 1)?,
                    _ => {}
                },
            }
        }
        Ok(())
    }

    fn check_array(
        &self,
        schema: &'a Map<String, Value>,
        items: &[Value],
        at: &str,
        depth: usize,
    ) -> Result<(), String> {
        let count = items.len() as f64;
        let bound = |key: &str| schema.get(key).and_then(Value::as_f64);
        if bound("minItems").is_some_and(|m| count < m)
            || bound("maxItems").is_some_and(|m| count > m)
        {
            return Err(format!(
                "{} has {} items, out of range",
                place(at),
                items.len()
            ));
        }
        if let Some(item_schema) = schema.get("items").filter(|s| s.is_object()) {
            for (i, item) in items.iter().enumerate() {
                self.check(item_schema, item, &format!("{at}[{i}]"), depth + 1)?;
            }
        }
        Ok(())
    }

    /// A local reference (`#/$defs/X`, `#/definitions/X`, `#`).
    fn resolve(&self, target: &str) -> Option<&'a Value> {
        let pointer = target.strip_prefix('#')?;
        self.root.pointer(pointer)
    }
}

fn check_type(kind: &Value, value: &Value, at: &str) -> Result<(), String> {
    let kinds: Vec<&str> = match kind {
        Value::String(k) => vec![k.as_str()],
        Value::Array(ks) => ks.iter().filter_map(Value::as_str).collect(),
        _ => return Ok(()),
    };
    if kinds.is_empty() || kinds.iter().any(|k| is_type(k, value)) {
        return Ok(());
    }
    Err(format!(
        "{} must be {}, not {}",
        place(at),
        kinds.join(" or "),
        shown(value)
    ))
}

fn is_type(kind: &str, value: &Value) -> bool {
    match kind {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "number" => value.is_number(),
        // 3.0 is an integer in JSON schema.
        "integer" => {
            value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|n| n.fract() == 0.0)
        }
        // A type this check does not know passes.
        _ => true,
    }
}

fn check_length(schema: &Map<String, Value>, chars: usize, at: &str) -> Result<(), String> {
    let bound = |key: &str| schema.get(key).and_then(Value::as_u64);
    if let Some(min) = bound("minLength").filter(|m| (chars as u64) < *m) {
        return Err(format!("{} is shorter than {min} characters", place(at)));
    }
    if let Some(max) = bound("maxLength").filter(|m| (chars as u64) > *m) {
        return Err(format!("{} is longer than {max} characters", place(at)));
    }
    Ok(())
}

fn check_range(schema: &Map<String, Value>, value: &Value, at: &str) -> Result<(), String> {
    let Some(n) = value.as_f64() else {
        return Ok(());
    };
    let bound = |key: &str| schema.get(key).and_then(Value::as_f64);
    let below = bound("minimum").is_some_and(|m| n < m)
        || bound("exclusiveMinimum").is_some_and(|m| n <= m);
    let above = bound("maximum").is_some_and(|m| n > m)
        || bound("exclusiveMaximum").is_some_and(|m| n >= m);
    if below || above {
        return Err(format!("{} = {value} is out of range", place(at)));
    }
    Ok(())
}

/// Equal as JSON values, numbers by value (`1` equals `1.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) if a.is_number() && b.is_number() => x == y,
        _ => a == b,
    }
}

fn join(at: &str, name: &str) -> String {
    if at.is_empty() {
        name.to_owned()
    } else {
        format!("{at}.{name}")
    }
}

fn place(at: &str) -> String {
    if at.is_empty() {
        "the arguments".to_owned()
    } else {
        format!("`{at}`")
    }
}

/// A value's kind, as the reason names it.
fn shown(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn weather() -> Value {
        json!({
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 1},
                "unit": {"type": "string", "enum": ["c", "f"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "tags": {"type": "array", "items": {"type": "string"}},
                "place": {"$ref": "#/$defs/place"}
            },
            "required": ["city"],
            "additionalProperties": false,
            "$defs": {"place": {"type": "object", "properties": {"lat": {"type": "number"}}, "required": ["lat"]}}
        })
    }

    #[test]
    fn fitting_arguments_pass() {
        let schema = weather();
        for args in [
            json!({"city": "Paris"}),
            json!({"city": "Paris", "unit": "c", "days": 3, "tags": ["a"]}),
            json!({"city": "Paris", "days": 3.0, "place": {"lat": 1.5}}),
        ] {
            assert_eq!(validate(&schema, &args), Ok(()), "{args}");
        }
        // Unknown keywords and schemas without a type pass.
        assert_eq!(
            validate(&json!({"format": "uri"}), &json!({"x": 1})),
            Ok(())
        );
        assert_eq!(validate(&json!({}), &json!({"anything": [1]})), Ok(()));
    }

    #[test]
    fn each_misfit_is_named_with_its_path() {
        let schema = weather();
        let cases = [
            (json!({}), "`city` is a required property"),
            (json!({"city": 3}), "`city` must be string, not a number"),
            (json!({"city": ""}), "`city` is shorter than 1 characters"),
            (
                json!({"city": "x", "unit": "k"}),
                "`unit` must be one of [\"c\", \"f\"], not a string",
            ),
            (
                json!({"city": "x", "days": 9}),
                "`days` = 9 is out of range",
            ),
            (
                json!({"city": "x", "days": 1.5}),
                "`days` must be integer, not a number",
            ),
            (
                json!({"city": "x", "tags": [1]}),
                "`tags[0]` must be string, not a number",
            ),
            (
                json!({"city": "x", "place": {}}),
                "`place.lat` is a required property",
            ),
            (
                json!({"city": "x", "town": "y"}),
                "`town` is not a known property (expected: city, unit, days, tags, place)",
            ),
            (json!([1]), "the arguments must be object, not an array"),
        ];
        for (args, reason) in cases {
            assert_eq!(validate(&schema, &args), Err(reason.to_owned()), "{args}");
        }
    }

    #[test]
    fn any_of_needs_one_fitting_shape() {
        let schema = json!({"anyOf": [{"type": "string"}, {"type": "integer"}]});
        assert_eq!(validate(&schema, &json!(3)), Ok(()));
        assert_eq!(
            validate(&schema, &json!(true)),
            Err("no allowed shape fits the arguments".to_owned())
        );
        let cyclic = json!({"$ref": "#"});
        assert_eq!(validate(&cyclic, &json!(1)), Ok(()));
    }
}
