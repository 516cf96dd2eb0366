//! The run's middlewares and settlement through the whole cluster (`antler run` against
//! real server-everything and sandbox-host): a deferred MCP tool called before
//! `tool_search` gets DeerFlow's error and works once promoted; a guardrail denies a tool
//! with DeerFlow's text and the run goes on; an output written and never presented ends
//! the run as an error with the receipt saying so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use crate::mcp_support::npm_bin;
use antler_tests::bin;
use serde_json::{json, Value};

const CONFIG: &str = "tool_search:\n  enabled: true\ntools:\n  - {name: write_file, group: file:write, use: deerflow.sandbox.tools:write_file_tool}\n  - {name: bash, group: bash, use: deerflow.sandbox.tools:bash_tool}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\nguardrails:\n  enabled: true\n  provider:\n    use: deerflow.guardrails.builtin:AllowlistProvider\n    config:\n      denied_tools: [bash]\n";

/// Runs `playbook` in a fresh directory with the everything server; the run's view and
/// its tool messages from the last checkpoint.
fn run(playbook: &str) -> (Value, Vec<Value>, tempfile::TempDir) {
    let dir = tempfile::Builder::new()
        .prefix("antler-mw")
        .tempdir_in("/tmp")
        .unwrap();
    let d = dir.path();
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(d.join("config.yaml"), CONFIG).unwrap();
    let everything = npm_bin("mcp-server-everything").display().to_string();
    std::fs::write(
        d.join("extensions_config.json"),
        json!({"mcpServers": {"everything": {"type": "stdio", "command": everything, "args": ["stdio"]}}}).to_string(),
    )
    .unwrap();
    std::fs::write(d.join("playbook.yaml"), playbook).unwrap();
    let out = Command::new(bin("antler"))
        .arg("--runtime-dir")
        .arg(d.join("run"))
        .args(["run", "Do the task", "--json", "--playbook"])
        .arg(d.join("playbook.yaml"))
        .arg("--config")
        .arg(d.join("config.yaml"))
        .current_dir(d)
        .env(
            "ANTLER_EXTENSIONS_CONFIG_PATH",
            d.join("extensions_config.json"),
        )
        .env("ANTLER_SANDBOX_BASE_DIR", d.join("base"))
        .env("ANTLER_GATEWAY_ADDR", "off")
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let view: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let tools = tool_messages(&d.join("run/runs.sqlite"), view["run_id"].as_str().unwrap());
    (view, tools, dir)
}

fn tool_messages(store: &Path, run_id: &str) -> Vec<Value> {
    let out = Command::new("python3")
        .arg("-c")
        .arg(
            "import sqlite3,sys,json;c=sqlite3.connect(sys.argv[1]);\
             s=json.loads(c.execute('select state from checkpoints where run_id=? order by step desc limit 1',(sys.argv[2],)).fetchone()[0]);\
             print(json.dumps([m for m in s['messages'] if m['role']=='tool']))",
        )
        .arg(store)
        .arg(run_id)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn a_deferred_tool_before_promotion_and_a_denied_tool_get_deerflows_texts() {
    let (view, tools, _dir) = run(r#"
turns:
  - tool_calls:
      - {name: everything_echo, args: {message: "too early"}}
  - tool_calls:
      - {name: bash, args: {description: list, command: "ls"}}
  - tool_calls:
      - {name: tool_search, args: {query: "select:everything_echo"}}
  - tool_calls:
      - {name: everything_echo, args: {message: "now promoted"}}
  - content: Done.
"#);
    assert_eq!(view["status"], "success", "{view}");
    let contents: Vec<&str> = tools
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(
        contents[0],
        "Error: Tool 'everything_echo' is deferred and has not been promoted yet. Call tool_search first to expose and promote this tool's schema, then retry."
    );
    assert_eq!(
        contents[1],
        "Guardrail denied: tool 'bash' was blocked (oap.tool_not_allowed). Reason: tool 'bash' is denied. Choose an alternative approach."
    );
    assert!(
        contents[2].contains("\"name\": \"everything_echo\""),
        "{}",
        contents[2]
    );
    assert!(contents[3].contains("now promoted"), "{}", contents[3]);
    assert_eq!(tools[3]["status"], "success");
}

#[test]
fn an_output_never_presented_ends_the_run_as_an_error_with_the_receipt_saying_so() {
    let (view, _tools, dir) = run(r##"
turns:
  - tool_calls:
      - {name: write_file, args: {description: report, path: /mnt/user-data/outputs/report.md, content: "# Report"}}
  - content: The report is written.
"##);
    assert_eq!(view["status"], "error", "{view}");
    assert_eq!(
        view["error"],
        "Artifact delivery incomplete: no produced output artifact was presented"
    );
    let receipt = &view["delivery"];
    assert_eq!(
        receipt["produced_paths"],
        json!(["/mnt/user-data/outputs/report.md"])
    );
    assert_eq!(receipt["stage"], "not_started", "{receipt}");
    assert_eq!(receipt["satisfied"], false, "{receipt}");
    let run_id = view["run_id"].as_str().unwrap();
    let written = dir
        .path()
        .join("base/users/default/threads")
        .join(run_id)
        .join("user-data/outputs/report.md");
    assert_eq!(std::fs::read_to_string(written).unwrap(), "# Report");
}
