//! What an [`OpenAiModel`](super::OpenAiModel) is built from: a `models:` entry (or the
//! environment when there is none) turned into an endpoint, an optional API key, the
//! request parameters sent verbatim, a retry policy and deadlines. Invariant: the API key
//! is only ever held as an [`ApiKey`], whose `Debug` never shows it.

use std::fmt;
use std::time::Duration;

use antler_protocol::config::{AppConfig, ModelConfig};
use serde_json::{Map, Value};

use super::retry::RetryPolicy;
use crate::model::ModelError;

/// The `use:` of DeerFlow's OpenAI chat model; also the provider of a default model
/// built from the environment.
pub const USE_CHAT_OPENAI: &str = "langchain_openai:ChatOpenAI";
/// The `use:` of DeerFlow's DeepSeek chat model (OpenAI-compatible).
pub const USE_CHAT_DEEPSEEK: &str = "langchain_deepseek:ChatDeepSeek";

/// `extra` keys copied verbatim into the request body when present.
pub const PASSTHROUGH_KEYS: &[&str] = &[
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "seed",
    "stop",
    "tool_choice",
];

/// Default per-request deadline (`timeout` in `extra`).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// Default wait for the next stream chunk (`stream_idle_timeout` in `extra`).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default TCP/TLS connect deadline (`connect_timeout` in `extra`).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// An API key. `Debug` and `Display` print `<redacted>`; [`ApiKey::expose`] is the only
/// way to the value.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: impl Into<String>) -> ApiKey {
        ApiKey(key.into())
    }

    /// The key itself, for the `Authorization` header.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Everything one OpenAI-compatible model needs.
#[derive(Clone, Debug)]
pub struct OpenAiConfig {
    /// The config name (`models[].name`), reported by `ChatModel::name`.
    pub name: String,
    /// The provider's model id, sent as `model`.
    pub model: String,
    /// The API root, e.g. `https://api.openai.com/v1`; `/chat/completions` is appended.
    pub base_url: String,
    pub api_key: Option<ApiKey>,
    /// Request parameters sent verbatim ([`PASSTHROUGH_KEYS`]).
    pub params: Map<String, Value>,
    pub retry: RetryPolicy,
    pub connect_timeout: Duration,
    /// Deadline of one HTTP attempt, reading the whole reply included.
    pub request_timeout: Duration,
    /// Longest wait between two chunks of a streamed reply.
    pub idle_timeout: Duration,
}

