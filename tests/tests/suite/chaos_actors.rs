//! Chaos mode's actor stops (`antler up --chaos`, `antler chaos stop KIND NAME`) against a
//! real local cluster: each kind of actor is stopped as if it crashed, and what a user
//! notices is checked: the call in flight gets an error naming the fault, the next call
//! works (its supervisor restarted the actor), the run reaches a terminal state, and the
//! fault shows in `antler status`, the run's events or the host's log. Without chaos mode
//! the stop is refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lead_support;
use crate::mcp_support;

use std::{
    thread,
    time::{Duration, Instant},
};

use crate::lead_support::LeadCluster;
use crate::mcp_support::{peer_script, python, stdio, McpCluster};
use antler_tests::{antler, output_text, wait_for};
use serde_json::{json, Value};

const CHAOS: (&str, &str) = ("ANTLER_CHAOS", "1");

const SANDBOX_CONFIG: &str = r#"
tools:
  - {name: bash, group: bash, use: deerflow.sandbox.tools:bash_tool}
  - {name: write_file, group: file:write, use: deerflow.sandbox.tools:write_file_tool}
sandbox:
  use: deerflow.community.aio_sandbox:AioSandboxProvider
tool_search:
  enabled: false
"#;

/// `antler chaos stop KIND [NAME] --json`, retried (for up to `within`) until an actor is
/// found to stop: the JSON reply.
fn stop_when_found(
    runtime: &std::path::Path,
    kind: &str,
    name: Option<&str>,
    within: Duration,
) -> Value {
    let mut args = vec!["chaos", "stop", kind];
    args.extend(name);
    args.push("--json");
    let mut last = None;
    let found = wait_for(within, || {
        let out = antler(runtime, &args);
        if out.status.success() {
            return serde_json::from_slice::<Value>(&out.stdout).ok();
        }
        last = Some(output_text(&out));
        thread::sleep(Duration::from_millis(100));
        None
    });
    found.unwrap_or_else(|| panic!("chaos stop {kind} {name:?} never found its actor: {last:?}"))
}

/// The pid of a process whose command line contains `needle`.
fn process_with(needle: &str) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        String::from_utf8_lossy(&cmd)
            .replace('\0', " ")
            .contains(needle)
            .then_some(pid)
    })
}

/// The tool message answering call `id` in a run's last checkpoint.
fn tool_message(cluster: &LeadCluster, run_id: &str, id: &str) -> Value {
    let state = cluster.run_state(run_id);
    let answers: Vec<&Value> = state["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool" && m["tool_call_id"] == id)
        .collect();
    assert_eq!(answers.len(), 1, "one result for {id}: {state:#}");
    answers[0].clone()
}

fn wait_ended(cluster: &LeadCluster, run_id: &str, within: Duration) -> String {
    wait_for(within, || {
        let status = cluster.run_status(run_id);
        (!status.is_empty() && status != "running").then_some(status)
    })
    .unwrap_or_else(|| format!("still {}", cluster.run_status(run_id)))
}

fn log_of(cluster: &LeadCluster, name: &str) -> String {
    std::fs::read_to_string(cluster.runtime().join("logs").join(name)).unwrap_or_default()
}

/// A cluster in chaos mode with [`SANDBOX_CONFIG`], running `playbook` (written as
/// `name`) on `task`; the cluster and the run's id.
fn chaos_run_in_sandbox(name: &str, playbook: &str, task: &str) -> (LeadCluster, String) {
    let cluster = LeadCluster::up(SANDBOX_CONFIG, &[CHAOS]);
    let playbook = cluster.write(name, playbook);
    let run_id = cluster.submit(task, &playbook, &[]);
    (cluster, run_id)
}

#[test]
fn without_chaos_mode_a_stop_is_refused_and_nothing_stops() {
    let cluster = LeadCluster::up(SANDBOX_CONFIG, &[]);
    for args in [
        vec!["chaos", "stop", "catalog"],
        vec!["chaos", "stop", "mcp-server", "any"],
        vec!["chaos", "stop", "peer-link", "sandbox-host-0"],
    ] {
        let out = antler(&cluster.runtime(), &args);
        assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("chaos mode is off"),
            "{}",
            output_text(&out)
        );
    }
    // A bad name is refused before anything is asked.
    let out = antler(&cluster.runtime(), &["chaos", "stop", "worker", "x"]);
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unknown actor kind `worker`"),
        "{}",
        output_text(&out)
    );
    let status = cluster.status().unwrap();
    assert!(status.iter().all(|p| p["healthy"] == true), "{status:?}");
    assert!(status[0]["reason"].is_null(), "{status:?}");
}

