//! What an [`OllamaModel`](super::OllamaModel) is built from: a `models:` entry
//! (`langchain_ollama:ChatOllama`, or `provider: ollama`) read into the native API root,
//! an optional key (Ollama's cloud), the `options` sent with every request and DeerFlow's
//! `reasoning` switch. The base URL is the one DeerFlow users write
//! (`http://localhost:11434`); a trailing `/v1` (the OpenAI-compatible API Ollama also
//! serves) or `/api` is dropped, so the native `/api/chat` is always what is spoken.

use antler_protocol::config::ModelConfig;
use serde_json::{Map, Value};

use crate::model::entry::{invalid, Common, Defaults, ThinkingSettings};
use crate::model::ModelError;

/// The `use:` of DeerFlow's Ollama model.
pub const USE_CHAT_OLLAMA: &str = "langchain_ollama:ChatOllama";
/// Ollama's own default address.
pub const DEFAULT_BASE_URL: &str = "http://localhost:11434";
/// The chat route under the base URL.
pub const CHAT_PATH: &str = "/api/chat";

/// Where an entry's endpoint and key are looked for (`$OLLAMA_HOST` may be written
/// without a scheme, as Ollama itself takes it: `http://` is added).
pub const DEFAULTS: Defaults = Defaults {
    base_url_keys: &["api_base", "host"],
    base_url_vars: &["OLLAMA_HOST"],
    public_base_url: Some(DEFAULT_BASE_URL),
    api_key_keys: &["ollama_api_key"],
    api_key_vars: &["OLLAMA_API_KEY"],
};

/// `extra` keys sent in `options` under the same name.
pub const OPTION_KEYS: &[&str] = &[
    "num_ctx",
    "num_predict",
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "seed",
    "stop",
    "repeat_penalty",
    "repeat_last_n",
    "presence_penalty",
    "frequency_penalty",
    "mirostat",
    "mirostat_eta",
    "mirostat_tau",
    "tfs_z",
    "num_gpu",
    "num_thread",
];
/// DeerFlow keys that mean an option when the option itself is not given.
pub const OPTION_ALIASES: &[(&str, &str)] =
    &[("max_tokens", "num_predict"), ("context_window", "num_ctx")];
/// `extra` keys sent at the top of the request.
pub const TOP_LEVEL_KEYS: &[&str] = &["keep_alive", "format"];

/// Everything one Ollama model needs. `Debug` leaves out the resolved entry (it may hold
/// a key).
#[derive(Clone)]
pub struct OllamaConfig {
    pub common: Common,
    /// The entry with its endpoint and key written out (what a worker gets).
    pub entry: ModelConfig,
    /// `options` sent with every request.
    pub options: Map<String, Value>,
    /// Top-level keys sent with every request ([`TOP_LEVEL_KEYS`]).
    pub top_level: Map<String, Value>,
    /// The entry's `reasoning` (`true`, `false`, or a level such as `high`).
    pub reasoning: Option<Value>,
    pub thinking: ThinkingSettings,
}

impl std::fmt::Debug for OllamaConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OllamaConfig")
            .field("common", &self.common)
            .field("options", &self.options)
            .field("reasoning", &self.reasoning)
            .finish_non_exhaustive()
    }
}

