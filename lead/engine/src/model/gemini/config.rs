//! What a [`GeminiModel`](super::GeminiModel) is built from: a `models:` entry
//! (`langchain_google_genai:ChatGoogleGenerativeAI`, or `provider: gemini`) read into
//! the endpoint, the key, the `generationConfig` it always sends, the thinking knobs and
//! when to stream. Invariant: the key is only ever held as an `ApiKey` and only ever
//! sent in the `x-goog-api-key` header, never in a URL.

use antler_protocol::config::ModelConfig;
use serde_json::{Map, Value};

use crate::model::entry::{extra_bool, extra_str, invalid, Common, Defaults, ThinkingSettings};
use crate::model::ModelError;

/// The `use:` of DeerFlow's native Gemini model.
pub const USE_CHAT_GEMINI: &str = "langchain_google_genai:ChatGoogleGenerativeAI";
/// The public Gemini API.
pub const PUBLIC_BASE_URL: &str = "https://generativelanguage.googleapis.com";
/// The API version in every path.
pub const API_VERSION: &str = "v1beta";
/// The header the key travels in.
pub const API_KEY_HEADER: &str = "x-goog-api-key";

/// Where an entry's endpoint and key are looked for.
pub const DEFAULTS: Defaults = Defaults {
    base_url_keys: &["api_base", "api_endpoint"],
    base_url_vars: &["GOOGLE_GEMINI_BASE_URL"],
    public_base_url: Some(PUBLIC_BASE_URL),
    api_key_keys: &["gemini_api_key", "google_api_key"],
    api_key_vars: &["GEMINI_API_KEY", "GOOGLE_API_KEY"],
};

/// `extra` keys sent in `generationConfig`, with their Gemini names (the first of
/// `max_output_tokens` and `max_tokens` wins).
pub const GENERATION_KEYS: &[(&str, &str)] = &[
    ("temperature", "temperature"),
    ("top_p", "topP"),
    ("top_k", "topK"),
    ("max_output_tokens", "maxOutputTokens"),
    ("max_tokens", "maxOutputTokens"),
    ("stop", "stopSequences"),
    ("stop_sequences", "stopSequences"),
    ("seed", "seed"),
    ("presence_penalty", "presencePenalty"),
    ("frequency_penalty", "frequencyPenalty"),
];

/// When a reply is streamed (LangChain's `disable_streaming`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Streaming {
    /// `:streamGenerateContent?alt=sse` always (the default).
    Always,
    /// `:generateContent` always (`disable_streaming: true`).
    Never,
    /// `:generateContent` when tools are visible (`disable_streaming: tool_calling`).
    NotWithTools,
}

/// Gemini's thinking knobs as an entry writes them (`thinking_budget`,
/// `include_thoughts`, `thinking_level`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ThinkingKnobs {
    pub budget: Option<i64>,
    pub include_thoughts: Option<bool>,
    pub level: Option<String>,
}

impl ThinkingKnobs {
    /// The knobs of a map (an entry's `extra`, or its `when_thinking_*` settings), over
    /// `self`.
    pub fn overlaid(&self, model: &str, map: &Map<String, Value>) -> Result<Self, ModelError> {
        let mut out = self.clone();
        if let Some(value) = map.get("thinking_budget").filter(|v| !v.is_null()) {
            out.budget = Some(value.as_i64().ok_or_else(|| {
                invalid(
                    model,
                    format!("thinking_budget must be a whole number, not {value}"),
                )
            })?);
        }
        if let Some(value) = map.get("include_thoughts").filter(|v| !v.is_null()) {
            out.include_thoughts = Some(value.as_bool().ok_or_else(|| {
                invalid(
                    model,
                    format!("include_thoughts must be true or false, not {value}"),
                )
            })?);
        }
        if let Some(level) = extra_str(map, "thinking_level") {
            out.level = Some(level);
        }
        Ok(out)
    }

    /// Gemini's `thinkingConfig` (`None`: nothing to say).
    pub fn config(&self) -> Option<Value> {
        let mut config = Map::new();
        if let Some(budget) = self.budget {
            config.insert("thinkingBudget".to_owned(), budget.into());
        }
        if let Some(include) = self.include_thoughts {
            config.insert("includeThoughts".to_owned(), include.into());
        }
        if let Some(level) = &self.level {
            config.insert("thinkingLevel".to_owned(), Value::String(level.clone()));
        }
        (!config.is_empty()).then_some(Value::Object(config))
    }
}

/// Everything one Gemini model needs. `Debug` leaves out the resolved entry (it holds
/// the key).
#[derive(Clone)]
pub struct GeminiConfig {
    pub common: Common,
    /// The model id in the path (`models/` stripped).
    pub model_id: String,
    /// The entry with its endpoint and key written out (what a worker gets).
    pub entry: ModelConfig,
    /// `generationConfig` keys sent with every request ([`GENERATION_KEYS`]).
    pub generation: Map<String, Value>,
    /// The entry's own thinking knobs, sent whatever the call.
    pub knobs: ThinkingKnobs,
    pub thinking: ThinkingSettings,
    /// `toolConfig.functionCallingConfig.mode` (`tool_choice`: `auto`, `any`, `none`).
    pub function_calling_mode: Option<String>,
    /// `safetySettings` (`safety_settings`: a mapping of category to threshold, as
    /// LangChain takes it, or Gemini's own list of `{category, threshold}`).
    pub safety_settings: Option<Value>,
    pub streaming: Streaming,
}

