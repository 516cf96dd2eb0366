//! What a [`ResponsesModel`](super::ResponsesModel) is built from: a `models:` entry
//! with `use_responses_api: true` or `wire_api: responses` (or DeerFlow's Codex class)
//! read into the request parameters, the reasoning settings, `store`, the thinking keys
//! (spec D.2) and `extra_body`; the endpoint and key are `entry::Common`'s. Invariant:
//! the API key is only ever held as an [`ApiKey`], whose `Debug` never shows it.

use std::time::Duration;

use antler_protocol::config::ModelConfig;
use serde_json::{Map, Value};

use crate::model::entry::{extra_bool, extra_str, invalid, ApiKey, Common, ThinkingSettings};
use crate::model::retry::RetryPolicy;
use crate::model::ModelError;

/// The `use:` of DeerFlow's ChatGPT Codex class (Responses API, `store: false`).
pub const USE_CODEX: &str = "deerflow.models.openai_codex_provider:CodexChatModel";
/// The `output_version` LangChain writes for Responses output (accepted, nothing to do).
pub const OUTPUT_VERSION_RESPONSES: &str = "responses/v1";
/// Codex's effort when thinking is on and the entry names none (spec D.1 step 6).
pub const CODEX_DEFAULT_EFFORT: &str = "medium";
/// Codex's effort when thinking is off.
pub const CODEX_EFFORT_OFF: &str = "none";

/// `extra` keys copied verbatim into the request body when present.
pub const PASSTHROUGH_KEYS: &[&str] = &[
    "temperature",
    "top_p",
    "tool_choice",
    "parallel_tool_calls",
    "text",
    "truncation",
    "service_tier",
    "metadata",
    "user",
    "prompt_cache_key",
    "safety_identifier",
];
/// The `extra` keys that give the output limit, sent as `max_output_tokens` (first wins).
pub const MAX_TOKENS_KEYS: &[&str] = &["max_output_tokens", "max_tokens", "max_completion_tokens"];

/// Everything one Responses model needs but its endpoint.
#[derive(Clone, Debug)]
pub struct ResponsesConfig {
    /// The config name (`models[].name`).
    pub name: String,
    /// The provider's model id (an Azure deployment's name on Azure), sent as `model`.
    pub model: String,
    /// The API root: `/responses` is appended (Azure builds its own URL).
    pub base_url: String,
    pub api_key: Option<ApiKey>,
    /// Request parameters sent verbatim ([`PASSTHROUGH_KEYS`]).
    pub params: Map<String, Value>,
    /// `max_output_tokens` (from `max_tokens`; never for Codex, spec D.1 step 6).
    pub max_output_tokens: Option<Value>,
    /// Whether replies stream (`streaming: false` asks for one whole `response`).
    pub stream: bool,
    /// `store`: whether the provider keeps the response (default false, like Codex); when
    /// false, reasoning comes back encrypted and is sent back whole.
    pub store: bool,
    /// `reasoning` (`{effort, summary}`) from the entry's `reasoning` and
    /// `reasoning_effort`.
    pub reasoning: Map<String, Value>,
    /// DeerFlow's Codex class: effort `none` with thinking off, else the entry's or
    /// `medium`.
    pub codex: bool,
    pub thinking: ThinkingSettings,
    pub supports_reasoning_effort: bool,
    /// Keys merged into every request body (`extra_body`).
    pub extra_body: Map<String, Value>,
    pub retry: RetryPolicy,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    pub idle_timeout: Duration,
}

impl ResponsesConfig {
    /// A config with the defaults: no key, no parameters, `store: false`, default retries
    /// and deadlines.
    #[cfg(test)]
    pub fn new(
        name: impl Into<String>,
        model: impl Into<String>,
        base_url: impl Into<String>,
    ) -> ResponsesConfig {
        let common = Common::new(name, model, base_url);
        ResponsesConfig::of_common(common)
    }

    fn of_common(common: Common) -> ResponsesConfig {
        ResponsesConfig {
            name: common.name,
            model: common.model,
            base_url: common.base_url.trim_end_matches('/').to_owned(),
            api_key: common.api_key,
            params: Map::new(),
            max_output_tokens: None,
            stream: true,
            store: false,
            reasoning: Map::new(),
            codex: false,
            thinking: ThinkingSettings::default(),
            supports_reasoning_effort: false,
            extra_body: Map::new(),
            retry: common.retry,
            connect_timeout: common.connect_timeout,
            request_timeout: common.request_timeout,
            idle_timeout: common.idle_timeout,
        }
    }

    /// `{base_url}/responses`.
    pub fn endpoint(&self) -> String {
        format!("{}/responses", self.base_url)
    }

    /// Reads an entry whose endpoint and key `common` resolved. `extra` keys read:
    /// [`PASSTHROUGH_KEYS`], [`MAX_TOKENS_KEYS`], `store`, `streaming`, `reasoning` (a mapping, or an
    /// effort), `reasoning_effort` (with `supports_reasoning_effort`, or for Codex),
    /// `extra_body`, `output_version` (only `responses/v1`), and the thinking keys.
    pub fn of_entry(entry: &ModelConfig, common: Common) -> Result<ResponsesConfig, ModelError> {
        let name = entry.name.clone();
        let codex = entry.use_ == USE_CODEX;
        let mut config = ResponsesConfig::of_common(common);
        config.codex = codex;
        for key in PASSTHROUGH_KEYS {
            if let Some(value) = entry.extra.get(*key).filter(|v| !v.is_null()) {
                config.params.insert((*key).to_owned(), value.clone());
            }
        }
        if !codex {
            config.max_output_tokens = MAX_TOKENS_KEYS
                .iter()
                .find_map(|k| entry.extra.get(*k).filter(|v| !v.is_null()).cloned());
        }
        config.store = extra_bool(entry, "store")?.unwrap_or(false);
        config.stream = extra_bool(entry, "streaming")?.unwrap_or(true);
        config.supports_reasoning_effort =
            extra_bool(entry, "supports_reasoning_effort")?.unwrap_or(false);
        match entry.extra.get("reasoning") {
            None | Some(Value::Null) => {}
            Some(Value::Object(map)) => config.reasoning = map.clone(),
            Some(Value::String(effort)) => {
                config
                    .reasoning
                    .insert("effort".to_owned(), Value::String(effort.clone()));
            }
            Some(other) => {
                return Err(invalid(
                    &name,
                    format!(
                    "reasoning must be a mapping ({{effort, summary}}) or an effort, not {other}"
                ),
                ))
            }
        }
        if let Some(effort) = extra_str(&entry.extra, "reasoning_effort") {
            if config.supports_reasoning_effort || codex {
                config
                    .reasoning
                    .insert("effort".to_owned(), Value::String(effort));
            }
        }
        config.extra_body = match entry.extra.get("extra_body") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(map)) => map.clone(),
            Some(other) => {
                return Err(invalid(
                    &name,
                    format!("extra_body must be a mapping, not {other}"),
                ))
            }
        };
        if let Some(version) = extra_str(&entry.extra, "output_version") {
            if version != OUTPUT_VERSION_RESPONSES && version != "v0" {
                return Err(invalid(
                    &name,
                    format!("output_version `{version}` is not one Antler reads: {OUTPUT_VERSION_RESPONSES}"),
                ));
            }
        }
        config.thinking = ThinkingSettings::of(entry)?;
        Ok(config)
    }
}
