//! Roots (issue 13, spec 5.3): a run's pooled stdio session has the thread's workspace as
//! its only root (`roots/list`) and as its working directory. Against the real
//! server-filesystem, started with another directory on its command line: inside a run
//! (a recording stand-in model), `list_allowed_directories` answers the workspace alone, a
//! relative write lands in the workspace, and a read outside it is refused; through
//! `antler mcp call`, a session whose workspace changes is told (`roots/list_changed`) and
//! the server follows.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::mcp_support::{npm_bin, stdio, McpCluster};
use crate::model_support::{antler_run, recording_server, Reply};
use antler_tests::wait_for;
use serde_json::{json, Value};

fn filesystem(allowed: &std::path::Path) -> Value {
    stdio(
        npm_bin("mcp-server-filesystem").display().to_string(),
        &[allowed.to_str().unwrap()],
    )
}

/// The content of the last tool message of a model request.
fn last_tool_message(request: &Value) -> String {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn a_run_sees_only_its_thread_workspace() {
    let dir = tempfile::Builder::new()
        .prefix("antler-roots")
        .tempdir_in("/tmp")
        .unwrap();
    let d = dir.path();
    let outside = d.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "the operator's secret").unwrap();
    std::fs::write(
        d.join("extensions_config.json"),
        json!({"mcpServers": {"filesystem": filesystem(&outside)}}).to_string(),
    )
    .unwrap();
    let secret = outside.join("secret.txt").display().to_string();
    let server = recording_server(vec![
        Reply::call(
            "tool_search",
            json!({"query": "select:filesystem_list_allowed_directories,filesystem_write_file,filesystem_read_text_file"}),
        ),
        Reply::call("filesystem_list_allowed_directories", json!({})),
        Reply::call(
            "filesystem_write_file",
            json!({"path": "note.txt", "content": "written in the workspace"}),
        ),
        Reply::call("filesystem_read_text_file", json!({"path": secret})),
        Reply::text("Done."),
    ]);
    std::fs::write(
        d.join("config.yaml"),
        format!(
            "models:\n  - name: rec\n    use: langchain_openai:ChatOpenAI\n    model: recorded\n    base_url: {}\n    api_key: sk-x\n",
            server.base_url
        ),
    )
    .unwrap();
    let (view, stderr) = antler_run(d, &["Look around", "--model", "rec", "--thread", "t1"]);
    assert_eq!(view["status"], "success", "{view}\n{stderr}");
    // Shown with a failure only: why a run might have gone without its MCP tools.
    eprintln!("the run's view: {view}\nits stderr: {stderr}");
    let requests = server.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 5, "{stderr}");
    let workspace = d.join("base/users/default/threads/t1/user-data/workspace");
    let workspace = workspace.canonicalize().unwrap().display().to_string();

    let allowed = last_tool_message(&requests[2]);
    assert!(allowed.contains(&workspace), "{allowed}");
    assert!(
        !allowed.contains(outside.to_str().unwrap()),
        "the command-line directory is still allowed: {allowed}"
    );
    // A relative path is the workspace's (the server's working directory).
    assert_eq!(
        std::fs::read_to_string(format!("{workspace}/note.txt")).unwrap(),
        "written in the workspace"
    );
    let refused = last_tool_message(&requests[4]);
    assert!(
        refused.contains("Access denied - path outside allowed directories"),
        "{refused}"
    );
    assert!(!refused.contains("the operator's secret"), "{refused}");
}

#[test]
fn a_changed_workspace_is_told_to_the_server() {
    let dir = tempfile::Builder::new()
        .prefix("antler-roots")
        .tempdir_in("/tmp")
        .unwrap();
    let (a, b, outside) = (
        dir.path().join("a"),
        dir.path().join("b"),
        dir.path().join("outside"),
    );
    for p in [&a, &b, &outside] {
        std::fs::create_dir_all(p).unwrap();
    }
    let c = McpCluster::start(json!({"filesystem": filesystem(&outside)}));
    let allowed = |ws: &std::path::Path| {
        let out = c.mcp(&[
            "call",
            "filesystem",
            "list_allowed_directories",
            "--user",
            "u1",
            "--thread",
            "t1",
            "--workspace",
            ws.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let first = allowed(&a);
    assert!(first.contains(a.to_str().unwrap()), "{first}");
    assert!(!first.contains(outside.to_str().unwrap()), "{first}");
    // The same session (user, thread) with another workspace: the server asks for the
    // roots again once told, and follows.
    let followed = wait_for(Duration::from_secs(10), || {
        let now = allowed(&b);
        (now.contains(b.to_str().unwrap()) && !now.contains(a.to_str().unwrap())).then_some(())
    });
    assert!(followed.is_some(), "{}", allowed(&b));
}
