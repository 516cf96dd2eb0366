//! `TitleMiddleware` (spec C.5): a thread's title, made once after its first exchange
//! (no title yet, exactly one real user message, at least one AI message). Without a
//! `title.model_name` no model is called: the title is the first user message, cut. With
//! one, the model is asked (thinking off, unstreamed) off the run's critical path, and
//! its reply is cleaned; an error or an empty reply falls back to the cut message. Unlike
//! DeerFlow (C.9 quirk 9), an uploads block never becomes the title.

use std::sync::{Arc, LazyLock};

use antler_protocol::config::TitleConfig;
use regex::Regex;

use crate::model::{Auxiliary, ChatModel};
use crate::thread::state::{Message, ThreadState};
use crate::tools::skills::is_real_user_message;

/// The title of a conversation whose first message is empty.
pub const NEW_CONVERSATION: &str = "New Conversation";
/// What a cut fallback title ends with.
const ELLIPSIS: &str = "...";
/// The longest fallback title before the ellipsis (DeerFlow's 50).
const FALLBACK_CHARS: usize = 50;
/// How much of each message the prompt quotes.
const PROMPT_QUOTE_CHARS: usize = 500;

/// `<think>…</think>` blocks a reasoning model writes into its text.
static THINK: LazyLock<Regex> = LazyLock::new(|| {
    // A constant pattern: it compiles (tested).
    Regex::new(r"(?is)<think>.*?</think>").unwrap_or_else(|_| unreachable!())
});

/// The blocks of uploaded files the uploads middleware puts before the user's text.
static UPLOADS_BLOCK: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?s)^\s*<(current_uploads|uploaded_files)>.*?</(current_uploads|uploaded_files)>\s*",
    )
    .unwrap_or_else(|_| unreachable!())
});

/// A run's titling: `title:` and the model `model_name` names.
#[derive(Clone)]
pub struct Titling {
    pub config: TitleConfig,
    /// `None`: no model is called (DeerFlow's default).
    pub model: Option<Arc<dyn ChatModel>>,
}

impl std::fmt::Debug for Titling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Titling")
            .field("config", &self.config)
            .field("model", &self.model.as_ref().map(|m| m.name().to_owned()))
            .finish()
    }
}

/// The real user messages of a conversation.
fn user_messages(messages: &[Message]) -> impl Iterator<Item = &str> {
    messages.iter().filter_map(|m| match m {
        Message::Human { content, .. } if is_real_user_message(m) => Some(content.as_str()),
        _ => None,
    })
}

/// Whether the state, with the messages `adding` about to join it, is due a title:
/// titling on, no title yet, exactly one real user message and (unless `partial`, an
/// ended first turn) at least one AI message.
pub fn due(config: &TitleConfig, state: &ThreadState, adding: &[Message], partial: bool) -> bool {
    let all = || state.messages.iter().chain(adding);
    config.enabled
        && state.title.as_deref().is_none_or(str::is_empty)
        && all().filter(|m| is_real_user_message(m)).count() == 1
        && (partial || all().any(|m| matches!(m, Message::Ai { .. })))
}

/// The first user message's text, without the uploads block before it.
pub fn first_user_text(messages: &[Message]) -> String {
    let text = user_messages(messages).next().unwrap_or("");
    UPLOADS_BLOCK.replace(text, "").trim().to_owned()
}

/// The first AI message's text, without `<think>` blocks.
fn first_ai_text(messages: &[Message]) -> String {
    let text = messages
        .iter()
        .find_map(|m| match m {
            Message::Ai { content, .. } => Some(content.as_str()),
            _ => None,
        })
        .unwrap_or("");
    strip_think(text)
}

/// Removes `<think>` blocks and surrounding whitespace.
pub fn strip_think(text: &str) -> String {
    THINK.replace_all(text, "").trim().to_owned()
}

fn take_chars(text: &str, n: usize) -> String {
    text.chars().take(n).collect()
}

/// DeerFlow's `_fallback_title`: the user's text, cut to `min(50, max_chars − 3)`
/// characters with `...` when longer than `min(max_chars, 50)`; `New Conversation` when
/// empty.
pub fn fallback_title(user_text: &str, max_chars: usize) -> String {
    let limit = max_chars.min(FALLBACK_CHARS);
    if user_text.chars().count() > limit {
        let body = FALLBACK_CHARS.min(max_chars.saturating_sub(ELLIPSIS.len()));
        return format!("{}{ELLIPSIS}", take_chars(user_text, body).trim_end());
    }
    if user_text.is_empty() {
        NEW_CONVERSATION.to_owned()
    } else {
        user_text.to_owned()
    }
}