impl std::fmt::Debug for GeminiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GeminiConfig")
            .field("common", &self.common)
            .field("model_id", &self.model_id)
            .field("generation", &self.generation)
            .field("knobs", &self.knobs)
            .field("streaming", &self.streaming)
            .finish_non_exhaustive()
    }
}

impl GeminiConfig {
    /// Reads an entry. The endpoint is `base_url` (or `api_base`, `api_endpoint`,
    /// `$GOOGLE_GEMINI_BASE_URL`, as the google-genai SDK reads it), else the public API; a trailing `/v1beta` or `/v1` is
    /// dropped, since Antler adds the version. The key is `api_key`, `gemini_api_key` or
    /// `google_api_key` (a `$VAR` is looked up), else `$GEMINI_API_KEY`, else
    /// `$GOOGLE_API_KEY`. `extra` keys read: [`GENERATION_KEYS`], `thinking_budget`,
    /// `include_thoughts`, `thinking_level`, `when_thinking_enabled`/`disabled`,
    /// `tool_choice`, `safety_settings`, `disable_streaming`, and the common deadlines
    /// and `max_retries`.
    pub fn from_model_config(
        entry: &ModelConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<GeminiConfig, ModelError> {
        let mut common = Common::of(entry, env, &DEFAULTS)?;
        for suffix in ["/v1beta", "/v1"] {
            if let Some(stripped) = common.base_url.strip_suffix(suffix) {
                common.base_url = stripped.to_owned();
            }
        }
        let model_id = entry.model.trim().trim_start_matches("models/").to_owned();
        if model_id.is_empty()
            || !model_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
        {
            return Err(invalid(
                &entry.name,
                format!(
                    "model `{}` is not a Gemini model id (letters, digits, `-`, `.`, `_`)",
                    entry.model
                ),
            ));
        }
        let mut generation = Map::new();
        for (key, gemini_key) in GENERATION_KEYS {
            let Some(value) = entry.extra.get(*key).filter(|v| !v.is_null()) else {
                continue;
            };
            let value = match (*gemini_key, value) {
                ("stopSequences", Value::String(one)) => Value::Array(vec![one.clone().into()]),
                _ => value.clone(),
            };
            generation.entry(*gemini_key).or_insert(value);
        }
        let knobs = ThinkingKnobs::default().overlaid(&entry.name, &entry.extra)?;
        let thinking = ThinkingSettings::of(entry)?;
        // Check the thinking settings now, not at the first call.
        for map in [
            Some(&thinking.when_enabled),
            thinking.when_disabled.as_ref(),
        ]
        .into_iter()
        .flatten()
        {
            knobs.overlaid(&entry.name, map)?;
        }
        let function_calling_mode = match extra_str(&entry.extra, "tool_choice") {
            None => None,
            Some(choice) => Some(match choice.to_ascii_lowercase().as_str() {
                "auto" => "AUTO".to_owned(),
                "any" | "required" => "ANY".to_owned(),
                "none" => "NONE".to_owned(),
                other => {
                    return Err(invalid(
                        &entry.name,
                        format!("tool_choice `{other}` is not one of auto, any, none"),
                    ))
                }
            }),
        };
        let safety_settings = match entry.extra.get("safety_settings") {
            None | Some(Value::Null) => None,
            Some(Value::Object(map)) => Some(Value::Array(
                map.iter()
                    .map(|(category, threshold)| {
                        serde_json::json!({"category": category, "threshold": threshold})
                    })
                    .collect(),
            )),
            Some(list @ Value::Array(_)) => Some(list.clone()),
            Some(other) => {
                return Err(invalid(
                    &entry.name,
                    format!("safety_settings must be a mapping of category to threshold, not {other}"),
                ))
            }
        };
        let streaming = match entry.extra.get("disable_streaming") {
            Some(Value::String(s)) if s == "tool_calling" => Streaming::NotWithTools,
            _ => match extra_bool(entry, "disable_streaming")? {
                Some(true) => Streaming::Never,
                _ => Streaming::Always,
            },
        };
        Ok(GeminiConfig {
            entry: common.resolved(entry),
            common,
            model_id,
            generation,
            knobs,
            thinking,
            function_calling_mode,
            safety_settings,
            streaming,
        })
    }

    /// The URL of a streamed (`:streamGenerateContent?alt=sse`) or whole
    /// (`:generateContent`) reply.
    pub fn url(&self, stream: bool) -> String {
        let method = if stream {
            "streamGenerateContent?alt=sse"
        } else {
            "generateContent"
        };
        format!(
            "{}/{API_VERSION}/models/{}:{method}",
            self.common.base_url, self.model_id
        )
    }

    /// The thinking knobs of one call: the entry's, then `when_thinking_enabled` (thinking
    /// on and `supports_thinking`) or `when_thinking_disabled` (thinking off) over them;
    /// with thinking on and supported, thoughts are included unless the entry says not.
    pub fn knobs_for(&self, thinking: bool) -> ThinkingKnobs {
        let mut knobs = match self.thinking.merged(thinking) {
            // Checked when the config was read.
            Some(map) => self
                .knobs
                .overlaid(&self.common.name, map)
                .unwrap_or_else(|_| self.knobs.clone()),
            None => self.knobs.clone(),
        };
        if thinking && self.thinking.supports_thinking && knobs.include_thoughts.is_none() {
            knobs.include_thoughts = Some(true);
        }
        knobs
    }
}
