//! A thread's later messages join its pending memory update instead of replacing it,
//! also when a summary removed the earlier ones mid-run (DeerFlow's summarization flush
//! runs as the summary removes them): through the real gateway and a recording model, a
//! first run states alice's preference and its update waits (five minutes of debounce); a
//! second run on the thread makes tool calls until summarization (6 messages, 2 kept, the
//! latest user turn rescued) removes the first run's turns from the state. The lead is
//! killed; the next one learns the pending update in one memory call, which holds the
//! preference (no longer in the thread's state) and the second run's task and answer.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::lead_support::{http_full, LeadCluster};
use crate::model_support::{is_memory_update, recording_server_by, Reply};
use antler_tests::wait_for;
use serde_json::{json, Value};

const ALICE: &str = "alice-token-000000000001";
const PREFERENCE: &str = "I always indent with tabs, never spaces";
const SECOND_TASK: &str = "Present the three weekly reports";
/// The summary prompt's opening (DeerFlow's `DEFAULT_SUMMARY_PROMPT`).
const SUMMARY_REQUEST: &str = "Context Extraction Assistant";

fn call(addr: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let body = body.map(Value::to_string);
    let (code, _, text) = http_full(addr, ALICE, method, path, body.as_deref());
    (
        code,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn config(base_url: &str, memory: &str) -> String {
    format!(
        "models:\n  - name: rec\n    use: langchain_openai:ChatOpenAI\n    model: recorded\n    base_url: {base_url}\n    api_key: sk-test\n\
summarization:\n  enabled: true\n  trigger:\n    - type: messages\n      value: 6\n  keep:\n    type: messages\n    value: 2\n\
memory:\n  backend_config:\n{memory}antler:\n  gateway:\n    tokens:\n      - {{token: {ALICE}, user: alice, role: member}}\n"
    )
}

fn run(addr: &str, task: &str, thread: &str) {
    let (code, submitted) = call(
        addr,
        "POST",
        "/api/runs",
        Some(&json!({"task": task, "thread": thread})),
    );
    assert_eq!(code, 201, "{submitted}");
    let id = submitted["run_id"].as_str().unwrap().to_owned();
    let ended = wait_for(Duration::from_secs(120), || {
        let (_, view) = call(addr, "GET", &format!("/api/runs/{id}"), None);
        (view["status"] != "running").then_some(view)
    })
    .expect("the run ends");
    assert_eq!(ended["status"], "success", "{ended}");
}

/// The `<conversation>` of a memory update request.
fn conversation(request: &Value) -> String {
    let user = request["messages"][1]["content"].as_str().unwrap_or("");
    user.split_once("<conversation>")
        .and_then(|(_, rest)| rest.split_once("</conversation>"))
        .map_or("", |(c, _)| c)
        .to_owned()
}

#[test]
fn a_summarized_turn_joins_the_threads_pending_update() {
    // The run turns: the first run answers; the second presents a report three times,
    // then answers. Summaries and memory updates get their own answers.
    let turns = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&turns);
    let server = recording_server_by(move |request, _| {
        if is_memory_update(request) {
            return Reply::text(
                &json!({"user": {}, "history": {}, "newFacts": [], "factsToReinforce": [],
                        "factsToRemove": []})
                .to_string(),
            );
        }
        if request.to_string().contains(SUMMARY_REQUEST) {
            return Reply::text("The user asked for reports; two were presented.");
        }
        match counter.fetch_add(1, Ordering::SeqCst) {
            0 => Reply::text("Done."),
            n @ 1..=3 => Reply::call(
                "present_files",
                json!({"filepaths": [format!("/mnt/user-data/outputs/week-{n}.md")]}),
            ),
            _ => Reply::text("All reports were looked for."),
        }
    });
    let waiting = config(
        &server.base_url,
        "    debounce_seconds: 300\n    max_delay_seconds: 300\n",
    );
    let mut cluster = LeadCluster::up(&waiting, &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")]);
    let addr = cluster.gateway();
    run(&addr, &format!("{PREFERENCE}. Say hi."), "long-thread");
    run(&addr, SECOND_TASK, "long-thread");
    let summarized = server
        .requests
        .lock()
        .unwrap()
        .iter()
        .any(|r| r.to_string().contains(SUMMARY_REQUEST));
    assert!(summarized, "the second run was never summarized");
    let (_, status) = call(&addr, "GET", "/api/memory/status", None);
    assert_eq!(
        status["pending"], 1,
        "one pending update for the thread: {status}"
    );
    cluster.kill_lead();
    assert!(
        !server.requests.lock().unwrap().iter().any(is_memory_update),
        "no update was made before the kill"
    );

    // The next lead learns the thread's pending update in one call.
    cluster.write(
        "config.yaml",
        &config(&server.base_url, "    debounce_seconds: 1\n"),
    );
    cluster.start();
    let addr = cluster.gateway();
    let update = wait_for(Duration::from_secs(90), || {
        let requests = server.requests.lock().unwrap();
        requests.iter().find(|r| is_memory_update(r)).cloned()
    })
    .expect("the restarted lead makes the update");
    let conversation = conversation(&update);
    assert!(conversation.contains(PREFERENCE), "{conversation}");
    assert!(conversation.contains(SECOND_TASK), "{conversation}");
    assert!(
        conversation.contains("All reports were looked for."),
        "{conversation}"
    );
    let done = wait_for(Duration::from_secs(30), || {
        let (_, status) = call(&addr, "GET", "/api/memory/status", None);
        (status["pending"] == 0).then_some(())
    });
    assert!(done.is_some(), "the update stays pending");
    let updates = server
        .requests
        .lock()
        .unwrap()
        .iter()
        .filter(|r| is_memory_update(r))
        .count();
    assert_eq!(updates, 1, "one update for the thread");
}
