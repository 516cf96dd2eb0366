//! One step of a [`RunLoop`]: the model turn (the request with the visible tools, the
//! routing auto-promotion, a slash-activated skill, the token budget's warning), the
//! reply through the after-model middlewares, recorded and checkpointed before its tool
//! calls run (`calls`).

use std::ops::ControlFlow;
use std::sync::Arc;

use crate::catalog::builtins::VIEW_IMAGE;
use crate::catalog::ToolSpec;
use crate::middleware::dangling;
use crate::middleware::deferred::RoutingBeforeFilter;
use crate::middleware::finish_reason;
use crate::middleware::loop_detection::LoopVerdict;
use crate::middleware::token_budget::{BudgetVerdict, BUDGET_WARNING_NAME};
use crate::model::{ImagePart, ModelReply, ModelRequest};
use crate::prompt;
use crate::run::events::{RunEvent, ToolState};
use crate::run::run_loop::{BudgetWarning, RunError, RunLoop, StepEnd};
use crate::thread::state::{Message, StateUpdate};
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
        let (messages, images) = self.request_messages(reminder).await;
        // SkillToolPolicy (spec 4.3): one policy for this turn's schemas and calls, as
        // DeerFlow's tool wrapper reuses the decision of the model call.
        let policy = self.skill_policy();
        let visible: Vec<&ToolSpec> =
            policy.filter(chain.visible_tools(self.state.promoted.as_ref()));
        let mut reply = self.ask_model(turn, &messages, &visible, &images).await?;
        let warning = self.after_model(turn, &mut reply, &mut update);
        let calls = reply.tool_calls.clone();
        let answer = self.record_reply(turn, reply, &mut update);
        if calls.is_empty() {
            self.merge(update).await?;
            return Ok(StepEnd::Final(answer));
        }
        // The reply is journaled before any of its calls is sent: every call in it is
        // "issued" from here on, and one without a journaled result is never sent again
        // (a resume gives it the interrupted-call result, `resume`).
        self.merge(update).await?;
        let end = self.run_calls(&calls, &chain, &policy).await?;
        if let Some(warning) = warning {
            self.merge(StateUpdate::messages([warning])).await?;
        }
        Ok(end)
    }

    /// The turn about to start (the first is 1), or the turn limit.
    fn next_turn(&self) -> Result<usize, RunError> {
        let turn = self
            .state
            .messages
            .iter()
            .filter(|m| matches!(m, Message::Ai { .. }))
            .count()
            + 1;
        if turn > self.settings.max_turns {
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
            });
            self.budget_warning = BudgetWarning::Sent;
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

    /// Asks the model, after reporting the tools it sees and the turn's start.
    async fn ask_model(
        &self,
        turn: usize,
        messages: &[Message],
        visible: &[&ToolSpec],
        images: &[ImagePart],
    ) -> Result<ModelReply, RunError> {
        for tool in visible {
            self.lifecycle(ToolState::Visible, &tool.name, None);
        }
        self.emit(RunEvent::ModelStarted { turn });
        let reply = self
            .model
            .complete(ModelRequest::new(messages, visible, images))
            .await?;
        Ok(reply)
    }

    /// The after-model middlewares on the reply: token accounting and the budget (spec
    /// D), loop detection, the subagent limit and the finish reason, each stop reason
    /// recorded in the turn's update. Returns loop detection's warning, merged after the
    /// reply's calls.
    fn after_model(
        &mut self,
        turn: usize,
        reply: &mut ModelReply,
        update: &mut StateUpdate,
    ) -> Option<Message> {
        // Token accounting (spec D): the provider's usage, the budget, finish reasons.
        update.token_usage = reply.usage;
        let total_usage = self.state.token_usage + reply.usage.unwrap_or_default();
        self.emit(RunEvent::ModelFinished {
            turn,
            usage: reply.usage,
            finish_reason: reply.finish_reason.clone(),
            total_usage: total_usage.reported(),
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
        let mut warning = None;
        match verdict {
            LoopVerdict::HardStop(reason) => update.stop_reason = Some(reason),
            LoopVerdict::Warn(message) => warning = Some(message),
            LoopVerdict::Pass => {}
        }
        if token_stop.is_some() {
            update.stop_reason = token_stop;
        }
        let so_far = update.stop_reason.or(self.state.stop_reason);
        if let Some(reason) = finish_reason::after_model(reply, so_far) {
            update.stop_reason = Some(reason);
        }
        warning
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
