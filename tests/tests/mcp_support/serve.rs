//! The set-up the `mcp_serve*` suites share: a cluster (lead with its gateway,
//! sandbox-host, mcp-host) whose gateway is on a free loopback port and takes the member
//! Alice's token ([`ALICE`]), optionally with server-everything on mcp-host; the official
//! MCP Python SDK driver (`tests/peers/mcp_serve_client.py`); and the runs of a thread and
//! the events of a run, as the gateway shows them to Alice.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use antler_tests::wait_for;
use serde_json::{json, Value};

use super::npm_bin;
use crate::lead_support::{http_full, LeadCluster};

/// Alice's token: a member, user `alice`.
pub const ALICE: &str = "alice-token-000000000001";

/// The config's `tools:` and `sandbox:` for sessions that work in their thread's sandbox:
/// bash and read_file.
pub const SANDBOX_TOOLS: &str = "tools:\n  - {name: bash, group: bash, use: deerflow.sandbox.tools:bash_tool}\n  - {name: read_file, group: file:read, use: deerflow.sandbox.tools:read_file_tool}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n";

/// server-everything's tool count once it knows its client can answer elicitations.
const EVERYTHING_ELICITING_TOOLS: u64 = 15;

/// config.yaml: `sections` (models, tools, sandbox, ...; each line ended), then the
/// gateway taking [`ALICE`]'s token. More `antler.gateway` keys may follow, indented by
/// four spaces.
pub fn config(sections: &str) -> String {
    format!(
        "{sections}antler:\n  gateway:\n    tokens:\n      - {{token: {ALICE}, user: alice, role: member}}\n"
    )
}

/// The extensions config of mcp-host running server-everything over stdio, with
/// `elicitation` as its elicitation policy when given.
pub fn everything(elicitation: Option<&str>) -> String {
    let mut server = json!({
        "type": "stdio",
        "command": npm_bin("mcp-server-everything").display().to_string(),
        "args": ["stdio"],
    });
    if let Some(policy) = elicitation {
        server["elicitation"] = json!(policy);
    }
    json!({"mcpServers": {"everything": server}}).to_string()
}

/// A cluster with `config` and, when given, `extensions` as its extensions config, with
/// `workers` subagent workers; its gateway on a free loopback port.
pub fn cluster(config: &str, extensions: Option<&str>, workers: u32) -> LeadCluster {
    let files: Vec<(&str, &str)> = extensions
        .map(|e| ("extensions_config.json", e))
        .into_iter()
        .collect();
    LeadCluster::up_with_workers(
        config,
        &files,
        &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")],
        workers,
    )
}

/// [`cluster`] whose mcp-host runs server-everything with elicitation policy `ask`, once
/// server-everything lists its eliciting tool (it adds it once it knows its client can
/// answer).
pub fn asking_cluster(config: &str, workers: u32) -> LeadCluster {
    let cluster = cluster(config, Some(&everything(Some("ask"))), workers);
    let listed = wait_for(Duration::from_secs(30), || {
        let out = antler_tests::antler(&cluster.runtime(), &["mcp", "status", "--json"]);
        let list: Value = serde_json::from_slice(&out.stdout).ok()?;
        list.as_array()?
            .iter()
            .any(|s| s["name"] == "everything" && s["tools"] == EVERYTHING_ELICITING_TOOLS)
            .then_some(())
    });
    assert!(listed.is_some(), "server-everything did not list its tools");
    cluster
}

/// The cluster's `/mcp` URL.
pub fn mcp_url(cluster: &LeadCluster) -> String {
    format!("http://{}/mcp", cluster.gateway())
}

/// The MCP SDK driver (`tests/peers/mcp_serve_client.py`) run with what `configure` gives
/// it (its mode and arguments, its environment), to its end: its one JSON report.
pub fn mcp_driver(configure: impl FnOnce(&mut Command) -> &mut Command) -> Value {
    python_driver("mcp_serve_client.py", configure)
}

/// The Python peer `tests/peers/{script}` run with what `configure` gives it, to its end:
/// its one JSON report on stdout (its failure shows its stderr).
pub fn python_driver(script: &str, configure: impl FnOnce(&mut Command) -> &mut Command) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("peers")
        .join(script);
    let mut command = Command::new("python3");
    command.arg(script);
    let out = configure(&mut command)
        .output()
        .expect("run the MCP SDK driver");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the driver failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).expect("one JSON report")
}

/// The runs of Alice's `thread`, newest first.
pub fn thread_runs(addr: &str, thread: &str) -> Vec<Value> {
    let path = format!("/api/threads/{thread}/runs");
    let (code, _, body) = http_full(addr, ALICE, "GET", &path, None);
    assert_eq!(code, 200, "{body}");
    serde_json::from_str::<Value>(&body)
        .unwrap()
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The runs of Alice's `thread` once `ended` holds for them (they ended, as the caller
/// counts them), newest first.
pub fn ended_runs(addr: &str, thread: &str, ended: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    wait_for(Duration::from_secs(30), || {
        let runs = thread_runs(addr, thread);
        ended(&runs).then_some(runs)
    })
    .unwrap_or_else(|| panic!("the runs did not end: {:?}", thread_runs(addr, thread)))
}

/// Whether every run of `runs` ended well.
pub fn all_succeeded(runs: &[Value]) -> bool {
    runs.iter().all(|r| r["status"] == "success")
}

/// The events of Alice's run `run_id`, oldest first.
pub fn run_events(addr: &str, run_id: &str) -> Vec<Value> {
    let path = format!("/api/runs/{run_id}/events");
    let (code, _, events) = http_full(addr, ALICE, "GET", &path, None);
    assert_eq!(code, 200, "{events}");
    events
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l.trim_start_matches("data:").trim()).ok())
        .collect()
}

/// The (tool, error) of each call that finished among `events`, in order.
pub fn finished_calls(events: &[Value]) -> Vec<(String, Value)> {
    events
        .iter()
        .filter(|e| e["event"] == "tool_finished")
        .map(|e| {
            (
                e["name"].as_str().unwrap_or_default().to_owned(),
                e["error"].clone(),
            )
        })
        .collect()
}

/// Whether a process whose command line is `argv` (NUL-joined) runs on this machine.
pub fn process_running(argv: &[&str]) -> bool {
    let wanted = argv.join("\0");
    std::fs::read_dir("/proc")
        .map(|dir| {
            dir.flatten().any(|entry| {
                std::fs::read(entry.path().join("cmdline")).is_ok_and(|cmdline| {
                    String::from_utf8_lossy(&cmdline).trim_end_matches('\0') == wanted
                })
            })
        })
        .unwrap_or(false)
}

/// The lead's `antler_mcp_direct_calls_total`: the calls its gateway answered without
/// rmcp's session worker (`mcp_server::direct`).
pub fn direct_calls(cluster: &LeadCluster) -> u64 {
    let (status, _, metrics) = crate::lead_support::http_full(
        &cluster.gateway(),
        &cluster.gateway_token(),
        "GET",
        "/metrics",
        None,
    );
    assert_eq!(status, 200, "{metrics}");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("antler_mcp_direct_calls_total "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no antler_mcp_direct_calls_total in {metrics}"))
}
