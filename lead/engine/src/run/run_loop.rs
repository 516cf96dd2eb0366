//! The run loop. One [`RunLoop`] owns one run's `ThreadState`: it asks the model with
//! the visible tools, passes the reply through the after-model middlewares, admits each
//! tool call through the call middlewares (guardrail, deferred filter, clarification),
//! executes it where it belongs, merges the results through the reducers and checkpoints
//! the state, until a final answer, an interrupt, a cap or an error. This file holds the
//! loop, its drive, settlement at the end and the run's subagent tasks; one step is in
//! `step`, its tool calls in `calls`. [`RunOutcome`] is how a run ended, [`RunError`]
//! why it could not go on, [`CancelFlag`] its cooperative cancellation.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::catalog::builtins::{PRESENT_FILES, TASK};
use crate::catalog::Catalog;
use crate::middleware::skill_policy::SkillPolicy;
use crate::middleware::{dangling, uploads};
use crate::model::{ChatModel, ModelError};
use crate::run::events::{EventSink, RunEvent, ToolState};
use crate::run::execute::{Executor, LeadTools};
use crate::run::journal::{Journal, JournalError, JournalResult, RunStatus};
use crate::run::settings::RunSettings;
use crate::settlement::{DeliveryReceipt, OutputsSnapshot, RECEIPT_NOT_PERSISTED};
use crate::thread::approvals::ApprovalDecision;
use crate::thread::context::RunContext;
use crate::thread::hosts::ToolHosts;
use crate::thread::lease::{self, SandboxLease};
use crate::thread::state::{
    Message, StateConflict, StateUpdate, ThreadState, TokenUsage, ToolCall,
};
use crate::tools::task::delegation::{self, Delegator, TaskCall, TaskEventSink};
use crate::tools::task::{TaskArgs, TaskEvent, TaskResult};

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
    /// The calls an interrupted run waits on for its user's approval.
    pub approvals: Vec<crate::thread::approvals::PendingApproval>,
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
    /// The model's reply was empty, and so was the one retry (spec D.5).
    #[error("{}", crate::middleware::terminal_response::EMPTY_REPLY_FALLBACK)]
    EmptyReply,
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

/// One run: its state, its model, its catalog, and where its tools run.
pub struct RunLoop {
    pub context: RunContext,
    pub(super) state: ThreadState,
    pub(super) step: i64,
    pub(super) model: Arc<dyn ChatModel>,
    pub(super) catalog: Arc<Catalog>,
    pub(super) hosts: Arc<dyn ToolHosts>,
    pub(super) journal: Arc<dyn Journal>,
    pub(super) settings: RunSettings,
    pub(super) events: Option<EventSink>,
    pub(super) lead_tools: Option<Arc<dyn LeadTools>>,
    pub(super) delegator: Option<Arc<dyn Delegator>>,
    /// Rules the parent's user approved for the thread through a subagent's ask.
    pub(super) subagent_thread_rules: super::approvals_relay::SubagentThreadRules,
    pub(super) cancel: Option<Arc<CancelFlag>>,
    /// The run's lease on its sandbox, renewed while the run is driven.
    pub(super) lease: Arc<SandboxLease>,
    /// The token budget's warning, sent with the next request once per drive.
    pub(super) budget_warning: BudgetWarning,
    /// When summarization's trigger is next evaluated (`run::context`).
    pub(super) compaction: super::context::ContextState,
    /// A title call running beside the run (`run::context`).
    pub(super) title_task: Option<super::context::TitleTask>,
    /// Loop detection's warnings for the next request (spec C.7), dropped with the drive.
    pub(super) loop_warnings: crate::middleware::loop_detection::LoopWarnings,
    /// Writes started and not awaited yet (a client's call is answered while its writes
    /// land, `run::client`): the next write awaits them before its own answer, as does
    /// [`RunLoop::settle_writes`].
    pub(super) unsettled: Vec<futures::future::BoxFuture<'static, JournalResult<()>>>,
    /// Whether [`RunLoop::merge`] leaves its write unsettled (while a client's call runs).
    pub(super) defer_writes: bool,
}

/// Where the token budget's one warning is.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) enum BudgetWarning {
    #[default]
    NotYet,
    Pending(String),
    Sent,
}

/// What one step decided.
pub(super) enum StepEnd {
    Continue,
    Final(String),
    Interrupted(String),
}

