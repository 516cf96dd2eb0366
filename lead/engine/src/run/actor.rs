//! The run loop and its actor. One [`RunLoop`] owns one run's `ThreadState`: it asks the
//! model with the visible tools, passes the reply through the after-model middlewares,
//! admits each tool call through the call middlewares (guardrail, deferred filter,
//! clarification), executes it where it belongs, merges the results through the
//! reducers and checkpoints the state, until a final answer, an interrupt, a cap or an
//! error. [`RunActor`] owns a loop and drives it on request. [`RunBuilder`] is the one
//! way to make a loop: the lead's runs add their journal, custom-agent tools and
//! delegator; a subagent's task graph runs with none of them.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use serde::Serialize;

use super::events::{first_line, EventSink, RunEvent, ToolState};
use super::execute::{Executor, LeadTools};
use super::journal::{Journal, JournalError, NoJournal, RunRecord, RunStatus};
use crate::catalog::builtins::{ASK_CLARIFICATION, PRESENT_FILES, TASK, VIEW_IMAGE};
use crate::catalog::{Catalog, ToolSpec, TOOL_SEARCH_NAME};
use crate::middleware::clarification::{self, Clarification};
use crate::middleware::dangling;
use crate::middleware::deferred::RoutingBeforeFilter;
use crate::middleware::finish_reason;
use crate::middleware::guardrail::{Guardrail, GuardrailRequest};
use crate::middleware::loop_detection::{LoopDetection, LoopVerdict};
use crate::middleware::output_budget::OutputBudget;
use crate::middleware::skill_policy::SkillPolicy;
use crate::middleware::subagent_limit::SubagentLimit;
use crate::middleware::token_budget::{BudgetVerdict, TokenBudget, BUDGET_WARNING_NAME};
use crate::middleware::tool_error::{failed_call_message, invalid_tool_message};
use crate::model::{ChatModel, ImagePart, ModelError, ModelReply, ModelRequest};
use crate::prompt;
use crate::settlement::{DeliveryReceipt, OutputsSnapshot, RECEIPT_NOT_PERSISTED};
use crate::thread::context::RunContext;
use crate::thread::hosts::ToolHosts;
use crate::thread::lease::{self, SandboxLease};
use crate::thread::state::{
    Message, StateConflict, StateUpdate, ThreadState, TokenUsage, ToolCall,
};
use crate::tools::skills::{self, SkillStore, SlashActivation};
use crate::tools::task::delegation::{self, Delegator, TaskCall, TaskEventSink};
use crate::tools::task::{TaskArgs, TaskEvent, TaskResult};
use crate::tools::view_image;

/// A run's knobs.
pub struct RunSettings {
    /// Model turns before the run fails (LangGraph's recursion limit).
    pub max_turns: usize,
    /// Deadline of one tool call on a host.
    pub tool_timeout: Duration,
    pub loop_detection: LoopDetection,
    pub subagent_limit: SubagentLimit,
    pub output_budget: OutputBudget,
    /// `guardrails.enabled` with a provider.
    pub guardrail: Option<Guardrail>,
    /// `tool_search.auto_promote_top_k`, clamped.
    pub auto_promote_top_k: usize,
    /// Where the run's skills are installed (activation and policy, `tools::skills`).
    pub skills: SkillStore,
    /// A fixed tool policy instead of the active skills' one (tests); `None` resolves
    /// the policy from the active skills at every model turn.
    pub skill_policy: Option<SkillPolicy>,
    /// The lead's static system prompt (`prompt`); `None` sends none.
    pub system_prompt: Option<Arc<str>>,
    /// `token_budget:` when enabled.
    pub token_budget: Option<TokenBudget>,
    /// The agent's skills whitelist (`None`: every skill), for `describe_skill`.
    pub allowed_skills: Option<std::collections::HashSet<String>>,
    /// Whether the run ends with settlement (the lead's runs; a subagent's task does not).
    pub settle: bool,
    /// Whether each AI message is reported as [`RunEvent::AssistantMessage`] (a
    /// subagent's task streams them to its parent as `task_running`).
    pub report_messages: bool,
    /// Whether this run is a subagent's (the guardrail is told so).
    pub is_subagent: bool,
    /// The configured web tools (`tools::web`), from config.yaml's `tools:`.
    pub web: Option<Arc<crate::tools::web::WebTools>>,
    /// What `invoke_acp_agent` calls carry (`None`: no agent is configured).
    pub acp: Option<Arc<crate::tools::acp::AcpCalls>>,
    /// `skill_manage` (`tools::skill_manage`) when `skill_evolution.enabled`; it writes
    /// under `skills` for the run's user.
    pub skill_manage: Option<crate::tools::skill_manage::SkillManageSettings>,
}

