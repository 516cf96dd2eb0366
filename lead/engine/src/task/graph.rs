//! One subagent task on the engine (spec 7.3): the task's catalog rebuilt and checked
//! against the hash the lead sent, its model, a run over the parent's thread (so its
//! sandbox) with no journal and no settlement, the recursion limit of `max_turns`, the
//! token budget and loop detection, the timeout, and cooperative cancellation. The
//! outcome becomes a [`TaskResult`] per 7.3 (the first terminal state wins; a timed-out
//! run is cancelled, so it still gives back its sandbox lease); each AI message is
//! reported as it comes. [`drive_task`] also keeps the run's final state. A worker's `TaskGraph` actor owns one of these; it is engine code so the same task
//! runs the same way wherever it is placed.

use std::sync::Arc;
use std::time::Duration;

use super::asks::TaskAsks;
use super::spec::TaskSpec;
use crate::run::events::RunEvent;
use crate::run::journal::RunStatus;
use crate::run::run_loop::{CancelFlag, RunLoop, RunOutcome};
use crate::run::settings::RunSettings;
use crate::thread::context::{AgentContext, RunContext, ThreadPaths};
use crate::thread::hosts::ToolHosts;
use crate::thread::state::{Message, StopReason, ThreadState};
use crate::tools::task::{
    TaskEvent, TaskResult, TaskStatus, TaskStopReason, CANCELLED_ERROR, MAX_TURNS_ERROR,
    NO_RESPONSE, TIMED_OUT_ERROR,
};

/// The refusal of a task whose catalog offers `task` (subagents do not nest).
pub const TASK_IN_CATALOG: &str = "a subagent's catalog never offers `task`: refused";
/// The error of a task whose model asked for a clarification.
pub const CLARIFICATION_REFUSED: &str =
    "the subagent asked for clarification, which subagents cannot";
/// The error of a failed task whose run gave no reason.
pub const TASK_FAILED: &str = "the task failed";

/// The run id of the task of call `tool_call_id` in run `run_id` (its sandbox lease
/// and its calls' ids on sandbox-host are its own).
pub fn task_run_id(run_id: &str, tool_call_id: &str) -> String {
    format!("{run_id}.task.{tool_call_id}")
}

/// How one task ended, and the subagent's state at its end (its messages, its token
/// use): what a test or a log inspects beyond the [`TaskResult`] the parent sees.
#[derive(Clone, Debug)]
pub struct TaskRun {
    pub result: TaskResult,
    /// `None`: the task was refused before its run began (catalog, model, set-up).
    pub state: Option<ThreadState>,
}

/// Runs `spec` to its end. `events` gets `task_running` for every AI message; the
/// caller reports `task_started` and the terminal event.
pub async fn run_task(
    spec: &TaskSpec,
    hosts: Arc<dyn ToolHosts>,
    cancel: Arc<CancelFlag>,
    events: Arc<dyn Fn(TaskEvent) + Send + Sync>,
) -> TaskResult {
    drive_task(spec, hosts, cancel, events).await.result
}

/// [`run_task`] whose calls an approval rule asks about are held for the parent run's
/// user: each is reported (`task_approval`) and waits for its answer, handed to `asks`.
pub async fn run_task_asking(
    spec: &TaskSpec,
    hosts: Arc<dyn ToolHosts>,
    cancel: Arc<CancelFlag>,
    events: Arc<dyn Fn(TaskEvent) + Send + Sync>,
    asks: Arc<TaskAsks>,
) -> TaskResult {
    drive_task_asking(spec, hosts, cancel, events, Some(asks))
        .await
        .result
}

/// [`run_task`], keeping the subagent's final state beside its result.
pub async fn drive_task(
    spec: &TaskSpec,
    hosts: Arc<dyn ToolHosts>,
    cancel: Arc<CancelFlag>,
    events: Arc<dyn Fn(TaskEvent) + Send + Sync>,
) -> TaskRun {
    drive_task_asking(spec, hosts, cancel, events, None).await
}

