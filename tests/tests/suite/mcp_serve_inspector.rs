//! The official MCP Inspector CLI (npm `@modelcontextprotocol/inspector`, pinned in
//! tests/package.json, run with the pinned Node 22 of tests/node_modules) lists and calls
//! Antler's tools: over stdio against `antler mcp serve --user alice` joining a running
//! cluster, and over streamable HTTP against the gateway's `/mcp` with alice's bearer token.
//! Each inspector command is one MCP session; naming one thread in `_meta`
//! (`--metadata antler/thread=...`) makes them work in one sandbox, so a file bash wrote
//! over stdio is read back over HTTP; a downstream server-everything tool answers through
//! mcp-host; each stdio session is a run of the thread, ended with it, whose events are its
//! calls. Without a token the inspector is pointed to OAuth (it exits asking for an
//! interactive login).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use crate::mcp_support::npm_bin;
use crate::mcp_support::serve::{
    all_succeeded, cluster, config, ended_runs, everything, finished_calls, run_events, ALICE,
    SANDBOX_TOOLS,
};
use serde_json::{json, Value};

/// The thread every inspector session names.
const THREAD: &str = "inspected";
const NOTE: &str = "/mnt/user-data/workspace/note.txt";

/// `mcp-inspector --cli ARGS` on the pinned Node, its home (where it keeps its catalog and
/// stored credentials) in `home`: its exit code and its JSON answer.
fn inspector(home: &Path, args: &[&str]) -> (i32, Value) {
    let out = Command::new(npm_bin("node"))
        .arg(npm_bin("mcp-inspector"))
        .arg("--cli")
        .args(args)
        .env("HOME", home)
        .output()
        .expect("run the MCP Inspector CLI");
    // A result is written to stdout, an error to stderr.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let text = if out.status.success() {
        &stdout
    } else {
        &stderr
    };
    let answer = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("the inspector's answer is not JSON ({e}): {stdout}\n{stderr}"));
    (out.status.code().unwrap_or(-1), answer)
}

/// The text of a `tools/call` answer, checked to be a success.
fn called(answer: &(i32, Value)) -> String {
    let (code, result) = answer;
    assert_eq!(*code, 0, "{result}");
    assert_eq!(result["isError"], false, "{result}");
    result["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["text"].as_str())
        .collect()
}

fn tool_names(answer: &(i32, Value)) -> Vec<String> {
    let (code, result) = answer;
    assert_eq!(*code, 0, "{result}");
    result["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The runs of alice's thread, once every one of them has ended. A stdio session's run ends
/// with the session, as its client exits; until then another session naming the thread is
/// refused ("Thread ... already has an active run"), so each inspector command on the
/// thread waits for this first.
fn ended(addr: &str) -> Vec<Value> {
    ended_runs(addr, THREAD, all_succeeded)
}

#[test]
fn the_mcp_inspector_cli_lists_and_calls_antlers_tools_over_stdio_and_http() {
    let cluster = cluster(&config(SANDBOX_TOOLS), Some(&everything(None)), 0);
    let addr = cluster.gateway();
    let home = cluster.dir.path().join("inspector-home");
    std::fs::create_dir_all(&home).unwrap();
    let runtime = cluster.runtime().display().to_string();
    let antler = antler_tests::bin("antler").display().to_string();
    let thread = format!("antler/thread={THREAD}");
    let write = format!("command=echo from-inspector > {NOTE} && echo written");
    let path = format!("path={NOTE}");

    // Over stdio: the inspector starts `antler mcp serve`, which joins the cluster.
    let serve = [
        "--",
        &antler,
        "--runtime-dir",
        &runtime,
        "mcp",
        "serve",
        "--user",
        "alice",
    ];
    let stdio = |args: &[&str]| inspector(&home, &[args, &serve[..]].concat());
    let listed = tool_names(&stdio(&["--method", "tools/list", "--metadata", &thread]));
    for tool in ["bash", "read_file", "everything_echo"] {
        assert!(listed.contains(&tool.to_owned()), "{tool}: {listed:?}");
    }
    assert_eq!(ended(&addr).len(), 1);
    let wrote = called(&stdio(&[
        "--method",
        "tools/call",
        "--tool-name",
        "bash",
        "--tool-arg",
        "description=write a note",
        &write,
        "--metadata",
        &thread,
    ]));
    assert_eq!(wrote.trim(), "written");
    assert_eq!(ended(&addr).len(), 2);
    // A downstream server's tool, through mcp-host.
    let echoed = called(&stdio(&[
        "--method",
        "tools/call",
        "--tool-name",
        "everything_echo",
        "--tool-arg",
        "message=hello inspector",
        "--metadata",
        &thread,
    ]));
    assert_eq!(echoed, "Echo: hello inspector");

    // Each session was a run of the thread, ended with it; every call is one of its events.
    let runs = ended(&addr);
    assert_eq!(runs.len(), 3, "{runs:?}");
    let mut finished = Vec::new();
    for run in runs.iter().rev() {
        finished.extend(finished_calls(&run_events(
            &addr,
            run["run_id"].as_str().unwrap(),
        )));
    }
    assert_eq!(
        finished,
        [
            ("bash".to_owned(), json!(false)),
            ("everything_echo".to_owned(), json!(false)),
        ],
    );

    // Over HTTP with alice's token. The inspector leaves without ending its session
    // (no DELETE), so its run holds the thread until the session's idle limit: the one call
    // naming the thread comes last.
    let url = format!("http://{addr}/mcp");
    let bearer = format!("Authorization: Bearer {ALICE}");
    let http = |args: &[&str]| {
        let head = [&url, "--transport", "http", "--header", &bearer];
        inspector(&home, &[&head[..], args].concat())
    };
    let listed = tool_names(&http(&["--method", "tools/list"]));
    for tool in ["bash", "read_file", "everything_echo"] {
        assert!(listed.contains(&tool.to_owned()), "{tool}: {listed:?}");
    }
    let echoed = called(&http(&[
        "--method",
        "tools/call",
        "--tool-name",
        "everything_echo",
        "--tool-arg",
        "message=hello over http",
    ]));
    assert_eq!(echoed, "Echo: hello over http");
    // The file bash wrote over stdio, in the same thread's sandbox.
    let read = called(&http(&[
        "--method",
        "tools/call",
        "--tool-name",
        "read_file",
        "--tool-arg",
        "description=read the note",
        &path,
        "--metadata",
        &thread,
    ]));
    assert_eq!(read.trim(), "from-inspector");

    // Without a token the gateway's 401 names its resource metadata: the inspector sets
    // out on OAuth, which it cannot do without a terminal.
    let (code, answer) = inspector(
        &home,
        &[&url, "--transport", "http", "--method", "tools/list"],
    );
    assert_ne!(code, 0, "{answer}");
    assert_eq!(answer["error"]["code"], "auth_required", "{answer}");
}
