//! One step of a [`RunLoop`]: the model turn (the request with the visible tools, the
//! routing auto-promotion, a slash-activated skill, the token budget's warning; its
//! retries and fallbacks reported, an empty reply asked again once), the reply's invalid
//! calls answered at once, the reply through the after-model middlewares, recorded and
//! checkpointed before its valid tool calls run (`calls`).

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Instant;

use crate::catalog::builtins::VIEW_IMAGE;
use crate::catalog::ToolSpec;
use crate::middleware::dangling;
use crate::middleware::deferred::RoutingBeforeFilter;
use crate::middleware::finish_reason;
use crate::middleware::invalid_calls;
use crate::middleware::loop_detection::LoopVerdict;
use crate::middleware::terminal_response::{self, EMPTY_REPLY_FALLBACK};
use crate::middleware::token_budget::{BudgetVerdict, BUDGET_WARNING_NAME};
use crate::model::resilient::{retry_message, FailureReason, FallbackNotice};
use crate::model::{ImagePart, ModelObserver, ModelReply, ModelRequest, RetryNotice};
use crate::prompt;
use crate::run::delta::Deltas;
use crate::run::events::{first_line, EventSink, RunEvent, ToolState};
use crate::run::run_loop::{BudgetWarning, RunError, RunLoop, StepEnd};
use crate::thread::state::{next_ai_id, Message, StateUpdate, StopReason};
use crate::tools::skills::{self, SlashActivation};
use crate::tools::view_image;

impl RunLoop {
    /// One model turn and its tool calls: the reply is checkpointed before the calls run,
    /// then each call's result as it comes back.
    pub(super) async fn step_once(&mut self) -> Result<StepEnd, RunError> {
        let turn = self.next_turn()?;
        let catalog = Arc::clone(&self.catalog);
        let chain = RoutingBeforeFilter::new(&catalog, self.settings.auto_promote_top_k);
        let mut update = self.auto_promote(&chain)?;
        let reminder = match self.activate_slash_skill(&mut update, turn).await? {
            ControlFlow::Continue(reminder) => reminder,
            ControlFlow::Break(end) => return Ok(end),
        };
        // SkillToolPolicy (spec 4.3): one policy for this turn's schemas and calls, as
        // DeerFlow's tool wrapper reuses the decision of the model call.
        let policy = self.skill_policy();
        let visible: Vec<&ToolSpec> =
            policy.filter(chain.visible_tools(self.state.promoted.as_ref()));
        // Summarization and the window (`run::context`), before the request is built.
        self.poll_title().await?;
        self.fit_context(turn, &visible, reminder.as_deref())
            .await?;
        let (mut messages, images) = self.request_messages(reminder).await;
        self.fit_request(&mut messages, &visible, images.len());
        let asked = self.ask_model(turn, &messages, &visible, &images).await?;
        self.observe_usage(asked.reply.usage);
        let mut reply = asked.reply;
        if asked.empty_twice {
            // TerminalResponse (spec D.5): DeerFlow's fallback is stored, the run fails.
            update.token_usage = reply.usage;
            reply.content = EMPTY_REPLY_FALLBACK.to_owned();
            self.record_reply(turn, reply, &mut update);
            self.merge(update).await?;
            return Err(RunError::EmptyReply);
        }
        // A model's mistakes (spec D.4): its invalid calls never run, and are answered now.
        let mut refused = invalid_calls::sort_out(&mut reply, &catalog);
        self.after_model(turn, &mut reply, &mut update, asked.answered_by);
        let stripped = matches!(
            update.stop_reason,
            Some(StopReason::LoopCapped | StopReason::SafetyCapped | StopReason::TokenCapped)
        );
        if stripped {
            refused.clear();
        } else if !refused.is_empty() {
            if update.stop_reason == Some(StopReason::ModelLengthCapped) {
                // A reply with calls, even invalid ones, is not a capped answer.
                update.stop_reason = None;
            }
            if reply.tool_calls.is_empty() {
                self.cap_invalid_streak(&mut reply, &mut refused, &mut update);
            }
        }
        let calls = reply.tool_calls.clone();
        // The AI message keeps every call it made, so each answer has its call.
        reply
            .tool_calls
            .extend(refused.iter().map(|r| r.call.clone()));
        let answer = self.record_reply(turn, reply, &mut update);
        for refused in refused.iter() {
            self.answer_invalid_call(refused, &mut update);
        }
        self.title_with_reply(&mut update);
        if calls.is_empty() {
            self.merge(update).await?;
            return Ok(if refused.is_empty() {
                StepEnd::Final(answer)
            } else {
                StepEnd::Continue
            });
        }
        // The reply is journaled before any of its calls is sent: every call in it is
        // "issued" from here on, and one without a journaled result is never sent again
        // (a resume gives it the interrupted-call result, `resume`).
        self.merge(update).await?;
        self.run_calls(&calls, &chain, &policy).await
    }