/// [`drive_task`]; with `asks`, an ask waits for the parent run's user (without, it is a
/// denial that says nobody can answer).
pub async fn drive_task_asking(
    spec: &TaskSpec,
    hosts: Arc<dyn ToolHosts>,
    cancel: Arc<CancelFlag>,
    events: Arc<dyn Fn(TaskEvent) + Send + Sync>,
    asks: Option<Arc<TaskAsks>>,
) -> TaskRun {
    let model_name = spec.model.name().to_owned();
    let max_turns = spec.max_turns.max(1);
    let timeout_s = spec.timeout_s.max(1);
    let mut run = match start_task(spec, hosts, &cancel, max_turns, asks).await {
        Ok(run) => run,
        Err(error) => {
            return TaskRun {
                result: TaskResult {
                    model_name: Some(model_name),
                    ..TaskResult::failed(error)
                },
                state: None,
            }
        }
    };
    run.on_event(task_reporter(spec, &model_name, events));
    let (outcome, timed_out) = drive_until(&mut run, &cancel, timeout_s).await;
    let state = run.state().clone();
    let result = if timed_out {
        TaskResult {
            status: TaskStatus::TimedOut,
            error: Some(TIMED_OUT_ERROR.replace("{t}", &timeout_s.to_string())),
            ..ended_as(&state)
        }
    } else {
        drove(outcome, &state, cancel.is_cancelled(), max_turns)
    };
    TaskRun {
        result: TaskResult {
            model_name: Some(model_name),
            ..result
        },
        state: Some(state),
    }
}

/// The task's run loop, started: its catalog rebuilt from the spec (never with `task`),
/// its model built, its thread's context and its settings; `Err`: why the task is
/// refused before it runs.
async fn start_task(
    spec: &TaskSpec,
    hosts: Arc<dyn ToolHosts>,
    cancel: &Arc<CancelFlag>,
    max_turns: usize,
    asks: Option<Arc<TaskAsks>>,
) -> Result<RunLoop, String> {
    let catalog = match spec.catalog.rebuild() {
        Ok(catalog) => Arc::new(catalog),
        Err(e) => return Err(e.to_string()),
    };
    if catalog.get(crate::catalog::builtins::TASK).is_some() {
        return Err(TASK_IN_CATALOG.to_owned());
    }
    let model = match spec.model.build() {
        Ok(model) => model,
        Err(e) => return Err(e.to_string()),
    };
    let paths = ThreadPaths::new(&spec.data_root, &spec.user_id, &spec.thread_id);
    let files =
        spec.thread_files
            .for_thread(&paths, Arc::clone(&hosts), &spec.user_id, &spec.thread_id);
    let context = RunContext {
        run_id: task_run_id(&spec.run_id, &spec.tool_call_id),
        user_id: spec.user_id.clone(),
        thread_id: spec.thread_id.clone(),
        paths,
        files,
        clarification_enabled: false,
        agent: AgentContext {
            non_interactive: true,
            ..AgentContext::new(&spec.data_root)
        },
        epoch: None,
    };
    let approvals = match spec.approvals.as_deref() {
        Some(wire) => crate::task::approvals::TaskApprovals::gate(wire)?,
        None => None,
    };
    // The parent's user answers the asks only when someone can.
    let answered = spec
        .approvals
        .as_deref()
        .and_then(crate::task::approvals::TaskApprovals::parent_answers);
    let asks = match (asks, answered) {
        (Some(asks), Some(thread_rules)) => {
            asks.remember(thread_rules);
            Some(asks)
        }
        _ => None,
    };
    // Asks are held only under a policy that can ask.
    let parent_asks = asks.filter(|_| approvals.is_some());
    let settings = RunSettings {
        approvals,
        parent_asks,
        max_turns,
        tool_timeout: Duration::from_secs(spec.tool_timeout_s.max(1)),
        system_prompt: Some(Arc::from(spec.system_prompt.clone().unwrap_or_default())),
        token_budget: spec.token_budget.clone(),
        settle: false,
        report_messages: true,
        is_subagent: true,
        web: spec.web_tools.tools().map(Arc::new),
        summarization: task_summarization(spec),
        loop_detection: crate::middleware::loop_detection::LoopDetection::from_config(
            &spec.loop_detection,
        ),
        output_budget: crate::middleware::output_budget::OutputBudget::from_config(
            &spec.tool_output,
        ),
        ..RunSettings::default()
    };
    RunLoop::builder(context, model, catalog, hosts)
        .settings(settings)
        .cancel(Arc::clone(cancel))
        .start(&spec.prompt)
        .await
        .map_err(|e| e.to_string())
}

