//! What an [`AnthropicModel`](super::AnthropicModel) is built from: a `models:` entry
//! read as `langchain_anthropic:ChatAnthropic` and DeerFlow's `ClaudeChatModel` read it
//! (endpoint, key or Claude Code OAuth token, `max_tokens`, the parameters sent verbatim,
//! prompt caching, the thinking settings). Invariants: the key is only ever held as an
//! [`ApiKey`]; a thinking budget that the API would refuse (below 1024, or not below
//! `max_tokens`) is a config error, found by `antler config check`.

use std::fmt;
use std::time::Duration;

use antler_protocol::config::ModelConfig;
use serde_json::{json, Map, Value};

use crate::model::entry::{
    extra_bool, extra_u64, invalid, ApiKey, Common, Defaults, ThinkingSettings,
};
use crate::model::retry::RetryPolicy;
use crate::model::ModelError;

/// The `use:` of DeerFlow's Claude provider (API key or Claude Code OAuth).
pub const USE_CLAUDE_CHAT_MODEL: &str = "deerflow.models.claude_provider:ClaudeChatModel";

/// Anthropic's public API root.
pub const PUBLIC_BASE_URL: &str = "https://api.anthropic.com";
/// `max_tokens` when the entry gives none (the API requires one; DeerFlow's
/// `ClaudeChatModel` default).
pub const DEFAULT_MAX_TOKENS: u64 = 8192;
/// The share of `max_tokens` an enabled thinking config without `budget_tokens` gets
/// (DeerFlow's `THINKING_BUDGET_RATIO`).
pub const THINKING_BUDGET_RATIO: f64 = 0.8;
/// The smallest `budget_tokens` the API takes.
pub const MIN_THINKING_BUDGET: u64 = 1024;
/// How many of the last messages are cache breakpoint candidates
/// (`prompt_cache_size`, DeerFlow's default).
pub const DEFAULT_PROMPT_CACHE_SIZE: usize = 3;
/// The prefix of a Claude Code OAuth access token (sent as a bearer token, not as
/// `x-api-key`).
pub const OAUTH_TOKEN_PREFIX: &str = "sk-ant-oat";

/// `extra` keys copied verbatim into the request body when present (`stop` is
/// LangChain's name for `stop_sequences`).
pub const PASSTHROUGH_KEYS: &[&str] = &[
    "temperature",
    "top_p",
    "top_k",
    "stop_sequences",
    "metadata",
    "service_tier",
];

/// Everything one Anthropic model needs.
#[derive(Clone, Debug)]
pub struct AnthropicConfig {
    /// The config name (`models[].name`), reported by `ChatModel::name`.
    pub name: String,
    /// The provider's model id, sent as `model`.
    pub model: String,
    /// The API root: `https://api.anthropic.com`, or a proxy's (with or without `/v1`).
    pub base_url: String,
    /// An API key (`x-api-key`) or, when it starts with [`OAUTH_TOKEN_PREFIX`], a Claude
    /// Code OAuth token (`Authorization: Bearer`).
    pub api_key: Option<ApiKey>,
    pub max_tokens: u64,
    /// Request parameters sent verbatim ([`PASSTHROUGH_KEYS`]).
    pub params: Map<String, Value>,
    /// Whether replies are streamed (`stream: true`); `disable_streaming: true` (LangChain's
    /// key) asks for whole replies instead.
    pub stream: bool,
    /// `tool_choice` in Anthropic's shape (sent only with tools).
    pub tool_choice: Option<Value>,
    /// `anthropic-beta` values (`betas`), besides OAuth's.
    pub betas: Vec<String>,
    /// `cache_control` breakpoints on the system prompt, the last tool and the last
    /// messages (`enable_prompt_caching`; always off with an OAuth token).
    pub prompt_caching: bool,
    /// How many of the last messages may carry a breakpoint (`prompt_cache_size`).
    pub prompt_cache_size: usize,
    /// What is merged into the body when the request's thinking is on (the entry's
    /// `when_thinking_enabled` with its `thinking` budget filled in), `None` when the
    /// model does not support thinking or has no settings for it.
    pub thinking_on: Option<Map<String, Value>>,
    /// What is merged when thinking is off (`when_thinking_disabled`).
    pub thinking_off: Option<Map<String, Value>>,
    pub retry: RetryPolicy,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    pub idle_timeout: Duration,
    /// The entry with its endpoint and key written out (what a worker builds from).
    pub resolved: ResolvedEntry,
}

