//! One subagent task on the real engine (`task::graph`), one test per terminal
//! state of spec 7.2/7.3: the exact `TaskResult`, the content and `additional_kwargs`
//! the parent's model sees, and the `task_running` events. The model is the real
//! scripted model; the tool calls are builtins (`tool_search` over a catalog with a
//! deferred MCP tool), so no host is needed: the hosts are [`UnreachableHosts`], a
//! stand-in that answers every request with a host error. Only the sandbox lease of a
//! timed-out task needs a sandbox-host: [`SandboxHostStandIn`] answers its few requests
//! and records them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use antler_engine::{
    catalog::{builtins, Catalog, ToolSource, ToolSpec},
    drive_task, run_task, CancelFlag, HostError, Message, Playbook, ScriptedCall, ScriptedTurn,
    TaskEvent, TaskResult, TaskRun, TaskSpec, TaskStatus, TaskStopReason, TokenBudget, TokenUsage,
    ToolHosts, ToolStatus, WireCatalog, WireModel,
};
use antler_protocol::messages::{
    AcquireSource, Acquired, Reply, Request, SandboxReply, SandboxRequest, ToolResult,
};
use antler_protocol::Role;
use futures::future::BoxFuture;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// A stand-in for sandbox-host and mcp-host: these tests call only builtins, so every
/// request is a host error (and is counted, so a test can say none was made).
#[derive(Default)]
pub(super) struct UnreachableHosts {
    requests: Mutex<usize>,
}

impl ToolHosts for UnreachableHosts {
    fn request(
        &self,
        role: Role,
        _request: Request,
        _timeout: Duration,
    ) -> BoxFuture<'_, Result<Reply, HostError>> {
        *self.requests.lock().unwrap() += 1;
        Box::pin(async move {
            Err(HostError::unavailable(format!(
                "{role:?} unreachable: UnreachableHosts stand-in"
            )))
        })
    }
}

/// A stand-in for sandbox-host (these engine tests start no process): it acquires one
/// sandbox, runs every call with an `ok` result, and records what it was asked, as
/// `acquire`, `call <tool>`, `release <sandbox> by <run>` and `renew`.
#[derive(Default)]
struct SandboxHostStandIn {
    asked: Mutex<Vec<String>>,
}

impl ToolHosts for SandboxHostStandIn {
    fn request(
        &self,
        role: Role,
        request: Request,
        _timeout: Duration,
    ) -> BoxFuture<'_, Result<Reply, HostError>> {
        let (asked, reply) = match request {
            Request::Sandbox(SandboxRequest::Acquire { .. }) => (
                "acquire".to_owned(),
                SandboxReply::Acquired(Ok(Acquired {
                    sandbox_id: "sbx-1".to_owned(),
                    source: AcquireSource::Created,
                    lease_ttl_ms: 60_000,
                })),
            ),
            Request::Sandbox(SandboxRequest::Call { call, .. }) => (
                format!("call {}", call.tool),
                SandboxReply::ToolResult(Ok(ToolResult {
                    content: "ok".to_owned(),
                    is_error: false,
                })),
            ),
            Request::Sandbox(SandboxRequest::Release { sandbox_id, owner }) => (
                format!(
                    "release {sandbox_id} by {}",
                    owner.map(|o| o.run_id).unwrap_or_default()
                ),
                SandboxReply::Released(Ok(())),
            ),
            Request::Sandbox(SandboxRequest::RenewLease { .. }) => {
                ("renew".to_owned(), SandboxReply::Renewed(1))
            }
            other => {
                return Box::pin(async move {
                    Err(HostError::failed(format!(
                        "{role:?}: SandboxHostStandIn does not answer {other:?}"
                    )))
                })
            }
        };
        self.asked.lock().unwrap().push(asked);
        Box::pin(async move { Ok(Reply::Sandbox(reply)) })
    }
}

const TOOL_CALL_ID: &str = "call-task-1";
const MODEL: &str = "scripted";

