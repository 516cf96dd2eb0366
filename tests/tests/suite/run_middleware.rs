//! The run's middlewares and settlement through the whole cluster (`antler run` against
//! real server-everything and sandbox-host): a deferred MCP tool called before
//! `tool_search` gets DeerFlow's error and works once promoted; a guardrail denies a tool
//! with DeerFlow's text and the run goes on; an output written and never presented ends
//! the run as an error with the receipt saying so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::mcp_support::npm_bin;
use crate::model_support;
use serde_json::{json, Value};

const CONFIG: &str = "tool_search:\n  enabled: true\ntools:\n  - {name: write_file, group: file:write, use: deerflow.sandbox.tools:write_file_tool}\n  - {name: bash, group: bash, use: deerflow.sandbox.tools:bash_tool}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\nguardrails:\n  enabled: true\n  provider:\n    use: deerflow.guardrails.builtin:AllowlistProvider\n    config:\n      denied_tools: [bash]\n";

/// Runs `playbook` in a fresh directory with the everything server; the run's view and
/// its tool messages from the last checkpoint.
fn run(playbook: &str) -> (Value, Vec<Value>, tempfile::TempDir) {
    let everything = npm_bin("mcp-server-everything").display().to_string();
    let extensions = json!({"mcpServers": {"everything": {"type": "stdio", "command": everything, "args": ["stdio"]}}});
    let dir = model_support::run_dir("antler-mw", CONFIG, &extensions.to_string());
    let (view, tools) = model_support::run_playbook(dir.path(), "Do the task", playbook);
    (view, tools, dir)
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