/// A `models:` entry with its key written out: its `Debug` shows only its name.
#[derive(Clone)]
pub struct ResolvedEntry(pub ModelConfig);

impl fmt::Debug for ResolvedEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResolvedEntry")
            .field("name", &self.0.name)
            .finish_non_exhaustive()
    }
}

impl AnthropicConfig {
    /// Builds the config of one `models:` entry.
    ///
    /// The endpoint is the first of `base_url`, `anthropic_api_url`, `api_base`,
    /// `$ANTHROPIC_BASE_URL` and Anthropic's public API. The key is `api_key` or
    /// `anthropic_api_key` (a `$VAR` is looked up), else `$ANTHROPIC_API_KEY` (and, for
    /// `ClaudeChatModel`, `$CLAUDE_CODE_OAUTH_TOKEN` or `$ANTHROPIC_AUTH_TOKEN`).
    ///
    /// `extra` keys read: `max_tokens` (default [`DEFAULT_MAX_TOKENS`]),
    /// [`PASSTHROUGH_KEYS`] and `stop`, `tool_choice`, `betas`, `disable_streaming`, `enable_prompt_caching`
    /// (default true), `prompt_cache_size` (default 3), DeerFlow's thinking keys
    /// (`when_thinking_enabled`, `thinking`, `when_thinking_disabled` with
    /// `supports_thinking`), and the retry and deadline keys every provider reads.
    pub fn from_model_config(
        entry: &ModelConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<AnthropicConfig, ModelError> {
        let defaults = if entry.use_ == USE_CLAUDE_CHAT_MODEL {
            Defaults {
                api_key_vars: &[
                    "ANTHROPIC_API_KEY",
                    "CLAUDE_CODE_OAUTH_TOKEN",
                    "ANTHROPIC_AUTH_TOKEN",
                ],
                ..DEFAULTS
            }
        } else {
            DEFAULTS
        };
        let common = Common::of(entry, env, &defaults)?;
        let name = entry.name.clone();

        let max_tokens = extra_u64(entry, "max_tokens")?
            .or(extra_u64(entry, "max_tokens_to_sample")?)
            .unwrap_or(DEFAULT_MAX_TOKENS);
        if max_tokens == 0 {
            return Err(invalid(&name, "max_tokens must be at least 1".to_owned()));
        }

        let mut params = Map::new();
        for key in PASSTHROUGH_KEYS {
            if let Some(value) = entry.extra.get(*key).filter(|v| !v.is_null()) {
                params.insert((*key).to_owned(), value.clone());
            }
        }
        if let Some(stop) = entry.extra.get("stop").filter(|v| !v.is_null()) {
            let stop = match stop {
                Value::String(one) => json!([one]),
                other => other.clone(),
            };
            params.entry("stop_sequences").or_insert(stop);
        }
        let tool_choice = match entry.extra.get("tool_choice") {
            None | Some(Value::Null) => None,
            Some(choice) => Some(tool_choice(choice).ok_or_else(|| {
                invalid(
                    &name,
                    format!("tool_choice must be auto, any, none, a tool name or an object, not {choice}"),
                )
            })?),
        };
        let betas = match entry.extra.get("betas") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(one)) => vec![one.clone()],
            Some(Value::Array(list)) => list
                .iter()
                .map(|b| b.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| invalid(&name, "betas must be a list of strings".to_owned()))?,
            Some(other) => {
                return Err(invalid(
                    &name,
                    format!("betas must be a list of strings, not {other}"),
                ))
            }
        };

        let oauth = common
            .api_key
            .as_ref()
            .is_some_and(|k| k.expose().starts_with(OAUTH_TOKEN_PREFIX));
        let prompt_caching = extra_bool(entry, "enable_prompt_caching")?.unwrap_or(true) && !oauth;
        let prompt_cache_size = match extra_u64(entry, "prompt_cache_size")? {
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
            None => DEFAULT_PROMPT_CACHE_SIZE,
        };