/// The title prompt: the template with the first user and AI texts, each cut to 500
/// characters.
pub fn title_prompt(config: &TitleConfig, messages: &[Message]) -> String {
    config
        .prompt_template
        .replace("{max_words}", &config.max_words.to_string())
        .replace(
            "{user_msg}",
            &take_chars(&first_user_text(messages), PROMPT_QUOTE_CHARS),
        )
        .replace(
            "{assistant_msg}",
            &take_chars(&first_ai_text(messages), PROMPT_QUOTE_CHARS),
        )
}

/// DeerFlow's `_parse_title`: `<think>` blocks, whitespace and surrounding quotes
/// stripped, cut to `max_chars` without an ellipsis.
pub fn clean_title(reply: &str, max_chars: usize) -> String {
    let title = strip_think(reply);
    let title = title.trim().trim_matches('"').trim_matches('\'');
    take_chars(title, max_chars)
}

impl Titling {
    /// The title without a model: the first user message, cut.
    pub fn fallback(&self, messages: &[Message]) -> String {
        fallback_title(&first_user_text(messages), self.config.max_chars as usize)
    }

    /// The title of the conversation `messages`: the model's, cleaned, or the fallback
    /// when there is no model, it fails or it answers nothing.
    pub async fn generate(&self, messages: &[Message]) -> String {
        let Some(model) = &self.model else {
            return self.fallback(messages);
        };
        let prompt = title_prompt(&self.config, messages);
        match model.auxiliary(Auxiliary::Title, &prompt).await {
            Ok(reply) => {
                let title = clean_title(&reply.content, self.config.max_chars as usize);
                if title.is_empty() {
                    self.fallback(messages)
                } else {
                    title
                }
            }
            Err(e) => {
                tracing::debug!("title generation failed, the fallback title is used: {e}");
                self.fallback(messages)
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn fallback_cuts_long_messages_and_names_empty_ones() {
        assert_eq!(fallback_title("Plan a trip", 60), "Plan a trip");
        let long = "a".repeat(49) + " and then some more words";
        let title = fallback_title(&long, 60);
        assert_eq!(title, format!("{}...", "a".repeat(49)));
        assert_eq!(
            fallback_title(&"b".repeat(80), 20),
            format!("{}...", "b".repeat(17))
        );
        assert_eq!(fallback_title("", 60), NEW_CONVERSATION);
    }

    #[test]
    fn the_uploads_block_never_becomes_the_title() {
        let text = "<current_uploads>\nThe following files were uploaded in this message:\n\n- a.pdf (1.0 KB)\n</current_uploads>\n\nSummarize the report";
        let messages = [Message::human(text)];
        assert_eq!(first_user_text(&messages), "Summarize the report");
        let titling = Titling {
            config: TitleConfig::default(),
            model: None,
        };
        assert_eq!(titling.fallback(&messages), "Summarize the report");
    }

    #[test]
    fn replies_are_cleaned() {
        assert_eq!(
            clean_title("<think>hmm\nlet me see</think>\n  \"Trip to Lisbon\"  ", 60),
            "Trip to Lisbon"
        );
        assert_eq!(clean_title("'Quoted'", 60), "Quoted");
        assert_eq!(clean_title(&"x".repeat(90), 60), "x".repeat(60));
    }

    #[test]
    fn due_after_the_first_exchange_only() {
        let config = TitleConfig::default();
        let mut state = ThreadState::new("hello");
        assert!(!due(&config, &state, &[], false));
        assert!(due(&config, &state, &[], true));
        let reply = Message::Ai {
            id: "ai-1".into(),
            content: "hi".into(),
            tool_calls: Vec::new(),
            reasoning: None,
        };
        assert!(due(&config, &state, std::slice::from_ref(&reply), false));
        state.messages.push(reply);
        assert!(due(&config, &state, &[], false));
        assert!(!due(&config, &state, &[Message::human("again")], false));
        state.title = Some("Set".into());
        assert!(!due(&config, &state, &[], false));
    }

    #[test]
    fn the_prompt_quotes_both_sides_without_thinking() {
        let messages = [
            Message::human("What is Rust?"),
            Message::Ai {
                id: "ai-1".into(),
                content: "<think>easy</think>A language.".into(),
                tool_calls: Vec::new(),
                reasoning: None,
            },
        ];
        let prompt = title_prompt(&TitleConfig::default(), &messages);
        assert_eq!(prompt, "Generate a concise title (max 6 words) for this conversation.\nUser: What is Rust?\nAssistant: A language.\n\nReturn ONLY the title, no quotes, no explanation.");
    }
}
