//! What every provider reads from a `models:` entry the same way: the entry a run names
//! (or the environment's default model), the endpoint and the API key with their `$VAR`
//! lookups and fallbacks, the retry count and the deadlines, and DeerFlow's thinking
//! keys. Invariants: an API key is only ever held as an [`ApiKey`], whose `Debug` never
//! shows it; a `$VAR` that is not set is an error naming the variable, never its value.

use std::fmt;
use std::time::Duration;

use antler_protocol::config::{AppConfig, ModelConfig};
use serde_json::{Map, Value};

use super::retry::RetryPolicy;
use super::ModelError;

/// The `use:` of DeerFlow's OpenAI chat model; also the provider of a default model
/// built from the environment.
pub const USE_CHAT_OPENAI: &str = "langchain_openai:ChatOpenAI";

/// Default per-request deadline (`timeout` or `request_timeout`).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// Default wait for the next stream chunk (`stream_idle_timeout`, or DeerFlow's
/// `stream_chunk_timeout`).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default TCP/TLS connect deadline (`connect_timeout`).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// An API key. `Debug` prints `<redacted>`; [`ApiKey::expose`] is the only way to the
/// value.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: impl Into<String>) -> ApiKey {
        ApiKey(key.into())
    }

    /// The key itself, for the authentication header.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Where a provider looks for what an entry does not say.
#[derive(Clone, Copy, Debug)]
pub struct Defaults {
    /// `extra` keys that name the endpoint, after `base_url` (`api_base`...).
    pub base_url_keys: &'static [&'static str],
    /// Environment variables that name the endpoint, in order.
    pub base_url_vars: &'static [&'static str],
    /// The provider's public endpoint (`None`: an entry must name one).
    pub public_base_url: Option<&'static str>,
    /// `extra` keys that hold the key, after `api_key` (`gemini_api_key`...).
    pub api_key_keys: &'static [&'static str],
    /// Environment variables that hold the key, in order.
    pub api_key_vars: &'static [&'static str],
}

/// What every provider's client is built from.
#[derive(Clone, Debug)]
pub struct Common {
    /// The config name (`models[].name`), reported by `ChatModel::name`.
    pub name: String,
    /// The provider's model id.
    pub model: String,
    /// The API root (no trailing `/`).
    pub base_url: String,
    pub api_key: Option<ApiKey>,
    pub retry: RetryPolicy,
    pub connect_timeout: Duration,
    /// Deadline of one HTTP attempt, reading the whole reply included.
    pub request_timeout: Duration,
    /// Longest wait between two chunks of a streamed reply.
    pub idle_timeout: Duration,
}