/// The task's summarization: the lead's `summarization:` within the window of the
/// task's own model (its `models:` entry); one that needs a window the model lacks is
/// left off, with a warning.
fn task_summarization(
    spec: &TaskSpec,
) -> Option<Arc<crate::middleware::summarization::Summarization>> {
    use crate::middleware::summarization::{window_of, Summarization, TokenCounter};
    let config = spec.summarization.clone()?;
    let entry = match &spec.model {
        crate::model::WireModel::Entry { entry }
        | crate::model::WireModel::Resilient { entry, .. } => Some(entry),
        crate::model::WireModel::Scripted { .. } => None,
    };
    let window = entry.and_then(window_of);
    let counter = entry.map(TokenCounter::for_entry).unwrap_or_default();
    match Summarization::new(config, spec.model.name(), window, None, counter) {
        Ok(summarization) => Some(Arc::new(summarization)),
        Err(e) => {
            tracing::warn!(run = %spec.run_id, "the task runs without summarization: {e}");
            None
        }
    }
}

/// What the task reports to its parent as its run goes: each assistant message
/// (`task_running`), each finished tool call (`task_tool`), each elicitation an MCP
/// call waits on, each call held for approval (`task_approval`) and how its approval was
/// decided (`task_approval_decided`).
fn task_reporter(
    spec: &TaskSpec,
    model_name: &str,
    reporter: Arc<dyn Fn(TaskEvent) + Send + Sync>,
) -> impl Fn(&RunEvent) + Send + Sync + 'static {
    let task_id = spec.tool_call_id.clone();
    let task_run = task_run_id(&spec.run_id, &spec.tool_call_id);
    let reporter_model = model_name.to_owned();
    move |event: &RunEvent| match event {
        RunEvent::AssistantMessage {
            index,
            content,
            usage,
        } => reporter(TaskEvent::TaskRunning {
            task_id: task_id.clone(),
            message: content.clone(),
            message_index: *index,
            total_messages: *index,
            usage: *usage,
            model_name: Some(reporter_model.clone()),
        }),
        RunEvent::ToolFinished {
            name,
            tool_call_id,
            error,
            message,
        } => reporter(TaskEvent::TaskTool {
            task_id: task_id.clone(),
            name: name.clone(),
            call_id: tool_call_id.clone(),
            error: *error,
            message: message.clone(),
        }),
        RunEvent::Elicitation {
            id,
            server,
            message,
            requested_schema,
            ..
        } => reporter(TaskEvent::TaskElicitation {
            task_id: task_id.clone(),
            run_id: task_run.clone(),
            id: id.clone(),
            server: server.clone(),
            message: message.clone(),
            requested_schema: requested_schema.clone(),
        }),
        RunEvent::ApprovalRequested {
            tool_call_id,
            tool,
            args,
            rule,
            origin,
            justification,
            deadline_at,
            ..
        } => reporter(TaskEvent::TaskApproval {
            task_id: task_id.clone(),
            call_id: tool_call_id.clone(),
            tool: tool.clone(),
            args: args.clone(),
            rule: rule.clone(),
            origin: origin.clone(),
            justification: justification.clone(),
            asked_at: crate::thread::approvals::now_ms(),
            deadline_at: *deadline_at,
        }),
        RunEvent::ApprovalDecided {
            tool_call_id,
            tool,
            decision,
            rule,
            by,
            reason,
            at,
            waited_ms,
            ..
        } => reporter(TaskEvent::TaskApprovalDecided {
            task_id: task_id.clone(),
            call_id: tool_call_id.clone(),
            tool: tool.clone(),
            decision: decision.clone(),
            rule: rule.clone(),
            by: by.clone(),
            reason: reason.clone(),
            at: *at,
            waited_ms: *waited_ms,
        }),
        _ => {}
    }
}