        let thinking = ThinkingSettings::of(entry)?;
        let thinking_on = match thinking.merged(true) {
            Some(settings) => Some(with_budget(&name, settings.clone(), max_tokens)?),
            None => None,
        };
        let thinking_off = thinking.merged(false).cloned();

        let resolved = ResolvedEntry(common.resolved(entry));
        Ok(AnthropicConfig {
            name: common.name,
            model: common.model,
            base_url: common.base_url,
            api_key: common.api_key,
            max_tokens,
            stream: !extra_bool(entry, "disable_streaming")?.unwrap_or(false),
            params,
            tool_choice,
            betas,
            prompt_caching,
            prompt_cache_size,
            thinking_on,
            thinking_off,
            retry: common.retry,
            connect_timeout: common.connect_timeout,
            request_timeout: common.request_timeout,
            idle_timeout: common.idle_timeout,
            resolved,
        })
    }

    /// The Messages endpoint: `{base_url}/v1/messages`, or `{base_url}/messages` when
    /// the base URL already ends in `/v1`.
    pub fn endpoint(&self) -> String {
        let base = self.base_url.trim_end_matches('/');
        if base.ends_with("/v1") {
            format!("{base}/messages")
        } else {
            format!("{base}/v1/messages")
        }
    }

    /// Whether the key is a Claude Code OAuth token.
    pub fn is_oauth(&self) -> bool {
        self.api_key
            .as_ref()
            .is_some_and(|k| k.expose().starts_with(OAUTH_TOKEN_PREFIX))
    }
}

const DEFAULTS: Defaults = Defaults {
    base_url_keys: &["anthropic_api_url", "api_base"],
    base_url_vars: &["ANTHROPIC_BASE_URL"],
    public_base_url: Some(PUBLIC_BASE_URL),
    api_key_keys: &["anthropic_api_key"],
    api_key_vars: &["ANTHROPIC_API_KEY"],
};

/// A `tool_choice` in Anthropic's shape: `auto`, `any` (OpenAI's `required`), `none`, a
/// bare tool name, or an object as written (OpenAI's `{"type": "function", ...}` is
/// turned into `{"type": "tool", "name": ...}`).
fn tool_choice(choice: &Value) -> Option<Value> {
    match choice {
        Value::String(s) => Some(match s.as_str() {
            "auto" => json!({"type": "auto"}),
            "any" | "required" => json!({"type": "any"}),
            "none" => json!({"type": "none"}),
            name => json!({"type": "tool", "name": name}),
        }),
        Value::Object(object) => {
            let function = object
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str);
            match (object.get("type").and_then(Value::as_str), function) {
                (Some("function"), Some(name)) => Some(json!({"type": "tool", "name": name})),
                (Some(_), _) => Some(choice.clone()),
                (None, _) => None,
            }
        }
        _ => None,
    }
}

/// `settings` with an enabled `thinking` given its budget: `budget_tokens` as written,
/// else `int(max_tokens * 0.8)` (DeerFlow's automatic budget); the API takes a budget of
/// at least 1024 and below `max_tokens`, and anything else is a config error here. A
/// `max_tokens` inside the settings (DeerFlow merges the settings into the model's
/// arguments) counts.
fn with_budget(
    model: &str,
    mut settings: Map<String, Value>,
    max_tokens: u64,
) -> Result<Map<String, Value>, ModelError> {
    let max_tokens = settings
        .get("max_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(max_tokens);
    let Some(Value::Object(thinking)) = settings.get_mut("thinking") else {
        return Ok(settings);
    };
    if thinking.get("type").and_then(Value::as_str) != Some("enabled") {
        return Ok(settings);
    }
    let budget = match thinking.get("budget_tokens").filter(|v| !v.is_null()) {
        Some(value) => value.as_u64().ok_or_else(|| {
            invalid(
                model,
                format!("thinking budget_tokens must be a whole number, not {value}"),
            )
        })?,
        None => (max_tokens as f64 * THINKING_BUDGET_RATIO) as u64,
    };
    if budget < MIN_THINKING_BUDGET || budget >= max_tokens {
        return Err(invalid(
            model,
            format!(
                "thinking budget_tokens {budget} must be at least {MIN_THINKING_BUDGET} and less than max_tokens {max_tokens}"
            ),
        ));
    }
    thinking.insert("budget_tokens".to_owned(), budget.into());
    Ok(settings)
}