#[test]
fn chaos_is_refused_in_cluster_mode_off_loopback() {
    let dir = tempfile::Builder::new()
        .prefix("antler-cm")
        .tempdir_in("/tmp")
        .unwrap();
    let init = antler(
        &dir.path().join("run"),
        &[
            "cluster",
            "init",
            dir.path().join("secret").to_str().unwrap(),
        ],
    );
    assert!(init.status.success(), "{}", output_text(&init));
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "antler:\n  cluster_token: chaos-test-token-0123456789abcdef\n  tls: {ca: secret/ca.crt, cert: secret/lead.crt, key: secret/lead.key}\n  cluster:\n    sandbox_hosts: [\"tcp:192.0.2.10:7001\"]\n    mcp_hosts: [\"tcp:127.0.0.1:7002\"]\n",
    )
    .unwrap();
    let out = std::process::Command::new(antler_tests::bin("antler"))
        .arg("--runtime-dir")
        .arg(dir.path().join("run"))
        .args(["up", "--chaos", "--config"])
        .arg(&config)
        .env("ANTLER_GATEWAY_ADDR", "off")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--chaos is refused in cluster mode off loopback (tcp:192.0.2.10:7001 is not a loopback address)"),
        "{}",
        output_text(&out)
    );
}

#[test]
fn a_stopped_mcp_connection_fails_its_call_in_flight_and_reconnects_and_the_catalog_restarts_with_its_hash(
) {
    let scratch = tempfile::tempdir().unwrap();
    let config = scratch.path().join("config.yaml");
    std::fs::write(&config, "tool_search:\n  enabled: true\n").unwrap();
    let c = McpCluster::start_with(
        json!({"slow": stdio(python(), &[&peer_script("slow_tools.py")])}),
        &[CHAOS, ("ANTLER_CONFIG_PATH", config.to_str().unwrap())],
    );
    let before = c.server("slow");
    assert_eq!(before["state"], "ready", "{before}");
    let old_pid = c.server_pids("slow_tools.py");

    // A call in flight when the connection is stopped gets an error naming the fault.
    let dir = c.runtime_dir();
    let call = thread::spawn(move || {
        antler(
            &dir,
            &[
                "mcp",
                "call",
                "slow",
                "sleep",
                "--args",
                r#"{"seconds": 30}"#,
                "--json",
            ],
        )
    });
    let in_flight = wait_for(Duration::from_secs(15), || {
        (c.server("slow")["in_flight"] == 1).then_some(())
    });
    assert!(in_flight.is_some(), "never in flight: {}", c.server("slow"));
    let stopped_at = Instant::now();
    let stop = stop_when_found(
        &c.runtime_dir(),
        "mcp-server",
        Some("slow"),
        Duration::from_secs(5),
    );
    assert_eq!(stop["stopped"], 1, "{stop}");
    let out = call.join().unwrap();
    // The call sleeps 30 s: an answer within 20 s of the stop is the stop's, not the
    // sleep's end (a behaviour bound, far from any machine's speed).
    assert!(stopped_at.elapsed() < Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
    let result: Value = serde_json::from_slice(&out.stdout).expect("a JSON result");
    assert!(
        McpCluster::text(&result).contains(
            "MCP server 'slow' connection lost during the call to 'sleep'; it is reconnecting"
        ),
        "{result}"
    );

    // The server actor reconnects (a new child) and the next call works.
    let back = wait_for(Duration::from_secs(15), || {
        let s = c.server("slow");
        (s["state"] == "ready" && s["reconnects"].as_u64() > before["reconnects"].as_u64())
            .then_some(s)
    });
    assert!(back.is_some(), "{}", c.server("slow"));
    assert_ne!(c.server_pids("slow_tools.py"), old_pid);
    let (code, result) = c.call("slow", "echo", r#"{"text": "after the stop"}"#);
    assert_eq!(code, 0, "{result}");
    assert!(
        McpCluster::text(&result).contains("after the stop"),
        "{result}"
    );
    let log = std::fs::read_to_string(c.runtime_dir().join("logs/mcp-host.log")).unwrap();
    assert!(
        log.contains("MCP server 'slow' connection stopped by chaos (as if it crashed)"),
        "{log}"
    );

    // The catalog actor: restarted with the same sources, the next run's catalog has the
    // same hash, and the stop shows beside the lead in `antler status`.
    let hash_of = |run: &mcp_support::RunOutput| {
        let id = run.view["run_id"].as_str().unwrap().to_owned();
        let (code, body) = c
            .cluster
            .gateway_http("GET", &format!("/api/runs/{id}/catalog"), None);
        assert_eq!(code, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        v["hash"]
            .as_str()
            .unwrap_or_else(|| panic!("no catalog hash: {v}"))
            .to_owned()
    };
    let first = c.run_playbook("turns:\n  - content: first\n");
    assert_eq!(first.view["status"], "success", "{:#}", first.view);
    let stop = stop_when_found(&c.runtime_dir(), "catalog", None, Duration::from_secs(5));
    assert_eq!(stop["stopped"], 1, "{stop}");
    let second = c.run_playbook("turns:\n  - content: second\n");
    assert_eq!(second.view["status"], "success", "{:#}", second.view);
    assert_eq!(hash_of(&first), hash_of(&second));
    let lead = c.cluster.process("lead", 0).unwrap();
    assert!(
        lead["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("chaos stop of the catalog actor")),
        "{lead}"
    );
}

#[test]
fn a_stopped_sandbox_fails_its_command_in_flight_and_the_next_call_gets_a_fresh_one() {
    let (cluster, run_id) = chaos_run_in_sandbox(
        "sandbox.yaml",
        r#"
turns:
  - tool_calls:
      - {id: first, name: bash, args: {description: first, command: "echo one > /mnt/user-data/workspace/a.txt"}}
  - tool_calls:
      - {id: cut, name: bash, args: {description: cut, command: "sleep 7.317; echo late"}}
  - tool_calls:
      - {id: after, name: bash, args: {description: after, command: "cat /mnt/user-data/workspace/a.txt; echo fresh"}}
  - content: done
"#,
        "Use the sandbox",
    );
    let sleeping = wait_for(Duration::from_secs(30), || process_with("sleep 7.317"));
    assert!(sleeping.is_some(), "the second command never started");
    let stop = stop_when_found(
        &cluster.runtime(),
        "sandbox",
        Some(&run_id),
        Duration::from_secs(5),
    );
    assert_eq!(stop["stopped"], 1, "{stop}");
    assert_eq!(
        wait_ended(&cluster, &run_id, Duration::from_secs(60)),
        "success"
    );
    let cut = tool_message(&cluster, &run_id, "cut");
    assert!(
        !cut["content"].as_str().unwrap().contains("late"),
        "the stopped sandbox's command finished: {cut}"
    );
    let after = tool_message(&cluster, &run_id, "after");
    assert_eq!(after["content"], "one\nfresh\n", "{after}");
    let log = log_of(&cluster, "sandbox-host.log");
    assert!(
        log.contains("the sandbox's actor had stopped; started a fresh one over the same files"),
        "{log}"
    );
    assert!(process_with("sleep 7.317").is_none());
}

#[test]
fn a_stopped_peer_link_fails_its_call_in_flight_and_redials() {
    let (cluster, run_id) = chaos_run_in_sandbox(
        "link.yaml",
        r#"
turns:
  - tool_calls:
      - {id: cut, name: bash, args: {description: cut, command: "sleep 6.271; echo late"}}
  - delay_ms: 1500
    tool_calls:
      - {id: after, name: bash, args: {description: after, command: "echo over the new link"}}
  - content: done
"#,
        "Use the sandbox",
    );
    let sleeping = wait_for(Duration::from_secs(30), || process_with("sleep 6.271"));
    assert!(sleeping.is_some(), "the command never started");
    let stop = stop_when_found(
        &cluster.runtime(),
        "peer-link",
        Some("sandbox-host-0"),
        Duration::from_secs(5),
    );
    assert_eq!(stop["stopped"], 1, "{stop}");
    assert_eq!(
        wait_ended(&cluster, &run_id, Duration::from_secs(60)),
        "success"
    );
    let cut = tool_message(&cluster, &run_id, "cut");
    assert!(
        cut["content"]
            .as_str()
            .unwrap()
            .contains("the link actor stopped (chaos: as if it crashed)"),
        "{cut}"
    );
    // The next call, once the link has redialed (ms later), goes through.
    assert_eq!(
        tool_message(&cluster, &run_id, "after")["content"],
        "over the new link\n"
    );
    // The link is back, and the stop shows beside the lead.
    let status = cluster.status().unwrap();
    assert!(status.iter().all(|p| p["healthy"] == true), "{status:?}");
    assert!(
        status[0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("the link to sandbox-host-0")),
        "{status:?}"
    );
    let out = antler(&cluster.runtime(), &["ping", "--role", "sandbox-host"]);
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.starts_with("sandbox-host-0") && l.contains(" ok ")),
        "{}",
        output_text(&out)
    );
}

#[test]
fn a_stopped_run_actor_is_resumed_from_its_checkpoint_and_delivers_once() {
    let (cluster, run_id) = chaos_run_in_sandbox(
        "run.yaml",
        r#"
turns:
  - tool_calls:
      - {id: a, name: write_file, args: {description: first, path: /mnt/user-data/outputs/a.md, content: a}}
  - delay_ms: 5000
    tool_calls:
      - {id: b, name: write_file, args: {description: second, path: /mnt/user-data/outputs/b.md, content: b}}
  - tool_calls:
      - {id: p, name: present_files, args: {filepaths: ["/mnt/user-data/outputs/a.md", "/mnt/user-data/outputs/b.md"]}}
  - content: Both files are written and presented.
"#,
        "Write two files",
    );
    let outputs = cluster
        .base()
        .join("users/default/threads")
        .join(&run_id)
        .join("user-data/outputs");
    let first = wait_for(Duration::from_secs(30), || {
        outputs.join("a.md").exists().then_some(())
    });
    assert!(first.is_some(), "the first step never ran");
    thread::sleep(Duration::from_millis(500));
    let stop = stop_when_found(
        &cluster.runtime(),
        "run",
        Some(&run_id),
        Duration::from_secs(5),
    );
    assert_eq!(stop["stopped"], 1, "{stop}");
    assert_eq!(
        wait_ended(&cluster, &run_id, Duration::from_secs(60)),
        "success"
    );
    for id in ["a", "b", "p"] {
        tool_message(&cluster, &run_id, id);
    }
    assert_eq!(std::fs::read_to_string(outputs.join("b.md")).unwrap(), "b");
    let receipts = lead_support::sql(
        &cluster.runtime().join("runs.sqlite"),
        "select count(*) from receipts where run_id = ?",
        &run_id,
    );
    assert_eq!(receipts, "[[1]]");
    // The resumed run's events say why.
    let out = antler(
        &cluster.runtime(),
        &["run", "--resume", &run_id, "--trace", "--json"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the run's actor stopped unexpectedly (it crashed); the run was resumed from its last checkpoint"),
        "{}",
        output_text(&out)
    );
}

#[test]
fn a_stopped_task_graph_ends_its_task_failed_and_the_run_goes_on() {
    let config = "tool_search:\n  enabled: false\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n";
    let cluster = LeadCluster::up_with_workers(config, &[], &[CHAOS], 1);
    let playbook = cluster.write(
        "task.yaml",
        r#"
turns:
  - tool_calls:
      - {id: doomed, name: task, args: {description: doomed, prompt: p, subagent_type: general-purpose}}
  - content: The task failed; I did it myself.
subagents:
  doomed:
    turns:
      - {delay_ms: 120000, content: too late}
"#,
    );
    let run_id = cluster.submit("Delegate", &playbook, &["--subagents"]);
    let stop = stop_when_found(
        &cluster.runtime(),
        "task-graph",
        Some("doomed"),
        Duration::from_secs(30),
    );
    assert_eq!(stop["stopped"], 1, "{stop}");
    assert_eq!(
        wait_ended(&cluster, &run_id, Duration::from_secs(30)),
        "success"
    );
    // The subagent's model answers after 120 s: a run that ended within wait_ended's 30 s
    // did not wait it out.
    let message = tool_message(&cluster, &run_id, "doomed");
    assert!(
        message["content"].as_str().unwrap().starts_with(
            "Task failed. Error: the task's graph stopped unexpectedly (it crashed) before it had a result"
        ),
        "{message}"
    );
    // The worker process did not die: only its actor was stopped.
    let worker = cluster
        .status()
        .unwrap()
        .into_iter()
        .find(|p| p["role"] == "subagent")
        .unwrap();
    assert_eq!(worker["restarts"], 0, "{worker}");
    assert_eq!(worker["healthy"], true, "{worker}");
}