/// The subagent's catalog: one deferred MCP tool, so `tool_search` is offered.
fn catalog(extra: Vec<ToolSpec>) -> Catalog {
    let mut tools = vec![ToolSpec::mcp(
        "srv_echo",
        "Echo a message back.",
        json!({"type": "object", "properties": {"message": {"type": "string"}}}),
        Some("srv".to_owned()),
        "echo",
    )];
    tools.extend(extra);
    Catalog::build(tools, true).unwrap()
}

pub(super) fn turn(content: &str, calls: Vec<ScriptedCall>) -> ScriptedTurn {
    ScriptedTurn {
        content: content.to_owned(),
        tool_calls: calls,
        ..ScriptedTurn::default()
    }
}

/// A turn whose model answers only after 10 s: a task that ends before it never gets it.
fn too_late() -> ScriptedTurn {
    let mut slow = turn("too late", Vec::new());
    slow.delay_ms = 60_000;
    slow
}

pub(super) fn search(query: &str) -> ScriptedCall {
    ScriptedCall {
        name: "tool_search".to_owned(),
        args: json!({ "query": query }),
        id: None,
    }
}

fn usage(input: u64, output: u64) -> Option<TokenUsage> {
    Some(TokenUsage {
        input_tokens: input,
        output_tokens: output,
        total_tokens: input + output,
        ..TokenUsage::default()
    })
}

/// A task of `turns` over [`catalog`], under `dir`.
pub(super) fn spec(dir: &tempfile::TempDir, turns: Vec<ScriptedTurn>) -> TaskSpec {
    TaskSpec {
        run_id: "run-1".to_owned(),
        tool_call_id: TOOL_CALL_ID.to_owned(),
        user_id: "alice".to_owned(),
        thread_id: "thread-1".to_owned(),
        data_root: dir.path().to_path_buf(),
        thread_files: Default::default(),
        subagent_type: "general-purpose".to_owned(),
        description: "find the answer".to_owned(),
        prompt: "Find the answer.".to_owned(),
        system_prompt: Some("You are a subagent.".to_owned()),
        catalog: WireCatalog::of(&catalog(Vec::new()), true),
        model: WireModel::Scripted {
            playbook: Playbook {
                turns,
                ..Playbook::default()
            },
        },
        max_turns: 10,
        timeout_s: 60,
        tool_timeout_s: 5,
        token_budget: None,
        web_tools: Default::default(),
        sandbox_host: None,
        mcp_host: None,
        summarization: None,
        loop_detection: Default::default(),
        tool_output: Default::default(),
        approvals: None,
    }
}

/// What one task did: its run, the events it reported, and how many host requests.
struct Observed {
    run: TaskRun,
    events: Vec<TaskEvent>,
    host_requests: usize,
}

impl Observed {
    fn result(&self) -> &TaskResult {
        &self.run.result
    }

    /// The `task_running` events as (message_index, total_messages, message, usage).
    fn running(&self) -> Vec<(usize, usize, String, Option<TokenUsage>)> {
        self.events
            .iter()
            .filter(|event| !matches!(event, TaskEvent::TaskTool { .. }))
            .map(|event| match event {
                TaskEvent::TaskRunning {
                    task_id,
                    message,
                    message_index,
                    total_messages,
                    usage,
                    model_name,
                } => {
                    assert_eq!(task_id, TOOL_CALL_ID);
                    assert_eq!(model_name.as_deref(), Some(MODEL));
                    (*message_index, *total_messages, message.clone(), *usage)
                }
                other => {
                    panic!("the task graph reports only task_running and task_tool: {other:?}")
                }
            })
            .collect()
    }

    /// The messages of the subagent's final state.
    fn messages(&self) -> &[Message] {
        &self.run.state.as_ref().expect("the task ran").messages
    }
}