impl Default for RunSettings {
    fn default() -> Self {
        RunSettings {
            max_turns: 50,
            tool_timeout: Duration::from_secs(900),
            loop_detection: LoopDetection::default(),
            subagent_limit: SubagentLimit::default(),
            output_budget: OutputBudget::default(),
            guardrail: None,
            auto_promote_top_k: crate::catalog::routing::DEFAULT_AUTO_PROMOTE_TOP_K,
            skills: SkillStore::default(),
            skill_policy: None,
            system_prompt: None,
            token_budget: None,
            allowed_skills: None,
            settle: true,
            report_messages: false,
            is_subagent: false,
            web: None,
            acp: None,
            skill_manage: None,
        }
    }
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunOutcome {
    pub run_id: String,
    pub status: RunStatus,
    pub final_answer: Option<String>,
    /// The clarification question of an interrupted run.
    pub question: Option<String>,
    pub error: Option<String>,
    pub artifacts: Vec<String>,
    /// The deferred tools `tool_search` promoted for the run.
    pub promoted: Option<crate::catalog::promotion::Promoted>,
    pub stop_reason: Option<crate::thread::state::StopReason>,
    /// The delivery receipt of a run that ended (success or error).
    pub delivery: Option<DeliveryReceipt>,
    /// The tokens the run's model calls used.
    pub token_usage: TokenUsage,
    /// The run ended at its limit of model turns.
    pub turn_limited: bool,
}

/// Why a run could not go on (operator-facing; the run ends as `error`).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("checkpoint store: {0}")]
    Journal(#[from] JournalError),
    #[error(transparent)]
    State(#[from] StateConflict),
    #[error("the run reached its limit of {0} model turns")]
    TurnLimit(usize),
    #[error("the run is already being driven")]
    Busy,
    #[error("cannot read the outputs directory: {0}")]
    Outputs(#[from] antler_protocol::messages::ThreadFileError),
    #[error("no run {0} in the checkpoint store")]
    UnknownRun(String),
    #[error("the run was cancelled")]
    Cancelled,
}

/// Pauses after a failed receipt write: DeerFlow retries after 0.1 s and 0.5 s.
const RECEIPT_RETRY_PAUSES: [Duration; 3] = [
    Duration::from_millis(100),
    Duration::from_millis(500),
    Duration::ZERO,
];

/// How long settlement waits for the thread's files to be reachable again.
const THREAD_FILES_WAIT: Duration = Duration::from_secs(20);

/// A cooperative cancellation: checked between steps, and it ends a step that waits.
#[derive(Debug, Default)]
pub struct CancelFlag {
    cancelled: std::sync::atomic::AtomicBool,
    notify: tokio::sync::Notify,
}

impl CancelFlag {
    pub fn cancel(&self) {
        self.cancelled
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Resolves once [`CancelFlag::cancel`] was called.
    pub async fn cancelled(&self) {
        loop {
            let notified = self.notify.notified();
            if self.is_cancelled() {
                return;
            }
            notified.await;
        }
    }
}

/// What a run is made of; [`RunBuilder::start`] and [`RunBuilder::resume`] make the loop.
pub struct RunBuilder {
    context: RunContext,
    model: Arc<dyn ChatModel>,
    model_label: String,
    catalog: Arc<Catalog>,
    hosts: Arc<dyn ToolHosts>,
    journal: Arc<dyn Journal>,
    settings: RunSettings,
    lead_tools: Option<Arc<dyn LeadTools>>,
    delegator: Option<Arc<dyn Delegator>>,
    cancel: Option<Arc<CancelFlag>>,
}

impl RunBuilder {
    /// Where the run is journaled (none by default: nothing is kept).
    pub fn journal(mut self, journal: Arc<dyn Journal>) -> Self {
        self.journal = journal;
        self
    }

    pub fn settings(mut self, settings: RunSettings) -> Self {
        self.settings = settings;
        self
    }

    /// The label the journal records to resume the run with the same model.
    pub fn model_label(mut self, label: impl Into<String>) -> Self {
        self.model_label = label.into();
        self
    }

    /// Tools only the lead runs (`setup_agent`, `update_agent`).
    pub fn lead_tools(mut self, tools: Arc<dyn LeadTools>) -> Self {
        self.lead_tools = Some(tools);
        self
    }

    /// Where the run's `task` calls go.
    pub fn delegator(mut self, delegator: Arc<dyn Delegator>) -> Self {
        self.delegator = Some(delegator);
        self
    }

    /// A cancellation the run checks between steps.
    pub fn cancel(mut self, cancel: Arc<CancelFlag>) -> Self {
        self.cancel = Some(cancel);
        self
    }

    fn into_loop(self, state: ThreadState, step: i64) -> RunLoop {
        RunLoop {
            lease: Arc::new(SandboxLease::new(&self.context.run_id)),
            context: self.context,
            state,
            step,
            model: self.model,
            catalog: self.catalog,
            hosts: self.hosts,
            journal: self.journal,
            settings: self.settings,
            events: None,
            budget_warning: BudgetWarning::NotYet,
            lead_tools: self.lead_tools,
            delegator: self.delegator,
            cancel: self.cancel,
        }
    }

    /// Starts a new run: its record and initial state are journaled as step 0.
    pub async fn start(self, task: &str) -> Result<RunLoop, RunError> {
        let state = ThreadState::new(task);
        let context = &self.context;
        let record = RunRecord {
            run_id: context.run_id.clone(),
            user_id: context.user_id.clone(),
            thread_id: context.thread_id.clone(),
            task: task.to_owned(),
            model: self.model_label.clone(),
            status: RunStatus::Running,
            detail: None,
            clarification: context.clarification_enabled,
            agent: context.agent.agent_name.clone(),
            bootstrap: context.agent.bootstrap,
            non_interactive: context.agent.non_interactive,
            subagents: context.agent.subagents,
            role: context.agent.role.clone(),
        };
        self.journal.create_run(&record, &state).await?;
        if self.settings.settle {
            let before = OutputsSnapshot::take_through(&*context.files).await?;
            self.journal
                .save_outputs_snapshot(&context.run_id, before)
                .await?;
        }
        Ok(self.into_loop(state, 0))
    }

    /// Resumes a run from its last checkpoint. Every call of the journaled model reply
    /// without a journaled result was issued (it may have reached its host and had its
    /// effects): it gets the interrupted-call result, merged and checkpointed as a step of
    /// its own, and is never sent again. A `task` call is the exception when the run has
    /// a delegator: its task may still run, or have finished, on a worker, and the drive
    /// collects it first.
    pub async fn resume(self) -> Result<RunLoop, RunError> {
        let run_id = self.context.run_id.clone();
        let (step, state) = self
            .journal
            .latest(&run_id)
            .await?
            .ok_or_else(|| RunError::UnknownRun(run_id.clone()))?;
        self.journal
            .set_status(&run_id, RunStatus::Running, None)
            .await?;
        let collect_tasks = self.delegator.is_some();
        let mut run = self.into_loop(state, step);
        let interrupted: Vec<Message> = dangling::interrupted_results(&run.state.messages)
            .into_iter()
            .filter(|m| !(collect_tasks && matches!(m, Message::Tool { name, .. } if name == TASK)))
            .collect();
        if !interrupted.is_empty() {
            run.merge(StateUpdate::messages(interrupted)).await?;
        }
        Ok(run)
    }
}

/// One run: its state, its model, its catalog, and where its tools run.
pub struct RunLoop {
    pub context: RunContext,
    state: ThreadState,
    step: i64,
    model: Arc<dyn ChatModel>,
    catalog: Arc<Catalog>,
    hosts: Arc<dyn ToolHosts>,
    journal: Arc<dyn Journal>,
    settings: RunSettings,
    events: Option<EventSink>,
    lead_tools: Option<Arc<dyn LeadTools>>,
    delegator: Option<Arc<dyn Delegator>>,
    cancel: Option<Arc<CancelFlag>>,
    /// The run's lease on its sandbox, renewed while the run is driven.
    lease: Arc<SandboxLease>,
    /// The token budget's warning, sent with the next request once per drive.
    budget_warning: BudgetWarning,
}

/// Where the token budget's one warning is.
#[derive(Clone, Debug, Default, PartialEq)]
enum BudgetWarning {
    #[default]
    NotYet,
    Pending(String),
    Sent,
}

/// What one step decided.
enum StepEnd {
    Continue,
    Final(String),
    Interrupted(String),
}

impl RunLoop {
    /// The builder of a run of `model` over `catalog`, its tools reached through `hosts`.
    pub fn builder(
        context: RunContext,
        model: Arc<dyn ChatModel>,
        catalog: Arc<Catalog>,
        hosts: Arc<dyn ToolHosts>,
    ) -> RunBuilder {
        RunBuilder {
            model_label: model.name().to_owned(),
            context,
            model,
            catalog,
            hosts,
            journal: Arc::new(NoJournal),
            settings: RunSettings::default(),
            lead_tools: None,
            delegator: None,
            cancel: None,
        }
    }

    /// Adds the user's answer to an interrupted run (a clarification), as a step.
    pub async fn answer(&mut self, text: &str) -> Result<(), RunError> {
        self.merge(StateUpdate::messages([Message::human(text)]))
            .await
    }

    /// Reports progress to `events`.
    pub fn on_event(&mut self, events: impl Fn(&RunEvent) + Send + Sync + 'static) {
        self.events = Some(Arc::new(events));
    }

    pub fn state(&self) -> &ThreadState {
        &self.state
    }

    fn lifecycle(&self, state: ToolState, tool: &str, tool_call_id: Option<&str>) {
        if self.events.is_some() {
            self.emit(RunEvent::Lifecycle {
                state,
                tool: tool.to_owned(),
                tool_call_id: tool_call_id.map(str::to_owned),
            });
        }
    }

    fn emit(&self, event: RunEvent) {
        if let Some(events) = &self.events {
            events(&event);
        }
    }

    async fn merge(&mut self, update: StateUpdate) -> Result<(), RunError> {
        self.state.apply(update)?;
        self.step += 1;
        self.journal
            .save(&self.context.run_id, self.step, &self.state)
            .await?;
        Ok(())
    }

    /// Drives the run to its end and records the outcome.
    pub async fn drive(&mut self) -> RunOutcome {
        for state in [ToolState::Available, ToolState::Authorized] {
            for tool in self.catalog.tools() {
                self.lifecycle(state, &tool.name, None);
            }
        }
        let renewal = lease::keep_renewed(Arc::clone(&self.hosts), Arc::clone(&self.lease));
        let result = {
            let steps = self.drive_steps();
            futures::pin_mut!(steps, renewal);
            match futures::future::select(steps, renewal).await {
                futures::future::Either::Left((result, _)) => result,
                futures::future::Either::Right(((), steps)) => steps.await,
            }
        };
        let executor = self.executor();
        executor.release(&self.state).await;
        let turn_limited = matches!(result, Err(RunError::TurnLimit(_)));
        if let (Some(delegator), Err(_)) = (&self.delegator, &result) {
            // A run that failed or was cancelled takes its tasks with it.
            delegator.cancel_run(&self.context.run_id);
        }
        let (mut status, final_answer, question, mut error) = match result {
            Ok(StepEnd::Final(answer)) => (RunStatus::Success, Some(answer), None, None),
            Ok(StepEnd::Interrupted(question)) => {
                (RunStatus::Interrupted, None, Some(question), None)
            }
            Ok(StepEnd::Continue) => (
                RunStatus::Error,
                None,
                None,
                Some("run ended mid-step".to_owned()),
            ),
            Err(error) => (RunStatus::Error, None, None, Some(error.to_string())),
        };
        let delivery = match status {
            RunStatus::Interrupted | RunStatus::Running => None,
            _ if !self.settings.settle => None,
            RunStatus::Success | RunStatus::Error => {
                let (receipt, failure) = self.settle().await;
                for path in receipt.iter().flat_map(|r| &r.matched_paths) {
                    self.lifecycle(ToolState::Delivered, PRESENT_FILES, Some(path));
                }
                if let (RunStatus::Success, Some(failure)) = (status, failure) {
                    status = RunStatus::Error;
                    error = Some(failure);
                }
                receipt
            }
        };
        let detail = error.clone().or_else(|| question.clone());
        if let Err(e) = self
            .journal
            .set_status(&self.context.run_id, status, detail)
            .await
        {
            tracing::error!(run = %self.context.run_id, "cannot record the run's status: {e}");
        }
        RunOutcome {
            run_id: self.context.run_id.clone(),
            status,
            final_answer,
            question,
            error,
            artifacts: self.state.artifacts.clone(),
            promoted: self.state.promoted.clone(),
            stop_reason: self.state.stop_reason,
            token_usage: self.state.token_usage,
            delivery,
            turn_limited,
        }
    }

    /// Settlement (spec 8): the receipt from the outputs produced since the start and
    /// the artifacts presented, written once, and the error a successful run must end
    /// with when delivery is incomplete or the receipt could not be written.
    async fn settle(&self) -> (Option<DeliveryReceipt>, Option<String>) {
        let run_id = &self.context.run_id;
        let before = match self.journal.outputs_snapshot(run_id).await {
            Ok(before) => before.unwrap_or_default(),
            Err(e) => return (None, Some(format!("{RECEIPT_NOT_PERSISTED}: {e}"))),
        };
        // The replica that holds the thread's files may be away for a moment (restarted,
        // its link cut): settlement waits for it, up to a bound, before it fails the run.
        let waited = std::time::Instant::now();
        let after = loop {
            match OutputsSnapshot::take_through(&*self.context.files).await {
                Ok(after) => break after,
                Err(antler_protocol::messages::ThreadFileError::Unavailable(why))
                    if waited.elapsed() < THREAD_FILES_WAIT =>
                {
                    tracing::warn!(run = %run_id, "settlement waits for the thread's files: {why}");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => return (None, Some(format!("{RECEIPT_NOT_PERSISTED}: {e}"))),
            }
        };
        let produced = before.produced_since(&after);
        let receipt = DeliveryReceipt::settle(&self.state.artifacts, &produced);
        let mut persisted = false;
        for (attempt, pause) in RECEIPT_RETRY_PAUSES.iter().enumerate() {
            match self
                .journal
                .put_receipt_if_absent(run_id, receipt.clone())
                .await
            {
                Ok(_) => {
                    persisted = true;
                    break;
                }
                Err(e) => {
                    tracing::warn!(run = %run_id, attempt, "delivery receipt not written: {e}");
                    // Only on a failing store, at most 0.6 s in all.
                    tokio::time::sleep(*pause).await;
                }
            }
        }
        let failure = if !persisted && !produced.is_empty() {
            Some(RECEIPT_NOT_PERSISTED.to_owned())
        } else {
            receipt.verdict().err().map(str::to_owned)
        };
        // A resumed run reports the receipt written first.
        let receipt = self
            .journal
            .receipt(run_id)
            .await
            .ok()
            .flatten()
            .unwrap_or(receipt);
        (Some(receipt), failure)
    }

    /// The tool policy of this turn: the fixed one of the settings, else the active
    /// skills' (spec 4.3), read from the skills installed now.
    fn skill_policy(&self) -> SkillPolicy {
        match &self.settings.skill_policy {
            Some(policy) => policy.clone(),
            None => self.settings.skills.policy(&self.state.active_skills),
        }
    }

    fn executor(&self) -> Executor<'_> {
        Executor {
            catalog: &self.catalog,
            hosts: self.hosts.as_ref(),
            context: &self.context,
            timeout: self.settings.tool_timeout,
            lease: &self.lease,
            skills: &self.settings.skills,
            allowed_skills: self.settings.allowed_skills.as_ref(),
            lead_tools: self.lead_tools.as_deref(),
            web: self.settings.web.as_deref(),
            acp: self.settings.acp.as_deref(),
            events: self.events.as_ref(),
            model: self.model.as_ref(),
            skill_manage: self.settings.skill_manage.as_ref(),
        }
    }

    async fn drive_steps(&mut self) -> Result<StepEnd, RunError> {
        // A run that already answered (resumed after its last step) ends with that answer.
        if let Some(Message::Ai {
            content,
            tool_calls,
            ..
        }) = self.state.messages.last()
        {
            if tool_calls.is_empty() {
                return Ok(StepEnd::Final(content.clone()));
            }
        }
        self.collect_dangling_tasks().await?;
        loop {
            if self.cancel.as_ref().is_some_and(|c| c.is_cancelled()) {
                return Err(RunError::Cancelled);
            }
            let cancel = self.cancel.clone();
            let step = self.step_once();
            let end = match cancel {
                Some(cancel) => {
                    futures::pin_mut!(step);
                    let cancelled = cancel.cancelled();
                    futures::pin_mut!(cancelled);
                    match futures::future::select(step, cancelled).await {
                        futures::future::Either::Left((end, _)) => end?,
                        futures::future::Either::Right(_) => return Err(RunError::Cancelled),
                    }
                }
                None => step.await?,
            };
            match end {
                StepEnd::Continue => continue,
                end => return Ok(end),
            }
        }
    }

    /// A resumed run's `task` calls that have no result yet: each is collected from the
    /// worker that ran it (re-attached while it runs); one no worker knows was lost with
    /// its worker or never placed, and gets the interrupted-call result.
    async fn collect_dangling_tasks(&mut self) -> Result<(), RunError> {
        let Some(delegator) = self.delegator.clone() else {
            return Ok(());
        };
        let dangling: Vec<ToolCall> = self
            .state
            .pending_tool_calls()
            .into_iter()
            .filter(|c| c.name == TASK)
            .collect();
        if dangling.is_empty() {
            return Ok(());
        }
        let run_id = self.context.run_id.clone();
        let collected = futures::future::join_all(
            dangling
                .iter()
                .map(|call| delegator.collect(&run_id, &call.id, self.task_events(&call.id))),
        )
        .await;
        let mut update = StateUpdate::default();
        for (call, result) in dangling.iter().zip(collected) {
            match result {
                Some(result) => {
                    self.task_events(&call.id)(TaskEvent::ended(&call.id, result.clone()));
                    update = update.then(delegation::task_update(&run_id, &call.id, &result))
                }
                None => {
                    update = update.then(StateUpdate::messages(dangling::interrupted_results(&[
                        Message::Ai {
                            id: String::new(),
                            content: String::new(),
                            tool_calls: vec![call.clone()],
                        },
                    ])))
                }
            }
        }
        self.merge(update).await
    }

    /// Where the events of the task of call `tool_call_id` go: the run's stream.
    fn task_events(&self, tool_call_id: &str) -> TaskEventSink {
        let events = self.events.clone();
        let tool_call_id = tool_call_id.to_owned();
        Arc::new(move |task: TaskEvent| {
            if let Some(events) = &events {
                events(&RunEvent::Task {
                    tool_call_id: tool_call_id.clone(),
                    task,
                });
            }
        })
    }

    /// One admitted `task` call, placed through the delegator (every failure is a
    /// result); the future borrows nothing of the run, so several run at once while the
    /// run goes on with its other calls.
    fn task_future(&self, call: &ToolCall) -> futures::future::BoxFuture<'static, StateUpdate> {
        let run_id = self.context.run_id.clone();
        let call_id = call.id.clone();
        match (&self.delegator, TaskArgs::parse(&call.args)) {
            (None, _) => {
                let result = TaskResult::failed("subagents are not enabled for this run");
                Box::pin(futures::future::ready(delegation::task_update(
                    &run_id, &call_id, &result,
                )))
            }
            (Some(_), Err(message)) => Box::pin(futures::future::ready(StateUpdate::messages([
                invalid_args_message(call, &message),
            ]))),
            (Some(delegator), Ok(args)) => {
                let task = TaskCall {
                    run_id: run_id.clone(),
                    tool_call_id: call_id.clone(),
                    user_id: self.context.user_id.clone(),
                    thread_id: self.context.thread_id.clone(),
                    args,
                };
                let events = self.task_events(&call_id);
                let running = delegator.delegate(task, Arc::clone(&events));
                Box::pin(async move {
                    let result = running.await;
                    // The task's last event, typed by how it ended (7.4).
                    events(TaskEvent::ended(&call_id, result.clone()));
                    delegation::task_update(&run_id, &call_id, &result)
                })
            }
        }
    }

    /// One model turn and its tool calls: the reply is checkpointed before the calls run,
    /// then each call's result as it comes back.
    async fn step_once(&mut self) -> Result<StepEnd, RunError> {
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
            .complete(ModelRequest {
                messages,
                tools: visible,
                images,
            })
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

    /// The reply's tool calls. Its `task` calls run at once, each on a worker, while the
    /// other calls run here one after the other, each result journaled as it comes back;
    /// the tasks' results are merged after those. A call that interrupts ends the step.
    async fn run_calls(
        &mut self,
        calls: &[ToolCall],
        chain: &RoutingBeforeFilter<'_>,
        policy: &SkillPolicy,
    ) -> Result<StepEnd, RunError> {
        let mut end = StepEnd::Continue;
        let (tasks, others): (Vec<&ToolCall>, Vec<&ToolCall>) =
            calls.iter().partition(|c| c.name == TASK);
        let (admitted, refused) = self.start_tasks(&tasks, chain, policy);
        let tasks_done = futures::future::join_all(admitted);
        futures::pin_mut!(tasks_done);
        let mut task_results = None;
        for call in &others {
            let outcome = {
                let done = self.call(call, &self.state, chain, policy);
                futures::pin_mut!(done);
                // Poll the tasks while this call runs (they share this task's thread).
                loop {
                    if task_results.is_some() {
                        break done.await;
                    }
                    match futures::future::select(done, tasks_done.as_mut()).await {
                        futures::future::Either::Left((outcome, _)) => break outcome,
                        futures::future::Either::Right((results, rest)) => {
                            task_results = Some(results);
                            done = rest;
                        }
                    }
                }
            };
            match outcome {
                CallEnd::Done(mut result) => {
                    // A successful read of a skill's SKILL.md activates it (DeerFlow's
                    // skill_context); the policy takes it into account from next turn.
                    let read = self.settings.skills.read_activation(call, &result);
                    result.active_skills.extend(read);
                    // Each result is journaled as it comes back.
                    self.merge(result).await?;
                }
                CallEnd::Interrupt { question, message } => {
                    self.merge(StateUpdate::messages([message])).await?;
                    end = StepEnd::Interrupted(question);
                    break;
                }
            }
        }
        let task_results = match task_results {
            Some(results) => results,
            None => tasks_done.await,
        };
        self.finish_tasks(&tasks, refused, task_results).await?;
        Ok(end)
    }

    /// Admits each `task` call through the call middlewares and starts the admitted ones
    /// on their workers; a refused one keeps the end the middlewares gave it.
    #[allow(clippy::type_complexity)]
    fn start_tasks<'c>(
        &self,
        tasks: &[&'c ToolCall],
        chain: &RoutingBeforeFilter<'_>,
        policy: &SkillPolicy,
    ) -> (
        Vec<futures::future::BoxFuture<'static, StateUpdate>>,
        Vec<(&'c ToolCall, CallEnd)>,
    ) {
        let mut admitted = Vec::with_capacity(tasks.len());
        let mut refused = Vec::new();
        for call in tasks {
            self.emit(RunEvent::ToolStarted {
                name: call.name.clone(),
                tool_call_id: call.id.clone(),
            });
            match self.admit(call, &self.state, chain, policy) {
                Some(end) => refused.push((*call, end)),
                None => {
                    self.lifecycle(ToolState::Executed, &call.name, Some(&call.id));
                    admitted.push(self.task_future(call));
                }
            }
        }
        (admitted, refused)
    }

    /// Merges the `task` calls' ends: the refused ones first, then each started one's
    /// result, in the reply's order.
    async fn finish_tasks(
        &mut self,
        tasks: &[&ToolCall],
        refused: Vec<(&ToolCall, CallEnd)>,
        results: Vec<StateUpdate>,
    ) -> Result<(), RunError> {
        let refused_ids: Vec<String> = refused.iter().map(|(c, _)| c.id.clone()).collect();
        let admitted_calls = tasks.iter().filter(|c| !refused_ids.contains(&c.id));
        let ends = refused
            .into_iter()
            .chain(
                admitted_calls
                    .copied()
                    .zip(results.into_iter().map(CallEnd::Done)),
            )
            .collect::<Vec<_>>();
        for (call, end) in ends {
            if let CallEnd::Done(result) = self.finish_call(call, end).await {
                self.merge(result).await?;
            }
        }
        Ok(())
    }

    /// One tool call through the call middlewares, in DeerFlow's order: guardrail, tool
    /// error handling, skill tool policy, deferred filter, clarification (last), then
    /// execution; the output budget applies to what comes back.
    async fn call(
        &self,
        call: &ToolCall,
        state: &ThreadState,
        chain: &RoutingBeforeFilter<'_>,
        policy: &SkillPolicy,
    ) -> CallEnd {
        self.emit(RunEvent::ToolStarted {
            name: call.name.clone(),
            tool_call_id: call.id.clone(),
        });
        let result = self.admit_and_execute(call, state, chain, policy).await;
        self.finish_call(call, result).await
    }

    /// What every call's result goes through once it is back: the output budget, and
    /// the Returned and finished events.
    async fn finish_call(&self, call: &ToolCall, result: CallEnd) -> CallEnd {
        let result = match result {
            CallEnd::Done(mut update) => {
                for message in &mut update.messages {
                    if let Message::Tool {
                        name,
                        tool_call_id,
                        content,
                        ..
                    } = message
                    {
                        let text = std::mem::take(content);
                        *content = self
                            .settings
                            .output_budget
                            .apply_through(name, tool_call_id, text, &*self.context.files)
                            .await;
                    }
                }
                CallEnd::Done(update)
            }
            interrupt => interrupt,
        };
        // The first line of the error result, for `antler run` beside its ✗.
        let error_line = match &result {
            CallEnd::Done(update) => update.messages.iter().find_map(|m| match m {
                Message::Tool {
                    status: crate::thread::state::ToolStatus::Error,
                    content,
                    ..
                } => Some(first_line(content)),
                _ => None,
            }),
            CallEnd::Interrupt { .. } => None,
        };
        self.lifecycle(ToolState::Returned, &call.name, Some(&call.id));
        self.emit(RunEvent::ToolFinished {
            name: call.name.clone(),
            tool_call_id: call.id.clone(),
            error: error_line.is_some(),
            message: error_line,
        });
        result
    }

    async fn admit_and_execute(
        &self,
        call: &ToolCall,
        state: &ThreadState,
        chain: &RoutingBeforeFilter<'_>,
        policy: &SkillPolicy,
    ) -> CallEnd {
        let refused = |message: Message| CallEnd::Done(StateUpdate::messages([message]));
        if let Some(end) = self.admit(call, state, chain, policy) {
            return end;
        }
        self.lifecycle(ToolState::Executed, &call.name, Some(&call.id));
        if call.name == TASK {
            return CallEnd::Done(self.task_future(call).await);
        }
        match self.executor().execute(call, state).await {
            Ok(update) if call.name == TOOL_SEARCH_NAME => {
                CallEnd::Done(policy.rewrite_tool_search(update))
            }
            Ok(update) => CallEnd::Done(update),
            Err(failure) => refused(failed_call_message(&call.name, &call.id, &failure)),
        }
    }

    /// The call middlewares before execution; `Some` is the call's end without running.
    fn admit(
        &self,
        call: &ToolCall,
        state: &ThreadState,
        chain: &RoutingBeforeFilter<'_>,
        policy: &SkillPolicy,
    ) -> Option<CallEnd> {
        let refused = |message: Message| Some(CallEnd::Done(StateUpdate::messages([message])));
        if let Some(guardrail) = &self.settings.guardrail {
            let request = GuardrailRequest {
                tool_name: &call.name,
                tool_input: &call.args,
                tool_call_id: &call.id,
                run_id: &self.context.run_id,
                thread_id: &self.context.thread_id,
                user_id: &self.context.user_id,
                is_subagent: self.settings.is_subagent,
            };
            if let Err(denial) = guardrail.check_call(&request) {
                return refused(denial);
            }
        }
        if self.catalog.get(&call.name).is_none() {
            let available = self.catalog.tools().iter().map(|t| t.name.as_str());
            return refused(invalid_tool_message(&call.name, &call.id, available));
        }
        if let Err(denied) = policy.check_call(&call.name, &call.id) {
            return refused(denied);
        }
        if let Err(hidden) = chain.check_call(state.promoted.as_ref(), &call.name, &call.id) {
            return refused(hidden);
        }
        if call.name == ASK_CLARIFICATION {
            return match clarification::handle(call, self.context.clarification_enabled) {
                Clarification::Proceed(message) => refused(message),
                Clarification::Interrupt {
                    question, message, ..
                } => Some(CallEnd::Interrupt { question, message }),
            };
        }
        None
    }
}

enum CallEnd {
    Done(StateUpdate),
    Interrupt { question: String, message: Message },
}

/// The tool message of a `task` call whose arguments do not validate.
fn invalid_args_message(call: &ToolCall, message: &str) -> Message {
    Message::tool(
        &call.id,
        &call.name,
        format!("Error: invalid arguments for task: {message}"),
        crate::thread::state::ToolStatus::Error,
    )
}

/// The actor that owns one [`RunLoop`].
pub struct RunActor {
    run: Option<RunLoop>,
}

impl RunActor {
    pub fn new(run: RunLoop) -> RunActor {
        RunActor { run: Some(run) }
    }
}

impl Actor for RunActor {
    type Context = Context<Self>;
}

/// Drives the run to its end (a final answer, an interrupt or an error).
#[derive(Message)]
#[rtype(result = "Result<RunOutcome, RunError>")]
pub struct Drive;

impl Handler<Drive> for RunActor {
    type Result = ResponseActFuture<Self, Result<RunOutcome, RunError>>;

    fn handle(&mut self, _: Drive, _: &mut Context<Self>) -> Self::Result {
        let Some(mut run) = self.run.take() else {
            return Box::pin(actix::fut::ready(Err(RunError::Busy)));
        };
        Box::pin(
            async move {
                let outcome = run.drive().await;
                (run, outcome)
            }
            .into_actor(self)
            .map(|(run, outcome), actor, _| {
                actor.run = Some(run);
                Ok(outcome)
            }),
        )
    }
}

/// Chaos mode: the actor stops as if it crashed, mid-drive: the drive is dropped where it
/// is and its caller sees the actor gone (the run manager resumes the run from its last
/// checkpoint).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Crash;

impl Handler<Crash> for RunActor {
    type Result = ();

    fn handle(&mut self, _: Crash, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

/// Adds the user's answer to the interrupted run (a clarification).
#[derive(Message)]
#[rtype(result = "Result<(), RunError>")]
pub struct Answer(pub String);

impl Handler<Answer> for RunActor {
    type Result = ResponseActFuture<Self, Result<(), RunError>>;

    fn handle(&mut self, answer: Answer, _: &mut Context<Self>) -> Self::Result {
        let Some(mut run) = self.run.take() else {
            return Box::pin(actix::fut::ready(Err(RunError::Busy)));
        };
        Box::pin(
            async move {
                let result = run.answer(&answer.0).await;
                (run, result)
            }
            .into_actor(self)
            .map(|(run, result), actor, _| {
                actor.run = Some(run);
                result
            }),
        )
    }
}