    /// The turn about to start (1 + the thread's turns, summarized ones too), or the turn limit, which
    /// counts this run's turns only (a continued thread's earlier runs are not counted).
    fn next_turn(&self) -> Result<usize, RunError> {
        let turn = self.state.turns() + 1;
        if self.state.turns_this_run() + 1 > self.settings.max_turns {
            return Err(RunError::TurnLimit(self.settings.max_turns));
        }
        Ok(turn)
    }

    /// MCP routing's auto-promotion (spec 2.5), applied to the state before the deferred
    /// filter reads it; the turn's update starts with it.
    fn auto_promote(&mut self, chain: &RoutingBeforeFilter<'_>) -> Result<StateUpdate, RunError> {
        let update = StateUpdate {
            promoted: chain.auto_promote(&self.state.messages),
            ..StateUpdate::default()
        };
        if update.promoted.is_some() {
            self.state.apply(StateUpdate {
                promoted: update.promoted.clone(),
                ..StateUpdate::default()
            })?;
        }
        Ok(update)
    }

    /// SkillActivation (spec 4.1, lead 2): a user message `/skill-name` not yet answered
    /// activates that skill, recorded in the state, and its SKILL.md goes to this model
    /// call only (the reminder it continues with); a skill that cannot be activated is
    /// the run's reply (the step breaks with it).
    async fn activate_slash_skill(
        &mut self,
        update: &mut StateUpdate,
        turn: usize,
    ) -> Result<ControlFlow<StepEnd, Option<String>>, RunError> {
        match self.settings.skills.slash_activation(&self.state.messages) {
            Some(SlashActivation::Activated { skill, reminder }) => {
                update.active_skills.push(skill);
                self.state.apply(StateUpdate {
                    active_skills: update.active_skills.clone(),
                    ..StateUpdate::default()
                })?;
                Ok(ControlFlow::Continue(Some(reminder)))
            }
            Some(SlashActivation::Failed(text)) => {
                update.messages.push(Message::Ai {
                    id: format!("{}-skill-activation-{turn}", self.context.run_id),
                    content: text.clone(),
                    tool_calls: Vec::new(),
                    reasoning: None,
                });
                self.merge(std::mem::take(update)).await?;
                Ok(ControlFlow::Break(StepEnd::Final(text)))
            }
            None => Ok(ControlFlow::Continue(None)),
        }
    }

    /// What this model call is sent: the state's messages with dangling calls patched,
    /// the skill reminder, the token budget's one warning and the prompt, and the images
    /// a vision model sees with this call only.
    async fn request_messages(
        &mut self,
        reminder: Option<String>,
    ) -> (Vec<Message>, Vec<ImagePart>) {
        let mut messages = dangling::patched(&self.state.messages);
        // DurableContext (prompts §A.7): the summary, hidden, after the leading system
        // messages (the prompt coalesces the contract into the system message).
        crate::middleware::summarization::insert_durable_context(
            &mut messages,
            self.state.summary_text.as_deref(),
        );
        if let Some(reminder) = reminder {
            skills::insert_reminder(&mut messages, reminder);
        }
        // ViewImageMiddleware (spec C): a vision model (one offered `view_image`) sees the
        // images of its last view_image calls with this call only.
        let images = if self.catalog.get(VIEW_IMAGE).is_some() {
            view_image::images_for_next_call(
                &self.state.messages,
                &self.state.viewed_images,
                &self.context,
            )
            .await
        } else {
            Vec::new()
        };
        if let BudgetWarning::Pending(text) = &self.budget_warning {
            messages.push(Message::Human {
                content: text.clone(),
                name: Some(BUDGET_WARNING_NAME.to_owned()),
                hide_from_ui: true,
                additional_kwargs: None,
            });
            self.budget_warning = BudgetWarning::Sent;
        }
        // LoopDetection (spec C.7): queued warnings go last, after the tool results.
        if let Some(warning) = self.loop_warnings.take_message() {
            messages.push(warning);
        }
        if self.model.reads_prompt() {
            prompt::prepare_request(
                &mut messages,
                self.settings.system_prompt.as_deref(),
                &prompt::today(),
            );
        }
        (messages, images)
    }

