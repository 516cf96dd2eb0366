//! The secrets of `mcpServers` as the gateway shows and takes them: `GET` answers every
//! secret value (`env` and `headers` values, and `oauth` fields that hold a secret,
//! token, password or key) as [`REDACTED`]; a `PUT` that sends [`REDACTED`] back keeps the
//! stored value. A `$VAR` reference is not a secret and is shown as written.

use serde_json::{Map, Value};

/// What a secret value reads as through the gateway.
pub const REDACTED: &str = "[redacted]";

/// The keys of a server's config whose every member is a secret.
const SECRET_MAPS: &[&str] = &["env", "headers"];

/// Whether an `oauth` field holds a secret.
fn secret_oauth_field(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["secret", "token", "password", "private_key", "key_pem"]
        .iter()
        .any(|word| key.contains(word))
        && !key.ends_with("_url")
        && key != "token_endpoint_auth_method"
}

/// Each secret value of one server's config: (path of keys, mutable value).
fn secrets_mut(server: &mut Value) -> Vec<(Vec<String>, &mut Value)> {
    let mut found = Vec::new();
    let Some(server) = server.as_object_mut() else {
        return found;
    };
    for (key, value) in server.iter_mut() {
        if SECRET_MAPS.contains(&key.as_str()) {
            if let Some(map) = value.as_object_mut() {
                for (name, v) in map.iter_mut() {
                    found.push((vec![key.clone(), name.clone()], v));
                }
            }
        } else if key == "oauth" {
            if let Some(map) = value.as_object_mut() {
                for (name, v) in map.iter_mut().filter(|(n, _)| secret_oauth_field(n)) {
                    found.push((vec![key.clone(), name.clone()], v));
                }
            }
        }
    }
    found
}

fn is_reference(value: &Value) -> bool {
    value.as_str().is_some_and(|s| s.starts_with('$'))
}

/// The `mcpServers` map with every secret value replaced by [`REDACTED`].
pub fn redacted(servers: &Value) -> Value {
    let mut servers = servers.clone();
    if let Some(map) = servers.as_object_mut() {
        for server in map.values_mut() {
            for (_, value) in secrets_mut(server) {
                if !value.is_null() && !is_reference(value) {
                    *value = Value::String(REDACTED.to_owned());
                }
            }
        }
    }
    servers
}

fn lookup<'a>(server: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(server, |v, key| v.get(key))
}

/// Puts the stored secret back wherever `incoming` sends [`REDACTED`]; an error names the
/// field whose stored value does not exist (a new server, or a new key).
pub fn restore(incoming: &mut Value, stored: &Map<String, Value>) -> Result<(), String> {
    let Some(map) = incoming.as_object_mut() else {
        return Ok(());
    };
    for (name, server) in map.iter_mut() {
        for (path, value) in secrets_mut(server) {
            if value.as_str() != Some(REDACTED) {
                continue;
            }
            match stored.get(name).and_then(|s| lookup(s, &path)) {
                Some(kept) => *value = kept.clone(),
                None => {
                    return Err(format!(
                        "mcp_servers.{name}.{} is {REDACTED} but no value is stored for it: send the value",
                        path.join(".")
                    ))
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stored() -> Value {
        json!({
            "remote": {
                "type": "http", "url": "http://127.0.0.1:9/mcp",
                "headers": {"Authorization": "Bearer sk-live-1", "X-Ref": "$TOKEN"},
                "oauth": {"enabled": true, "token_url": "http://x/token", "client_id": "id",
                          "client_secret": "cs-1", "refresh_token": "rt-1",
                          "token_endpoint_auth_method": "client_secret_basic"}
            },
            "local": {"command": "npx", "args": ["-y", "srv"], "env": {"API_KEY": "k-1"}}
        })
    }

    #[test]
    fn every_secret_reads_as_redacted_and_references_stay() {
        let shown = redacted(&stored());
        let text = shown.to_string();
        for secret in ["sk-live-1", "cs-1", "rt-1", "k-1"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert_eq!(shown["remote"]["headers"]["X-Ref"], "$TOKEN");
        assert_eq!(shown["remote"]["oauth"]["client_id"], "id");
        assert_eq!(shown["remote"]["oauth"]["token_url"], "http://x/token");
        assert_eq!(
            shown["remote"]["oauth"]["token_endpoint_auth_method"],
            "client_secret_basic"
        );
        assert_eq!(shown["local"]["env"]["API_KEY"], REDACTED);
    }

    #[test]
    fn a_put_of_the_redacted_view_keeps_the_stored_secrets() {
        let stored = stored();
        let mut incoming = redacted(&stored);
        incoming["local"]["args"] = json!(["-y", "srv", "--verbose"]);
        restore(&mut incoming, stored.as_object().unwrap()).unwrap();
        assert_eq!(incoming["remote"]["oauth"]["client_secret"], "cs-1");
        assert_eq!(incoming["local"]["env"]["API_KEY"], "k-1");
        assert_eq!(incoming["local"]["args"][2], "--verbose");
        let mut new = json!({"other": {"command": "x", "env": {"K": REDACTED}}});
        let err = restore(&mut new, stored.as_object().unwrap()).unwrap_err();
        assert!(
            err.starts_with("mcp_servers.other.env.K is [redacted]"),
            "{err}"
        );
    }
}

/// Whether an argument named `key` holds a secret (a token, password, key or credential).
fn secret_argument(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    [
        "secret",
        "token",
        "password",
        "passwd",
        "api_key",
        "apikey",
        "authorization",
        "credential",
        "private_key",
    ]
    .iter()
    .any(|word| key.contains(word))
}

/// The longest text of one message the gateway sends in a run's messages.
pub const MAX_MESSAGE_TEXT: usize = 16 * 1024;

/// A run's messages as the gateway shows them: tool-call arguments whose name says
/// they hold a secret are [`REDACTED`] (at any depth), and every text is cut at
/// [`MAX_MESSAGE_TEXT`] bytes (on a character boundary, marked with `…`).
pub fn shown_messages(messages: &Value) -> Value {
    fn walk(value: &mut Value, in_args: bool) {
        match value {
            Value::Object(map) => {
                for (key, v) in map.iter_mut() {
                    if in_args && secret_argument(key) && !v.is_null() {
                        *v = Value::String(REDACTED.to_owned());
                    } else {
                        walk(v, in_args || key == "args");
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| walk(v, in_args)),
            Value::String(text) if text.len() > MAX_MESSAGE_TEXT => {
                let mut end = MAX_MESSAGE_TEXT;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.truncate(end);
                text.push('…');
            }
            _ => {}
        }
    }
    let mut shown = messages.clone();
    walk(&mut shown, false);
    shown
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod shown_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secret_arguments_are_redacted_and_long_texts_cut() {
        let messages = json!([
            {"role": "ai", "id": "a", "content": "calling", "tool_calls": [
                {"id": "c", "name": "http", "args": {"url": "https://x", "api_key": "sk-1", "nested": {"Password": "p"}}}
            ]},
            {"role": "tool", "tool_call_id": "c", "name": "http", "content": "é".repeat(MAX_MESSAGE_TEXT)}
        ]);
        let shown = shown_messages(&messages);
        let args = &shown[0]["tool_calls"][0]["args"];
        assert_eq!(args["url"], "https://x");
        assert_eq!(args["api_key"], REDACTED);
        assert_eq!(args["nested"]["Password"], REDACTED);
        let content = shown[1]["content"].as_str().unwrap();
        assert!(content.len() <= MAX_MESSAGE_TEXT + 3 && content.ends_with('…'));
    }
}
