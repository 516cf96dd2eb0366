//! `invoke_acp_agent` through the whole cluster (`antler run --playbook`): sandbox-host
//! runs real ACP agents, the npm example agent of `@zed-industries/agent-client-protocol`
//! (protocol v1, one permission request) and the Rust crate's own `simple_agent_v2`
//! example (draft v2, built here from the crate's published source with a pinned lock
//! file), in one run whose model calls six agents at once: permissions approved and not,
//! a timeout, a missing command, an unknown agent, and v2. A wrapper records what the
//! client wrote to the agent and the agent's working directory and environment.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::mcp_support;
use crate::model_support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The example agent's closing text when its permission request is approved.
const APPROVED: &str =
    " Perfect! I've successfully updated the configuration. The changes have been applied.";
const FIRST: &str =
    "I'll help you with that. Let me start by reading some files to understand the current situation.";

/// The crate's `simple_agent_v2` example, built from the crate's source in cargo's
/// registry (the version the workspace pins) with `tests/acp/simple_agent_v2.Cargo.lock`.
fn simple_agent_v2() -> PathBuf {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cargo"));
    let source = std::fs::read_dir(home.join("registry/src"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|d| d.path().join("agent-client-protocol-5.2.0"))
        .find(|p| p.join("Cargo.toml").exists())
        .expect("agent-client-protocol 5.2.0 in cargo's registry (a workspace dependency)");
    let workspace = mcp_support::tests_dir().join("..");
    let copy = workspace.join("target/acp-peer/src");
    if !copy.join("Cargo.toml").exists() {
        std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
        let status = Command::new("cp")
            .arg("-r")
            .arg(&source)
            .arg(&copy)
            .status()
            .unwrap();
        assert!(status.success());
        // Its own workspace, not ours (the copy sits under our target directory).
        let manifest = copy.join("Cargo.toml");
        let mut text = std::fs::read_to_string(&manifest).unwrap();
        text.push_str("\n[workspace]\n");
        std::fs::write(&manifest, text).unwrap();
    }
    std::fs::copy(
        mcp_support::tests_dir().join("acp/simple_agent_v2.Cargo.lock"),
        copy.join("Cargo.lock"),
    )
    .unwrap();
    let target = workspace.join("target/acp-peer/target");
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "build",
            "--quiet",
            "--locked",
            "--example",
            "simple_agent_v2",
            "--features",
            "stdio,unstable_protocol_v2",
            "--target-dir",
        ])
        .arg(&target)
        .current_dir(&copy)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "building simple_agent_v2: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    target.join("debug/examples/simple_agent_v2")
}

/// The content of the tool message answering `call`.
fn answer<'a>(tools: &'a [Value], call: &str) -> (&'a str, &'a str) {
    let m = tools
        .iter()
        .find(|m| m["tool_call_id"] == call)
        .unwrap_or_else(|| panic!("no answer to {call}: {tools:?}"));
    (
        m["content"].as_str().unwrap(),
        m["status"].as_str().unwrap_or("success"),
    )
}

/// Processes working in a directory under `dir` (the agents run in the test's
/// acp-workspace).
fn processes_under(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        let Ok(cwd) = std::fs::read_link(entry.path().join("cwd")) else {
            continue;
        };
        if cwd.starts_with(dir) {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            found.push(format!(
                "{}: {cmdline}",
                entry.file_name().to_string_lossy()
            ));
        }
    }
    found
}