impl RunLoop {
    /// Adds the user's answer to an interrupted run (a clarification), as a step.
    pub async fn answer(&mut self, text: &str) -> Result<(), RunError> {
        self.merge(StateUpdate::messages([Message::human(text)]))
            .await
    }

    /// Adds the answers to an interrupted run's pending approvals (issue 37), as a step;
    /// an answer to a call that does not wait is ignored. The resumed drive applies them.
    pub async fn decide(
        &mut self,
        answers: impl IntoIterator<Item = (String, ApprovalDecision)>,
    ) -> Result<(), RunError> {
        let mut approvals = self.state.approvals.clone();
        let mut changed = false;
        for (call, decision) in answers {
            if approvals.pending_call(&call).is_some() {
                approvals.decided.insert(call, decision);
                changed = true;
            }
        }
        if !changed {
            return Ok(());
        }
        self.merge(StateUpdate {
            approvals: Some(approvals),
            ..StateUpdate::default()
        })
        .await
    }

    /// Reports progress to `events`.
    pub fn on_event(&mut self, events: impl Fn(&RunEvent) + Send + Sync + 'static) {
        self.events = Some(Arc::new(events));
    }

    pub fn state(&self) -> &ThreadState {
        &self.state
    }

    pub(super) fn lifecycle(&self, state: ToolState, tool: &str, tool_call_id: Option<&str>) {
        if self.events.is_some() {
            self.emit(RunEvent::Lifecycle {
                state,
                tool: tool.to_owned(),
                tool_call_id: tool_call_id.map(str::to_owned),
            });
        }
    }

    pub(super) fn emit(&self, event: RunEvent) {
        if let Some(events) = &self.events {
            events(&event);
        }
    }

    /// Applies `update` to the state and journals it as the next step; answers once it is
    /// stored (with every write started before it), or at once while writes are deferred
    /// ([`RunLoop::defer_writes`]).
    pub(super) async fn merge(&mut self, update: StateUpdate) -> Result<(), RunError> {
        let saved = self.merge_started(update)?;
        if self.defer_writes {
            self.unsettled.push(saved);
            return Ok(());
        }
        self.settle_writes().await?;
        saved.await?;
        Ok(())
    }

    /// Awaits the writes started and not awaited yet; the first that failed is the error
    /// (the store took them in order: the others landed or failed on their own).
    pub(super) async fn settle_writes(&mut self) -> Result<(), RunError> {
        let mut failed = None;
        for write in std::mem::take(&mut self.unsettled) {
            if let Err(e) = write.await {
                failed.get_or_insert(e);
            }
        }
        match failed {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }

    /// [`RunLoop::merge`] whose write is started (it lands before any later one) but not
    /// awaited: the future is its answer.
    pub(super) fn merge_started(
        &mut self,
        update: StateUpdate,
    ) -> Result<futures::future::BoxFuture<'static, JournalResult<()>>, RunError> {
        self.state.apply(update)?;
        self.step += 1;
        Ok(self
            .journal
            .save(&self.context.run_id, self.step, &self.state))
    }

    /// Drives the run to its end and records the outcome. With a lease epoch
    /// ([`RunContext::epoch`]) the whole drive runs in the run's fenced trace, so each
    /// request it sends (its sandbox's acquire, renewals and release, tool and MCP calls,
    /// subagent tasks and their cancel) carries the run's id and epoch.
    pub async fn drive(&mut self) -> RunOutcome {
        let Some(epoch) = self.context.epoch else {
            return self.drive_unfenced().await;
        };
        let trace = antler_protocol::telemetry::current()
            .unwrap_or_else(|| antler_protocol::TraceContext::for_run(&self.context.run_id))
            .fenced(&self.context.run_id, Some(epoch));
        antler_protocol::telemetry::within(trace, self.drive_unfenced()).await
    }

