//! DeerFlow's context sections of config.yaml, typed: `summarization:` (spec C.1) and
//! `title:` (spec C.5), with DeerFlow's defaults and ranges. Each parses from its raw
//! section (`AppConfig::other`); an unknown key or a value out of range is an error
//! naming the key, never a silent default.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The tools whose reads of a skill file DeerFlow captures (`skill_file_read_tool_names`).
pub const DEFAULT_SKILL_FILE_READ_TOOL_NAMES: &[&str] = &["read_file", "read", "view", "cat"];

/// DeerFlow's title prompt (`title.prompt_template`'s default).
pub const DEFAULT_TITLE_PROMPT: &str = "Generate a concise title (max {max_words} words) for this conversation.\nUser: {user_msg}\nAssistant: {assistant_msg}\n\nReturn ONLY the title, no quotes, no explanation.";

/// How much context: `{type: tokens|messages|fraction, value}` (`ContextSize`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(
    deny_unknown_fields,
    tag = "type",
    content = "value",
    rename_all = "snake_case"
)]
pub enum ContextSize {
    /// An absolute number of tokens.
    Tokens(u64),
    /// An absolute number of messages.
    Messages(u64),
    /// A fraction (0, 1] of the model's input window.
    Fraction(f64),
}

impl ContextSize {
    fn check(self, key: &str) -> Result<ContextSize, String> {
        match self {
            ContextSize::Fraction(f) if !(f > 0.0 && f <= 1.0) => {
                Err(format!("{key}: a fraction must be in (0, 1], got {f}"))
            }
            ContextSize::Tokens(0) | ContextSize::Messages(0) => {
                Err(format!("{key}: must be greater than 0"))
            }
            size => Ok(size),
        }
    }

    /// Whether this size needs the model's window.
    pub fn is_fraction(&self) -> bool {
        matches!(self, ContextSize::Fraction(_))
    }
}

/// `trigger:`: one size, or a list of them combined with OR.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
enum Triggers {
    One(ContextSize),
    Many(Vec<ContextSize>),
}

/// `summarization:` (DeerFlow's `SummarizationConfig`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SummarizationConfig {
    pub enabled: bool,
    /// `None`: the run's model summarizes; set, that model first and the run's second.
    pub model_name: Option<String>,
    /// When to summarize, OR-ed; empty means never (DeerFlow's `null`).
    #[serde(deserialize_with = "triggers")]
    pub trigger: Vec<ContextSize>,
    /// How much of the tail survives.
    pub keep: ContextSize,
    /// The input budget of the summary call (`None`: untrimmed).
    pub trim_tokens_to_summarize: Option<u64>,
    /// `None`: LangChain's `DEFAULT_SUMMARY_PROMPT`; a custom one holds `{messages}`.
    pub summary_prompt: Option<String>,
    pub skill_file_read_tool_names: Vec<String>,
}

fn triggers<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<ContextSize>, D::Error> {
    Ok(match Option::<Triggers>::deserialize(d)? {
        None => Vec::new(),
        Some(Triggers::One(size)) => vec![size],
        Some(Triggers::Many(sizes)) => sizes,
    })
}

impl Default for SummarizationConfig {
    fn default() -> Self {
        SummarizationConfig {
            enabled: false,
            model_name: None,
            trigger: Vec::new(),
            keep: ContextSize::Messages(20),
            trim_tokens_to_summarize: Some(4000),
            summary_prompt: None,
            skill_file_read_tool_names: DEFAULT_SKILL_FILE_READ_TOOL_NAMES
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
        }
    }
}

impl From<ContextSize> for crate::messages::WireContextSize {
    fn from(size: ContextSize) -> Self {
        match size {
            ContextSize::Tokens(n) => Self::Tokens(n),
            ContextSize::Messages(n) => Self::Messages(n),
            ContextSize::Fraction(f) => Self::Fraction(f),
        }
    }
}

impl From<crate::messages::WireContextSize> for ContextSize {
    fn from(size: crate::messages::WireContextSize) -> Self {
        use crate::messages::WireContextSize as W;
        match size {
            W::Tokens(n) => Self::Tokens(n),
            W::Messages(n) => Self::Messages(n),
            W::Fraction(f) => Self::Fraction(f),
        }
    }
}

impl From<&SummarizationConfig> for crate::messages::WireSummarization {
    fn from(config: &SummarizationConfig) -> Self {
        Self {
            trigger: config.trigger.iter().map(|t| (*t).into()).collect(),
            keep: config.keep.into(),
            trim_tokens_to_summarize: config.trim_tokens_to_summarize,
            summary_prompt: config.summary_prompt.clone(),
        }
    }
}

impl From<crate::messages::WireSummarization> for SummarizationConfig {
    /// An enabled summarization (only an enabled one travels).
    fn from(wire: crate::messages::WireSummarization) -> Self {
        Self {
            enabled: true,
            trigger: wire.trigger.into_iter().map(Into::into).collect(),
            keep: wire.keep.into(),
            trim_tokens_to_summarize: wire.trim_tokens_to_summarize,
            summary_prompt: wire.summary_prompt,
            ..Self::default()
        }
    }
}

