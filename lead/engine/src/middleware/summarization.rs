//! Summarization (spec C.1–C.4): DeerFlow's `SummarizationMiddleware` before every model
//! call, and the same compaction for `POST /api/threads/{id}/compact`. It counts what a
//! request really sends (messages, the summary, the system prompt, tool schemas), cuts
//! the oldest messages so that a tool call is never separated from its result, rescues
//! the current request (and a clarification answer), and folds what it cut into
//! `summary_text`, which every request carries as hidden durable context, bounded. Where
//! a summary fails or the tail alone is too large, the oldest whole turns are trimmed:
//! a request never exceeds the model's window. `counter` counts, `cutoff` cuts, `prompt`
//! writes what the summary reads and the durable context, `compact` is the manual
//! compaction; the run loop's hook is `run::context`.

use std::sync::Arc;

use antler_protocol::config::{ContextSize, SummarizationConfig};
use serde_json::Value;

use crate::model::{Auxiliary, ChatModel};
use crate::thread::state::{Message, StateUpdate, ThreadState};

mod compact;
mod counter;
mod cutoff;
mod prompt;

pub use compact::{compact, CompactError, CompactOutcome, NOT_ENOUGH_MESSAGES};
pub use counter::{count_request_tokens, TokenCounter, MAX_COUNTED_IMAGES, TOKENS_PER_IMAGE};
pub use cutoff::{bound_request, keep_cutoff, partition, trim_oldest_turns};
pub use prompt::{
    bound_text, durable_context, insert_durable_context, summary_input, AUTHORITY_CONTRACT,
    DEFAULT_SUMMARY_PROMPT, NO_HISTORY, SUMMARY_HEADING, SUMMARY_RENDER_CHAR_BUDGET, TOO_LONG,
};

/// Model turns the trigger waits after a summary that could not bring the request under
/// it, or after a failed one (DeerFlow retries on every call: C.9 quirk 2).
pub const HOLD_TURNS: usize = 4;
/// A run's summarization: `summarization:` with what it needs of the run's model.
#[derive(Clone)]
pub struct Summarization {
    pub config: SummarizationConfig,
    /// The run's model's input window (`max_input_tokens`, else `context_window`, of its
    /// `models:` entry); `None` when the entry gives none.
    pub window: Option<u64>,
    /// `model_name`'s model, asked first (`None`: the run's model only).
    pub model: Option<Arc<dyn ChatModel>>,
    pub counter: TokenCounter,
}

impl std::fmt::Debug for Summarization {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Summarization")
            .field("config", &self.config)
            .field("window", &self.window)
            .field("model", &self.model.as_ref().map(|m| m.name().to_owned()))
            .finish()
    }
}

/// Why a summarization could not be configured (an operator's config error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SummarizationConfigError {
    /// A fraction needs a window and the model's entry gives none.
    #[error("summarization: a `fraction` trigger or keep needs the window of model `{model}`; set `context_window` or `max_input_tokens` on its `models:` entry, or use `tokens`")]
    NoWindow { model: String },
}

impl Summarization {
    /// `config` for a run of the model `model_name`, whose window is `window`; a fraction
    /// without a window is an error naming the model.
    pub fn new(
        config: SummarizationConfig,
        model_name: &str,
        window: Option<u64>,
        model: Option<Arc<dyn ChatModel>>,
        counter: TokenCounter,
    ) -> Result<Summarization, SummarizationConfigError> {
        if config.needs_window() && window.is_none() {
            return Err(SummarizationConfigError::NoWindow {
                model: model_name.to_owned(),
            });
        }
        Ok(Summarization {
            config,
            window,
            model,
            counter,
        })
    }

    fn prompt(&self) -> &str {
        self.config
            .summary_prompt
            .as_deref()
            .unwrap_or(DEFAULT_SUMMARY_PROMPT)
    }

    /// Whether any trigger holds (OR) for a request of `tokens` over `messages` messages.
    pub fn triggered(&self, messages: usize, tokens: u64) -> bool {
        self.config.trigger.iter().any(|t| match *t {
            ContextSize::Messages(n) => messages as u64 >= n,
            ContextSize::Tokens(n) => tokens >= n,
            ContextSize::Fraction(f) => self
                .window
                .is_some_and(|w| tokens >= ((w as f64 * f) as u64).max(1)),
        })
    }

    /// The most characters a stored summary keeps: DeerFlow's render cap, and within a
    /// small window an eighth of it in tokens, so the summary is bounded too.
    pub fn summary_cap(&self) -> usize {
        match self.window {
            Some(window) => SUMMARY_RENDER_CHAR_BUDGET.min((window / 2) as usize),
            None => SUMMARY_RENDER_CHAR_BUDGET,
        }
    }

