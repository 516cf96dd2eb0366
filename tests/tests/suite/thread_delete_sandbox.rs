//! A deleted thread takes its sandbox with it: against a real cluster and a real
//! bubblewrap sandbox, a run on alice's thread leaves its sandbox warm; `DELETE
//! /api/threads/{tid}` destroys that sandbox and the thread's directory; a thread made again
//! under the same id gets a fresh sandbox over fresh directories (what its run writes is on
//! disk, and nothing of the deleted thread is seen), never the old one whose mounts still
//! held the deleted directories.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::lead_support::{http_full, LeadCluster};
use antler_tests::wait_for;
use serde_json::{json, Value};

const ALICE: &str = "alice-token-000000000001";

const FIRST: &str = r##"
turns:
  - tool_calls:
      - name: bash
        args: {description: write, command: "echo one > /mnt/user-data/workspace/one.txt"}
  - content: Done.
"##;

const AGAIN: &str = r##"
turns:
  - tool_calls:
      - name: bash
        args: {description: list, command: "ls /mnt/user-data/workspace > /mnt/user-data/workspace/listing.txt"}
  - content: Done.
"##;

#[test]
fn a_deleted_threads_sandbox_goes_with_it_and_the_id_starts_afresh() {
    let config = format!(
        "tools:\n  - {{name: bash, group: bash, use: \"deerflow.sandbox.tools:bash_tool\"}}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n  bash_command_timeout: 20\nantler:\n  gateway:\n    tokens:\n      - {{token: {ALICE}, user: alice}}\n    allow_scripted_models: true\n"
    );
    let cluster = LeadCluster::up(&config, &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")]);
    let addr = cluster.gateway();
    let call = |method: &str, path: &str, body: Option<&Value>| {
        let body = body.map(Value::to_string);
        http_full(&addr, ALICE, method, path, body.as_deref())
    };
    let run = |playbook: &str| {
        let body = json!({"task": "Work in the thread", "thread": "t1", "playbook_yaml": playbook});
        let (code, _, text) = call("POST", "/api/runs", Some(&body));
        assert_eq!(code, 201, "{text}");
        let run_id = serde_json::from_str::<Value>(&text).unwrap()["run_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let view = wait_for(Duration::from_secs(90), || {
            let (code, _, text) = call("GET", &format!("/api/runs/{run_id}"), None);
            let view: Value = serde_json::from_str(&text).ok()?;
            (code == 200 && view["status"] != "running").then_some(view)
        })
        .expect("the run stopped");
        assert_eq!(view["status"], "success", "{view}");
    };
    let thread_sandboxes = || {
        cluster
            .sandboxes()
            .unwrap_or_default()
            .into_iter()
            .filter(|s| s["user_id"] == "alice" && s["thread_id"] == "t1")
            .collect::<Vec<_>>()
    };
    let workspace = cluster
        .base()
        .join("users/alice/threads/t1/user-data/workspace");

    run(FIRST);
    assert_eq!(
        std::fs::read_to_string(workspace.join("one.txt")).unwrap(),
        "one\n"
    );
    let warm = wait_for(Duration::from_secs(30), || {
        let rows = thread_sandboxes();
        (rows.len() == 1 && rows[0]["state"] == "warm").then_some(rows)
    });
    assert!(warm.is_some(), "{:?}", cluster.sandboxes());

    let (code, _, text) = call("DELETE", "/api/threads/t1", None);
    assert_eq!(code, 204, "{text}");
    assert!(thread_sandboxes().is_empty(), "{:?}", cluster.sandboxes());
    assert!(!workspace.exists());

    // The same id again: a fresh sandbox over fresh directories.
    run(AGAIN);
    let listing = std::fs::read_to_string(workspace.join("listing.txt"))
        .expect("the new run's file is in the thread's directory on disk");
    assert!(!listing.contains("one.txt"), "{listing}");
}
