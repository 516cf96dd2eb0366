//! The run loop's context hooks: summarization before every model call (spec C.1–C.3,
//! `middleware::summarization`), the window as a hard limit on what a request sends,
//! and the thread's title (spec C.5, `middleware::title`), made off the critical path: a
//! title call runs beside the run's next steps, is merged when it is ready and at the
//! latest when the run ends; the run never waits for it before a model call.

use std::time::Duration;

use crate::catalog::ToolSpec;
use crate::middleware::summarization::{self, Summarization, HOLD_TURNS};
use crate::middleware::title;
use crate::run::events::RunEvent;
use crate::run::run_loop::{RunError, RunLoop};
use crate::thread::state::{Message, StateUpdate, ThreadState};

/// How long a run's end waits for a title call still running before it takes the
/// fallback title.
const TITLE_WAIT: Duration = Duration::from_secs(20);

/// A title call running beside the run; aborted if the run is dropped first.
pub(super) struct TitleTask(tokio::task::JoinHandle<String>);

impl Drop for TitleTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What the run knows between model calls about its context.
#[derive(Debug, Default)]
pub(super) struct ContextState {
    /// The trigger is not evaluated before this turn (after a summary that left the
    /// request over it, or a failed one).
    pub(super) hold_until_turn: usize,
    /// What the last request counted (DeerFlow's counter).
    last_counted: u64,
    /// The provider's input tokens over that count, within [1, 1.25] (LangChain's usage
    /// scaling); `None` until a provider reports usage.
    scale: Option<f64>,
}

impl ContextState {
    fn scale(&self) -> f64 {
        self.scale.unwrap_or(1.0)
    }

    /// A count as the provider would report it.
    fn scaled(&self, tokens: u64) -> u64 {
        (tokens as f64 * self.scale()).ceil() as u64
    }

    /// The window in the counter's units: smaller when the provider counts more.
    fn window(&self, s: &Summarization) -> Option<u64> {
        s.window.map(|w| (w as f64 / self.scale()) as u64)
    }
}

impl RunLoop {
    /// Tokens a request sends besides the state's messages and the durable context: the
    /// system prompt, a reminder, the tool schemas and the images.
    fn request_overhead(&self, s: &Summarization, tools: &[&ToolSpec], extra: Option<&str>) -> u64 {
        let mut overhead = s.counter.tools(tools);
        if self.model.reads_prompt() {
            if let Some(prompt) = self.settings.system_prompt.as_deref() {
                // The date reminder and the coalescing join add about 80 characters.
                let system = format!("{prompt}{}", " ".repeat(80));
                overhead += s.counter.message(&Message::System { content: system });
            }
        }
        if let Some(extra) = extra {
            overhead += s.counter.message(&Message::human(extra));
        }
        overhead
            + summarization::TOKENS_PER_IMAGE
                * self
                    .state
                    .viewed_images
                    .len()
                    .min(summarization::MAX_COUNTED_IMAGES) as u64
    }

    /// The tokens a request over `state` sends with `overhead` besides.
    fn measure(s: &Summarization, state: &ThreadState, overhead: u64) -> u64 {
        s.counter.messages(&state.messages)
            + s.counter.messages(&summarization::durable_context(
                state.summary_text.as_deref(),
            ))
            + overhead
    }