    async fn drive_unfenced(&mut self) -> RunOutcome {
        for state in [ToolState::Available, ToolState::Authorized] {
            for tool in self.catalog.tools() {
                self.lifecycle(state, &tool.name, None);
            }
        }
        let renewal = lease::keep_renewed(Arc::clone(&self.hosts), Arc::clone(&self.lease));
        let agent = self
            .context
            .agent
            .agent_name
            .clone()
            .unwrap_or_else(|| "antler".to_owned());
        let (mut run_span, trace) = super::spans::run_span(&self.context.run_id, &agent);
        let result = {
            let steps = antler_protocol::telemetry::within(trace, self.drive_turns());
            futures::pin_mut!(steps, renewal);
            match futures::future::select(steps, renewal).await {
                futures::future::Either::Left((result, _)) => result,
                futures::future::Either::Right(((), steps)) => steps.await,
            }
        };
        // A title made beside the run lands before the run's end is recorded.
        self.finish_title().await;
        let executor = self.executor();
        executor.release(&self.state).await;
        if let Err(e) = &result {
            run_span.fail(e.to_string());
        }
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
            approvals: match status {
                RunStatus::Interrupted => self.state.approvals.pending.clone(),
                _ => Vec::new(),
            },
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
    pub(super) fn skill_policy(&self) -> SkillPolicy {
        match &self.settings.skill_policy {
            Some(policy) => policy.clone(),
            None => self.settings.skills.policy(&self.state.active_skills),
        }
    }

    pub(super) fn executor(&self) -> Executor<'_> {
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
            read_before_write: self.settings.read_before_write.enabled,
            approvals: self.settings.approvals.as_deref(),
        }
    }

    /// The run's turns: the user's, then the hidden ones its thread's goal asks for
    /// (`run::goal`).
    async fn drive_turns(&mut self) -> Result<StepEnd, RunError> {
        let mut end = self.drive_steps().await?;
        while matches!(end, StepEnd::Final(_)) && self.continue_goal().await? {
            end = self.drive_steps().await?;
        }
        Ok(end)
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
        // A run that starts from a user turn: DeerFlow's `UploadsMiddleware.before_agent`.
        if matches!(self.state.messages.last(), Some(Message::Human { .. })) {
            let update = uploads::before_run(&self.state, &*self.context.files).await;
            let changes = update.rewritten_human.is_some()
                || update
                    .uploaded_files
                    .as_ref()
                    .is_some_and(|files| *files != self.state.uploaded_files);
            if changes {
                self.merge(update).await?;
            }
        }
        self.collect_dangling_tasks().await?;
        if let Some(end) = self.resume_approvals().await? {
            return Ok(end);
        }
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
                .map(|call| delegator.collect(&run_id, &call.id, self.task_events(call))),
        )
        .await;
        let mut update = StateUpdate::default();
        for (call, result) in dangling.iter().zip(collected) {
            match result {
                Some(result) => {
                    self.task_events(call)(TaskEvent::ended(&call.id, result.clone()));
                    update = update.then(delegation::task_update(&run_id, &call.id, &result))
                }
                None => {
                    update = update.then(StateUpdate::messages(dangling::interrupted_results(&[
                        Message::Ai {
                            id: String::new(),
                            content: String::new(),
                            tool_calls: vec![call.clone()],
                            reasoning: None,
                        },
                    ])))
                }
            }
        }
        self.merge(update).await
    }

    /// Where the events of the task of call `tool_call_id` go: the run's stream.
    fn task_events(&self, call: &ToolCall) -> TaskEventSink {
        let events = self.events.clone();
        let tool_call_id = call.id.clone();
        let subagent_type = call
            .args
            .get("subagent_type")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let thread_rules = Arc::clone(&self.subagent_thread_rules);
        Arc::new(move |task: TaskEvent| {
            if let TaskEvent::TaskApprovalDecided {
                decision,
                rule: Some(rule),
                ..
            } = &task
            {
                if decision == "approve_for_thread" {
                    super::approvals_relay::remember(&thread_rules, rule);
                }
            }
            if let Some(events) = &events {
                let event =
                    super::approvals_relay::parent_event(&tool_call_id, &subagent_type, task);
                events(&event);
            }
        })
    }

    /// One admitted `task` call, placed through the delegator (every failure is a
    /// result); the future borrows nothing of the run, so several run at once while the
    /// run goes on with its other calls.
    pub(super) fn task_future(
        &self,
        call: &ToolCall,
    ) -> futures::future::BoxFuture<'static, StateUpdate> {
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
                    thread_rules: {
                        let mut rules = self.state.approvals.thread_rules.clone();
                        rules.extend(
                            self.subagent_thread_rules
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner)
                                .iter()
                                .cloned(),
                        );
                        rules.into_iter().collect()
                    },
                    parent_answers: !self.context.agent.non_interactive,
                };
                let events = self.task_events(call);
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
