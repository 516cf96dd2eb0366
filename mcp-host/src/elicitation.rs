//! Answers a server's `elicitation/create` by its `elicitation` policy: `decline` (the
//! default) declines; `accept_defaults` accepts a form request with the defaults of its
//! requested schema, but only when they fill every required field and each fits its
//! property's schema (type, enum, length and range); anything else is declined. A URL
//! request is always declined: no one here can open it. Under `ask` a form request made
//! during a run's call is asked of the run's user (`crate::ask`); anything else is
//! declined, as here.

use rmcp::model::{ElicitRequestParams, ElicitResult, ElicitationAction};
use serde_json::{Map, Value};

pub use antler_protocol::config::ElicitationPolicy;

/// The answer to one elicitation request under `policy`.
pub fn answer(policy: ElicitationPolicy, request: &ElicitRequestParams) -> ElicitResult {
    let decline = || ElicitResult::new(ElicitationAction::Decline);
    let ElicitRequestParams::FormElicitationParams {
        requested_schema, ..
    } = request
    else {
        return decline();
    };
    match policy {
        ElicitationPolicy::Decline | ElicitationPolicy::Ask => decline(),
        ElicitationPolicy::AcceptDefaults => {
            let schema = serde_json::to_value(requested_schema).unwrap_or(Value::Null);
            match defaults(&schema) {
                Ok(content) => ElicitResult::new(ElicitationAction::Accept)
                    .with_content(Value::Object(content)),
                Err(why) => {
                    tracing::info!("elicitation declined: {why}");
                    decline()
                }
            }
        }
    }
}

/// The content made of the schema's defaults, validated against it.
pub fn defaults(schema: &Value) -> Result<Map<String, Value>, String> {
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .ok_or("the requested schema has no properties")?;
    let mut content = Map::new();
    for (name, property) in properties {
        if let Some(default) = property.get("default") {
            fits(property, default).map_err(|why| format!("default of `{name}`: {why}"))?;
            content.insert(name.clone(), default.clone());
        }
    }
    let required = schema.get("required").and_then(Value::as_array);
    for name in required.into_iter().flatten().filter_map(Value::as_str) {
        if !content.contains_key(name) {
            return Err(format!("required field `{name}` has no default"));
        }
    }
    Ok(content)
}

/// Whether `content` (a user's answer) fits the requested schema: an object of its
/// properties only, each fitting its property's schema, every required one present.
pub fn validate(schema: &Value, content: &Value) -> Result<(), String> {
    let content = content
        .as_object()
        .ok_or("the content must be a JSON object")?;
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .ok_or("the requested schema has no properties")?;
    for (name, value) in content {
        let property = properties
            .get(name)
            .ok_or_else(|| format!("`{name}` is not a field of the requested schema"))?;
        fits(property, value).map_err(|why| format!("`{name}`: {why}"))?;
    }
    let required = schema.get("required").and_then(Value::as_array);
    for name in required.into_iter().flatten().filter_map(Value::as_str) {
        if !content.contains_key(name) {
            return Err(format!("required field `{name}` is missing"));
        }
    }
    Ok(())
}

/// Whether `value` fits one primitive property schema of an elicitation request.
fn fits(property: &Value, value: &Value) -> Result<(), String> {
    let kind = property.get("type").and_then(Value::as_str).unwrap_or("");
    let number = |key: &str| property.get(key).and_then(Value::as_f64);
    match kind {
        "string" => {
            let s = value.as_str().ok_or("not a string")?;
            let chars = s.chars().count() as f64;
            if number("minLength").is_some_and(|m| chars < m)
                || number("maxLength").is_some_and(|m| chars > m)
            {
                return Err("length out of range".into());
            }
            if !allowed(property, value) {
                return Err("not one of the allowed values".into());
            }
        }
        "number" | "integer" => {
            let n = value.as_f64().ok_or("not a number")?;
            if kind == "integer" && !(value.is_i64() || value.is_u64()) {
                return Err("not an integer".into());
            }
            if number("minimum").is_some_and(|m| n < m) || number("maximum").is_some_and(|m| n > m)
            {
                return Err("out of range".into());
            }
        }
        "boolean" => {
            value.as_bool().ok_or("not a boolean")?;
        }
        "array" => {
            let items = value.as_array().ok_or("not an array")?;
            let len = items.len() as f64;
            if number("minItems").is_some_and(|m| len < m)
                || number("maxItems").is_some_and(|m| len > m)
            {
                return Err("item count out of range".into());
            }
            if let Some(item_schema) = property.get("items") {
                if items.iter().any(|item| !allowed(item_schema, item)) {
                    return Err("an item is not one of the allowed values".into());
                }
            }
        }
        other => return Err(format!("unknown property type `{other}`")),
    }
    Ok(())
}

/// Whether `value` is among the `enum` / `oneOf` / `anyOf` constants, when there are any.
fn allowed(schema: &Value, value: &Value) -> bool {
    let mut constants = Vec::new();
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        constants.extend(values.iter());
    }
    for key in ["oneOf", "anyOf"] {
        for option in schema
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            constants.extend(option.get("const"));
        }
    }
    constants.is_empty() || constants.contains(&value)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_fill_the_content_and_are_checked() {
        let schema = json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "default": "Ada", "minLength": 1},
                "age": {"type": "integer", "default": 36, "minimum": 0},
                "tone": {"type": "string", "enum": ["warm", "dry"], "default": "dry"},
                "extra": {"type": "boolean"}
            },
            "required": ["name", "age"]
        });
        assert_eq!(
            Value::Object(defaults(&schema).unwrap()),
            json!({"name": "Ada", "age": 36, "tone": "dry"})
        );
    }

    #[test]
    fn an_answer_is_checked_against_the_requested_schema() {
        let schema = json!({
            "type": "object",
            "properties": {"name": {"type": "string"}, "n": {"type": "integer", "maximum": 5}},
            "required": ["name"]
        });
        assert!(validate(&schema, &json!({"name": "Ada", "n": 3})).is_ok());
        assert_eq!(
            validate(&schema, &json!({"n": 3})).unwrap_err(),
            "required field `name` is missing"
        );
        assert_eq!(
            validate(&schema, &json!({"name": 7})).unwrap_err(),
            "`name`: not a string"
        );
        assert_eq!(
            validate(&schema, &json!({"name": "A", "n": 9})).unwrap_err(),
            "`n`: out of range"
        );
        assert!(validate(&schema, &json!({"name": "A", "odd": 1}))
            .unwrap_err()
            .contains("`odd` is not a field"));
        assert!(validate(&schema, &json!(["name"])).is_err());
    }

    #[test]
    fn a_required_field_without_default_or_a_bad_default_declines() {
        let missing =
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]});
        assert!(defaults(&missing)
            .unwrap_err()
            .contains("`a` has no default"));
        let bad = json!({"type": "object", "properties": {"n": {"type": "number", "default": 9, "maximum": 5}}});
        assert!(defaults(&bad).unwrap_err().contains("out of range"));
        let not_listed = json!({"type": "object", "properties": {"c": {"type": "string", "enum": ["x"], "default": "y"}}});
        assert!(defaults(&not_listed).is_err());
    }
}