/// Drives the run until it ends or `timeout_s` passes; `true`: it timed out. At the
/// timeout the run is cancelled, not dropped: it stops at once (a step waits on the
/// cancellation) and still releases its sandbox lease as a cancelled run does.
async fn drive_until(run: &mut RunLoop, cancel: &CancelFlag, timeout_s: u64) -> (RunOutcome, bool) {
    let drive = run.drive();
    futures::pin_mut!(drive);
    match tokio::time::timeout(Duration::from_secs(timeout_s), &mut drive).await {
        Ok(outcome) => (outcome, false),
        Err(_) => {
            cancel.cancel();
            (drive.await, true)
        }
    }
}

/// A completed task with nothing yet but the tokens of its run, which ended at `state`.
fn ended_as(state: &ThreadState) -> TaskResult {
    TaskResult {
        status: TaskStatus::Completed,
        result: None,
        error: None,
        stop_reason: None,
        model_name: None,
        token_usage: state.token_usage,
        worker: None,
    }
}

/// The result (without its model's name) of a task whose drive ended by itself, or was
/// cancelled (`cancelled`: the flag is set), at `state`, per spec 7.3.
fn drove(
    outcome: RunOutcome,
    state: &ThreadState,
    cancelled: bool,
    max_turns: usize,
) -> TaskResult {
    let base = ended_as(state);
    // A run that reached its end before the cancellation keeps that end (the
    // first terminal state wins); one the cancellation stopped is cancelled.
    if cancelled && outcome.status != RunStatus::Success && !outcome.turn_limited {
        return TaskResult {
            status: TaskStatus::Cancelled,
            error: Some(CANCELLED_ERROR.to_owned()),
            ..base
        };
    }
    let guard_reason = match state.stop_reason {
        Some(StopReason::TokenCapped) => Some(TaskStopReason::TokenCapped),
        Some(StopReason::LoopCapped) => Some(TaskStopReason::LoopCapped),
        _ => None,
    };
    let base = TaskResult {
        stop_reason: guard_reason,
        ..base
    };
    let last_text = state.messages.iter().rev().find_map(|m| match m {
        Message::Ai { content, .. } if !content.trim().is_empty() => Some(content.clone()),
        _ => None,
    });
    if outcome.turn_limited {
        let stop_reason = guard_reason.or(Some(TaskStopReason::TurnCapped));
        return match last_text {
            Some(text) => TaskResult {
                result: Some(text),
                stop_reason,
                ..base
            },
            None => TaskResult {
                status: TaskStatus::Failed,
                error: Some(MAX_TURNS_ERROR.replace("{n}", &max_turns.to_string())),
                stop_reason,
                ..base
            },
        };
    }
    match outcome.status {
        RunStatus::Success => TaskResult {
            result: Some(
                outcome
                    .final_answer
                    .filter(|a| !a.trim().is_empty())
                    .or(last_text)
                    .unwrap_or_else(|| NO_RESPONSE.to_owned()),
            ),
            ..base
        },
        RunStatus::Interrupted => TaskResult {
            status: TaskStatus::Failed,
            error: Some(CLARIFICATION_REFUSED.to_owned()),
            ..base
        },
        RunStatus::Error | RunStatus::Running => TaskResult {
            status: TaskStatus::Failed,
            error: Some(outcome.error.unwrap_or_else(|| TASK_FAILED.to_owned())),
            ..base
        },
    }
}
