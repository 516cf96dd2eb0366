//! DeerFlow's `$VAR` resolution: a string value that starts with `$` is replaced by that
//! environment variable's value, or by `""` when it is unset, recursively through mappings
//! and lists. Keys are never resolved, and a `$` anywhere but the first byte is kept as is.
//! The environment is an injected lookup, so tests never touch the process environment.

/// Looks up one environment variable by name.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment; a value that is not valid Unicode counts as unset.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The replacement for one string value, or `None` when it does not start with `$`.
pub fn resolve_str(value: &str, env: EnvLookup<'_>) -> Option<String> {
    let name = value.strip_prefix('$')?;
    Some(env(name).unwrap_or_default())
}

/// Resolves every `$VAR` string inside a JSON value in place.
pub fn resolve_json(value: &mut serde_json::Value, env: EnvLookup<'_>) {
    match value {
        serde_json::Value::String(s) => {
            if let Some(resolved) = resolve_str(s, env) {
                *s = resolved;
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| resolve_json(v, env)),
        serde_json::Value::Object(map) => map.values_mut().for_each(|v| resolve_json(v, env)),
        serde_json::Value::Null | serde_json::Value::Bool(_) | serde_json::Value::Number(_) => {}
    }
}

/// Resolves every `$VAR` string inside a YAML value in place.
pub fn resolve_yaml(value: &mut serde_yaml::Value, env: EnvLookup<'_>) {
    match value {
        serde_yaml::Value::String(s) => {
            if let Some(resolved) = resolve_str(s, env) {
                *s = resolved;
            }
        }
        serde_yaml::Value::Sequence(items) => items.iter_mut().for_each(|v| resolve_yaml(v, env)),
        serde_yaml::Value::Mapping(map) => map.values_mut().for_each(|v| resolve_yaml(v, env)),
        serde_yaml::Value::Tagged(tagged) => resolve_yaml(&mut tagged.value, env),
        serde_yaml::Value::Null | serde_yaml::Value::Bool(_) | serde_yaml::Value::Number(_) => {}
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn fake_env(name: &str) -> Option<String> {
        (name == "TOKEN").then(|| "secret".to_owned())
    }

    #[test]
    fn resolves_nested_json_strings_and_leaves_the_rest() {
        let mut v = serde_json::json!({
            "$KEY": "$TOKEN",
            "list": ["$TOKEN", "$MISSING", "a$TOKEN", 5, null],
            "deep": {"x": {"y": "$TOKEN"}}
        });
        resolve_json(&mut v, &fake_env);
        assert_eq!(
            v,
            serde_json::json!({
                "$KEY": "secret",
                "list": ["secret", "", "a$TOKEN", 5, null],
                "deep": {"x": {"y": "secret"}}
            })
        );
    }

    #[test]
    fn resolves_nested_yaml_strings() {
        let mut v: serde_yaml::Value =
            serde_yaml::from_str("a: $TOKEN\nb: [$MISSING, plain]\nc: {d: $TOKEN}\n").unwrap();
        resolve_yaml(&mut v, &fake_env);
        let want: serde_yaml::Value =
            serde_yaml::from_str("a: secret\nb: ['', plain]\nc: {d: secret}\n").unwrap();
        assert_eq!(v, want);
    }
}
