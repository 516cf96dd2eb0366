//! The tool calls of one step of a [`RunLoop`]: `task` calls start at once, each on a
//! worker, while the other calls are admitted (guardrail, skill policy, deferred filter,
//! clarification) and executed one after the other, each result merged and journaled as
//! it comes back; the tasks' results are merged after those. A call that interrupts ends
//! the step.

use crate::catalog::builtins::{ASK_CLARIFICATION, TASK};
use crate::catalog::TOOL_SEARCH_NAME;
use crate::middleware::clarification::{self, Clarification};
use crate::middleware::deferred::RoutingBeforeFilter;
use crate::middleware::guardrail::GuardrailRequest;
use crate::middleware::skill_policy::SkillPolicy;
use crate::middleware::tool_error::{failed_call_message, invalid_tool_message};
use crate::run::events::{first_line, RunEvent, ToolState};
use crate::run::run_loop::{RunError, RunLoop, StepEnd};
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

// `Done` is the common case: boxing it would allocate for every call.
#[allow(clippy::large_enum_variant)]
enum CallEnd {
    Done(StateUpdate),
    Interrupt { question: String, message: Message },
}