/// Drives `spec` with `cancel`; `on_event` sees each event as it is reported.
async fn observe_with(
    spec: &TaskSpec,
    cancel: Arc<CancelFlag>,
    on_event: impl Fn(&TaskEvent) + Send + Sync + 'static,
) -> Observed {
    let hosts = Arc::new(UnreachableHosts::default());
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&events);
    let run = drive_task(
        spec,
        hosts.clone(),
        cancel,
        Arc::new(move |event: TaskEvent| {
            on_event(&event);
            sink.lock().unwrap().push(event);
        }),
    )
    .await;
    let events = events.lock().unwrap().clone();
    let host_requests = *hosts.requests.lock().unwrap();
    Observed {
        run,
        events,
        host_requests,
    }
}

async fn observe(spec: &TaskSpec) -> Observed {
    observe_with(spec, Arc::new(CancelFlag::default()), |_| {}).await
}

fn sha256(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

fn usage_json(usage: TokenUsage) -> Value {
    json!({
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
    })
}

/// The `additional_kwargs` of a completed task with `result`.
fn completed_kwargs(result: &str, stop: Option<&str>, usage: TokenUsage) -> Value {
    let mut kwargs = json!({
        "subagent_status": "completed",
        "subagent_result_brief": result,
        "subagent_result_sha256": sha256(result),
        "subagent_model_name": MODEL,
        "subagent_token_usage": usage_json(usage),
    });
    if let Some(stop) = stop {
        kwargs["subagent_stop_reason"] = stop.into();
    }
    kwargs
}

/// The `additional_kwargs` of a task that did not complete.
fn ended_kwargs(status: &str, error: &str, stop: Option<&str>, usage: TokenUsage) -> Value {
    let mut kwargs = json!({
        "subagent_status": status,
        "subagent_error": error,
        "subagent_model_name": MODEL,
        "subagent_token_usage": usage_json(usage),
    });
    if let Some(stop) = stop {
        kwargs["subagent_stop_reason"] = stop.into();
    }
    kwargs
}

fn expected(status: TaskStatus, usage: TokenUsage) -> TaskResult {
    TaskResult {
        status,
        result: None,
        error: None,
        stop_reason: None,
        model_name: Some(MODEL.to_owned()),
        token_usage: usage,
        worker: None,
    }
}

#[tokio::test]
async fn a_completed_task_returns_its_last_text_and_its_summed_usage() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = turn("Looking for a tool.", vec![search("select:srv_echo")]);
    first.usage = usage(100, 20);
    let mut last = turn("The answer is 42.", Vec::new());
    last.usage = usage(50, 10);
    let task = spec(&dir, vec![first, last]);

    let seen = observe(&task).await;

    let total = usage(150, 30).unwrap();
    assert_eq!(
        *seen.result(),
        TaskResult {
            result: Some("The answer is 42.".to_owned()),
            ..expected(TaskStatus::Completed, total)
        }
    );
    assert_eq!(
        seen.result().content(),
        "Task Succeeded. Result: The answer is 42."
    );
    assert_eq!(
        seen.result().additional_kwargs(),
        completed_kwargs("The answer is 42.", None, total)
    );
    assert_eq!(
        seen.running(),
        vec![
            (1, 1, "Looking for a tool.".to_owned(), usage(100, 20)),
            (2, 2, "The answer is 42.".to_owned(), usage(50, 10)),
        ]
    );
    // The subagent's tool_search ran on the worker and promoted the deferred tool.
    assert!(seen.messages().iter().any(|m| matches!(
        m,
        Message::Tool { name, status: ToolStatus::Success, content, .. }
            if name == "tool_search" && content.contains("srv_echo")
    )));
    assert_eq!(seen.host_requests, 0);
    // run_task is drive_task's result.
    assert_eq!(
        run_task(
            &task,
            Arc::new(UnreachableHosts::default()),
            Arc::new(CancelFlag::default()),
            Arc::new(|_| {}),
        )
        .await,
        *seen.result()
    );
}

