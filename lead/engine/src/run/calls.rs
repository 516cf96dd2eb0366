//! The tool calls of one step of a [`RunLoop`]: `task` calls start at once, each on a
//! worker, while the other calls are admitted (guardrail, skill policy, deferred filter,
//! approvals, clarification) and executed one after the other, each result merged and
//! journaled as it comes back; the tasks' results are merged after those. A call that
//! interrupts ends the step; a call an approval rule asks about stops with the calls
//! behind it held (recorded in the state), and a resumed run runs them once answered.

use crate::catalog::builtins::{ASK_CLARIFICATION, TASK};
use crate::catalog::TOOL_SEARCH_NAME;
use crate::middleware::approvals::{self, Gate};
use crate::middleware::clarification::{self, Clarification};
use crate::middleware::deferred::RoutingBeforeFilter;
use crate::middleware::guardrail::GuardrailRequest;
use crate::middleware::skill_policy::SkillPolicy;
use crate::middleware::tool_error::{failed_call_message, invalid_tool_message};
use crate::run::events::{first_line, RunEvent, ToolState};
use crate::run::run_loop::{RunError, RunLoop, StepEnd};
use crate::thread::approvals::{ApprovalChoice, ApprovalState, PendingApproval};
use crate::thread::state::{Message, StateUpdate, ThreadState, ToolCall};

/// The span events of a tool call's lifecycle (docs/telemetry.md).
const TOOL_STARTED: &str = "tool.started";
const TOOL_EXECUTED: &str = "tool.executed";
const TOOL_RETURNED: &str = "tool.returned";

