//! Real MCP servers behind `antler mcp`: server-everything over stdio and streamable HTTP,
//! server-filesystem, mcp-server-time and a Python SDK server; listing with `{server}_{tool}`
//! names and schemas, calls with text results, and `isError` as exit code 1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::mcp_support::{
    everything_http, npm_bin, peer_script, pip_bin, python, stdio, McpCluster,
};
use serde_json::json;

#[test]
fn tools_and_calls_over_stdio_and_streamable_http() {
    let files = tempfile::tempdir().expect("tempdir");
    std::fs::write(files.path().join("hello.txt"), "hello from a file").expect("write");
    let (_http_peer, port) = everything_http("streamableHttp");
    let everything = npm_bin("mcp-server-everything").display().to_string();
    let c = McpCluster::start(json!({
        "everything": stdio(everything, &["stdio"]),
        "fs": stdio(npm_bin("mcp-server-filesystem").display().to_string(), &[files.path().to_str().expect("utf8")]),
        "time": stdio(pip_bin("mcp-server-time"), &["--local-timezone", "UTC"]),
        "py": stdio(python(), &[&peer_script("slow_tools.py")]),
        "web": {"type": "http", "url": format!("http://127.0.0.1:{port}/mcp")},
        "disabled": {"enabled": false, "command": "does-not-exist"},
    }));

    // Every tool is named {server}_{tool} and carries its schema.
    // server-everything lists 13 tools, and 2 more for a client that declares roots and
    // elicitation (get-roots-list, trigger-elicitation-request), announced once initialized.
    let all = antler_tests::wait_for(std::time::Duration::from_secs(15), || {
        let all = c.tools(None);
        let count = |s: &str| all.iter().filter(|t| t["server"] == s).count();
        (count("everything") == 15 && count("web") == 15).then_some(all)
    })
    .unwrap_or_else(|| c.tools(None));
    for t in &all {
        let server = t["server"].as_str().expect("server");
        let name = t["name"].as_str().expect("name");
        assert!(name.starts_with(&format!("{server}_")), "{t}");
        assert!(t["input_schema"].is_object(), "{t}");
        assert!(t["description"].is_string(), "{t}");
    }
    let echo = all
        .iter()
        .find(|t| t["name"] == "everything_echo")
        .expect("everything_echo listed");
    assert_eq!(echo["input_schema"]["type"], "object", "{echo}");
    assert!(
        echo["input_schema"]["properties"]["message"].is_object(),
        "{echo}"
    );
    let count = |s: &str| all.iter().filter(|t| t["server"] == s).count();
    assert_eq!(
        count("everything"),
        15,
        "server-everything lists 13 tools and 2 for roots and elicitation"
    );
    assert_eq!(count("web"), 15, "the same server over streamable HTTP");
    assert_eq!(count("fs"), 14);
    assert_eq!(
        c.tool_names("time"),
        ["time_get_current_time", "time_convert_time"]
    );
    assert_eq!(
        count("py"),
        7,
        "sleep, cancellations, fail, echo, pid, where, grow"
    );
    assert_eq!(count("disabled"), 0);

    // Status: every enabled server ready with its tool count; the disabled one absent.
    let status = c.status();
    let names: Vec<&str> = status
        .iter()
        .map(|s| s["name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(names, ["everything", "fs", "time", "py", "web"]);
    for s in &status {
        assert_eq!(s["state"], "ready", "{s}");
        assert_eq!(s["reconnects"], 0, "{s}");
    }
    assert_eq!(c.server("web")["transport"], "http");
    assert_eq!(c.server("fs")["tools"], 14);

    // Calls: stdio and HTTP echo; the prefixed name works too.
    let (code, r) = c.call("everything", "echo", r#"{"message": "hi there"}"#);
    assert_eq!(
        (code, McpCluster::text(&r)),
        (0, "Echo: hi there".to_owned()),
        "{r}"
    );
    let (code, r) = c.call("web", "web_echo", r#"{"message": "over http"}"#);
    assert_eq!(
        (code, McpCluster::text(&r)),
        (0, "Echo: over http".to_owned()),
        "{r}"
    );
    let path = files.path().join("hello.txt");
    let (code, r) = c.call("fs", "read_text_file", &json!({"path": path}).to_string());
    assert_eq!(code, 0, "{r}");
    assert!(McpCluster::text(&r).contains("hello from a file"), "{r}");
    let (code, r) = c.call("time", "get_current_time", r#"{"timezone": "UTC"}"#);
    assert_eq!(code, 0, "{r}");
    assert!(
        McpCluster::text(&r).contains("\"timezone\": \"UTC\""),
        "{r}"
    );

    // structuredContent is kept (server-everything's structured tool, the SDK's output schema).
    let (code, r) = c.call("py", "echo", r#"{"text": "structured"}"#);
    assert_eq!(code, 0, "{r}");
    assert_eq!(
        r["structured_content"],
        json!({"result": "structured"}),
        "{r}"
    );

    // isError results exit 1 and carry the server's text.
    let (code, r) = c.call("py", "fail", r#"{"message": "the tool said no"}"#);
    assert_eq!(code, 1, "{r}");
    assert_eq!(r["is_error"], true);
    assert!(McpCluster::text(&r).contains("the tool said no"), "{r}");
    let outside = "/etc/hostname";
    let (code, r) = c.call(
        "fs",
        "read_text_file",
        &json!({"path": outside}).to_string(),
    );
    assert_eq!(code, 1, "{r}");
    assert!(
        McpCluster::text(&r)
            .to_lowercase()
            .contains("access denied"),
        "{r}"
    );

    // Unknown servers and invalid arguments are errors the user can read.
    let (code, r) = c.call("nope", "echo", "{}");
    assert_eq!(code, 1);
    assert_eq!(McpCluster::text(&r), "no MCP server named 'nope'");
    let out = c.mcp(&["call", "everything", "echo", "--args", "[1]"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--args must be a JSON object"));

    // Images convert to image blocks.
    let (code, r) = c.call("everything", "get-tiny-image", "{}");
    assert_eq!(code, 0, "{r}");
    assert!(
        r["content"]
            .as_array()
            .expect("content")
            .iter()
            .any(|b| b["type"] == "image" && b["mime_type"] == "image/png"),
        "{r}"
    );
}