impl Common {
    /// Settings with the defaults: no key, default retries and deadlines.
    pub fn new(
        name: impl Into<String>,
        model: impl Into<String>,
        base_url: impl Into<String>,
    ) -> Common {
        Common {
            name: name.into(),
            model: model.into(),
            base_url: base_url.into(),
            api_key: None,
            retry: RetryPolicy::default(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        }
    }

    /// Reads an entry. The endpoint is the first of `base_url`, the provider's
    /// `base_url_keys`, its `base_url_vars` and its public endpoint; it must be an
    /// http(s) URL. The key is `api_key` or one of the provider's `api_key_keys` (a
    /// `$VAR` is looked up, and an unset one is an error naming it), else the first set
    /// `api_key_vars`, else none; an empty key counts as none. `extra` keys read:
    /// `max_retries`, `timeout` (or `request_timeout`), `connect_timeout`,
    /// `stream_idle_timeout` (or `stream_chunk_timeout`), all in seconds.
    pub fn of(
        entry: &ModelConfig,
        env: &dyn Fn(&str) -> Option<String>,
        defaults: &Defaults,
    ) -> Result<Common, ModelError> {
        let name = entry.name.clone();
        let invalid = |message: String| invalid(&name, message);

        let explicit_base = non_empty(entry.base_url.as_deref())
            .map(str::to_owned)
            .or_else(|| {
                defaults
                    .base_url_keys
                    .iter()
                    .find_map(|k| extra_str(&entry.extra, k))
            });
        let base_url = match explicit_base {
            Some(value) => Some(resolve_var(&name, "base_url", &value, env)?),
            None => defaults
                .base_url_vars
                .iter()
                .find_map(|var| env_non_empty(env, var))
                .or_else(|| defaults.public_base_url.map(str::to_owned)),
        }
        .ok_or_else(|| invalid("no base_url".to_owned()))?;
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(invalid(format!(
                "base_url `{base_url}` is not an http:// or https:// URL"
            )));
        }

        let explicit_key = non_empty(entry.api_key.as_deref())
            .map(|k| ("api_key", k.to_owned()))
            .or_else(|| {
                defaults
                    .api_key_keys
                    .iter()
                    .find_map(|k| extra_str(&entry.extra, k).map(|v| (*k, v)))
            });
        let api_key = match explicit_key {
            Some((field, value)) => Some(resolve_var(&name, field_name(field), &value, env)?),
            None => defaults
                .api_key_vars
                .iter()
                .find_map(|var| env_non_empty(env, var)),
        }
        .filter(|key| !key.is_empty())
        .map(ApiKey);

        let mut retry = RetryPolicy::default();
        if let Some(value) = entry.extra.get("max_retries") {
            retry.max_retries = value
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| {
                    invalid(format!("max_retries must be a whole number, not {value}"))
                })?;
        }
        Ok(Common {
            name: name.clone(),
            model: entry.model.clone(),
            base_url: base_url.trim_end_matches('/').to_owned(),
            api_key,
            retry,
            connect_timeout: seconds(entry, &["connect_timeout"], DEFAULT_CONNECT_TIMEOUT)?,
            request_timeout: seconds(
                entry,
                &["timeout", "request_timeout"],
                DEFAULT_REQUEST_TIMEOUT,
            )?,
            idle_timeout: seconds(
                entry,
                &["stream_idle_timeout", "stream_chunk_timeout"],
                DEFAULT_IDLE_TIMEOUT,
            )?,
        })
    }

    /// `entry` as it travels to a worker: its endpoint and key written out, so the
    /// worker needs none of the lead's environment.
    pub fn resolved(&self, entry: &ModelConfig) -> ModelConfig {
        let mut entry = entry.clone();
        entry.base_url = Some(self.base_url.clone());
        entry.api_key = self.api_key.as_ref().map(|k| k.expose().to_owned());
        entry
    }
}

fn field_name(field: &str) -> &'static str {
    match field {
        "api_key" => "api_key",
        "gemini_api_key" => "gemini_api_key",
        "google_api_key" => "google_api_key",
        "anthropic_api_key" => "anthropic_api_key",
        "openai_api_key" => "openai_api_key",
        _ => "the API key",
    }
}

/// A config error of model `model`.
pub fn invalid(model: &str, message: String) -> ModelError {
    ModelError::InvalidConfig {
        model: model.to_owned(),
        message,
    }
}

/// A duration in seconds from the first of `keys` present in `extra`.
pub fn seconds(
    entry: &ModelConfig,
    keys: &[&str],
    default: Duration,
) -> Result<Duration, ModelError> {
    let Some((key, value)) = keys.iter().find_map(|k| {
        entry
            .extra
            .get(*k)
            .filter(|v| !v.is_null())
            .map(|v| (*k, v))
    }) else {
        return Ok(default);
    };
    value
        .as_f64()
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| {
            invalid(
                &entry.name,
                format!("{key} must be a positive number of seconds, not {value}"),
            )
        })
}

