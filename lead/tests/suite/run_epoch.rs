//! A run's lease epoch on its requests (issue 38): driven with `RunContext::epoch`, every
//! request the run sends to a host (its sandbox call, its MCP call) goes under the run's
//! fenced trace (its id and epoch); without one, no request carries an epoch. The hosts
//! are stand-ins that write down the trace each request is sent under and fail it (the
//! hosts' own refusal is `tests/suite/ha_fencing.rs`, against real ones).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use antler_engine::{
    catalog::{Catalog, ToolSource, ToolSpec},
    HostError, RunContext, RunLoop, RunSettings, ScriptedModel, ToolHosts,
};
use antler_lead::runs::{CheckpointStore, RunStatus};
use antler_protocol::messages::{Reply, Request};
use antler_protocol::{Role, TraceContext};
use futures::future::BoxFuture;
use serde_json::json;

/// Where a request went and the run id and epoch of the trace it was sent under.
type Sent = (Role, Option<String>, Option<u64>);

/// Writes down each request's [`Sent`], and fails it.
#[derive(Default)]
struct TraceRecordingHosts {
    seen: Mutex<Vec<Sent>>,
}

impl ToolHosts for TraceRecordingHosts {
    fn request(
        &self,
        role: Role,
        _: Request,
        _: Duration,
    ) -> BoxFuture<'_, Result<Reply, HostError>> {
        let trace = TraceContext::current();
        self.seen
            .lock()
            .unwrap()
            .push((role, trace.run_id, trace.epoch));
        Box::pin(async move { Err(HostError::failed(format!("{role:?} stand-in"))) })
    }
}

const PLAYBOOK: &str = r#"
turns:
  - tool_calls:
      - {name: write_file, args: {path: /mnt/user-data/outputs/a.txt, content: a}}
      - {name: everything_echo, args: {message: hi}}
  - content: Done.
"#;

fn drive(run_id: &str, epoch: Option<u64>) -> Vec<Sent> {
    let dir = tempfile::tempdir().unwrap();
    let mut write_file = ToolSpec::builtin(
        "write_file",
        "Write a file.",
        json!({"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}),
    );
    write_file.source = ToolSource::Config {
        use_id: "deerflow.sandbox.tools:write_file_tool".into(),
    };
    let echo = ToolSpec::mcp(
        "everything_echo",
        "Echoes back the input.",
        json!({"type": "object", "properties": {"message": {"type": "string"}}}),
        Some("everything".into()),
        "echo",
    );
    let catalog = Arc::new(Catalog::build(vec![write_file, echo], false).unwrap());
    let context = RunContext {
        epoch,
        ..RunContext::local(&dir.path().join("data"), "u1", "t1", run_id)
    };
    context.paths.create().unwrap();
    let hosts = Arc::new(TraceRecordingHosts::default());
    let store = CheckpointStore::open(&dir.path().join("checkpoints.sqlite")).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let outcome = runtime.block_on(async {
        let mut run = RunLoop::builder(
            context,
            Arc::new(ScriptedModel::from_yaml(PLAYBOOK, "inline").unwrap()),
            catalog,
            Arc::clone(&hosts) as Arc<dyn ToolHosts>,
        )
        .journal(Arc::new(store))
        .settings(RunSettings::default())
        .model_label("scripted")
        .start("write a file and echo")
        .await
        .unwrap();
        run.drive().await
    });
    assert_eq!(outcome.status, RunStatus::Success, "{outcome:?}");
    let seen = hosts.seen.lock().unwrap();
    seen.clone()
}

#[test]
fn every_request_of_a_run_with_an_epoch_carries_its_id_and_epoch() {
    let seen = drive("run-e7", Some(7));
    assert!(
        seen.iter().any(|(role, ..)| *role == Role::SandboxHost),
        "{seen:?}"
    );
    assert!(
        seen.iter().any(|(role, ..)| *role == Role::McpHost),
        "{seen:?}"
    );
    for (role, run_id, epoch) in &seen {
        assert_eq!(
            (run_id.as_deref(), *epoch),
            (Some("run-e7"), Some(7)),
            "a request to {role:?} went out unfenced: {seen:?}"
        );
    }
}

#[test]
fn a_run_without_an_epoch_sends_none() {
    let seen = drive("run-none", None);
    assert!(!seen.is_empty());
    assert!(seen.iter().all(|(_, _, epoch)| epoch.is_none()), "{seen:?}");
}