impl SummarizationConfig {
    /// The section as written (`None` or `null`: the defaults); an invalid one is an
    /// error naming the key.
    pub fn from_section(section: Option<&Value>) -> Result<SummarizationConfig, String> {
        let config: SummarizationConfig = match section {
            None | Some(Value::Null) => return Ok(SummarizationConfig::default()),
            Some(value) => {
                serde_json::from_value(value.clone()).map_err(|e| format!("summarization: {e}"))?
            }
        };
        for size in &config.trigger {
            size.check("summarization.trigger")?;
        }
        config.keep.check("summarization.keep")?;
        if config.trim_tokens_to_summarize == Some(0) {
            return Err("summarization.trim_tokens_to_summarize: must be greater than 0".into());
        }
        if let Some(prompt) = &config.summary_prompt {
            if !prompt.contains("{messages}") {
                return Err(
                    "summarization.summary_prompt: must contain the {messages} placeholder".into(),
                );
            }
        }
        Ok(config)
    }

    /// Whether any trigger or the keep is a fraction of the model's window.
    pub fn needs_window(&self) -> bool {
        self.keep.is_fraction() || self.trigger.iter().any(ContextSize::is_fraction)
    }
}

/// `title:` (DeerFlow's `TitleConfig`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TitleConfig {
    pub enabled: bool,
    /// A hint in the prompt, 1..=20.
    pub max_words: u32,
    /// 10..=200.
    pub max_chars: u32,
    /// `None`: no model is called, the title is the first user message, cut.
    pub model_name: Option<String>,
    pub prompt_template: String,
}

impl Default for TitleConfig {
    fn default() -> Self {
        TitleConfig {
            enabled: true,
            max_words: 6,
            max_chars: 60,
            model_name: None,
            prompt_template: DEFAULT_TITLE_PROMPT.to_owned(),
        }
    }
}

impl TitleConfig {
    /// The section as written (`None` or `null`: the defaults); a value out of DeerFlow's
    /// ranges is an error naming the key.
    pub fn from_section(section: Option<&Value>) -> Result<TitleConfig, String> {
        let config: TitleConfig = match section {
            None | Some(Value::Null) => return Ok(TitleConfig::default()),
            Some(value) => {
                serde_json::from_value(value.clone()).map_err(|e| format!("title: {e}"))?
            }
        };
        if !(1..=20).contains(&config.max_words) {
            return Err(format!(
                "title.max_words: must be in 1..=20, got {}",
                config.max_words
            ));
        }
        if !(10..=200).contains(&config.max_chars) {
            return Err(format!(
                "title.max_chars: must be in 10..=200, got {}",
                config.max_chars
            ));
        }
        Ok(config)
    }
}

/// The context sections' errors for `antler config check`: the section and what is
/// wrong with it.
pub(crate) fn section_problems(
    other: &super::shapes::NamedMap<Value>,
) -> Vec<(&'static str, String)> {
    let mut problems = Vec::new();
    if let Err(e) = SummarizationConfig::from_section(other.get("summarization")) {
        problems.push(("summarization", e));
    }
    if let Err(e) = TitleConfig::from_section(other.get("title")) {
        problems.push(("title", e));
    }
    problems
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn deerflow_example_sections_parse() {
        let s = SummarizationConfig::from_section(Some(&json!({
            "enabled": true, "model_name": null,
            "trigger": [{"type": "tokens", "value": 32000}],
            "keep": {"type": "messages", "value": 10},
            "trim_tokens_to_summarize": 15564, "summary_prompt": null
        })))
        .unwrap();
        assert!(s.enabled);
        assert_eq!(s.trigger, vec![ContextSize::Tokens(32000)]);
        assert_eq!(s.keep, ContextSize::Messages(10));
        assert_eq!(s.skill_file_read_tool_names.len(), 4);
        let one = SummarizationConfig::from_section(Some(&json!({
            "trigger": {"type": "fraction", "value": 0.8}
        })))
        .unwrap();
        assert_eq!(one.trigger, vec![ContextSize::Fraction(0.8)]);
        assert!(one.needs_window());
        let t = TitleConfig::from_section(Some(&json!({"enabled": true, "max_words": 6}))).unwrap();
        assert_eq!(t.prompt_template, DEFAULT_TITLE_PROMPT);
    }

    #[test]
    fn invalid_values_name_their_key() {
        let err = |v: Value| SummarizationConfig::from_section(Some(&v)).unwrap_err();
        assert!(err(json!({"trigger": {"type": "fraction", "value": 1.5}}))
            .starts_with("summarization.trigger"));
        assert!(err(json!({"summary_prompt": "no placeholder"})).contains("{messages}"));
        assert!(err(json!({"keep": {"type": "lines", "value": 3}})).starts_with("summarization"));
        assert!(err(json!({"triger": []})).contains("triger"));
        let title = TitleConfig::from_section(Some(&json!({"max_chars": 5}))).unwrap_err();
        assert!(title.starts_with("title.max_chars"), "{title}");
    }
}
