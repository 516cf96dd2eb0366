//! Epochs on the wire (issue 38): sandbox-host, mcp-host and a subagent worker of a real
//! cluster, each sent requests straight on its socket under a run's lease epoch. A call at
//! epoch 2 passes; one at epoch 1 for the same run is refused with the fenced error and
//! does nothing (no file written, the recording MCP server saw nothing, no task started);
//! epoch 2 passes again; epoch 3 passes and fences 2. A request with no epoch passes, and
//! another run's epochs are its own. A task started at epoch 2 and followed at epoch 3
//! runs on to its end for the newer lead, while epoch 2's cancel and answer are refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use antler_engine::{catalog::Catalog, Playbook, ScriptedTurn, TaskSpec, WireCatalog, WireModel};
use antler_protocol::{
    calls::{attach_task, run_task, McpCalls, SandboxCalls, TaskItem, WorkerCalls},
    link::dial,
    messages::{
        ApprovalAnswer, ApprovalAnswerChoice, McpCall, Principal, TaskAssignment, TaskStatus,
        ThreadFileOp, ThreadFileReply,
    },
    runtime_dir::RuntimeDir,
    telemetry::within,
    Address, Connection, ConnectionConfig, Identity, Json, RemoteError, Role, RpcError,
    TraceContext,
};
use antler_tests::{antler, wait_for};
use serde_json::{json, Value};

use crate::lead_support::LeadCluster;
use crate::mcp_support::{peer_script, python};

const CONFIG: &str = "tool_search:\n  enabled: false\napprovals:\n  defaults: false\n";
const RUN: &str = "run-fenced";
const OTHER_RUN: &str = "run-other";
const T: Duration = Duration::from_secs(60);

/// The trace a lead holding `run`'s lease at `epoch` sends under (`None`: no lease).
fn at(run: &str, epoch: Option<u64>) -> TraceContext {
    TraceContext::for_run(run).fenced(run, epoch)
}

/// `work` sent under `run`'s lease at `epoch`.
async fn as_lead<F: Future>(run: &str, epoch: Option<u64>, work: F) -> F::Output {
    within(at(run, epoch), work).await
}

/// The refusal a lead at `epoch` gets once `current` was seen for `run`.
fn fenced(run: &str, current: u64, epoch: u64) -> RemoteError {
    RemoteError::Fenced {
        run_id: run.into(),
        current,
        epoch,
    }
}

fn remote<T: std::fmt::Debug>(result: Result<T, RpcError>) -> RemoteError {
    match result {
        Err(RpcError::Remote(e)) => e,
        other => panic!("expected a remote error, got {other:?}"),
    }
}

async fn connect(runtime: &Path, role: Role) -> Connection {
    let rt = RuntimeDir::open(runtime.to_path_buf()).expect("runtime dir");
    let token = rt.read_token().expect("token");
    let me = Identity::new(Role::Lead, "fencing-test", Some(token));
    dial(
        &Address::Unix(rt.socket(role, 0)),
        &me,
        ConnectionConfig::default(),
        None,
    )
    .await
    .unwrap_or_else(|e| panic!("dial {role}: {e}"))
}

/// The calls the recording server saw, in order.
fn seen(record: &Path) -> Vec<Value> {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn publish(text: &str) -> McpCall {
    McpCall {
        server: "rec".into(),
        tool: "publish".into(),
        args: Json::from(&json!({"text": text})),
        user: None,
        thread: None,
        workspace: None,
        run_id: None,
        tool_call_id: None,
        clearance: None,
    }
}

fn principal() -> Principal {
    Principal {
        user_id: "u-fence".into(),
        thread_id: "t-fence".into(),
        roles: Vec::new(),
    }
}

fn write_output(name: &str) -> ThreadFileOp {
    ThreadFileOp::WriteOutput {
        name: name.into(),
        content: b"written".to_vec(),
    }
}

/// Every file named `name` under `dir`.
fn files_named(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() && !path.is_symlink() {
            found.extend(files_named(&path, name));
        } else if entry.file_name() == name {
            found.push(path);
        }
    }
    found
}

/// A task of `run` whose scripted model answers after `delay_ms`.
fn assignment(run: &str, call: &str, delay_ms: u64) -> TaskAssignment {
    let spec = TaskSpec {
        run_id: run.into(),
        tool_call_id: call.into(),
        user_id: "u-fence".into(),
        thread_id: "t-fence".into(),
        data_root: std::env::temp_dir(),
        thread_files: Default::default(),
        subagent_type: "general-purpose".into(),
        description: "fenced task".into(),
        prompt: "work".into(),
        system_prompt: None,
        catalog: WireCatalog::of(&Catalog::build(Vec::new(), true).unwrap(), true),
        model: WireModel::Scripted {
            playbook: Playbook {
                turns: vec![ScriptedTurn {
                    delay_ms,
                    content: "done".into(),
                    ..ScriptedTurn::default()
                }],
                ..Playbook::default()
            },
        },
        max_turns: 5,
        timeout_s: 120,
        tool_timeout_s: 60,
        token_budget: None,
        web_tools: Default::default(),
        sandbox_host: None,
        mcp_host: None,
        summarization: None,
        loop_detection: Default::default(),
        tool_output: Default::default(),
        approvals: None,
    };
    TaskAssignment {
        run_id: run.into(),
        tool_call_id: call.into(),
        spec: Box::new(spec.to_wire().unwrap()),
    }
}