/// The model config named `name` (the first when `None`). With no `models:` entries,
/// the environment gives one default model when `$ANTLER_MODEL_BASE_URL` or
/// `$OPENAI_BASE_URL` is set: its id (and name) is `$ANTLER_MODEL` or `$OPENAI_MODEL`,
/// its key `$OPENAI_API_KEY`.
pub fn select_model_config(
    app: &AppConfig,
    name: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ModelConfig, ModelError> {
    let candidates = if app.models.is_empty() {
        vec![environment_default(env)?]
    } else {
        app.models.clone()
    };
    match name {
        None => candidates
            .into_iter()
            .next()
            .ok_or(ModelError::NoModelConfigured {
                hint: BASE_URL_HINT.to_owned(),
            }),
        Some(wanted) => {
            let names: Vec<String> = candidates.iter().map(|m| m.name.clone()).collect();
            candidates
                .into_iter()
                .find(|m| m.name == wanted)
                .ok_or_else(|| ModelError::UnknownModel {
                    name: wanted.to_owned(),
                    configured: names,
                })
        }
    }
}

const BASE_URL_HINT: &str =
    "OPENAI_BASE_URL (or ANTLER_MODEL_BASE_URL) and OPENAI_MODEL (or ANTLER_MODEL)";

fn environment_default(env: &dyn Fn(&str) -> Option<String>) -> Result<ModelConfig, ModelError> {
    let no_model = || ModelError::NoModelConfigured {
        hint: BASE_URL_HINT.to_owned(),
    };
    let base_url = env_non_empty(env, "ANTLER_MODEL_BASE_URL")
        .or_else(|| env_non_empty(env, "OPENAI_BASE_URL"))
        .ok_or_else(no_model)?;
    let model = env_non_empty(env, "ANTLER_MODEL")
        .or_else(|| env_non_empty(env, "OPENAI_MODEL"))
        .ok_or_else(no_model)?;
    Ok(ModelConfig {
        name: model.clone(),
        display_name: None,
        use_: USE_CHAT_OPENAI.to_owned(),
        model,
        supports_vision: false,
        supports_thinking: false,
        api_key: None,
        base_url: Some(base_url),
        extra: Map::new(),
    })
}

/// A `$VAR` value looked up in `env`; any other value as it is.
pub fn resolve_var(
    model: &str,
    field: &'static str,
    value: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, ModelError> {
    match value.strip_prefix('$') {
        None => Ok(value.to_owned()),
        Some(variable) => env(variable).ok_or_else(|| ModelError::MissingEnv {
            model: model.to_owned(),
            field,
            variable: variable.to_owned(),
        }),
    }
}

fn non_empty(value: Option<&str>) -> Option<&str> {
    value.filter(|v| !v.trim().is_empty())
}

/// An environment variable, when set and not blank.
pub fn env_non_empty(env: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    env(name).filter(|v| !v.trim().is_empty())
}

/// A non-blank string in `extra`.
pub fn extra_str(extra: &Map<String, Value>, key: &str) -> Option<String> {
    extra
        .get(key)
        .and_then(Value::as_str)
        .filter(|v| !v.trim().is_empty())
        .map(str::to_owned)
}

/// A boolean in `extra` (`None`: absent or null; a non-boolean is an error).
pub fn extra_bool(entry: &ModelConfig, key: &str) -> Result<Option<bool>, ModelError> {
    match entry.extra.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(invalid(
            &entry.name,
            format!("{key} must be true or false, not {other}"),
        )),
    }
}

/// A whole number in `extra` (`None`: absent or null).
pub fn extra_u64(entry: &ModelConfig, key: &str) -> Result<Option<u64>, ModelError> {
    match entry.extra.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value.as_u64().map(Some).ok_or_else(|| {
            invalid(
                &entry.name,
                format!("{key} must be a whole number, not {value}"),
            )
        }),
    }
}

/// DeerFlow's thinking settings of an entry (spec D.2): `when_thinking_enabled` with the
/// `thinking` shortcut merged into its `thinking` key, and `when_thinking_disabled`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ThinkingSettings {
    pub supports_thinking: bool,
    pub when_enabled: Map<String, Value>,
    pub when_disabled: Option<Map<String, Value>>,
}

impl ThinkingSettings {
    pub fn of(entry: &ModelConfig) -> Result<ThinkingSettings, ModelError> {
        let object = |key: &str| -> Result<Option<Map<String, Value>>, ModelError> {
            match entry.extra.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::Object(map)) => Ok(Some(map.clone())),
                Some(other) => Err(invalid(
                    &entry.name,
                    format!("{key} must be a mapping, not {other}"),
                )),
            }
        };
        let mut when_enabled = object("when_thinking_enabled")?.unwrap_or_default();
        if let Some(thinking) = entry.extra.get("thinking").filter(|v| !v.is_null()) {
            let merged = match (when_enabled.remove("thinking"), thinking) {
                (Some(Value::Object(mut base)), Value::Object(extra)) => {
                    base.extend(extra.clone());
                    Value::Object(base)
                }
                (_, value) => value.clone(),
            };
            when_enabled.insert("thinking".to_owned(), merged);
        }
        Ok(ThinkingSettings {
            supports_thinking: entry.supports_thinking,
            when_enabled,
            when_disabled: object("when_thinking_disabled")?,
        })
    }

    /// The settings to merge into a request: `when_thinking_enabled` when thinking is on
    /// and supported, `when_thinking_disabled` when it is off; nothing otherwise (the
    /// provider's own rules for turning thinking off apply then).
    pub fn merged(&self, thinking: bool) -> Option<&Map<String, Value>> {
        if thinking {
            (self.supports_thinking && !self.when_enabled.is_empty()).then_some(&self.when_enabled)
        } else {
            self.when_disabled.as_ref()
        }
    }
}
