//! What an [`OpenAiModel`](super::OpenAiModel) is built from: a `models:` entry (or the
//! environment when there is none) turned into an endpoint, an optional API key, the
//! request parameters sent verbatim, a retry policy and deadlines. Invariant: the API key
//! is only ever held as an [`ApiKey`], whose `Debug` never shows it.

use std::time::Duration;

use antler_protocol::config::ModelConfig;
use serde_json::{Map, Value};

use crate::model::entry::{extra_bool, extra_str, Common, Defaults, ThinkingSettings};
pub use crate::model::entry::{
    ApiKey, DEFAULT_CONNECT_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_REQUEST_TIMEOUT, USE_CHAT_OPENAI,
};
use crate::model::retry::RetryPolicy;
use crate::model::ModelError;

/// The `use:` of DeerFlow's DeepSeek chat model (OpenAI-compatible).
pub const USE_CHAT_DEEPSEEK: &str = "langchain_deepseek:ChatDeepSeek";

/// The `use:` ids whose `reasoning_content` is copied back onto the assistant messages of
/// later requests (DeerFlow's patched DeepSeek, MiMo and StepFun classes, spec D.3; and
/// LangChain's DeepSeek class, whose API asks for it back within a tool-call turn).
pub const REPLAY_REASONING_CONTENT_USES: &[&str] = &[
    USE_CHAT_DEEPSEEK,
    "deerflow.models.patched_deepseek:PatchedChatDeepSeek",
    "deerflow.models.patched_mimo:PatchedChatMiMo",
    "deerflow.models.patched_stepfun:PatchedChatStepFun",
];
/// The `use:` ids whose `reasoning` is copied back (DeerFlow's vLLM class, spec D.3).
pub const REPLAY_REASONING_USES: &[&str] = &["deerflow.models.vllm_provider:VllmChatModel"];

/// How the reasoning an OpenAI-compatible server wrote goes back to it (spec D.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReasoningReplay {
    /// Nothing is sent back (every class DeerFlow does not patch).
    Never,
    /// Each assistant message carries its reasoning under this key (`reasoning_content`
    /// or `reasoning`).
    Key(&'static str),
    /// Each assistant message carries its reasoning under the key the server wrote it
    /// with (`replay_reasoning: true`).
    AsWritten,
}

impl ReasoningReplay {
    /// The replay of a `use:` id; `replay_reasoning: true|false` overrides it.
    pub fn of(use_: &str, explicit: Option<bool>) -> ReasoningReplay {
        let by_use = if REPLAY_REASONING_CONTENT_USES.contains(&use_) {
            ReasoningReplay::Key("reasoning_content")
        } else if REPLAY_REASONING_USES.contains(&use_) {
            ReasoningReplay::Key("reasoning")
        } else {
            ReasoningReplay::Never
        };
        match explicit {
            Some(false) => ReasoningReplay::Never,
            Some(true) if by_use == ReasoningReplay::Never => ReasoningReplay::AsWritten,
            _ => by_use,
        }
    }
}

/// `extra` keys copied verbatim into the request body when present.
pub const PASSTHROUGH_KEYS: &[&str] = &[
    "reasoning_effort",
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
    /// The entry's `use:` (what travels to a worker).
    pub use_: String,
    /// `supports_thinking`, `when_thinking_enabled`/`when_thinking_disabled` (spec D.2).
    pub thinking: ThinkingSettings,
    /// Whether `reasoning_effort` is sent (DeerFlow drops it otherwise: D.1 step 4).
    pub supports_reasoning_effort: bool,
    /// Keys merged into every request body (`extra_body`).
    pub extra_body: Map<String, Value>,
    /// How reasoning goes back to the server (spec D.3).
    pub replay: ReasoningReplay,
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
            use_: USE_CHAT_OPENAI.to_owned(),
            thinking: ThinkingSettings::default(),
            supports_reasoning_effort: false,
            extra_body: Map::new(),
            replay: ReasoningReplay::Never,
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
        if !self.thinking.when_enabled.is_empty() {
            extra.insert(
                "when_thinking_enabled".to_owned(),
                Value::Object(self.thinking.when_enabled.clone()),
            );
        }
        if let Some(disabled) = &self.thinking.when_disabled {
            extra.insert(
                "when_thinking_disabled".to_owned(),
                Value::Object(disabled.clone()),
            );
        }
        if self.supports_reasoning_effort {
            extra.insert("supports_reasoning_effort".to_owned(), Value::Bool(true));
        }
        if !self.extra_body.is_empty() {
            extra.insert(
                "extra_body".to_owned(),
                Value::Object(self.extra_body.clone()),
            );
        }
        extra.insert(
            "replay_reasoning".to_owned(),
            Value::Bool(self.replay != ReasoningReplay::Never),
        );
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
            use_: self.use_.clone(),
            model: self.model.clone(),
            supports_vision: false,
            supports_thinking: self.thinking.supports_thinking,
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
    /// `request_timeout`), `connect_timeout`, `stream_idle_timeout`, all in seconds;
    /// `extra_body`, `supports_reasoning_effort`, `replay_reasoning` and the thinking keys
    /// (`when_thinking_enabled`, `when_thinking_disabled`, `thinking`).
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
        OpenAiConfig::with_defaults(config, env, &provider.defaults())
    }

    /// The config of `config` with the endpoint and key found as `defaults` say (Azure
    /// reads its own names).
    pub(crate) fn with_defaults(
        config: &ModelConfig,
        env: &dyn Fn(&str) -> Option<String>,
        defaults: &Defaults,
    ) -> Result<OpenAiConfig, ModelError> {
        let common = Common::of(config, env, defaults)?;
        let mut params = Map::new();
        for key in PASSTHROUGH_KEYS {
            if let Some(value) = config.extra.get(*key).filter(|v| !v.is_null()) {
                params.insert((*key).to_owned(), value.clone());
            }
        }
        let extra_body = match config.extra.get("extra_body") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(map)) => map.clone(),
            Some(other) => {
                return Err(crate::model::entry::invalid(
                    &config.name,
                    format!("extra_body must be a mapping, not {other}"),
                ))
            }
        };
        Ok(OpenAiConfig {
            name: common.name,
            model: common.model,
            base_url: common.base_url,
            api_key: common.api_key,
            params,
            use_: config.use_.clone(),
            thinking: ThinkingSettings::of(config)?,
            supports_reasoning_effort: extra_bool(config, "supports_reasoning_effort")?
                .unwrap_or(false),
            extra_body,
            replay: ReasoningReplay::of(&config.use_, extra_bool(config, "replay_reasoning")?),
            retry: common.retry,
            connect_timeout: common.connect_timeout,
            request_timeout: common.request_timeout,
            idle_timeout: common.idle_timeout,
        })
    }
}

/// Where OpenAI's own entries find what they do not say (chat and Responses alike).
pub const OPENAI_DEFAULTS: Defaults = Defaults {
    base_url_keys: &["api_base", "openai_api_base"],
    base_url_vars: &["ANTLER_MODEL_BASE_URL", "OPENAI_BASE_URL"],
    public_base_url: Some("https://api.openai.com/v1"),
    api_key_keys: &["openai_api_key"],
    api_key_vars: &["OPENAI_API_KEY"],
};

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
            Provider::OpenAi => OPENAI_DEFAULTS,
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