impl OllamaConfig {
    /// Reads an entry. The endpoint is `base_url` (or `api_base`, `host`,
    /// `$OLLAMA_HOST`), else `http://localhost:11434`. The key (Ollama's cloud) is
    /// `api_key` or `ollama_api_key`, else `$OLLAMA_API_KEY`, sent as a bearer token.
    /// `extra` keys read: [`OPTION_KEYS`] and [`OPTION_ALIASES`] into `options`,
    /// [`TOP_LEVEL_KEYS`], `reasoning`, `when_thinking_enabled`/`disabled`, and the
    /// common deadlines and `max_retries`.
    pub fn from_model_config(
        entry: &ModelConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<OllamaConfig, ModelError> {
        // `OLLAMA_HOST=0.0.0.0:11434` is how Ollama users write it.
        let env_with_scheme = |name: &str| {
            env(name).map(|value| {
                if name == "OLLAMA_HOST"
                    && !value.trim().is_empty()
                    && !value.starts_with("http://")
                    && !value.starts_with("https://")
                {
                    format!("http://{value}")
                } else {
                    value
                }
            })
        };
        let mut common = Common::of(entry, &env_with_scheme, &DEFAULTS)?;
        for suffix in ["/v1", "/api"] {
            if let Some(stripped) = common.base_url.strip_suffix(suffix) {
                common.base_url = stripped.trim_end_matches('/').to_owned();
            }
        }
        if entry.model.trim().is_empty() {
            return Err(invalid(&entry.name, "no model".to_owned()));
        }
        let mut options = Map::new();
        for key in OPTION_KEYS {
            if let Some(value) = entry.extra.get(*key).filter(|v| !v.is_null()) {
                options.insert((*key).to_owned(), value.clone());
            }
        }
        for (alias, key) in OPTION_ALIASES {
            if let Some(value) = entry.extra.get(*alias).filter(|v| !v.is_null()) {
                options
                    .entry((*key).to_owned())
                    .or_insert_with(|| value.clone());
            }
        }
        if let Some(Value::String(stop)) = options.get("stop") {
            let one = Value::Array(vec![Value::String(stop.clone())]);
            options.insert("stop".to_owned(), one);
        }
        let mut top_level = Map::new();
        for key in TOP_LEVEL_KEYS {
            if let Some(value) = entry.extra.get(*key).filter(|v| !v.is_null()) {
                top_level.insert((*key).to_owned(), value.clone());
            }
        }
        let reasoning = reasoning_of(&entry.name, &entry.extra)?;
        let thinking = ThinkingSettings::of(entry)?;
        for map in [
            Some(&thinking.when_enabled),
            thinking.when_disabled.as_ref(),
        ]
        .into_iter()
        .flatten()
        {
            reasoning_of(&entry.name, map)?;
        }
        Ok(OllamaConfig {
            entry: common.resolved(entry),
            common,
            options,
            top_level,
            reasoning,
            thinking,
        })
    }

    /// The `/api/chat` URL.
    pub fn url(&self) -> String {
        format!("{}{CHAT_PATH}", self.common.base_url)
    }

    /// The `think` of one call (`None`: not sent). The entry's `reasoning`, with
    /// `when_thinking_enabled` (thinking on, `supports_thinking`) or
    /// `when_thinking_disabled` (thinking off) over it (`reasoning` or `think`). Thinking
    /// on: that value, or `true` when the entry `supports_thinking`. Thinking off:
    /// `when_thinking_disabled`'s value, or `false` when the entry says it can think
    /// (`reasoning` set, or `supports_thinking`); a model that cannot think is sent
    /// nothing.
    pub fn think(&self, thinking: bool) -> Option<Value> {
        let over = self
            .thinking
            .merged(thinking)
            .and_then(|map| reasoning_of(&self.common.name, map).ok().flatten());
        let can_think = self.reasoning.is_some() || self.thinking.supports_thinking;
        if thinking {
            over.or_else(|| self.reasoning.clone())
                .or_else(|| self.thinking.supports_thinking.then_some(Value::Bool(true)))
        } else {
            over.or_else(|| can_think.then_some(Value::Bool(false)))
        }
    }
}

/// `reasoning` (or `think`) of a map: a boolean or a level string.
fn reasoning_of(model: &str, map: &Map<String, Value>) -> Result<Option<Value>, ModelError> {
    match map.get("reasoning").or_else(|| map.get("think")) {
        None | Some(Value::Null) => Ok(None),
        Some(value @ (Value::Bool(_) | Value::String(_))) => Ok(Some(value.clone())),
        Some(other) => Err(invalid(
            model,
            format!("reasoning must be true, false or a level such as high, not {other}"),
        )),
    }
}