#[tokio::test]
async fn a_turn_capped_task_with_partial_text_completes_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut task = spec(
        &dir,
        vec![
            turn("Half done.", vec![search("echo")]),
            turn("", vec![search("message")]),
            turn("never played", Vec::new()),
        ],
    );
    task.max_turns = 2;

    let seen = observe(&task).await;

    let zero = TokenUsage::default();
    assert_eq!(
        *seen.result(),
        TaskResult {
            result: Some("Half done.".to_owned()),
            stop_reason: Some(TaskStopReason::TurnCapped),
            ..expected(TaskStatus::Completed, zero)
        }
    );
    assert_eq!(
        seen.result().content(),
        "Task Succeeded (capped: turn budget). Result: Half done."
    );
    assert_eq!(
        seen.result().additional_kwargs(),
        completed_kwargs("Half done.", Some("turn_capped"), zero)
    );
    assert_eq!(
        seen.running(),
        vec![
            (1, 1, "Half done.".to_owned(), None),
            (2, 2, String::new(), None),
        ]
    );
}

#[tokio::test]
async fn a_turn_capped_task_without_text_fails_with_reached_max_turns() {
    let dir = tempfile::tempdir().unwrap();
    let mut task = spec(
        &dir,
        vec![
            turn("", vec![search("echo")]),
            turn("  ", vec![search("message")]),
            turn("never played", Vec::new()),
        ],
    );
    task.max_turns = 2;

    let seen = observe(&task).await;

    let zero = TokenUsage::default();
    assert_eq!(
        *seen.result(),
        TaskResult {
            error: Some("Reached max_turns=2".to_owned()),
            stop_reason: Some(TaskStopReason::TurnCapped),
            ..expected(TaskStatus::Failed, zero)
        }
    );
    assert_eq!(
        seen.result().content(),
        "Task failed (capped: turn budget). Error: Reached max_turns=2"
    );
    assert_eq!(
        seen.result().additional_kwargs(),
        ended_kwargs("failed", "Reached max_turns=2", Some("turn_capped"), zero)
    );
    assert_eq!(seen.running().len(), 2);
}

#[tokio::test]
async fn a_token_capped_task_completes_with_the_budget_note() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = turn("Searching.", vec![search("echo")]);
    first.usage = usage(500, 100);
    let mut second = turn("Still working.", vec![search("message")]);
    second.usage = usage(500, 100);
    let mut task = spec(&dir, vec![first, second, turn("never played", Vec::new())]);
    task.token_budget = Some(TokenBudget {
        enabled: true,
        max_tokens: 1000,
        ..TokenBudget::default()
    });

    let seen = observe(&task).await;

    // The hard stop drops the second reply's calls and appends the note: that reply is
    // the final answer, and the run's stop reason is the task's.
    let text = "Still working.\n\n[TOKEN BUDGET EXCEEDED] The total token usage (1,200) has exceeded the safety limit (1,000). Producing final answer with results collected so far.";
    let total = usage(1000, 200).unwrap();
    assert_eq!(
        *seen.result(),
        TaskResult {
            result: Some(text.to_owned()),
            stop_reason: Some(TaskStopReason::TokenCapped),
            ..expected(TaskStatus::Completed, total)
        }
    );
    assert_eq!(
        seen.result().content(),
        format!("Task Succeeded (capped: token budget). Result: {text}")
    );
    assert_eq!(
        seen.result().additional_kwargs(),
        completed_kwargs(text, Some("token_capped"), total)
    );
    assert_eq!(
        seen.running(),
        vec![
            (1, 1, "Searching.".to_owned(), usage(500, 100)),
            (2, 2, text.to_owned(), usage(500, 100)),
        ]
    );
    assert!(matches!(
        seen.messages().last(),
        Some(Message::Ai { tool_calls, .. }) if tool_calls.is_empty()
    ));
}