/// The refusal of a task's stream: at its start or as its first item.
async fn refused(
    started: Result<antler_protocol::calls::Watch<TaskItem>, RpcError>,
) -> RemoteError {
    match started {
        Err(RpcError::Remote(e)) => e,
        Ok(mut watch) => match watch.next().await {
            Some(Err(RpcError::Remote(e))) => e,
            other => panic!("expected a refusal, got {other:?}"),
        },
        Err(e) => panic!("expected a remote error, got {e}"),
    }
}

/// Follows a task's stream to its end: its final item.
async fn end_of(mut watch: antler_protocol::calls::Watch<TaskItem>) -> TaskItem {
    while let Some(item) = watch.next().await {
        match item.expect("a task item") {
            TaskItem::Event(_) => {}
            last => return last,
        }
    }
    panic!("the task's stream ended without its end")
}

fn answer(call: &str) -> ApprovalAnswer {
    ApprovalAnswer {
        run_id: RUN.into(),
        tool_call_id: call.into(),
        call_id: "held-1".into(),
        choice: ApprovalAnswerChoice::Approve,
        by: None,
        at: 0,
        reason: None,
    }
}

#[test]
fn hosts_and_workers_refuse_a_runs_stale_epoch_and_act_for_the_newest() {
    let scratch = tempfile::Builder::new()
        .prefix("antler-fencing")
        .tempdir_in("/tmp")
        .unwrap();
    let record = scratch.path().join("calls.jsonl");
    let extensions = json!({"mcpServers": {"rec": {
        "type": "stdio",
        "command": python(),
        "args": [peer_script("recording_tools.py"), record.to_str().unwrap()],
    }}});
    let c = LeadCluster::up_with_workers(
        CONFIG,
        &[("extensions_config.json", &extensions.to_string())],
        &[],
        1,
    );
    let ready = wait_for(Duration::from_secs(60), || {
        let out = antler(&c.runtime(), &["mcp", "status", "--json"]);
        let status: Value = serde_json::from_slice(&out.stdout).ok()?;
        (status[0]["state"] == "ready").then_some(())
    });
    assert!(ready.is_some(), "the recording server did not start");
    let (runtime, base) = (c.runtime(), c.base());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        sandbox_host(&runtime, &base).await;
        mcp_host(&runtime, &record).await;
        worker(&runtime).await;
    });
}

async fn sandbox_host(runtime: &Path, base: &Path) {
    let sandbox = connect(runtime, Role::SandboxHost).await;
    let write = |name: &'static str| sandbox.thread_files(principal(), write_output(name), T);
    let written = |r: Result<Result<ThreadFileReply, _>, RpcError>| match r {
        Ok(Ok(ThreadFileReply::Written(name))) => name,
        other => panic!("expected a written file, got {other:?}"),
    };

    // The thread's directories, as a lead makes them before a run.
    let made = sandbox.thread_files(principal(), ThreadFileOp::EnsureDirs, T);
    assert_eq!(made.await.unwrap(), Ok(ThreadFileReply::Done));
    assert_eq!(
        written(as_lead(RUN, Some(2), write("e2.txt")).await),
        "/mnt/user-data/outputs/e2.txt"
    );
    assert_eq!(files_named(base, "e2.txt").len(), 1);
    // Epoch 1 is refused and writes nothing; no sandbox is acquired for it either.
    assert_eq!(
        remote(as_lead(RUN, Some(1), write("e1.txt")).await),
        fenced(RUN, 2, 1)
    );
    assert_eq!(
        remote(as_lead(RUN, Some(1), sandbox.acquire(principal(), None, None, T)).await),
        fenced(RUN, 2, 1)
    );
    assert!(
        files_named(base, "e1.txt").is_empty(),
        "a fenced write landed"
    );
    let pool = sandbox.sandbox_status(T).await.unwrap();
    assert!(
        pool.sandboxes.iter().all(|s| s.thread_id != "t-fence"),
        "a fenced acquire made a sandbox: {:?}",
        pool.sandboxes
    );
    // The mark stays at 2; 3 raises it and fences 2.
    written(as_lead(RUN, Some(2), write("e2-again.txt")).await);
    written(as_lead(RUN, Some(3), write("e3.txt")).await);
    let refused = remote(as_lead(RUN, Some(2), write("e2-late.txt")).await);
    assert_eq!(refused, fenced(RUN, 3, 2));
    assert_eq!(
        refused.to_string(),
        "run run-fenced is owned by a newer lead (epoch 3); this lead's epoch 2 is fenced"
    );
    assert!(files_named(base, "e2-late.txt").is_empty());
    // No epoch (a single lead) and another run's epochs pass.
    written(as_lead(RUN, None, write("no-epoch.txt")).await);
    written(as_lead(OTHER_RUN, Some(1), write("other.txt")).await);
    assert_eq!(files_named(base, "other.txt").len(), 1);
}