    /// Asks the model, after reporting the tools it sees and the turn's start; its
    /// retries and fallbacks are reported as they happen. An empty reply is asked again
    /// once, with TerminalResponse's hidden reminder (spec D.5).
    async fn ask_model(
        &self,
        turn: usize,
        messages: &[Message],
        visible: &[&ToolSpec],
        images: &[ImagePart],
    ) -> Result<Asked, RunError> {
        for tool in visible {
            self.lifecycle(ToolState::Visible, &tool.name, None);
        }
        self.emit(RunEvent::ModelStarted { turn });
        // The reply's id is chosen before the call, so its streamed deltas carry it.
        let message_id = next_ai_id(&self.state.messages, turn);
        let observer = RunObserver::new(
            self.events.clone(),
            Deltas::new(turn, message_id.clone(), self.events.clone()),
        );
        let mut request = ModelRequest::new(messages, visible, images);
        request.observer = Some(&observer);
        request.earlier_turns = self.state.summarized_turns;
        request.turns_before = self.state.turns_before;
        let mut span = super::spans::model_span(self.model.name(), self.model.provider_name());
        let completed = self.model.complete(request).await;
        observer.deltas.flush(Instant::now());
        if let Err(e) = &completed {
            span.fail(e.to_string());
        }
        let mut reply = completed?;
        super::spans::record_reply(
            &mut span,
            &reply,
            observer.answered_by().as_deref(),
            self.model.name(),
        );
        drop(span);
        reply.id.clone_from(&message_id);
        let mut empty_twice = false;
        if terminal_response::is_empty(&reply) {
            self.emit(RunEvent::EmptyReplyRetried { turn });
            let mut again: Vec<Message> = messages.to_vec();
            again.push(terminal_response::recovery_message());
            let mut request = ModelRequest::new(&again, visible, images);
            request.observer = Some(&observer);
            request.earlier_turns = self.state.summarized_turns;
            request.turns_before = self.state.turns_before;
            let first_usage = reply.usage;
            let completed = self.model.complete(request).await;
            observer.deltas.flush(Instant::now());
            reply = completed?;
            reply.id = message_id;
            reply.usage = match (first_usage, reply.usage) {
                (Some(a), Some(b)) => Some(a + b),
                (a, b) => a.or(b),
            };
            empty_twice = terminal_response::is_empty(&reply);
        }
        Ok(Asked {
            reply,
            empty_twice,
            answered_by: observer.answered_by(),
        })
    }

    /// `llm_call.max_invalid_tool_calls` replies in a row of only invalid calls: the
    /// reply's calls are dropped and the run ends with its text and the note.
    fn cap_invalid_streak(
        &self,
        reply: &mut ModelReply,
        refused: &mut Vec<invalid_calls::RefusedCall>,
        update: &mut StateUpdate,
    ) {
        let streak = invalid_calls::consecutive_invalid_replies(&self.state.messages) + 1;
        if streak < self.settings.invalid_calls.max_consecutive {
            return;
        }
        tracing::warn!(run = %self.context.run_id, streak, "invalid tool calls limit reached, ending the run");
        refused.clear();
        reply.content = format!(
            "{}\n\n{}",
            reply.content,
            invalid_calls::hard_stop_note(streak)
        );
        if reply.finish_reason.as_deref() == Some(crate::model::finish_reason::TOOL_CALLS) {
            reply.finish_reason = Some(crate::model::finish_reason::STOP.to_owned());
        }
        update.stop_reason = Some(StopReason::InvalidToolCallsCapped);
    }

    /// An invalid call's answer joins the turn's update, reported as a call that failed
    /// without running.
    fn answer_invalid_call(&self, refused: &invalid_calls::RefusedCall, update: &mut StateUpdate) {
        let (name, id) = (&refused.call.name, &refused.call.id);
        self.emit(RunEvent::ToolStarted {
            name: name.clone(),
            tool_call_id: id.clone(),
        });
        let message = match &refused.answer {
            Message::Tool { content, .. } => Some(first_line(content)),
            _ => None,
        };
        self.lifecycle(ToolState::Returned, name, Some(id));
        self.emit(RunEvent::ToolFinished {
            name: name.clone(),
            tool_call_id: id.clone(),
            error: true,
            message,
        });
        update.messages.push(refused.answer.clone());
    }