impl RunLoop {
    /// The reply's tool calls. Its `task` calls run at once, each on a worker, while the
    /// other calls run here one after the other, each result journaled as it comes back;
    /// the tasks' results are merged after those. A call that interrupts ends the step.
    pub(super) async fn run_calls(
        &mut self,
        calls: &[ToolCall],
        chain: &RoutingBeforeFilter<'_>,
        policy: &SkillPolicy,
    ) -> Result<StepEnd, RunError> {
        let mut end = StepEnd::Continue;
        // Calls an approval rule stops for the run's user, and those waiting behind them.
        let mut asks: Vec<PendingApproval> = Vec::new();
        let mut held: Vec<String> = Vec::new();
        let (tasks, others): (Vec<&ToolCall>, Vec<&ToolCall>) =
            calls.iter().partition(|c| c.name == TASK);
        let (admitted, refused) = self.start_tasks(&tasks, chain, policy);
        let tasks_done = futures::future::join_all(admitted);
        futures::pin_mut!(tasks_done);
        let mut task_results = None;
        for call in &others {
            if !asks.is_empty() {
                // Never sent before the ask ahead of it is answered: run in order after it.
                held.push(call.id.clone());
                continue;
            }
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
                CallEnd::Ask(pending) => asks.push(pending),
            }
        }
        let task_results = match task_results {
            Some(results) => results,
            None => tasks_done.await,
        };
        asks.extend(self.finish_tasks(&tasks, refused, task_results).await?);
        // The asks in the reply's order; the run stops for them (a clarification asked
        // before them stops it first, and they are never reached).
        asks.sort_by_key(|p| calls.iter().position(|c| c.id == p.tool_call_id));
        if !asks.is_empty() && matches!(end, StepEnd::Continue) {
            end = StepEnd::Interrupted(approvals::question(&asks));
        }
        self.settle_approvals(asks, held).await?;
        Ok(end)
    }

    /// Records the step's asks and held calls in the state (journaled with it), and drops
    /// the answers the step applied.
    async fn settle_approvals(
        &mut self,
        asks: Vec<PendingApproval>,
        held: Vec<String>,
    ) -> Result<(), RunError> {
        let current = &self.state.approvals;
        let from_subagents = super::approvals_relay::take(&self.subagent_thread_rules);
        if asks.is_empty()
            && held.is_empty()
            && current.pending.is_empty()
            && current.held.is_empty()
            && current.decided.is_empty()
            && from_subagents.is_subset(&current.thread_rules)
        {
            return Ok(());
        }
        let mut thread_rules = current.thread_rules.clone();
        thread_rules.extend(from_subagents);
        let approvals = ApprovalState {
            pending: asks,
            held,
            decided: Default::default(),
            thread_rules,
        };
        self.merge(StateUpdate {
            approvals: Some(approvals),
            ..StateUpdate::default()
        })
        .await
    }

    /// A resumed run's calls that waited for approval, once every ask is answered (or
    /// expired): the rules approved for the thread are remembered, then the asked and held
    /// calls run in the reply's order through the call middlewares (the answers decide the
    /// asked ones; a held one may ask in turn). `Some` when the run stops again.
    pub(super) async fn resume_approvals(&mut self) -> Result<Option<StepEnd>, RunError> {
        let approvals = self.state.approvals.clone();
        if approvals.pending.is_empty() && approvals.held.is_empty() {
            return Ok(None);
        }
        if approvals.waiting() {
            let waiting: Vec<PendingApproval> = approvals.unanswered().cloned().collect();
            return Ok(Some(StepEnd::Interrupted(approvals::question(&waiting))));
        }
        let mut thread_rules = approvals.thread_rules.clone();
        for pending in &approvals.pending {
            let for_thread = approvals
                .decided
                .get(&pending.tool_call_id)
                .is_some_and(|d| d.choice == ApprovalChoice::ApproveForThread);
            if let (true, Some(rule)) = (for_thread, &pending.rule) {
                thread_rules.insert(rule.clone());
            }
        }
        let unresolved: Vec<ToolCall> = self
            .state
            .pending_tool_calls()
            .into_iter()
            .filter(|c| approvals.pending_call(&c.id).is_some() || approvals.held.contains(&c.id))
            .collect();
        self.merge(StateUpdate {
            approvals: Some(ApprovalState {
                thread_rules,
                ..approvals
            }),
            ..StateUpdate::default()
        })
        .await?;
        let catalog = std::sync::Arc::clone(&self.catalog);
        let chain = RoutingBeforeFilter::new(&catalog, self.settings.auto_promote_top_k);
        let policy = self.skill_policy();
        match self.run_calls(&unresolved, &chain, &policy).await? {
            StepEnd::Continue => Ok(None),
            end => Ok(Some(end)),
        }
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
                    let (mut span, trace) = super::spans::tool_span(&call.name, &call.id);
                    span.event(TOOL_STARTED, Vec::new);
                    let work = self.task_future(call);
                    admitted.push(match trace {
                        Some(trace) => Box::pin(async move {
                            let update = antler_protocol::telemetry::within(trace, work).await;
                            span.event(TOOL_EXECUTED, Vec::new);
                            span.event(TOOL_RETURNED, Vec::new);
                            update
                        }),
                        None => work,
                    });
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
    ) -> Result<Vec<PendingApproval>, RunError> {
        let mut asks = Vec::new();
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
            match self.finish_call(call, end).await {
                CallEnd::Done(result) => self.merge(result).await?,
                CallEnd::Ask(pending) => asks.push(pending),
                CallEnd::Interrupt { .. } => {}
            }
        }
        Ok(asks)
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
        let (mut span, trace) = super::spans::tool_span(&call.name, &call.id);
        span.event(TOOL_STARTED, Vec::new);
        let work = self.admit_and_execute(call, state, chain, policy);
        let result = match trace {
            Some(trace) => antler_protocol::telemetry::within(trace, work).await,
            None => work.await,
        };
        span.event(TOOL_EXECUTED, Vec::new);
        let end = self.finish_call(call, result).await;
        span.event(TOOL_RETURNED, Vec::new);
        end
    }

    /// What every call's result goes through once it is back: the output budget, and
    /// the Returned and finished events.
    async fn finish_call(&self, call: &ToolCall, result: CallEnd) -> CallEnd {
        if matches!(result, CallEnd::Ask(_)) {
            // Not returned: it waits for the run's user.
            return result;
        }
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
            CallEnd::Interrupt { .. } | CallEnd::Ask(_) => None,
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
        // A subagent's thread rules approved while the task ran count for its later calls.
        let with_rules;
        let mut state = state;
        if let Some(asks) = &self.settings.parent_asks {
            let rules = asks.thread_rules();
            if !rules.is_subset(&state.approvals.thread_rules) {
                let mut widened = state.clone();
                widened.approvals.thread_rules.extend(rules);
                with_rules = widened;
                state = &with_rules;
            }
        }
        let decided;
        let held = self
            .settings
            .parent_asks
            .as_deref()
            .zip(self.settings.approvals.as_deref());
        match (self.admit(call, state, chain, policy), held) {
            (Some(CallEnd::Ask(pending)), Some((asks, gate))) => {
                match self.held_call(call, state, pending, asks, gate).await {
                    Ok(approved) => {
                        decided = approved;
                        state = &decided;
                    }
                    Err(denial) => return refused(denial),
                }
            }
            (Some(end), _) => return end,
            (None, _) => {}
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
        if let Some(gate) = &self.settings.approvals {
            // A subagent task's asks wait for its parent run's user.
            let interactive = self.settings.parent_asks.is_some()
                || (!self.context.agent.non_interactive && !self.settings.is_subagent);
            match gate.check(
                call,
                self.catalog.get(&call.name),
                &state.approvals,
                interactive,
            ) {
                Gate::Pass(None) => {}
                Gate::Pass(Some(record)) => self.emit(record.event(call)),
                Gate::Refuse { message, record } => {
                    self.emit(record.event(call));
                    return refused(message);
                }
                Gate::Ask(pending) => {
                    // A held call is reported once its answer has a place to go.
                    if self.settings.parent_asks.is_none() {
                        self.emit(requested(&pending));
                    }
                    return Some(CallEnd::Ask(pending));
                }
            }
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

impl RunLoop {
    /// A subagent's call an approval rule asks about, held until the parent run's user
    /// answers (or its deadline): `Ok` with the state the approved call runs in (its
    /// answer in it, so the hosts' second check sees the approval), `Err` with the denial
    /// its model reads. Either way the decision is an `approval_decided` event.
    async fn held_call(
        &self,
        call: &ToolCall,
        state: &ThreadState,
        pending: PendingApproval,
        asks: &crate::task::asks::TaskAsks,
        gate: &approvals::ApprovalGate,
    ) -> Result<ThreadState, Message> {
        let held = asks.hold(&pending);
        self.emit(requested(&pending));
        let decision = asks.wait(held, pending.rule.as_deref()).await;
        let mut decided = state.clone();
        decided.approvals.decided.insert(call.id.clone(), decision);
        // The answer is in the state: the gate decides by it (the text, the record).
        match gate.check(call, self.catalog.get(&call.name), &decided.approvals, true) {
            Gate::Pass(record) => {
                if let Some(record) = record {
                    self.emit(record.event(call));
                }
                Ok(decided)
            }
            Gate::Refuse { message, record } => {
                self.emit(record.event(call));
                Err(message)
            }
            // Never: a call with an answer is not asked again. Fail closed all the same.
            Gate::Ask(p) => Err(crate::middleware::error_message(
                &call.id,
                &call.name,
                approvals::DENIED_BY_USER
                    .replace("{user}", "the user")
                    .replace("{reason}", approvals::NO_REASON)
                    + &format!(" (rule {})", p.rule.as_deref().unwrap_or("?")),
            )),
        }
    }
}

/// The `approval_requested` event of a call waiting for a person.
fn requested(pending: &PendingApproval) -> RunEvent {
    RunEvent::ApprovalRequested {
        tool_call_id: pending.tool_call_id.clone(),
        tool: pending.tool.clone(),
        args: pending.args.clone(),
        rule: pending.rule.clone(),
        origin: pending.origin.clone(),
        justification: pending.justification.clone(),
        deadline_at: pending.deadline_at,
        subagent: None,
    }
}

// `Done` is the common case: boxing it would allocate for every call.
#[allow(clippy::large_enum_variant)]
enum CallEnd {
    Done(StateUpdate),
    Interrupt {
        question: String,
        message: Message,
    },
    /// An approval rule asks the run's user first: the call is not sent.
    Ask(PendingApproval),
}