    /// The input budget of the summary call: `trim_tokens_to_summarize`, and within the
    /// window with the prompt around it.
    fn input_budget(&self) -> Option<u64> {
        let prompt = self.counter.text(self.prompt()) + 64;
        match (self.config.trim_tokens_to_summarize, self.window) {
            (Some(trim), Some(window)) => Some(trim.min(window.saturating_sub(prompt)).max(1)),
            (Some(trim), None) => Some(trim),
            (None, Some(window)) => Some(window.saturating_sub(prompt).max(1)),
            (None, None) => None,
        }
    }

    /// The prompt of a summary of `messages` after `previous`, or a canned summary that
    /// skips the call.
    pub fn summary_prompt(&self, messages: &[Message], previous: Option<&str>) -> SummaryPrompt {
        if messages.is_empty() {
            return SummaryPrompt::Canned(NO_HISTORY);
        }
        match summary_input(messages, previous, self.input_budget(), &self.counter) {
            None => SummaryPrompt::Canned(TOO_LONG),
            Some(input) => SummaryPrompt::Ask(
                self.prompt()
                    .replace("{messages}", &input)
                    .trim_end()
                    .to_owned(),
            ),
        }
    }

    /// The summary of `messages` (C.3): the configured model, then the run's, each with
    /// thinking off and unstreamed; an empty reply is a failure. Bounded to
    /// [`Summarization::summary_cap`].
    pub async fn summarize(
        &self,
        run_model: &dyn ChatModel,
        messages: &[Message],
        previous: Option<&str>,
    ) -> Result<String, SummaryError> {
        let prompt = match self.summary_prompt(messages, previous) {
            SummaryPrompt::Canned(text) => return Ok(text.to_owned()),
            SummaryPrompt::Ask(prompt) => prompt,
        };
        let mut failures = Vec::new();
        let candidates = self
            .model
            .iter()
            .map(|m| m.as_ref())
            .chain(std::iter::once(run_model));
        for model in candidates {
            match model.auxiliary(Auxiliary::Summary, &prompt).await {
                Ok(reply) if !reply.content.trim().is_empty() => {
                    return Ok(bound_text(reply.content.trim(), self.summary_cap()));
                }
                Ok(_) => failures.push(format!("model `{}`: empty summary", model.name())),
                Err(e) => failures.push(e.to_string()),
            }
        }
        Err(SummaryError(failures.join("; then ")))
    }

    /// The compaction of `state` with the cutoff `cutoff` (already chosen): the update
    /// that replaces the messages and the summary, or `None` when nothing is left to
    /// summarize.
    pub async fn compact_at(
        &self,
        run_model: &dyn ChatModel,
        state: &ThreadState,
        cutoff: usize,
    ) -> Result<Option<Compaction>, SummaryError> {
        let Some((summarized, kept)) = partition(&state.messages, cutoff) else {
            return Ok(None);
        };
        let summary = self
            .summarize(run_model, &summarized, state.summary_text.as_deref())
            .await?;
        let removed_turns = summarized
            .iter()
            .filter(|m| matches!(m, Message::Ai { .. }))
            .count();
        Ok(Some(Compaction {
            removed: summarized.len(),
            summarized,
            kept: kept.len(),
            update: StateUpdate {
                replace_messages: Some(kept),
                summary_text: Some(summary),
                summarized_turns: removed_turns,
                ..StateUpdate::default()
            },
        }))
    }
}

/// A summary prompt, or one of DeerFlow's canned summaries that need no call.
#[derive(Clone, Debug, PartialEq)]
pub enum SummaryPrompt {
    Canned(&'static str),
    Ask(String),
}

/// Every summary model failed (each reason, in order); the state is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("summary generation failed: {0}")]
pub struct SummaryError(pub String);

/// One compaction: the messages it folds into the summary, how many it removed and
/// kept, and the update that does it.
#[derive(Clone, Debug, PartialEq)]
pub struct Compaction {
    pub summarized: Vec<Message>,
    pub removed: usize,
    pub kept: usize,
    pub update: StateUpdate,
}

/// What hears the messages a summary is about to remove, once the summary exists, with
/// the messages it keeps (DeerFlow's `before_summarization` hooks and their
/// `SummarizationEvent`: its memory queues the removed ones for extraction). Called on
/// the run's thread: it must not block.
pub type BeforeSummarization = Arc<dyn Fn(&[Message], &[Message]) + Send + Sync>;

/// The model's input window from its `models:` entry: `max_input_tokens`, else
/// `context_window` (DeerFlow reads only the profile's `max_input_tokens`).
pub fn window_of(entry: &antler_protocol::config::ModelConfig) -> Option<u64> {
    ["max_input_tokens", "context_window"]
        .iter()
        .find_map(|key| entry.extra.get(*key).and_then(Value::as_u64))
        .filter(|w| *w > 0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
#[path = "summarization_tests.rs"]
mod tests;