    /// The after-model middlewares on the reply: token accounting and the budget (spec
    /// D), loop detection (its warning queued for the next request), the subagent limit
    /// and the finish reason, each stop reason recorded in the turn's update.
    fn after_model(
        &mut self,
        turn: usize,
        reply: &mut ModelReply,
        update: &mut StateUpdate,
        answered_by: Option<String>,
    ) {
        // Token accounting (spec D): the provider's usage, the budget, finish reasons.
        update.token_usage = reply.usage;
        let total_usage = self.state.token_usage + reply.usage.unwrap_or_default();
        self.emit(RunEvent::ModelFinished {
            turn,
            message_id: Some(reply.id.clone()),
            model: answered_by,
            usage: reply.usage,
            finish_reason: reply.finish_reason.clone(),
            total_usage: total_usage.reported(),
            reasoning: reply
                .reasoning
                .as_ref()
                .map(|r| r.text.clone())
                .filter(|text| !text.is_empty()),
        });
        let mut token_stop = None;
        if let Some(budget) = &self.settings.token_budget {
            let warned = self.budget_warning != BudgetWarning::NotYet;
            match budget.after_model(total_usage, reply, warned) {
                BudgetVerdict::HardStop(reason) => token_stop = Some(reason),
                BudgetVerdict::Warn(text) => self.budget_warning = BudgetWarning::Pending(text),
                BudgetVerdict::Pass => {}
            }
        }
        let verdict = self
            .settings
            .loop_detection
            .after_model(&self.state.messages, reply);
        let limit_stop = self.settings.subagent_limit.after_model(
            reply,
            &self.state.delegations,
            &self.context.run_id,
        );
        update.stop_reason = limit_stop;
        match verdict {
            LoopVerdict::HardStop(reason) => update.stop_reason = Some(reason),
            LoopVerdict::Warn(text) => self.loop_warnings.queue(text),
            LoopVerdict::Pass => {}
        }
        if token_stop.is_some() {
            update.stop_reason = token_stop;
        }
        let so_far = update.stop_reason.or(self.state.stop_reason);
        let safety = self.settings.safety_finish_reason;
        if let Some(reason) = finish_reason::after_model_with(reply, so_far, safety) {
            update.stop_reason = Some(reason);
        }
    }

    /// Adds the reply to the turn's update and reports it; returns its text (the run's
    /// answer when it calls no tool).
    fn record_reply(&self, turn: usize, reply: ModelReply, update: &mut StateUpdate) -> String {
        let answer = reply.content.clone();
        let usage = reply.usage;
        update.messages.push(reply.into_message());
        if self.settings.report_messages {
            self.emit(RunEvent::AssistantMessage {
                index: turn,
                content: answer.clone(),
                usage,
            });
        }
        answer
    }
}

/// What the model answered this turn.
struct Asked {
    reply: ModelReply,
    /// The reply was empty, and so was the one retry.
    empty_twice: bool,
    /// The fallback that answered (`None`: the run's model).
    answered_by: Option<String>,
}

/// Hears one model turn's stream, retries and fallbacks and reports them as run events.
struct RunObserver {
    events: Option<EventSink>,
    /// The streamed text and reasoning, coalesced into `model_delta` events.
    deltas: Deltas,
    answered_by: std::sync::Mutex<Option<String>>,
}

impl RunObserver {
    fn new(events: Option<EventSink>, deltas: Deltas) -> RunObserver {
        RunObserver {
            events,
            deltas,
            answered_by: std::sync::Mutex::new(None),
        }
    }

    fn emit(&self, event: RunEvent) {
        if let Some(events) = &self.events {
            events(&event);
        }
    }

    fn answered_by(&self) -> Option<String> {
        self.answered_by
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl ModelObserver for RunObserver {
    fn text_delta(&self, text: &str) {
        self.deltas.text(text, Instant::now());
    }

    fn reasoning_delta(&self, text: &str) {
        self.deltas.reasoning(text, Instant::now());
    }

    fn retry(&self, notice: &RetryNotice) {
        // What the failed attempt streamed goes out before the retry's notice.
        self.deltas.flush(Instant::now());
        let reason = FailureReason::of_retry(notice);
        self.emit(RunEvent::LlmRetry {
            model: notice.model.clone(),
            attempt: notice.attempt,
            max_attempts: notice.max_attempts,
            wait_ms: notice.wait.as_millis() as u64,
            reason: reason.to_string(),
            message: retry_message(notice.attempt, notice.max_attempts, notice.wait, reason),
            detail: notice.reason.clone(),
        });
    }

    fn fallback(&self, notice: &FallbackNotice) {
        self.deltas.flush(Instant::now());
        self.emit(RunEvent::ModelFallback {
            from: notice.from.clone(),
            to: notice.to.clone(),
            reason: notice.reason.to_string(),
            detail: notice.detail.clone(),
        });
    }

    fn answered_by(&self, model: &str) {
        *self
            .answered_by
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(model.to_owned());
    }
}
