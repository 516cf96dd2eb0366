//! A run that starts while mcp-host cannot be reached goes on with its builtin and sandbox
//! tools and says so in one warning event, as DeerFlow falls back to no MCP tools. Here
//! mcp-host never comes up: the cluster's `antler-mcp-host` is a stand-in that exits at
//! once, so the supervisor marks it failed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

use antler_tests::{bin, bin_dir, wait_for, Cluster};
use serde_json::{json, Value};

const PLAYBOOK: &str = r#"
turns:
  - tool_calls:
      - {name: bash, args: {description: write, command: "echo ok > /mnt/user-data/outputs/note.txt"}}
  - tool_calls:
      - {name: present_files, args: {filepaths: ["/mnt/user-data/outputs/note.txt"]}}
  - content: Wrote the note without MCP.
"#;

#[test]
fn a_run_without_mcp_host_uses_its_other_tools_and_warns_once() {
    let dir = tempfile::Builder::new()
        .prefix("antler-nomcp")
        .tempdir_in("/tmp")
        .unwrap();
    let d = dir.path();
    // The real binaries, but an mcp-host that exits at once.
    let bins = d.join("bin");
    std::fs::create_dir(&bins).unwrap();
    for b in ["antler", "antler-sandbox-host", "antler-subagent"] {
        std::os::unix::fs::symlink(bin_dir().join(b), bins.join(b)).unwrap();
    }
    let fake = bins.join("antler-mcp-host");
    std::fs::write(&fake, "#!/bin/sh\nexit 3\n").unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        d.join("extensions_config.json"),
        json!({"mcpServers": {"time": {"type": "stdio", "command": "python3", "args": ["-m", "mcp_server_time"]}}}).to_string(),
    )
    .unwrap();
    std::fs::write(
        d.join("config.yaml"),
        "tools:\n  - {name: bash, group: bash, use: deerflow.sandbox.tools:bash_tool}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n",
    )
    .unwrap();
    std::fs::write(d.join("playbook.yaml"), PLAYBOOK).unwrap();
    let ext = d.join("extensions_config.json").display().to_string();
    let base = d.join("base").display().to_string();
    let bins_s = bins.display().to_string();
    let c = Cluster::up_with(
        0,
        &[
            ("ANTLER_BIN_DIR", &bins_s),
            ("ANTLER_EXTENSIONS_CONFIG_PATH", &ext),
            ("ANTLER_SANDBOX_BASE_DIR", &base),
            ("ANTLER_GATEWAY_ADDR", "off"),
        ],
    );
    let ready = wait_for(Duration::from_secs(30), || {
        let st = c.status()?;
        let sandbox = st.iter().find(|p| p["role"] == "sandbox-host")?;
        (sandbox["healthy"] == true).then_some(())
    });
    assert!(ready.is_some(), "{:?}", c.status());
    let out = Command::new(bin("antler"))
        .arg("--runtime-dir")
        .arg(c.runtime_dir())
        .args(["run", "Write a note", "--json", "--trace", "--playbook"])
        .arg(d.join("playbook.yaml"))
        .arg("--config")
        .arg(d.join("config.yaml"))
        .env("ANTLER_EXTENSIONS_CONFIG_PATH", &ext)
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let view: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\n{stderr}"));
    assert_eq!(view["status"], "success", "{view}\n{stderr}");
    assert_eq!(view["final_answer"], "Wrote the note without MCP.");
    assert_eq!(
        view["artifacts"],
        json!(["/mnt/user-data/outputs/note.txt"]),
        "{stderr}"
    );
    let warnings: Vec<String> = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["event"]["event"] == "warning")
        .map(|e| {
            e["event"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(
        warnings,
        ["mcp-host cannot be reached; this run goes on without MCP tools"],
        "{stderr}"
    );
}
