//! `kill -9` of mcp-host in the middle of a run's MCP call: the call becomes an error
//! tool message the model reads, and the run goes on to its final answer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::mcp_support::{peer_script, python, stdio, McpCluster};
use antler_tests::{bin, signal, wait_for};
use serde_json::{json, Value};

const PLAYBOOK: &str = r#"
turns:
  - tool_calls:
      - {name: slow_sleep, args: {seconds: 30}}
  - content: Carried on without the sleep.
"#;

#[test]
fn kill_9_of_mcp_host_mid_run_is_an_error_tool_message_and_the_run_completes() {
    let files = tempfile::tempdir().unwrap();
    let config = files.path().join("config.yaml");
    std::fs::write(&config, "tool_search:\n  enabled: false\n").unwrap();
    let playbook = files.path().join("playbook.yaml");
    std::fs::write(&playbook, PLAYBOOK).unwrap();
    let base = files.path().join("base");
    let base_s = base.display().to_string();
    let c = McpCluster::start_with(
        json!({"slow": stdio(python(), &[&peer_script("slow_tools.py")])}),
        &[("ANTLER_SANDBOX_BASE_DIR", base_s.as_str())],
    );
    let run = spawn_run(
        &c,
        &["Sleep, then answer"],
        &playbook,
        &config,
        Some(&c.config),
    );
    // The run's call goes to a stdio session pooled for its user and thread: a second
    // slow_tools.py child. Once it exists the call is sent; give it a moment to land.
    let pooled = wait_for(Duration::from_secs(30), || {
        (c.server_pids("slow_tools.py").len() >= 2).then_some(())
    });
    if pooled.is_none() {
        let out = run.wait_with_output().unwrap();
        panic!(
            "the run's pooled session never started: {:?}\n{}\n{}",
            c.server_pids("slow_tools.py"),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::thread::sleep(Duration::from_secs(2));
    let host = c.cluster.process("mcp-host", 0).unwrap();
    signal(host["pid"].as_u64().unwrap() as u32, libc::SIGKILL);
    let (outcome, stderr) = run_outcome(run);
    assert_eq!(outcome["status"], "success", "{outcome}\n{stderr}");
    assert_eq!(outcome["final_answer"], "Carried on without the sleep.");
    let run_id = outcome["run_id"].as_str().unwrap();
    let store = antler_lead_store(&c.runtime_dir().join("runs.sqlite"), run_id);
    let result = store
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == "call-1-1")
        .unwrap_or_else(|| panic!("no result for the killed call: {store:?}"));
    let content = result["content"].as_str().unwrap();
    assert_eq!(result["status"], "error");
    assert!(
        content.starts_with("Error: Tool 'slow_sleep' failed with HostUnavailable: ")
            && content
                .ends_with(". Continue with available context, or choose an alternative tool."),
        "{content}"
    );
}

/// The messages of the run's last checkpoint, read with the sqlite3 command.
fn antler_lead_store(path: &std::path::Path, run_id: &str) -> Vec<Value> {
    let out = Command::new("python3")
        .arg("-c")
        .arg(
            "import sqlite3,sys;c=sqlite3.connect(sys.argv[1]);\
             print(c.execute('select state from checkpoints where run_id=? order by step desc limit 1',(sys.argv[2],)).fetchone()[0])",
        )
        .arg(path)
        .arg(run_id)
        .output()
        .unwrap();
    let state: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    state["messages"].as_array().unwrap().clone()
}

/// `antler run ARGS --json --playbook PLAYBOOK --config CONFIG` against `c`'s runtime
/// directory (with `extensions` as the MCP servers' config), its output piped.
fn spawn_run(
    c: &McpCluster,
    args: &[&str],
    playbook: &Path,
    config: &Path,
    extensions: Option<&Path>,
) -> Child {
    let mut run = Command::new(bin("antler"));
    run.arg("--runtime-dir")
        .arg(c.runtime_dir())
        .arg("run")
        .args(args)
        .arg("--json")
        .arg("--playbook")
        .arg(playbook)
        .arg("--config")
        .arg(config)
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(extensions) = extensions {
        run.env("ANTLER_EXTENSIONS_CONFIG_PATH", extensions);
    }
    run.spawn().unwrap()
}

/// The view a spawned `antler run --json` printed when it ended, and its stderr.
fn run_outcome(run: Child) -> (Value, String) {
    let out = run.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let outcome = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\n{stderr}"));
    (outcome, stderr)
}

/// A cluster with no MCP server whose runs have `write_file` and `bash` in sandboxes
/// (`AioSandboxProvider`), with its config.yaml, a playbook and the sandboxes' data root in a
/// temporary directory.
struct SandboxCluster {
    files: tempfile::TempDir,
    config: PathBuf,
    playbook: PathBuf,
    base: PathBuf,
    c: McpCluster,
}

impl SandboxCluster {
    fn start(playbook_yaml: &str) -> SandboxCluster {
        let files = tempfile::tempdir().unwrap();
        let config = files.path().join("config.yaml");
        std::fs::write(
            &config,
            "tools:\n  - {name: write_file, group: file:write, use: deerflow.sandbox.tools:write_file_tool}\n  - {name: bash, group: bash, use: deerflow.sandbox.tools:bash_tool}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n",
        )
        .unwrap();
        let playbook = files.path().join("playbook.yaml");
        std::fs::write(&playbook, playbook_yaml).unwrap();
        let base = files.path().join("base");
        let base_s = base.display().to_string();
        let config_s = config.display().to_string();
        let c = McpCluster::start_with(
            json!({}),
            &[
                ("ANTLER_SANDBOX_BASE_DIR", base_s.as_str()),
                ("ANTLER_CONFIG_PATH", config_s.as_str()),
            ],
        );
        SandboxCluster {
            files,
            config,
            playbook,
            base,
            c,
        }
    }
}

const SANDBOX_PLAYBOOK: &str = r#"
turns:
  - tool_calls:
      - {name: write_file, args: {description: first, path: /mnt/user-data/outputs/a.md, content: a}}
  - tool_calls:
      - {name: bash, args: {description: wait, command: "sleep 30"}}
  - delay_ms: 8000
    tool_calls:
      - {name: write_file, args: {description: second, path: /mnt/user-data/outputs/b.md, content: b}}
  - tool_calls:
      - {name: present_files, args: {filepaths: ["/mnt/user-data/outputs"]}}
  - content: Both files written.
"#;

#[test]
fn kill_9_of_sandbox_host_mid_run_is_an_error_tool_message_and_the_sandbox_comes_back() {
    let SandboxCluster {
        files: _files,
        config,
        playbook,
        base,
        c,
    } = SandboxCluster::start(SANDBOX_PLAYBOOK);
    let run = spawn_run(
        &c,
        &["Write two files", "--user", "alice", "--thread", "t1"],
        &playbook,
        &config,
        None,
    );
    let outputs = base.join("users/alice/threads/t1/user-data/outputs");
    let first = wait_for(Duration::from_secs(30), || {
        outputs.join("a.md").exists().then_some(())
    });
    assert!(first.is_some(), "the first write never landed");
    // The bash call is in flight once its `sleep 30` runs in the sandbox (a fixed pause
    // is not enough on a loaded machine: the call may not have been sent yet).
    // Looked for below this cluster's sandbox-host only: other tests of the binary run
    // `sleep 30` in their own sandboxes.
    let sandbox_host = c.cluster.process("sandbox-host", 0).unwrap()["pid"]
        .as_u64()
        .unwrap() as u32;
    let sleeping = wait_for(Duration::from_secs(30), || {
        crate::mcp_support::descendants(sandbox_host)
            .into_iter()
            .find_map(|pid| {
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
                (cmdline == b"sleep\x0030\x00").then_some(())
            })
    });
    assert!(sleeping.is_some(), "the bash call never started");
    std::thread::sleep(Duration::from_millis(500));
    let host = c.cluster.process("sandbox-host", 0).unwrap();
    signal(host["pid"].as_u64().unwrap() as u32, libc::SIGKILL);
    let (outcome, stderr) = run_outcome(run);
    let run_id = outcome["run_id"].as_str().unwrap();
    let messages = antler_lead_store(&c.runtime_dir().join("runs.sqlite"), run_id);
    assert_eq!(
        outcome["status"], "success",
        "{outcome}\n{messages:?}\n{stderr}"
    );
    let result = |id: &str| {
        messages
            .iter()
            .find(|m| m["role"] == "tool" && m["tool_call_id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no result for {id}: {messages:?}"))
    };
    let killed = result("call-2-1");
    assert_eq!(killed["status"], "error");
    assert!(
        killed["content"]
            .as_str()
            .unwrap()
            .starts_with("Error: Tool 'bash' failed with HostUnavailable: "),
        "{killed}"
    );
    assert_eq!(result("call-3-1")["status"], "success", "{messages:?}");
    assert_eq!(std::fs::read_to_string(outputs.join("b.md")).unwrap(), "b");
    assert_eq!(outcome["delivery"]["stage"], "presented");
}

const AFTER_RESTART_PLAYBOOK: &str = r#"
turns:
  - tool_calls:
      - {name: write_file, args: {description: first, path: /mnt/user-data/outputs/a.md, content: a}}
  - delay_ms: 6000
    tool_calls:
      - {name: bash, args: {description: second, command: "sleep 1; echo ok > /mnt/user-data/outputs/b.md"}}
  - tool_calls:
      - {name: present_files, args: {filepaths: ["/mnt/user-data/outputs"]}}
  - content: Both files written.
"#;

#[test]
fn a_call_after_sandbox_host_restarted_runs_in_the_sandbox_that_comes_back() {
    let SandboxCluster {
        files: _files,
        config,
        playbook,
        base,
        c,
    } = SandboxCluster::start(AFTER_RESTART_PLAYBOOK);
    let run = spawn_run(
        &c,
        &["Write two files", "--user", "bob", "--thread", "t2"],
        &playbook,
        &config,
        None,
    );
    let outputs = base.join("users/bob/threads/t2/user-data/outputs");
    let first = wait_for(Duration::from_secs(30), || {
        outputs.join("a.md").exists().then_some(())
    });
    assert!(first.is_some(), "the first write never landed");
    // Between the calls, while the model "thinks": the next call meets a new sandbox-host.
    let host = c.cluster.process("sandbox-host", 0).unwrap();
    signal(host["pid"].as_u64().unwrap() as u32, libc::SIGKILL);
    let (outcome, _) = run_outcome(run);
    let run_id = outcome["run_id"].as_str().unwrap();
    let messages = antler_lead_store(&c.runtime_dir().join("runs.sqlite"), run_id);
    assert_eq!(outcome["status"], "success", "{outcome}\n{messages:?}");
    let second = messages
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == "call-2-1")
        .unwrap_or_else(|| panic!("no result for call-2-1: {messages:?}"));
    assert_eq!(second["status"], "success", "{second}");
    assert_eq!(
        std::fs::read_to_string(outputs.join("b.md")).unwrap(),
        "ok\n"
    );
}
