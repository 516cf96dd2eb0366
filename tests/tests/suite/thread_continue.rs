//! A thread continues from the command line: `antler run --thread T` twice is one
//! conversation (the model's second request holds the first exchange; the thread's state
//! holds both), and `antler threads list|show|delete` read and remove it (its files with
//! it), against the real binaries, the runs store and a recording model endpoint.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::model_support::{
    antler_in, antler_run, recording_server, run_dir, Reply, NO_MCP_SERVERS,
};
use serde_json::Value;

/// `antler threads ARGS --json` in `dir` (the runtime and base directories of
/// [`antler_run`]): its exit status and stdout as JSON (or text).
fn threads(dir: &std::path::Path, args: &[&str]) -> (bool, Value, String) {
    let out = antler_in(dir, "threads", args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    (
        out.status.success(),
        serde_json::from_str(stdout.trim()).unwrap_or(Value::Null),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn antler_run_on_a_thread_twice_is_one_conversation() {
    let model = recording_server(vec![
        Reply::text("The capital of France is Paris."),
        Reply::text("About 2.1 million people."),
    ]);
    let config = format!(
        "models:\n  - name: rec\n    use: langchain_openai:ChatOpenAI\n    model: rec\n    base_url: {}\n    api_key: sk-test\ntool_search:\n  enabled: false\n",
        model.base_url
    );
    let dir = run_dir("antler-tc", &config, NO_MCP_SERVERS);
    let d = dir.path();
    let (first, _) = antler_run(
        d,
        &[
            "What is the capital of France?",
            "--thread",
            "conv1",
            "--no-input",
        ],
    );
    assert_eq!(first["status"], "success", "{first}");
    let (second, _) = antler_run(
        d,
        &[
            "How many people live there?",
            "--thread",
            "conv1",
            "--no-input",
        ],
    );
    assert_eq!(second["status"], "success", "{second}");
    assert_eq!(second["final_answer"], "About 2.1 million people.");

    // The second run's request held the first exchange, then the new question.
    let requests = model.requests.lock().unwrap().clone();
    let asked: Vec<(String, String)> = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] != "system")
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_owned(),
                m["content"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(asked.len(), 3, "{asked:?}");
    assert_eq!(
        asked[0],
        (
            "user".to_owned(),
            "What is the capital of France?".to_owned()
        )
    );
    assert_eq!(
        asked[1],
        (
            "assistant".to_owned(),
            "The capital of France is Paris.".to_owned()
        )
    );
    assert!(
        asked[2].1.contains("How many people live there?"),
        "{asked:?}"
    );

    // The thread: listed, shown with both exchanges (AI ids unique), then deleted.
    let (ok, list, err) = threads(d, &["list"]);
    assert!(ok, "{err}");
    assert_eq!(list[0]["thread_id"], "conv1", "{list}");
    assert_eq!(list[0]["status"], "idle");
    assert_eq!(list[0]["last_run_id"], second["run_id"]);
    let (ok, shown, err) = threads(d, &["show", "conv1"]);
    assert!(ok, "{err}");
    let roles: Vec<&str> = shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["human", "ai", "human", "ai"], "{shown}");
    assert_ne!(shown["messages"][1]["id"], shown["messages"][3]["id"]);
    assert!(d.join("base/users/default/threads/conv1").exists());
    let (ok, deleted, err) = threads(d, &["delete", "conv1"]);
    assert!(ok, "{err}");
    assert_eq!(deleted["deleted"], true);
    assert!(!d.join("base/users/default/threads/conv1").exists());
    let (ok, list, err) = threads(d, &["list"]);
    assert!(ok, "{err}");
    assert_eq!(list, serde_json::json!([]));
    let (ok, _, err) = threads(d, &["show", "conv1"]);
    assert!(!ok);
    assert!(err.contains("Thread conv1 not found"), "{err}");
}
