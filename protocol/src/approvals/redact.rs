//! Secrets taken out of a call's arguments before a person sees them (the
//! `approval_requested` event, the inspector): the values of keys that name a secret (token,
//! password, secret, api key, authorization, cookie, credential, private key), the text after
//! `Bearer `, and every occurrence of a known secret value. Nothing else changes.

use serde_json::{Map, Value};

/// What a redacted value reads.
pub const REDACTED: &str = "[REDACTED]";

/// Known secrets shorter than this are not searched for (they would blank ordinary text).
const MIN_SECRET_LEN: usize = 4;

/// Words that make a key a secret's.
const SECRET_WORDS: &[&str] = &[
    "token",
    "password",
    "passwd",
    "passphrase",
    "secret",
    "authorization",
    "cookie",
    "credential",
    "credentials",
    "apikey",
];

/// Word pairs that make a key a secret's (`api_key`, `privateKey`, `x-access-key`).
const SECRET_PAIRS: &[(&str, &str)] = &[("api", "key"), ("private", "key"), ("access", "key")];

/// The args with secrets redacted (keys like token/password/secret/api_key/authorization/
/// cookie, and values given in `secrets`), for the approval_requested event and the person's view.
pub fn redact(args: &Value, secrets: &[&str]) -> Value {
    let secrets: Vec<&str> = secrets
        .iter()
        .copied()
        .filter(|s| s.len() >= MIN_SECRET_LEN)
        .collect();
    redact_value(args, &secrets)
}

fn redact_value(value: &Value, secrets: &[&str]) -> Value {
    match value {
        Value::Object(map) => {
            let mut out = Map::with_capacity(map.len());
            for (key, value) in map {
                let redacted = match is_secret_key(key) && !value.is_null() {
                    true => Value::String(REDACTED.to_owned()),
                    false => redact_value(value, secrets),
                };
                out.insert(key.clone(), redacted);
            }
            Value::Object(out)
        }
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| redact_value(v, secrets)).collect())
        }
        Value::String(text) => Value::String(redact_text(text, secrets)),
        other => other.clone(),
    }
}

/// Whether `key` names a secret: split into words at `_`, `-`, `.`, spaces and camelCase humps.
fn is_secret_key(key: &str) -> bool {
    let words = key_words(key);
    words.iter().any(|w| SECRET_WORDS.contains(&w.as_str()))
        || words
            .windows(2)
            .any(|pair| SECRET_PAIRS.contains(&(pair[0].as_str(), pair[1].as_str())))
}

fn key_words(key: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut previous_lower = false;
    for c in key.chars() {
        if !c.is_alphanumeric() {
            if !current.is_empty() {
                words.push(std::mem::take(&mut current));
            }
            previous_lower = false;
            continue;
        }
        if c.is_uppercase() && previous_lower && !current.is_empty() {
            words.push(std::mem::take(&mut current));
        }
        previous_lower = c.is_lowercase() || c.is_ascii_digit();
        current.extend(c.to_lowercase());
    }
    if !current.is_empty() {
        words.push(current);
    }
    words
}

/// `text` with known secrets and bearer tokens replaced.
fn redact_text(text: &str, secrets: &[&str]) -> String {
    let mut out = text.to_owned();
    for secret in secrets {
        if out.contains(secret) {
            out = out.replace(secret, REDACTED);
        }
    }
    redact_bearer(&out)
}

/// The token after each `Bearer ` (any case) replaced, up to whitespace or a quote.
fn redact_bearer(text: &str) -> String {
    const MARK: &str = "bearer ";
    let lower = text.to_ascii_lowercase();
    if !lower.contains(MARK) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = 0;
    let mut search = 0;
    while let Some(found) = lower[search..].find(MARK) {
        let start = search + found + MARK.len();
        let end = text[start..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ','))
            .map_or(text.len(), |e| start + e);
        if end > start && !text[start..end].starts_with(REDACTED) {
            out.push_str(&text[rest..start]);
            out.push_str(REDACTED);
            rest = end;
        }
        search = end.max(start);
    }
    out.push_str(&text[rest..]);
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn secret_keys_and_values_are_redacted_and_the_rest_kept() {
        let args = json!({
            "to": "a@example.com",
            "api_key": "k-123",
            "headers": {"Authorization": "Bearer abc", "X-Api-Key": "zz", "accept": "json"},
            "accessToken": "t",
            "max_tokens": 100,
            "password": null,
            "command": "curl -H 'Authorization: Bearer sk-live-9' https://x -d hunter22",
            "list": ["hunter22", 3],
        });
        let out = redact(&args, &["hunter22", "ab"]);
        assert_eq!(
            out,
            json!({
                "to": "a@example.com",
                "api_key": REDACTED,
                "headers": {"Authorization": REDACTED, "X-Api-Key": REDACTED, "accept": "json"},
                "accessToken": REDACTED,
                "max_tokens": 100,
                "password": null,
                "command": "curl -H 'Authorization: Bearer [REDACTED]' https://x -d [REDACTED]",
                "list": [REDACTED, 3],
            })
        );
    }
}
