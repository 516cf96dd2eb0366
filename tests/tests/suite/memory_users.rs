//! Memory across threads and users, through the real gateway of a running cluster with
//! two members (alice, bob) and a recording model server that answers runs "Done." and
//! the memory update call with DeerFlow's JSON (a fact when the conversation holds
//! alice's preference). A fact learned in one of alice's threads is in the system prompt
//! of her next thread, never in bob's; `GET /api/memory` shows it to alice only (bob can
//! neither read nor delete it); once alice deletes it, her next run's prompt lacks it.
//! A pending update is in the runs store: a lead killed before it is learned leaves it
//! queued, and the next lead learns it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::lead_support::{http_full, LeadCluster};
use crate::model_support::{is_memory_update as is_update, recording_server_by, Reply};
use antler_tests::wait_for;
use serde_json::{json, Value};

const ALICE: &str = "alice-token-000000000001";
const BOB: &str = "bob-token-00000000000002";
const PREFERENCE: &str = "I always indent with tabs, never spaces";
const FACT_LINE: &str = "- [preference | 0.95] Prefers tabs over spaces";

fn call(addr: &str, token: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let body = body.map(Value::to_string);
    let (code, _, text) = http_full(addr, token, method, path, body.as_deref());
    (
        code,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// The memory model's answer: the fact when the conversation (not the current memory)
/// holds alice's preference, nothing otherwise; in a code fence, as models write it.
fn memory_reply(request: &Value) -> Reply {
    let user = request["messages"][1]["content"].as_str().unwrap_or("");
    let conversation = user
        .split_once("<conversation>")
        .and_then(|(_, rest)| rest.split_once("</conversation>"))
        .map_or("", |(c, _)| c);
    let facts = if conversation.contains(PREFERENCE) {
        json!([{"content": "Prefers tabs over spaces", "category": "preference",
                "confidence": 0.95, "scope": "user", "durability": "durable",
                "authority": "descriptive"}])
    } else {
        json!([])
    };
    let update = json!({"user": {}, "history": {}, "newFacts": facts,
                        "factsToReinforce": [], "factsToRemove": []});
    Reply::text(&format!("```json\n{update}\n```"))
}

/// config.yaml with the recording model at `base_url`, alice and bob, and `memory`.
fn config(base_url: &str, memory: &str) -> String {
    format!(
        "models:\n  - name: rec\n    use: langchain_openai:ChatOpenAI\n    model: recorded\n    base_url: {base_url}\n    api_key: sk-test\nmemory:\n  backend_config:\n{memory}antler:\n  gateway:\n    tokens:\n      - {{token: {ALICE}, user: alice, role: member}}\n      - {{token: {BOB}, user: bob, role: member}}\n"
    )
}

/// Runs `task` on `thread` as `token`'s user through the gateway, to its end.
fn run(addr: &str, token: &str, task: &str, thread: &str) {
    let (code, submitted) = call(
        addr,
        token,
        "POST",
        "/api/runs",
        Some(&json!({"task": task, "thread": thread})),
    );
    assert_eq!(code, 201, "{submitted}");
    let id = submitted["run_id"].as_str().unwrap().to_owned();
    let ended = wait_for(Duration::from_secs(120), || {
        let (_, view) = call(addr, token, "GET", &format!("/api/runs/{id}"), None);
        (view["status"] != "running").then_some(view)
    })
    .expect("the run ends");
    assert_eq!(ended["status"], "success", "{ended}");
}

/// The system prompt of the run whose task contains `marker`.
fn prompt_of(requests: &[Value], marker: &str) -> String {
    let request = requests
        .iter()
        .filter(|r| !is_update(r))
        .find(|r| {
            r["messages"]
                .as_array()
                .and_then(|m| m.last())
                .and_then(|m| m["content"].as_str())
                .is_some_and(|c| c.contains(marker))
        })
        .unwrap_or_else(|| panic!("no request of the run {marker:?}"));
    assert_eq!(request["messages"][0]["role"], "system");
    request["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn a_fact_learned_in_one_thread_reaches_the_users_next_thread_only() {
    let server = recording_server_by(|request, _| match is_update(request) {
        true => memory_reply(request),
        false => Reply::text("Done."),
    });
    let config = config(&server.base_url, "    debounce_seconds: 1\n");
    let cluster = LeadCluster::up(&config, &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")]);
    let addr = cluster.gateway();

    run(&addr, ALICE, &format!("{PREFERENCE}. Say hi."), "alice-one");
    let facts = wait_for(Duration::from_secs(90), || {
        let (code, memory) = call(&addr, ALICE, "GET", "/api/memory", None);
        assert_eq!(code, 200, "{memory}");
        let facts = memory["facts"].as_array().cloned().unwrap_or_default();
        (!facts.is_empty()).then_some(facts)
    })
    .expect("alice's memory learns the fact");
    assert_eq!(facts.len(), 1, "{facts:?}");
    assert_eq!(facts[0]["content"], "Prefers tabs over spaces");
    assert_eq!(facts[0]["source"], "alice-one");
    let fact_id = facts[0]["id"].as_str().unwrap().to_owned();
    // The update call carried DeerFlow's prompt and alice's words.
    let requests = server.requests.lock().unwrap().clone();
    let update = requests.iter().find(|r| is_update(r)).unwrap();
    let asked = update["messages"][1]["content"].as_str().unwrap();
    assert!(
        asked.starts_with("Current Memory State:\n<current_memory>\n"),
        "{asked}"
    );
    assert!(
        asked.contains(&format!("User: {PREFERENCE}. Say hi.")),
        "{asked}"
    );
    assert!(asked.contains("Assistant: Done."), "{asked}");

    run(&addr, ALICE, "Name a variable (alice two)", "alice-two");
    run(&addr, BOB, "Name a variable (bob one)", "bob-one");
    let requests = server.requests.lock().unwrap().clone();
    let alice_two = prompt_of(&requests, "(alice two)");
    let memory_at = alice_two
        .find("\n\n<system-reminder>\n<memory>\n")
        .expect("the memory block");
    let block = &alice_two[memory_at..];
    assert!(
        block.contains(&format!(
            "Facts:\n{FACT_LINE}\n</memory>\n</system-reminder>"
        )),
        "{block}"
    );
    assert!(
        alice_two[..memory_at].contains("</critical_reminders>"),
        "the static prompt comes first"
    );
    assert!(
        block.contains("<current_date>"),
        "the date reminder follows"
    );
    let bob_one = prompt_of(&requests, "(bob one)");
    assert!(
        !bob_one.contains("Prefers tabs") && !bob_one.contains("<system-reminder>\n<memory>"),
        "{bob_one}"
    );

    // Bob sees none of it, and cannot reach it.
    let (code, bobs) = call(&addr, BOB, "GET", "/api/memory", None);
    assert_eq!(code, 200);
    assert_eq!(bobs["facts"], json!([]), "{bobs}");
    let (code, _) = call(&addr, BOB, "GET", "/api/memory?user=alice", None);
    assert_eq!(code, 403);
    let (code, _) = call(&addr, BOB, "GET", "/api/memory/facts?user=alice", None);
    assert_eq!(code, 403);
    let (code, _) = call(
        &addr,
        BOB,
        "DELETE",
        &format!("/api/memory/facts/{fact_id}"),
        None,
    );
    assert_eq!(code, 404);
    let (_, listed) = call(&addr, ALICE, "GET", "/api/memory/facts", None);
    assert_eq!(listed["facts"][0]["id"], fact_id.as_str(), "{listed}");

    // Alice deletes it: her next run does not see it.
    let (code, after) = call(
        &addr,
        ALICE,
        "DELETE",
        &format!("/api/memory/facts/{fact_id}"),
        None,
    );
    assert_eq!(code, 200, "{after}");
    assert_eq!(after["facts"], json!([]), "{after}");
    run(&addr, ALICE, "Name a variable (alice three)", "alice-three");
    let requests = server.requests.lock().unwrap().clone();
    let alice_three = prompt_of(&requests, "(alice three)");
    assert!(!alice_three.contains("Prefers tabs"), "{alice_three}");
    // The operator reaches alice's memory by name; its config hides no key it lacks.
    let operator = cluster.gateway_token();
    let (code, status) = call(
        &addr,
        &operator,
        "GET",
        "/api/memory/status?user=alice",
        None,
    );
    assert_eq!(code, 200, "{status}");
    assert_eq!(status["config"]["manager_class"], "deermem");
    assert_eq!(status["data"]["facts"], json!([]));

    // A fact alice writes herself: once, editable by her only.
    let wrote = json!({"content": "Writes Rust daily", "category": "knowledge", "confidence": 0.9});
    let (code, doc) = call(&addr, ALICE, "POST", "/api/memory/facts", Some(&wrote));
    assert_eq!(code, 200, "{doc}");
    assert_eq!(doc["facts"][0]["source"], "manual", "{doc}");
    let id = doc["facts"][0]["id"].as_str().unwrap().to_owned();
    let (code, _) = call(&addr, ALICE, "POST", "/api/memory/facts", Some(&wrote));
    assert_eq!(code, 409);
    let path = format!("/api/memory/facts/{id}");
    let (code, _) = call(
        &addr,
        BOB,
        "PATCH",
        &path,
        Some(&json!({"confidence": 0.1})),
    );
    assert_eq!(code, 404);
    let (code, doc) = call(
        &addr,
        ALICE,
        "PATCH",
        &path,
        Some(&json!({"confidence": 0.8})),
    );
    assert_eq!(code, 200, "{doc}");
    assert_eq!(doc["facts"][0]["confidence"], 0.8);
}

#[test]
fn a_pending_update_survives_a_killed_lead() {
    let server = recording_server_by(|request, _| match is_update(request) {
        true => memory_reply(request),
        false => Reply::text("Done."),
    });
    // Five minutes of debounce: the update is still pending when the lead dies.
    let waiting = config(
        &server.base_url,
        "    debounce_seconds: 300\n    max_delay_seconds: 300\n",
    );
    let mut cluster = LeadCluster::up(&waiting, &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")]);
    let addr = cluster.gateway();
    run(&addr, ALICE, &format!("{PREFERENCE}. Say hi."), "alice-one");
    let pending = wait_for(Duration::from_secs(30), || {
        let (_, status) = call(&addr, ALICE, "GET", "/api/memory/status", None);
        (status["pending"] == 1).then_some(status)
    })
    .expect("the update is queued");
    assert_eq!(pending["data"]["facts"], json!([]), "{pending}");
    cluster.kill_lead();
    assert!(
        !server.requests.lock().unwrap().iter().any(is_update),
        "no update was made before the kill"
    );

    // The next lead (a short debounce now) finds the update in the store and learns it.
    cluster.write(
        "config.yaml",
        &config(&server.base_url, "    debounce_seconds: 1\n"),
    );
    cluster.start();
    let addr = cluster.gateway();
    let facts = wait_for(Duration::from_secs(90), || {
        let (_, memory) = call(&addr, ALICE, "GET", "/api/memory", None);
        let facts = memory["facts"].as_array().cloned().unwrap_or_default();
        (!facts.is_empty()).then_some(facts)
    })
    .expect("the restarted lead learns the queued update");
    assert_eq!(facts[0]["content"], "Prefers tabs over spaces");
    let (_, status) = call(&addr, ALICE, "GET", "/api/memory/status", None);
    assert_eq!(status["pending"], 0, "{status}");
}