#[test]
fn a_run_invokes_acp_agents_of_both_protocol_versions() {
    let v2_agent = simple_agent_v2();
    let dir = tempfile::Builder::new()
        .prefix("antler-acp")
        .tempdir_in("/tmp")
        .unwrap();
    let d = dir.path();
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    let tsx = mcp_support::npm_bin("tsx");
    let agent_ts = mcp_support::tests_dir()
        .join("node_modules/@zed-industries/agent-client-protocol/typescript/examples/agent.ts");
    assert!(
        agent_ts.exists(),
        "{} is missing: npm ci in tests/",
        agent_ts.display()
    );
    // The recording wrapper: the agent's cwd and environment, and every line the client
    // sent it, land in `record/`; then the example agent gets the same stdin.
    let record = d.join("record");
    std::fs::create_dir(&record).unwrap();
    let wrapper = d.join("recording-agent.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\npwd > '{r}/cwd'\nenv > '{r}/env'\ntee '{r}/stdin' | exec '{tsx}' '{agent}'\n",
            r = record.display(),
            tsx = tsx.display(),
            agent = agent_ts.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let example = |name: &str, extra: &str| {
        format!(
            "  {name}:\n    command: {}\n    args: [\"{}\"]\n    description: The ACP example agent\n{extra}",
            tsx.display(),
            agent_ts.display()
        )
    };
    let config = format!(
        "acp_agents:\n  recording:\n    command: {wrapper}\n    description: The example agent behind a recorder\n    model: example-model\n    auto_approve_permissions: true\n    env:\n      AGENT_TOKEN: agent-secret\n{approving}{asking}{slow}  missing:\n    command: antler-no-such-acp-agent\n    description: Not installed\n  echo:\n    command: {v2}\n    description: The Rust crate's v2 echo agent\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n",
        wrapper = wrapper.display(),
        approving = example("approving", "    auto_approve_permissions: true\n"),
        asking = example("asking", ""),
        slow = example("slow", "    timeout_seconds: 1\n"),
        v2 = v2_agent.display(),
    );
    std::fs::write(d.join("config.yaml"), config).unwrap();
    // One enabled MCP server, to be handed to the recording agent's session; the v2 echo
    // agent refuses sessions with MCP servers, so it runs in a second run without them.
    std::fs::write(
        d.join("extensions_config.json"),
        r#"{"mcpServers": {"docs": {"type": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"X-Team": "antler"}}, "off": {"enabled": false, "command": "true"}}}"#,
    )
    .unwrap();
    let playbook = r#"
turns:
  - tool_calls:
      - {id: rec, name: invoke_acp_agent, args: {agent: recording, prompt: "Fix the config"}}
      - {id: yes, name: invoke_acp_agent, args: {agent: approving, prompt: "Fix the config"}}
      - {id: no, name: invoke_acp_agent, args: {agent: asking, prompt: "Fix the config"}}
      - {id: slow, name: invoke_acp_agent, args: {agent: slow, prompt: "Fix the config"}}
      - {id: missing, name: invoke_acp_agent, args: {agent: missing, prompt: "hi"}}
      - {id: unknown, name: invoke_acp_agent, args: {agent: nobody, prompt: "hi"}}
  - content: Done.
"#;
    std::fs::write(d.join("playbook.yaml"), playbook).unwrap();
    let playbook_path = d.join("playbook.yaml").display().to_string();
    let (view, stderr) = model_support::antler_run(
        d,
        &[
            "Use the agents",
            "--playbook",
            &playbook_path,
            "--user",
            "alice",
            "--trace",
        ],
    );
    assert_eq!(view["status"], "success", "{view}\n{stderr}");
    let run_id = view["run_id"].as_str().unwrap();
    let thread = view["thread"].as_str().unwrap();
    let tools = model_support::tool_messages(&d.join("run/runs.sqlite"), run_id);

    // Approved: the agent's whole text, its permission request answered allow_once.
    let (text, status) = answer(&tools, "yes");
    assert_eq!(status, "success");
    assert!(
        text.starts_with(FIRST) && text.ends_with(APPROVED),
        "{text}"
    );
    // Not approved: the request is cancelled and the agent skips the change.
    let (text, status) = answer(&tools, "no");
    assert_eq!(status, "success");
    assert!(
        text.starts_with(FIRST) && !text.contains("Perfect!"),
        "{text}"
    );
    // The prompt's deadline, with DeerFlow's text; the agent is gone.
    let (text, status) = answer(&tools, "slow");
    assert_eq!(status, "error");
    assert_eq!(
        text,
        "Error: ACP agent 'slow' timed out after 1 seconds without responding. The agent \
         subprocess has been terminated. If this agent handles long-running tasks, increase \
         acp_agents.slow.timeout_seconds in config.yaml."
    );
    let (text, _) = answer(&tools, "missing");
    assert_eq!(
        text,
        "Error invoking ACP agent 'missing': Command 'antler-no-such-acp-agent' was not found \
         on PATH. Install the agent binary or update `acp_agents.missing.command` in config.yaml."
    );
    let (text, _) = answer(&tools, "unknown");
    assert_eq!(
        text,
        "Error: Unknown agent 'nobody'. Available: recording, approving, asking, slow, missing, echo"
    );

    // What the client sent: v2 first, then (same process) v1 as the agent answered; the
    // session in the thread's acp-workspace with the enabled MCP server in ACP's shape
    // and the configured model; the prompt as one text block.
    let (text, _) = answer(&tools, "rec");
    assert!(text.ends_with(APPROVED), "{text}");
    let sent: Vec<Value> = std::fs::read_to_string(record.join("stdin"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let method = |m: &str| {
        sent.iter()
            .filter(|s| s["method"] == m)
            .cloned()
            .collect::<Vec<_>>()
    };
    let inits = method("initialize");
    assert_eq!(inits.len(), 1, "one initialize on one process: {sent:?}");
    assert_eq!(inits[0]["params"]["protocolVersion"], 2);
    let workspace = d
        .join("base/users/alice/threads")
        .join(thread)
        .join("acp-workspace");
    let new = &method("session/new")[0]["params"];
    assert_eq!(new["cwd"], workspace.display().to_string(), "{new}");
    assert_eq!(new["_meta"]["model"], "example-model");
    assert_eq!(
        new["mcpServers"],
        serde_json::json!([{"name": "docs", "type": "http", "url": "http://127.0.0.1:9/mcp", "headers": [{"name": "X-Team", "value": "antler"}]}])
    );
    let prompt = &method("session/prompt")[0]["params"]["prompt"];
    assert_eq!(
        prompt,
        &serde_json::json!([{"type": "text", "text": "Fix the config"}])
    );
    let answered: Vec<&Value> = sent.iter().filter(|s| s.get("result").is_some()).collect();
    assert_eq!(
        answered[0]["result"]["outcome"],
        serde_json::json!({"outcome": "selected", "optionId": "allow"})
    );
    // The agent ran in that workspace with the trimmed environment and its own env.
    assert_eq!(
        std::fs::read_to_string(record.join("cwd")).unwrap().trim(),
        workspace.display().to_string()
    );
    let env = std::fs::read_to_string(record.join("env")).unwrap();
    assert!(env.contains("AGENT_TOKEN=agent-secret"), "{env}");
    for leaked in ["ANTLER_", "RUST_LOG", "CARGO"] {
        assert!(
            !env.lines().any(|l| l.starts_with(leaked)),
            "{leaked} reached the agent: {env}"
        );
    }
    // The agent's tool calls were run events of the call.
    let activity: Vec<Value> = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|l| l["event"].clone())
        .filter(|e| e["event"] == "acp_activity" && e["tool_call_id"] == "yes")
        .collect();
    assert!(
        activity
            .iter()
            .any(|e| e["agent"] == "approving" && e["update"]["title"] == "Reading project files"),
        "{stderr}"
    );
    assert_eq!(processes_under(&d.join("base")), Vec::<String>::new());

    // The Rust crate's v2 agent, in a run without MCP servers (it refuses them).
    std::fs::write(d.join("extensions_config.json"), r#"{"mcpServers": {}}"#).unwrap();
    std::fs::write(
        d.join("playbook.yaml"),
        "turns:\n  - tool_calls:\n      - {id: v2, name: invoke_acp_agent, args: {agent: echo, prompt: \"Hello from Antler\"}}\n  - content: Done.\n",
    )
    .unwrap();
    let (view, stderr) = model_support::antler_run(d, &["Echo", "--playbook", &playbook_path]);
    assert_eq!(view["status"], "success", "{view}\n{stderr}");
    let tools =
        model_support::tool_messages(&d.join("run/runs.sqlite"), view["run_id"].as_str().unwrap());
    assert_eq!(answer(&tools, "v2"), ("Echo: Hello from Antler", "success"));
    assert_eq!(processes_under(&d.join("base")), Vec::<String>::new());
}

/// `antler up` for one test, stopped with `antler down` when dropped.
struct Up {
    dir: PathBuf,
    lead: std::process::Child,
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = antler_tests::antler(&self.dir.join("run"), &["down"]);
        let _ = self.lead.kill();
        let _ = self.lead.wait();
    }
}

#[test]
fn a_cancelled_run_cancels_the_agents_prompt_and_stops_it() {
    let dir = tempfile::Builder::new()
        .prefix("antler-acpc")
        .tempdir_in("/tmp")
        .unwrap();
    let d = dir.path().to_path_buf();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    let tsx = mcp_support::npm_bin("tsx");
    let agent_ts = mcp_support::tests_dir()
        .join("node_modules/@zed-industries/agent-client-protocol/typescript/examples/agent.ts");
    let wrapper = d.join("recording-agent.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\ntee '{}' | exec '{}' '{}'\n",
            d.join("stdin").display(),
            tsx.display(),
            agent_ts.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        d.join("config.yaml"),
        format!(
            "acp_agents:\n  recording:\n    command: {}\n    description: The example agent behind a recorder\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n",
            wrapper.display()
        ),
    )
    .unwrap();
    std::fs::write(d.join("extensions_config.json"), r#"{"mcpServers": {}}"#).unwrap();
    let lead = Command::new(antler_tests::bin("antler"))
        .arg("--runtime-dir")
        .arg(d.join("run"))
        .args(["up", "--workers", "1", "--config"])
        .arg(d.join("config.yaml"))
        .env("ANTLER_SANDBOX_BASE_DIR", d.join("base"))
        .env(
            "ANTLER_EXTENSIONS_CONFIG_PATH",
            d.join("extensions_config.json"),
        )
        .env("ANTLER_GATEWAY_ADDR", "off")
        .env("RUST_LOG", "warn")
        .current_dir(&d)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let up = Up {
        dir: d.clone(),
        lead,
    };
    let runtime = up.dir.join("run");
    let ready = antler_tests::wait_for(std::time::Duration::from_secs(60), || {
        let out = antler_tests::antler(&runtime, &["status", "--json"]);
        let list: Value = serde_json::from_slice(&out.stdout).ok()?;
        let list = list.as_array()?;
        (list.len() == 4 && list.iter().all(|p| p["healthy"] == true)).then_some(())
    });
    assert!(ready.is_some(), "the cluster did not come up");
    std::fs::write(
        d.join("playbook.yaml"),
        "turns:\n  - tool_calls:\n      - {name: invoke_acp_agent, args: {agent: recording, prompt: \"Fix the config\"}}\n  - content: Done.\n",
    )
    .unwrap();
    let out = antler_tests::antler(
        &runtime,
        &[
            "run",
            "Use the agent",
            "--detach",
            "--json",
            "--playbook",
            &d.join("playbook.yaml").display().to_string(),
        ],
    );
    let submitted: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let run_id = submitted["run_id"].as_str().unwrap().to_owned();
    let sent = |method: &str| {
        std::fs::read_to_string(d.join("stdin"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|l| l["method"] == method)
    };
    let prompted = antler_tests::wait_for(std::time::Duration::from_secs(30), || {
        sent("session/prompt").then_some(())
    });
    assert!(prompted.is_some(), "the agent was never prompted");
    let out = antler_tests::antler(&runtime, &["cancel", &run_id]);
    assert!(
        out.status.success(),
        "cancel: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The agent is told, then stopped; its prompt never finishes.
    let cancelled = antler_tests::wait_for(std::time::Duration::from_secs(10), || {
        sent("session/cancel").then_some(())
    });
    assert!(cancelled.is_some(), "no session/cancel reached the agent");
    let gone = antler_tests::wait_for(std::time::Duration::from_secs(10), || {
        processes_under(&d.join("base")).is_empty().then_some(())
    });
    assert!(
        gone.is_some(),
        "the agent still runs: {:?}",
        processes_under(&d.join("base"))
    );
}
