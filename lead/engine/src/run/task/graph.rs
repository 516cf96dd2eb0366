//! One subagent task on the engine (spec 7.3): the task's catalog rebuilt and checked
//! against the hash the lead sent, its model, a run over the parent's thread (so its
//! sandbox) with no journal and no settlement, the recursion limit of `max_turns`, the
//! token budget and loop detection, the timeout, and cooperative cancellation. The
//! outcome becomes a [`TaskResult`] per 7.3; each AI message is reported as it comes.
//! A worker's `TaskGraph` actor owns one of these; it is engine code so the same task
//! runs the same way wherever it is placed.

use std::sync::Arc;
use std::time::Duration;

use super::spec::TaskSpec;
use super::{
    TaskEvent, TaskResult, TaskStatus, TaskStopReason, CANCELLED_ERROR, MAX_TURNS_ERROR,
    NO_RESPONSE, TIMED_OUT_ERROR,
};
use crate::run::actor::{CancelFlag, RunEvent, RunLoop, RunSettings};
use crate::run::context::{AgentContext, RunContext, ThreadPaths};
use crate::run::hosts::ToolHosts;
use crate::run::journal::RunStatus;
use crate::run::state::{Message, StopReason};

/// The run id of the task of call `tool_call_id` in run `run_id` (its sandbox lease
/// and its calls' ids on sandbox-host are its own).
pub fn task_run_id(run_id: &str, tool_call_id: &str) -> String {
    format!("{run_id}.task.{tool_call_id}")
}

/// Runs `spec` to its end. `events` gets `task_running` for every AI message; the
/// caller reports `task_started` and the terminal event.
pub async fn run_task(
    spec: &TaskSpec,
    hosts: Arc<dyn ToolHosts>,
    cancel: Arc<CancelFlag>,
    events: Arc<dyn Fn(TaskEvent) + Send + Sync>,
) -> TaskResult {
    let model_name = spec.model.name().to_owned();
    let failed = |error: String| TaskResult {
        model_name: Some(model_name.clone()),
        ..TaskResult::failed(error)
    };
    let catalog = match spec.catalog.rebuild() {
        Ok(catalog) => Arc::new(catalog),
        Err(e) => return failed(e.to_string()),
    };
    if catalog.get(crate::catalog::builtins::TASK).is_some() {
        return failed("a subagent's catalog never offers `task`: refused".to_owned());
    }
    let model = match spec.model.build() {
        Ok(model) => model,
        Err(e) => return failed(e.to_string()),
    };
    let context = RunContext {
        run_id: task_run_id(&spec.run_id, &spec.tool_call_id),
        user_id: spec.user_id.clone(),
        thread_id: spec.thread_id.clone(),
        paths: ThreadPaths::new(&spec.data_root, &spec.user_id, &spec.thread_id),
        clarification_enabled: false,
        agent: AgentContext {
            non_interactive: true,
            ..AgentContext::new(&spec.data_root)
        },
    };
    let settings = RunSettings {
        max_turns: spec.max_turns.max(1),
        tool_timeout: Duration::from_secs(spec.tool_timeout_s.max(1)),
        system_prompt: Some(Arc::from(spec.system_prompt.clone().unwrap_or_default())),
        token_budget: spec.token_budget.clone(),
        settle: false,
        report_messages: true,
        is_subagent: true,
        ..RunSettings::default()
    };
    let built = RunLoop::builder(context, model, catalog, hosts)
        .settings(settings)
        .cancel(Arc::clone(&cancel))
        .start(&spec.prompt)
        .await;
    let mut run = match built {
        Ok(run) => run,
        Err(e) => return failed(e.to_string()),
    };
    let task_id = spec.tool_call_id.clone();
    let reporter_model = model_name.clone();
    let reporter = Arc::clone(&events);
    run.on_event(move |event| match event {
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
        _ => {}
    });
    let timeout = Duration::from_secs(spec.timeout_s.max(1));
    let outcome = match tokio::time::timeout(timeout, run.drive()).await {
        Ok(outcome) => outcome,
        Err(_) => {
            cancel.cancel();
            return TaskResult {
                status: TaskStatus::TimedOut,
                error: Some(TIMED_OUT_ERROR.replace("{t}", &spec.timeout_s.to_string())),
                model_name: Some(model_name),
                token_usage: run.state().token_usage,
                ..TaskResult::failed("")
            };
        }
    };
    let guard_reason = match run.state().stop_reason {
        Some(StopReason::TokenCapped) => Some(TaskStopReason::TokenCapped),
        Some(StopReason::LoopCapped) => Some(TaskStopReason::LoopCapped),
        _ => None,
    };
    let last_text = run.state().messages.iter().rev().find_map(|m| match m {
        Message::Ai { content, .. } if !content.trim().is_empty() => Some(content.clone()),
        _ => None,
    });
    let base = TaskResult {
        status: TaskStatus::Completed,
        result: None,
        error: None,
        stop_reason: guard_reason,
        model_name: Some(model_name),
        token_usage: outcome.token_usage,
        worker: None,
    };
    if cancel.is_cancelled() {
        return TaskResult {
            status: TaskStatus::Cancelled,
            error: Some(CANCELLED_ERROR.to_owned()),
            ..base
        };
    }
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
                error: Some(MAX_TURNS_ERROR.replace("{n}", &spec.max_turns.to_string())),
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
            error: Some("the subagent asked for clarification, which subagents cannot".into()),
            ..base
        },
        RunStatus::Error | RunStatus::Running => TaskResult {
            status: TaskStatus::Failed,
            error: Some(outcome.error.unwrap_or_else(|| "the task failed".into())),
            ..base
        },
    }
}