#[tokio::test]
async fn a_loop_capped_task_completes_with_the_forced_stop() {
    let dir = tempfile::tempdir().unwrap();
    let mut turns: Vec<ScriptedTurn> = (0..5)
        .map(|_| turn("Searching again.", vec![search("select:srv_echo")]))
        .collect();
    turns.push(turn("never played", Vec::new()));
    let task = spec(&dir, turns);

    let seen = observe(&task).await;

    let text = "Searching again.\n\n[FORCED STOP] Repeated tool calls exceeded the safety limit. Producing final answer with results collected so far.";
    let zero = TokenUsage::default();
    assert_eq!(
        *seen.result(),
        TaskResult {
            result: Some(text.to_owned()),
            stop_reason: Some(TaskStopReason::LoopCapped),
            ..expected(TaskStatus::Completed, zero)
        }
    );
    assert_eq!(
        seen.result().content(),
        format!("Task Succeeded (capped: repeated tool-call loop). Result: {text}")
    );
    assert_eq!(
        seen.result().additional_kwargs(),
        completed_kwargs(text, Some("loop_capped"), zero)
    );
    let running = seen.running();
    let indices: Vec<usize> = running.iter().map(|r| r.0).collect();
    assert_eq!(indices, [1, 2, 3, 4, 5]);
    assert_eq!(running[4].2, text);
    // The warning at the third repeat goes to the next request only (spec C.7), never
    // into the subagent's conversation.
    assert!(!seen.messages().iter().any(|m| matches!(
        m,
        Message::Human { content, .. } if content.starts_with("[LOOP DETECTED]")
    )));
}

/// The lead's `loop_detection:` and `tool_output:` travel in the spec and the task runs
/// with them: a hard limit of 2 stops the second identical call (the default is 5), and
/// a 20-character threshold spills the first result to a file.
#[tokio::test]
async fn a_task_runs_with_the_leads_loop_detection_and_tool_output() {
    let dir = tempfile::tempdir().unwrap();
    let mut turns: Vec<ScriptedTurn> = (0..3)
        .map(|_| turn("Searching again.", vec![search("select:srv_echo")]))
        .collect();
    turns.push(turn("never played", Vec::new()));
    let mut task = spec(&dir, turns);
    task.loop_detection.warn_threshold = 1;
    task.loop_detection.hard_limit = 2;
    task.tool_output.externalize_min_chars = 20;
    antler_engine::ThreadPaths::new(dir.path(), "alice", "thread-1")
        .create()
        .unwrap();

    let seen = observe(&task).await;

    let text = "Searching again.\n\n[FORCED STOP] Repeated tool calls exceeded the safety limit. Producing final answer with results collected so far.";
    assert_eq!(seen.result().result.as_deref(), Some(text));
    assert_eq!(seen.result().stop_reason, Some(TaskStopReason::LoopCapped));
    let indices: Vec<usize> = seen.running().iter().map(|r| r.0).collect();
    assert_eq!(indices, [1, 2]);
    let spilled = seen
        .messages()
        .iter()
        .find_map(|m| match m {
            Message::Tool { content, .. } => Some(content.clone()),
            _ => None,
        })
        .expect("the first search's result");
    assert!(
        spilled
            .starts_with("[Full tool_search output saved to /mnt/user-data/outputs/.tool-results/"),
        "{spilled}"
    );
}

#[tokio::test]
async fn a_task_past_its_timeout_times_out_well_before_its_model_answers() {
    let dir = tempfile::tempdir().unwrap();
    let slow = too_late();
    let mut task = spec(&dir, vec![slow]);
    task.timeout_s = 1;
    let cancel = Arc::new(CancelFlag::default());

    let started = Instant::now();
    let seen = observe_with(&task, Arc::clone(&cancel), |_| {}).await;
    let took = started.elapsed();

    let error = "Execution timed out after 1 seconds";
    let zero = TokenUsage::default();
    assert_eq!(
        *seen.result(),
        TaskResult {
            error: Some(error.to_owned()),
            ..expected(TaskStatus::TimedOut, zero)
        }
    );
    assert_eq!(
        seen.result().content(),
        "Task timed out. Error: Execution timed out after 1 seconds"
    );
    assert_eq!(
        seen.result().additional_kwargs(),
        ended_kwargs("timed_out", error, None, zero)
    );
    assert!(seen.events.is_empty(), "{:?}", seen.events);
    assert!(took >= Duration::from_millis(900), "{took:?}");
    // Well before the model's 60 s answer (a behaviour bound, not a speed target).
    assert!(took < Duration::from_secs(30), "{took:?}");
    // The timeout cancels the task (7.3 sets its cancel_event).
    assert!(cancel.is_cancelled());
}