    /// Summarization before the model call of `turn` (C.1): when a trigger holds, or the
    /// request would exceed the window, the oldest messages are folded into the summary;
    /// when that fails or is not enough, the oldest whole turns are dropped so the
    /// request fits the window. `extra`: a reminder this call also sends.
    pub(super) async fn fit_context(
        &mut self,
        turn: usize,
        tools: &[&ToolSpec],
        extra: Option<&str>,
    ) -> Result<(), RunError> {
        let Some(s) = self.settings.summarization.clone() else {
            return Ok(());
        };
        if !s.config.enabled {
            return Ok(());
        }
        let overhead = self.request_overhead(&s, tools, extra);
        let tokens = Self::measure(&s, &self.state, overhead);
        let counted = self.state.messages.len() + usize::from(self.state.summary_text.is_some());
        let window = self.compaction.window(&s);
        let over = window.is_some_and(|w| tokens > w);
        let free = turn >= self.compaction.hold_until_turn;
        if free && (over || s.triggered(counted, self.compaction.scaled(tokens))) {
            self.summarize(&s, turn, overhead).await?;
        }
        let Some(window) = self.compaction.window(&s) else {
            return Ok(());
        };
        let durable = s.counter.messages(&summarization::durable_context(
            self.state.summary_text.as_deref(),
        ));
        let budget = window.saturating_sub(overhead + durable);
        if s.counter.messages(&self.state.messages) <= budget {
            return Ok(());
        }
        // Trimmed to three quarters of the room, so the next calls do not trim again.
        let target = budget / 4 * 3;
        if let Some((kept, turns)) =
            summarization::trim_oldest_turns(&self.state.messages, target, &s.counter)
        {
            let removed = self.state.messages.len() - kept.len();
            self.emit(RunEvent::ContextTrimmed {
                removed,
                kept: kept.len(),
            });
            self.merge(StateUpdate {
                replace_messages: Some(kept),
                summarized_turns: turns,
                ..StateUpdate::default()
            })
            .await?;
        }
        Ok(())
    }

    /// One summarization: the configured keep, and within a window a tail that leaves
    /// room to grow; a failure holds the trigger for [`HOLD_TURNS`] turns.
    async fn summarize(
        &mut self,
        s: &Summarization,
        turn: usize,
        overhead: u64,
    ) -> Result<(), RunError> {
        let messages = &self.state.messages;
        let mut cutoff = summarization::keep_cutoff(messages, s.config.keep, s.window, &s.counter);
        if let Some(window) = self.compaction.window(s) {
            let reserve = s.counter.messages(&summarization::durable_context(Some(
                &"x".repeat(s.summary_cap()),
            )));
            let room = window.saturating_sub(overhead + reserve) / 2;
            cutoff = cutoff.max(summarization::keep_cutoff(
                messages,
                antler_protocol::config::ContextSize::Tokens(room.max(1)),
                s.window,
                &s.counter,
            ));
        }
        match s.compact_at(self.model.as_ref(), &self.state, cutoff).await {
            Ok(Some(compaction)) => {
                if let Some(hook) = &self.settings.before_summarization {
                    let kept = compaction.update.replace_messages.as_deref();
                    hook(&compaction.summarized, kept.unwrap_or_default());
                }
                self.emit(RunEvent::ContextSummarized {
                    removed: compaction.removed,
                    kept: compaction.kept,
                });
                self.merge(compaction.update).await?;
                let tokens = self
                    .compaction
                    .scaled(Self::measure(s, &self.state, overhead));
                let counted = self.state.messages.len() + 1;
                if s.triggered(counted, tokens) {
                    // The kept tail is over the trigger by itself: summarizing again at
                    // the next call would fold a message or two for a model call each.
                    self.compaction.hold_until_turn = turn + HOLD_TURNS;
                }
            }
            Ok(None) => self.compaction.hold_until_turn = turn + HOLD_TURNS,
            Err(e) => {
                tracing::warn!(run = %self.context.run_id, "summarization failed, retried in {HOLD_TURNS} turns: {e}");
                self.emit(RunEvent::Warning {
                    message: format!("summarization failed; the oldest turns are trimmed instead if the window requires it: {e}"),
                });
                self.compaction.hold_until_turn = turn + HOLD_TURNS;
            }
        }
        Ok(())
    }

    /// The last guard on the request itself: within the window, counting what is sent
    /// (its longest contents bounded, in the request only, when even the kept turn is too
    /// large). What it counts is kept for [`RunLoop::observe_usage`].
    pub(super) fn fit_request(
        &mut self,
        messages: &mut [Message],
        tools: &[&ToolSpec],
        images: usize,
    ) {
        let Some(s) = self.settings.summarization.clone() else {
            return;
        };
        if !s.config.enabled {
            return;
        }
        let fixed = s.counter.tools(tools) + summarization::TOKENS_PER_IMAGE * images as u64;
        if let Some(window) = self.compaction.window(&s) {
            summarization::bound_request(messages, window.saturating_sub(fixed), &s.counter);
        }
        self.compaction.last_counted = s.counter.messages(messages) + fixed;
    }

