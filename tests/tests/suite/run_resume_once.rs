//! `kill -9` of the lead while a `bash` step runs: the run is resumed by the next lead,
//! and the step is not run a second time. Its command appends a line to a counter file
//! in the thread's outputs and sleeps; after the resume the file still has one line and
//! the call's result is DeerFlow's interrupted-call text. Once with the lead killed (its
//! hosts die with it), once with sandbox-host and mcp-host killed first.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::lead_support::LeadCluster;
use antler_tests::{alive, signal, wait_for};

const CONFIG: &str = "tools:\n  - {name: bash, group: bash, use: deerflow.sandbox.tools:bash_tool}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n  bash_command_timeout: 120\ntool_search:\n  enabled: false\n";

const PLAYBOOK: &str = r#"
turns:
  - tool_calls:
      - {name: bash, id: count-once, args: {description: count, command: "echo ran >> /mnt/user-data/outputs/count.txt; sleep 15; echo slept"}}
  - tool_calls:
      - {name: present_files, args: {filepaths: ["/mnt/user-data/outputs/count.txt"]}}
  - content: Counted.
"#;

/// DeerFlow's text for a call that never returned (`dangling::INTERRUPTED_CALL`).
const INTERRUPTED: &str = "[Tool call was interrupted and did not return a result.]";

fn bash_step_runs_once(kill_hosts_first: bool) {
    let mut c = LeadCluster::up(CONFIG, &[]);
    let playbook = c.write("playbook.yaml", PLAYBOOK);
    let run_id = c.submit("Count once", &playbook, &[]);
    let counter = c
        .base()
        .join("users/default/threads")
        .join(&run_id)
        .join("user-data/outputs/count.txt");
    let started = wait_for(Duration::from_secs(60), || {
        std::fs::read_to_string(&counter)
            .ok()
            .filter(|t| t.lines().count() == 1)
    });
    assert!(started.is_some(), "the bash step never started");
    let children = c.child_pids();
    if kill_hosts_first {
        for pid in &children {
            signal(*pid, libc::SIGKILL);
        }
    }
    c.kill_lead();
    let gone = wait_for(Duration::from_secs(10), || {
        children.iter().all(|p| !alive(*p)).then_some(())
    });
    assert!(gone.is_some(), "the children outlived the lead");
    assert_eq!(c.run_status(&run_id), "running");

    // The next lead resumes the run by itself.
    c.start();
    let ended = wait_for(Duration::from_secs(90), || {
        let status = c.run_status(&run_id);
        (status != "running").then_some(status)
    });
    assert_eq!(
        ended.as_deref(),
        Some("success"),
        "{}",
        c.run_state(&run_id)
    );
    // Long past the sleep of a second run of the step, had there been one.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        std::fs::read_to_string(&counter).unwrap(),
        "ran\n",
        "the bash step ran again after the resume"
    );
    let state = c.run_state(&run_id);
    let results: Vec<&serde_json::Value> = state["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["tool_call_id"] == "count-once")
        .collect();
    assert_eq!(results.len(), 1, "{state}");
    let text = results[0]["content"].as_str().unwrap_or_default();
    assert!(text.contains(INTERRUPTED), "{text}");
}

#[test]
fn a_bash_step_in_flight_when_the_lead_is_killed_is_not_run_again() {
    bash_step_runs_once(false);
}

#[test]
fn a_bash_step_in_flight_when_the_lead_and_its_hosts_are_killed_is_not_run_again() {
    bash_step_runs_once(true);
}