#[tokio::test]
async fn a_cancelled_task_stops_promptly_while_its_model_waits() {
    let dir = tempfile::tempdir().unwrap();
    let slow = too_late();
    let mut first = turn("First look.", vec![search("echo")]);
    first.usage = usage(10, 5);
    let task = spec(&dir, vec![first, slow]);
    let cancel = Arc::new(CancelFlag::default());
    let canceller = Arc::clone(&cancel);
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        canceller.cancel();
    });

    let started = Instant::now();
    let seen = observe_with(&task, cancel, |_| {}).await;
    let took = started.elapsed();

    let error = "Cancelled by user";
    let spent = usage(10, 5).unwrap();
    assert_eq!(
        *seen.result(),
        TaskResult {
            error: Some(error.to_owned()),
            ..expected(TaskStatus::Cancelled, spent)
        }
    );
    assert_eq!(
        seen.result().content(),
        "Task cancelled by user. Error: Cancelled by user"
    );
    assert_eq!(
        seen.result().additional_kwargs(),
        ended_kwargs("cancelled", error, None, spent)
    );
    assert_eq!(
        seen.running(),
        vec![(1, 1, "First look.".to_owned(), usage(10, 5))]
    );
    // At the cancellation, not at the end of the model's 60 s.
    assert!(took < Duration::from_secs(30), "{took:?}");
}

#[tokio::test]
async fn a_cancellation_after_the_final_answer_leaves_the_task_completed() {
    let dir = tempfile::tempdir().unwrap();
    let task = spec(
        &dir,
        vec![
            turn("Looking.", vec![search("echo")]),
            turn("Done.", Vec::new()),
        ],
    );
    let cancel = Arc::new(CancelFlag::default());
    let canceller = Arc::clone(&cancel);
    // The parent cancels as the final answer is reported: the task ended already, and
    // the first terminal state wins (7.3).
    let seen = observe_with(&task, cancel, move |event| {
        if matches!(
            event,
            TaskEvent::TaskRunning {
                message_index: 2,
                ..
            }
        ) {
            canceller.cancel();
        }
    })
    .await;

    assert_eq!(
        *seen.result(),
        TaskResult {
            result: Some("Done.".to_owned()),
            ..expected(TaskStatus::Completed, TokenUsage::default())
        }
    );
    assert_eq!(seen.result().content(), "Task Succeeded. Result: Done.");
}

#[tokio::test]
async fn a_task_whose_model_fails_fails_with_the_model_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut only = turn("Checking.", vec![search("echo")]);
    only.usage = usage(30, 3);
    let task = spec(&dir, vec![only]);

    let seen = observe(&task).await;

    let error = "the playbook has 1 turns and the run asked for turn 2";
    let spent = usage(30, 3).unwrap();
    assert_eq!(
        *seen.result(),
        TaskResult {
            error: Some(error.to_owned()),
            ..expected(TaskStatus::Failed, spent)
        }
    );
    assert_eq!(
        seen.result().content(),
        format!("Task failed. Error: {error}")
    );
    assert_eq!(
        seen.result().additional_kwargs(),
        ended_kwargs("failed", error, None, spent)
    );
    assert_eq!(
        seen.running(),
        vec![(1, 1, "Checking.".to_owned(), usage(30, 3))]
    );
}

#[tokio::test]
async fn a_catalog_offering_task_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut task = spec(&dir, vec![turn("never played", Vec::new())]);
    task.catalog = WireCatalog::of(&catalog(vec![builtins::task()]), true);

    let seen = observe(&task).await;

    let error = "a subagent's catalog never offers `task`: refused";
    let zero = TokenUsage::default();
    assert_eq!(
        *seen.result(),
        TaskResult {
            error: Some(error.to_owned()),
            ..expected(TaskStatus::Failed, zero)
        }
    );
    assert_eq!(
        seen.result().content(),
        format!("Task failed. Error: {error}")
    );
    assert_eq!(
        seen.result().additional_kwargs(),
        ended_kwargs("failed", error, None, zero)
    );
    assert!(seen.run.state.is_none());
    assert!(seen.events.is_empty());
}