async fn mcp_host(runtime: &Path, record: &Path) {
    let mcp = connect(runtime, Role::McpHost).await;
    let call = |text: &'static str| mcp.call_tool(publish(text), T);
    let ran = |r: Result<antler_protocol::messages::McpCallResult, RpcError>| {
        let r = r.expect("an MCP result");
        assert!(!r.is_error, "{}", r.text());
        r.text()
    };

    assert_eq!(
        ran(as_lead(RUN, Some(2), call("at 2")).await),
        "published at 2"
    );
    assert_eq!(
        remote(as_lead(RUN, Some(1), call("at 1")).await),
        fenced(RUN, 2, 1)
    );
    ran(as_lead(RUN, Some(2), call("at 2 again")).await);
    ran(as_lead(RUN, Some(3), call("at 3")).await);
    assert_eq!(
        remote(as_lead(RUN, Some(2), call("at 2 late")).await),
        fenced(RUN, 3, 2)
    );
    ran(as_lead(RUN, None, call("no epoch")).await);
    ran(as_lead(OTHER_RUN, Some(1), call("other run")).await);
    let texts: Vec<Value> = seen(record)
        .iter()
        .map(|c| c["args"]["text"].clone())
        .collect();
    assert_eq!(
        texts,
        vec![
            json!("at 2"),
            json!("at 2 again"),
            json!("at 3"),
            json!("no epoch"),
            json!("other run")
        ],
        "the server saw a fenced call"
    );
}

async fn worker(runtime: &Path) {
    let worker = connect(runtime, Role::Subagent).await;
    // A task started at epoch 2, long enough to be running when epoch 3 comes.
    let mut started = as_lead(
        RUN,
        Some(2),
        run_task(&worker, assignment(RUN, "task-2", 3000), T),
    )
    .await
    .expect("the task starts at epoch 2");
    let first = started
        .next()
        .await
        .expect("a first event")
        .expect("an item");
    assert!(matches!(first, TaskItem::Event(_)), "{first:?}");
    drop(started);

    // Epoch 1: no task starts, no cancel or answer reaches the task.
    let stale = as_lead(
        RUN,
        Some(1),
        run_task(&worker, assignment(RUN, "task-1", 0), T),
    )
    .await;
    assert_eq!(refused(stale).await, fenced(RUN, 2, 1));
    let unknown = as_lead(
        RUN,
        Some(2),
        attach_task(&worker, RUN.into(), "task-1".into(), T),
    )
    .await
    .expect("attach at epoch 2");
    assert_eq!(
        end_of(unknown).await,
        TaskItem::Unknown,
        "a fenced task started"
    );
    assert_eq!(
        remote(as_lead(RUN, Some(1), worker.cancel_tasks(RUN.into(), None, T)).await),
        fenced(RUN, 2, 1)
    );

    // Epoch 3 adopts the task; epoch 2's cancel and answer are refused from then on.
    let adopted = as_lead(
        RUN,
        Some(3),
        attach_task(&worker, RUN.into(), "task-2".into(), T),
    )
    .await
    .expect("attach at epoch 3");
    assert_eq!(
        remote(as_lead(RUN, Some(2), worker.cancel_tasks(RUN.into(), None, T)).await),
        fenced(RUN, 3, 2)
    );
    assert_eq!(
        remote(as_lead(RUN, Some(2), worker.answer_approval(answer("task-2"), T)).await),
        fenced(RUN, 3, 2)
    );
    match end_of(adopted).await {
        TaskItem::Ended(result) => assert_eq!(
            result.status,
            TaskStatus::Completed,
            "the adopted task did not run on: {result:?}"
        ),
        other => panic!("expected the task's end, got {other:?}"),
    }

    // No epoch, and another run's epochs, pass.
    let taken = as_lead(RUN, None, worker.answer_approval(answer("task-2"), T))
        .await
        .expect("an answer with no epoch");
    assert!(!taken, "no call of the ended task waits");
    let other = as_lead(
        OTHER_RUN,
        Some(1),
        run_task(&worker, assignment(OTHER_RUN, "task-o", 0), T),
    )
    .await
    .expect("another run's task starts");
    match end_of(other).await {
        TaskItem::Ended(result) => assert_eq!(result.status, TaskStatus::Completed),
        other => panic!("expected the task's end, got {other:?}"),
    }
}
