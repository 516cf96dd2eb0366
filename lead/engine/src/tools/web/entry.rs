//! One web tool's config entry (`tools:` in config.yaml, DeerFlow's `model_extra`): its
//! extra keys read with Python's coercions, `base_url` (Antler lets every backend's be
//! changed), the address-guard keys, and the environment fallbacks for keys DeerFlow reads
//! from the environment when the entry has none.

use serde_json::{Map, Value};

use super::guard::GuardPolicy;

/// A config entry's extra keys (none when the tool has no entry).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolEntry {
    pub extra: Map<String, Value>,
}

impl ToolEntry {
    pub fn new(extra: Map<String, Value>) -> ToolEntry {
        ToolEntry { extra }
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.extra.get(key).filter(|v| !v.is_null())
    }

    pub fn has(&self, key: &str) -> bool {
        self.extra.contains_key(key)
    }

    /// A string value (numbers are written as text), trimmed; empty counts as absent.
    pub fn str(&self, key: &str) -> Option<String> {
        let text = match self.get(key)? {
            Value::String(s) => s.trim().to_owned(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            _ => return None,
        };
        (!text.is_empty()).then_some(text)
    }

    /// The key, else the environment variable `env` (DeerFlow's fallbacks).
    pub fn str_or_env(&self, key: &str, env: &str) -> Option<String> {
        self.str(key).or_else(|| {
            std::env::var(env)
                .ok()
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        })
    }

    /// Python's `int(value)`: integers, integral floats, numeric strings; a boolean or
    /// anything else is invalid (`Err` with the value as written).
    pub fn int(&self, key: &str) -> Option<Result<i64, String>> {
        let value = self.get(key)?;
        Some(match value {
            Value::Number(n) if n.is_i64() => n.as_i64().ok_or_else(|| n.to_string()),
            Value::Number(n) => match n.as_f64() {
                Some(f) if f.is_finite() => Ok(f.trunc() as i64),
                _ => Err(n.to_string()),
            },
            Value::String(s) => s.trim().parse::<i64>().map_err(|_| s.clone()),
            other => Err(other.to_string()),
        })
    }

    /// An integer, or `default` when absent or invalid.
    pub fn int_or(&self, key: &str, default: i64) -> i64 {
        match self.int(key) {
            Some(Ok(n)) => n,
            _ => default,
        }
    }

    /// A number of seconds (int or float), or `default`.
    pub fn secs_or(&self, key: &str, default: f64) -> f64 {
        match self.get(key) {
            Some(Value::Number(n)) => n.as_f64().filter(|f| *f > 0.0).unwrap_or(default),
            Some(Value::String(s)) => s
                .trim()
                .parse()
                .ok()
                .filter(|f: &f64| *f > 0.0)
                .unwrap_or(default),
            _ => default,
        }
    }

    pub fn bool_or(&self, key: &str, default: bool) -> bool {
        match self.get(key) {
            Some(Value::Bool(b)) => *b,
            Some(Value::String(s)) => matches!(
                s.trim().to_ascii_lowercase().as_str(),
                "true" | "1" | "yes" | "on"
            ),
            _ => default,
        }
    }

    /// `base_url` without its trailing `/`, else `default`.
    pub fn base_url(&self, default: &str) -> String {
        self.str("base_url")
            .unwrap_or_else(|| default.to_owned())
            .trim_end_matches('/')
            .to_owned()
    }

    /// The address guard's policy: `allow_private_addresses` and `allowed_private_hosts`.
    pub fn guard(&self) -> GuardPolicy {
        let allowed_hosts = match self.get("allowed_private_hosts") {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
            Some(Value::String(s)) => s.split(',').map(|h| h.trim().to_owned()).collect(),
            _ => Vec::new(),
        };
        GuardPolicy {
            allow_private: self.bool_or("allow_private_addresses", false),
            allowed_hosts,
        }
    }
}