#[tokio::test]
async fn a_forged_task_call_gets_the_unknown_tool_error_and_the_task_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let forged = ScriptedCall {
        name: "task".to_owned(),
        args: json!({
            "description": "nested",
            "prompt": "Delegate again.",
            "subagent_type": "general-purpose",
        }),
        id: Some("forged-1".to_owned()),
    };
    let task = spec(
        &dir,
        vec![
            turn("Delegating.", vec![forged]),
            turn("Done without help.", Vec::new()),
        ],
    );

    let seen = observe(&task).await;

    assert_eq!(
        *seen.result(),
        TaskResult {
            result: Some("Done without help.".to_owned()),
            ..expected(TaskStatus::Completed, TokenUsage::default())
        }
    );
    let answers: Vec<&Message> = seen
        .messages()
        .iter()
        .filter(|m| matches!(m, Message::Tool { tool_call_id, .. } if tool_call_id == "forged-1"))
        .collect();
    assert_eq!(
        answers,
        [&Message::tool(
            "forged-1",
            "task",
            "Error: task is not a valid tool, try one of [srv_echo, tool_search].",
            ToolStatus::Error,
        )]
    );
    assert_eq!(seen.host_requests, 0);
}

#[tokio::test]
async fn a_catalog_whose_hash_was_tampered_with_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut task = spec(&dir, vec![turn("never played", Vec::new())]);
    let real = catalog(Vec::new()).hash().unwrap().as_str().to_owned();
    let forged = "0".repeat(real.len());
    task.catalog.hash = Some(forged.clone());

    let seen = observe(&task).await;

    let error = format!("the subagent's catalog hashes to {real}, the lead sent {forged}: refused");
    let zero = TokenUsage::default();
    assert_eq!(
        *seen.result(),
        TaskResult {
            error: Some(error.clone()),
            ..expected(TaskStatus::Failed, zero)
        }
    );
    assert_eq!(
        seen.result().content(),
        format!("Task failed. Error: {error}")
    );
    assert_eq!(
        seen.result().additional_kwargs(),
        ended_kwargs("failed", &error, None, zero)
    );
    assert!(seen.run.state.is_none());
    assert!(seen.events.is_empty());
}

#[tokio::test]
async fn a_timed_out_task_still_releases_its_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let bash = ToolSpec {
        source: ToolSource::Config {
            use_id: "deerflow.sandbox.tools:bash_tool".to_owned(),
        },
        ..ToolSpec::builtin(
            "bash",
            "Run a command in the sandbox.",
            json!({"type": "object", "properties": {"command": {"type": "string"}}}),
        )
    };
    let command = ScriptedCall {
        name: "bash".to_owned(),
        args: json!({"command": "ls"}),
        id: None,
    };
    let slow = too_late();
    let mut task = spec(&dir, vec![turn("Running.", vec![command]), slow]);
    task.catalog = WireCatalog::of(&catalog(vec![bash]), true);
    task.timeout_s = 1;
    let hosts = Arc::new(SandboxHostStandIn::default());

    let run = drive_task(
        &task,
        hosts.clone(),
        Arc::new(CancelFlag::default()),
        Arc::new(|_| {}),
    )
    .await;

    assert_eq!(run.result.status, TaskStatus::TimedOut);
    let state = run.state.expect("the task ran");
    assert_eq!(
        state.sandbox.map(|s| s.sandbox_id).as_deref(),
        Some("sbx-1")
    );
    // The lease is the task's own (its run id), and it is given back at the timeout,
    // not left to expire on sandbox-host.
    let asked: Vec<String> = hosts
        .asked
        .lock()
        .unwrap()
        .iter()
        .filter(|a| *a != "renew")
        .cloned()
        .collect();
    assert_eq!(
        asked,
        [
            "acquire",
            "call bash",
            "release sbx-1 by run-1.task.call-task-1"
        ]
    );
}
