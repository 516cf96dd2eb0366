//! What an [`OpenAiModel`](super::OpenAiModel) is built from: a `models:` entry (or the
//! environment when there is none) turned into an endpoint, an optional API key, the
//! request parameters sent verbatim, a retry policy and deadlines. Invariant: the API key
//! is only ever held as an [`ApiKey`], whose `Debug` never shows it.

use std::time::Duration;

use antler_protocol::config::ModelConfig;
use serde_json::{Map, Value};

use crate::model::entry::{extra_str, Common, Defaults};
pub use crate::model::entry::{
    ApiKey, DEFAULT_CONNECT_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_REQUEST_TIMEOUT, USE_CHAT_OPENAI,
};
use crate::model::retry::RetryPolicy;
use crate::model::ModelError;

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

    /// The config as a `models:` entry with everything written out (what travels to a
    /// worker: [`crate::model::WireModel::Entry`]).
    pub fn to_entry(&self) -> ModelConfig {
        let mut extra = self.params.clone();
        extra.insert("max_retries".to_owned(), self.retry.max_retries.into());
        for (key, duration) in [
            ("connect_timeout", self.connect_timeout),
            ("timeout", self.request_timeout),
            ("stream_idle_timeout", self.idle_timeout),
        ] {
            extra.insert(key.to_owned(), duration.as_secs_f64().into());
        }
        ModelConfig {
            name: self.name.clone(),
            display_name: None,
            use_: USE_CHAT_OPENAI.to_owned(),
            model: self.model.clone(),
            supports_vision: false,
            supports_thinking: false,
            api_key: self.api_key.as_ref().map(|k| k.expose().to_owned()),
            base_url: Some(self.base_url.clone()),
            extra,
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
        let explicit_base = config
            .base_url
            .as_deref()
            .is_some_and(|b| !b.trim().is_empty())
            || ["api_base", "openai_api_base"]
                .iter()
                .any(|k| extra_str(&config.extra, k).is_some());
        if provider == Provider::Other && !explicit_base {
            return Err(ModelError::UnsupportedProvider {
                model: config.name.clone(),
                use_: config.use_.clone(),
            });
        }
        let common = Common::of(config, env, &provider.defaults())?;
        let mut params = Map::new();
        for key in PASSTHROUGH_KEYS {
            if let Some(value) = config.extra.get(*key).filter(|v| !v.is_null()) {
                params.insert((*key).to_owned(), value.clone());
            }
        }
        Ok(OpenAiConfig {
            name: common.name,
            model: common.model,
            base_url: common.base_url,
            api_key: common.api_key,
            params,
            retry: common.retry,
            connect_timeout: common.connect_timeout,
            request_timeout: common.request_timeout,
            idle_timeout: common.idle_timeout,
        })
    }
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

    fn defaults(self) -> Defaults {
        let base_url_keys: &'static [&'static str] = &["api_base", "openai_api_base"];
        match self {
            Provider::DeepSeek => Defaults {
                base_url_keys,
                base_url_vars: &["ANTLER_MODEL_BASE_URL", "DEEPSEEK_API_BASE"],
                public_base_url: Some("https://api.deepseek.com/v1"),
                api_key_keys: &[],
                api_key_vars: &["DEEPSEEK_API_KEY"],
            },
            Provider::OpenAi => Defaults {
                base_url_keys,
                base_url_vars: &["ANTLER_MODEL_BASE_URL", "OPENAI_BASE_URL"],
                public_base_url: Some("https://api.openai.com/v1"),
                api_key_keys: &["openai_api_key"],
                api_key_vars: &["OPENAI_API_KEY"],
            },
            Provider::Other => Defaults {
                base_url_keys,
                base_url_vars: &["ANTLER_MODEL_BASE_URL", "OPENAI_BASE_URL"],
                public_base_url: None,
                api_key_keys: &["openai_api_key"],
                api_key_vars: &["OPENAI_API_KEY"],
            },
        }
    }
}
