//! A call the run journaled as issued is never sent again: the lead dies while a sandbox
//! call is at its host (the drive is dropped there), and the resumed run gives that call
//! the interrupted-call result instead of asking the model again and re-sending it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use antler_engine::{
    catalog::{Catalog, ToolSource, ToolSpec},
    HostError, Message, RunContext, RunLoop, RunSettings, ScriptedModel, ToolHosts, ToolStatus,
    INTERRUPTED_CALL,
};
use antler_lead::runs::{CheckpointStore, RunStatus};
use antler_protocol::messages::{
    AcquireSource, Acquired, Reply, Request, SandboxReply, SandboxRequest, ToolResult,
};
use antler_protocol::Role;
use futures::future::BoxFuture;
use serde_json::json;

const PLAYBOOK: &str = r#"
turns:
  - tool_calls:
      - {name: bash, args: {description: count, command: "echo one >> /mnt/user-data/outputs/count.txt; sleep 30"}}
  - content: Done.
"#;

/// A sandbox-host that records every call it receives; with `hang`, a call never
/// returns (the lead dies while it runs).
struct RecordingHosts {
    calls: Arc<Mutex<Vec<String>>>,
    hang: bool,
}

impl ToolHosts for RecordingHosts {
    fn request(
        &self,
        _: Role,
        request: Request,
        _: Duration,
    ) -> BoxFuture<'_, Result<Reply, HostError>> {
        let reply = match request {
            Request::Sandbox(SandboxRequest::Acquire { .. }) => {
                Reply::Sandbox(SandboxReply::Acquired(Ok(Acquired {
                    sandbox_id: "0123456789abcdef".into(),
                    source: AcquireSource::Created,
                    lease_ttl_ms: 30_000,
                })))
            }
            Request::Sandbox(SandboxRequest::Call { call, call_id, .. }) => {
                self.calls.lock().unwrap().push(format!(
                    "{} {}",
                    call.tool,
                    call_id.unwrap_or_default()
                ));
                if self.hang {
                    return Box::pin(futures::future::pending());
                }
                Reply::Sandbox(SandboxReply::ToolResult(Ok(ToolResult {
                    content: "ran".into(),
                    is_error: false,
                })))
            }
            Request::Sandbox(SandboxRequest::Release { .. }) => {
                Reply::Sandbox(SandboxReply::Released(Ok(())))
            }
            other => return Box::pin(async move { Err(HostError::failed(format!("{other:?}"))) }),
        };
        Box::pin(async move { Ok(reply) })
    }
}

fn catalog() -> Arc<Catalog> {
    let mut bash = ToolSpec::builtin(
        "bash",
        "Run a command.",
        json!({"type": "object", "properties": {"command": {"type": "string"}}}),
    );
    bash.source = ToolSource::Config {
        use_id: "deerflow.sandbox.tools:bash_tool".into(),
    };
    Arc::new(Catalog::build(vec![bash], true).unwrap())
}

fn context(dir: &std::path::Path) -> RunContext {
    let context = RunContext::local(&dir.join("data"), "u1", "t1", "run-1");
    context.paths.create().unwrap();
    context
}

#[test]
fn a_call_at_its_host_when_the_lead_dies_is_not_sent_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = CheckpointStore::open(&dir.path().join("c.sqlite")).unwrap();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let model = || Arc::new(ScriptedModel::from_yaml(PLAYBOOK, "inline").unwrap());
    let mut run = block_on(
        RunLoop::builder(
            context(dir.path()),
            model(),
            catalog(),
            Arc::new(RecordingHosts {
                calls: calls.clone(),
                hang: true,
            }),
        )
        .journal(Arc::new(store.clone()))
        .model_label("scripted")
        .settings(RunSettings::default())
        .start("count once"),
    )
    .unwrap();
    {
        // Drive until the call is at its host, then drop the drive: the lead is gone.
        let mut drive = Box::pin(run.drive());
        // Checkpoint writes run on the blocking pool: poll until the call reaches it.
        block_on(async {
            for _ in 0..500 {
                assert!(futures::poll!(&mut drive).is_pending());
                if !calls.lock().unwrap().is_empty() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        });
    }
    drop(run);
    assert_eq!(*calls.lock().unwrap(), ["bash call-1-1"]);

    let mut resumed = block_on(
        RunLoop::builder(
            context(dir.path()),
            model(),
            catalog(),
            Arc::new(RecordingHosts {
                calls: calls.clone(),
                hang: false,
            }),
        )
        .journal(Arc::new(store.clone()))
        .settings(RunSettings::default())
        .resume(),
    )
    .unwrap();
    let outcome = block_on(resumed.drive());
    assert_eq!(outcome.status, RunStatus::Success, "{:?}", outcome.error);
    assert_eq!(outcome.final_answer.as_deref(), Some("Done."));
    assert_eq!(
        *calls.lock().unwrap(),
        ["bash call-1-1"],
        "the issued call was sent again after the resume"
    );
    let results: Vec<(String, ToolStatus)> = resumed
        .state()
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool {
                tool_call_id,
                content,
                status,
                ..
            } if tool_call_id == "call-1-1" => Some((content.clone(), *status)),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].0.contains(INTERRUPTED_CALL), "{results:?}");
    assert_eq!(results[0].1, ToolStatus::Error);
}

fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}