    /// The provider's count of the last request: later counts are scaled by how much more
    /// it counted (at most 1.25 times, as LangChain scales).
    pub(super) fn observe_usage(&mut self, usage: Option<crate::thread::state::TokenUsage>) {
        let Some(usage) = usage.filter(|u| u.input_tokens > 0) else {
            return;
        };
        if self.compaction.last_counted == 0 {
            return;
        }
        let ratio = usage.input_tokens as f64 / self.compaction.last_counted as f64;
        self.compaction.scale = Some(ratio.clamp(1.0, 1.25));
    }

    /// The reply's update, before it is merged: the title, once the first exchange is
    /// there. Without a model it joins the update (no checkpoint of its own); with one,
    /// its call starts beside the run.
    pub(super) fn title_with_reply(&mut self, update: &mut StateUpdate) {
        let Some(titling) = self.settings.title.clone() else {
            return;
        };
        if self.title_task.is_some()
            || !title::due(&titling.config, &self.state, &update.messages, false)
        {
            return;
        }
        let mut messages = self.state.messages.clone();
        messages.extend(update.messages.iter().cloned());
        if titling.model.is_none() {
            let text = titling.fallback(&messages);
            self.emit(RunEvent::TitleSet {
                title: text.clone(),
            });
            update.title = Some(text);
            return;
        }
        self.title_task = Some(TitleTask(tokio::spawn(async move {
            titling.generate(&messages).await
        })));
    }

    /// A title call that has finished is merged; one still running is left to run.
    pub(super) async fn poll_title(&mut self) -> Result<(), RunError> {
        if !self.title_task.as_ref().is_some_and(|t| t.0.is_finished()) {
            return Ok(());
        }
        self.take_title(Duration::ZERO).await
    }

    /// The run's end: a running title call is awaited (bounded); a first turn that ended
    /// without a title (interrupted, failed, no AI message) gets the fallback title.
    pub(super) async fn finish_title(&mut self) {
        if self.title_task.is_some() {
            if let Err(e) = self.take_title(TITLE_WAIT).await {
                tracing::warn!(run = %self.context.run_id, "the title was not saved: {e}");
            }
        }
        let Some(titling) = self.settings.title.clone() else {
            return;
        };
        if title::due(&titling.config, &self.state, &[], true) {
            let text = titling.fallback(&self.state.messages);
            if let Err(e) = self.set_title(text).await {
                tracing::warn!(run = %self.context.run_id, "the title was not saved: {e}");
            }
        }
    }

    /// The finished (or, within `wait`, finishing) title call's title, merged; the
    /// fallback when the call failed or took longer.
    async fn take_title(&mut self, wait: Duration) -> Result<(), RunError> {
        let Some(mut task) = self.title_task.take() else {
            return Ok(());
        };
        let title = match tokio::time::timeout(wait, &mut task.0).await {
            Ok(Ok(title)) => title,
            _ => match &self.settings.title {
                Some(titling) => titling.fallback(&self.state.messages),
                None => return Ok(()),
            },
        };
        if self.state.title.as_deref().is_some_and(|t| !t.is_empty()) {
            return Ok(());
        }
        self.set_title(title).await
    }

    async fn set_title(&mut self, text: String) -> Result<(), RunError> {
        self.emit(RunEvent::TitleSet {
            title: text.clone(),
        });
        self.merge(StateUpdate {
            title: Some(text),
            ..StateUpdate::default()
        })
        .await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::middleware::summarization::TokenCounter;
    use antler_protocol::config::SummarizationConfig;

    #[test]
    fn a_provider_that_counts_more_shrinks_the_window() {
        let s = Summarization::new(
            SummarizationConfig::default(),
            "m",
            Some(4000),
            None,
            TokenCounter::default(),
        )
        .unwrap();
        let mut state = ContextState::default();
        assert_eq!((state.scaled(1000), state.window(&s)), (1000, Some(4000)));
        state.scale = Some(1.25);
        assert_eq!((state.scaled(1000), state.window(&s)), (1250, Some(3200)));
    }
}