impl OpenAiConfig {
    /// A config with the defaults: no key, no parameters, default retries and deadlines.
    pub fn new(
        name: impl Into<String>,
        model: impl Into<String>,
        base_url: impl Into<String>,
    ) -> OpenAiConfig {
        OpenAiConfig {
            name: name.into(),
            model: model.into(),
            base_url: base_url.into(),
            api_key: None,
            params: Map::new(),
            retry: RetryPolicy::default(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        }
    }

    /// The chat completions endpoint.
    pub fn endpoint(&self) -> String {
        format!("{}/chat/completions", self.base_url.trim_end_matches('/'))
    }

    /// Builds the config of one `models:` entry.
    ///
    /// Accepted `use:` values: [`USE_CHAT_OPENAI`] and [`USE_CHAT_DEEPSEEK`] (each with
    /// its provider's default endpoint and key variable), and any other class whose
    /// entry gives a `base_url` (it is then taken to be OpenAI-compatible: vLLM, Ollama,
    /// llama.cpp, a proxy...).
    ///
    /// The endpoint is the first of `base_url`, `extra.api_base`, `extra.openai_api_base`,
    /// `$ANTLER_MODEL_BASE_URL`, the provider's variable (`$OPENAI_BASE_URL` or
    /// `$DEEPSEEK_API_BASE`) and the provider's public endpoint. The key is `api_key`
    /// (a `$VAR` is looked up, and an unset one is an error naming it), else the
    /// provider's variable (`$OPENAI_API_KEY` or `$DEEPSEEK_API_KEY`), else none: no
    /// `Authorization` header, as local servers expect. An empty `api_key` (what the
    /// config loader makes of an unset `$VAR`) counts as none.
    ///
    /// `extra` keys read: [`PASSTHROUGH_KEYS`], `max_retries`, `timeout` (or
    /// `request_timeout`), `connect_timeout`, `stream_idle_timeout`, all in seconds.
    pub fn from_model_config(
        config: &ModelConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<OpenAiConfig, ModelError> {
        let provider = Provider::of(&config.use_);
        let name = config.name.clone();
        let invalid = |message: String| ModelError::InvalidConfig {
            model: name.clone(),
            message,
        };

        let explicit_base = non_empty(config.base_url.as_deref())
            .map(str::to_owned)
            .or_else(|| extra_str(&config.extra, "api_base"))
            .or_else(|| extra_str(&config.extra, "openai_api_base"));
        let explicit_base = match explicit_base {
            Some(value) => Some(resolve_var(&name, "base_url", &value, env)?),
            None => None,
        };
        if provider == Provider::Other && explicit_base.is_none() {
            return Err(ModelError::UnsupportedProvider {
                model: name,
                use_: config.use_.clone(),
            });
        }
        let base_url = explicit_base
            .or_else(|| env_non_empty(env, "ANTLER_MODEL_BASE_URL"))
            .or_else(|| env_non_empty(env, provider.base_url_var()))
            .or_else(|| provider.public_base_url().map(str::to_owned))
            .ok_or_else(|| invalid("no base_url".to_owned()))?;
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(invalid(format!(
                "base_url `{base_url}` is not an http:// or https:// URL"
            )));
        }

        let api_key = match non_empty(config.api_key.as_deref()) {
            Some(value) => Some(resolve_var(&name, "api_key", value, env)?),
            None => env_non_empty(env, provider.api_key_var()),
        }
        .filter(|key| !key.is_empty())
        .map(ApiKey);

        let mut params = Map::new();
        for key in PASSTHROUGH_KEYS {
            if let Some(value) = config.extra.get(*key).filter(|v| !v.is_null()) {
                params.insert((*key).to_owned(), value.clone());
            }
        }

        let mut retry = RetryPolicy::default();
        if let Some(value) = config.extra.get("max_retries") {
            retry.max_retries = value
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| {
                    invalid(format!("max_retries must be a whole number, not {value}"))
                })?;
        }
        let seconds = |keys: &[&str], default: Duration| -> Result<Duration, ModelError> {
            let Some((key, value)) = keys
                .iter()
                .find_map(|k| config.extra.get(*k).map(|v| (*k, v)))
            else {
                return Ok(default);
            };
            value
                .as_f64()
                .filter(|s| s.is_finite() && *s > 0.0)
                .map(Duration::from_secs_f64)
                .ok_or_else(|| {
                    invalid(format!(
                        "{key} must be a positive number of seconds, not {value}"
                    ))
                })
        };

        Ok(OpenAiConfig {
            name: name.clone(),
            model: config.model.clone(),
            base_url,
            api_key,
            params,
            retry,
            connect_timeout: seconds(&["connect_timeout"], DEFAULT_CONNECT_TIMEOUT)?,
            request_timeout: seconds(&["timeout", "request_timeout"], DEFAULT_REQUEST_TIMEOUT)?,
            idle_timeout: seconds(&["stream_idle_timeout"], DEFAULT_IDLE_TIMEOUT)?,
        })
    }
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

/// The providers whose defaults Antler knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Provider {
    OpenAi,
    DeepSeek,
    /// Any other class: OpenAI-compatible when given a `base_url`.
    Other,
}

impl Provider {
    fn of(use_: &str) -> Provider {
        match use_ {
            USE_CHAT_OPENAI => Provider::OpenAi,
            USE_CHAT_DEEPSEEK => Provider::DeepSeek,
            _ => Provider::Other,
        }
    }

    fn base_url_var(self) -> &'static str {
        match self {
            Provider::DeepSeek => "DEEPSEEK_API_BASE",
            Provider::OpenAi | Provider::Other => "OPENAI_BASE_URL",
        }
    }

    fn api_key_var(self) -> &'static str {
        match self {
            Provider::DeepSeek => "DEEPSEEK_API_KEY",
            Provider::OpenAi | Provider::Other => "OPENAI_API_KEY",
        }
    }

    fn public_base_url(self) -> Option<&'static str> {
        match self {
            Provider::OpenAi => Some("https://api.openai.com/v1"),
            Provider::DeepSeek => Some("https://api.deepseek.com/v1"),
            Provider::Other => None,
        }
    }
}

/// A `$VAR` value looked up in `env`; any other value as it is.
fn resolve_var(
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

fn env_non_empty(env: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    env(name).filter(|v| !v.trim().is_empty())
}

fn extra_str(extra: &Map<String, Value>, key: &str) -> Option<String> {
    extra
        .get(key)
        .and_then(Value::as_str)
        .filter(|v| !v.trim().is_empty())
        .map(str::to_owned)
}
