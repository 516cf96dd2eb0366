//! Branches, regenerate and edit on the LangGraph-compatible API against the official
//! client (`tests/peers/langgraph_branches.py`, langgraph-sdk) and the real gateway: a
//! branch holds its parent's messages up to the turn and not after, and a run on it goes
//! on from there; `regenerate/prepare` then a run from the returned checkpoint sends the
//! model the history before the regenerated answer only, and the thread forks there;
//! edit does the same with new text; a clarification's answer is replayed from the step
//! before it; bob gets alice's thread's 404 on every route.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::lead_support::LeadCluster;
use crate::model_support::{is_memory_update, recording_server_by, Reply};
use serde_json::{json, Value};

const ALICE: &str = "alice-token-000000000001";
const BOB: &str = "bob-token-00000000000002";

/// The text of the last user message of a model request, out of the frame the lead puts
/// user input in.
pub(crate) fn last_user_text(request: &Value) -> String {
    let text = raw_user_text(request);
    match (
        text.find("--- BEGIN USER INPUT ---\n"),
        text.rfind("\n--- END USER INPUT ---"),
    ) {
        (Some(start), Some(end)) if start + 25 <= end => text[start + 25..end].to_owned(),
        _ => text,
    }
}

fn raw_user_text(request: &Value) -> String {
    let message = request["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .cloned()
        .unwrap_or(Value::Null);
    match &message["content"] {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// Runs the driver in `mode` against a cluster whose one model is `base_url`.
pub(crate) fn drive(mode: &str, base_url: &str) -> Value {
    let config = format!(
        "models:\n  - name: fast\n    use: langchain_openai:ChatOpenAI\n    model: fast\n    base_url: {base_url}\n    api_key: sk-test\ntool_search:\n  enabled: false\nantler:\n  gateway:\n    tokens:\n      - {{token: {ALICE}, user: alice, role: member}}\n      - {{token: {BOB}, user: bob, role: member}}\n"
    );
    let cluster = LeadCluster::up(&config, &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")]);
    let base = format!("http://{}/api", cluster.gateway());
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("peers/langgraph_branches.py");
    let out = Command::new("python3")
        .arg(script)
        .args([&base, ALICE, BOB, mode])
        .output()
        .expect("run the langgraph-sdk driver");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the driver failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).expect("one JSON report")
}

/// `(type, content)` of each message.
fn contents(messages: &Value) -> Vec<(String, String)> {
    messages
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let content = match &m["content"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (m["type"].as_str().unwrap().to_owned(), content)
        })
        .collect()
}

fn pair(kind: &str, text: &str) -> (String, String) {
    (kind.to_owned(), text.to_owned())
}

#[test]
fn branches_and_replays_fork_a_thread_where_the_user_points() {
    // Each answer names its number and the question, so a replay's answer differs.
    let answered = Arc::new(AtomicUsize::new(0));
    let counter = answered.clone();
    let model = recording_server_by(move |request, _| {
        if is_memory_update(request) {
            return Reply::text(r#"{"user": {}, "history": {}, "newFacts": []}"#);
        }
        if last_user_text(request) == "Plan a trip." {
            return Reply::call(
                "ask_clarification",
                json!({"question": "Where to?", "clarification_type": "missing_info"}),
            );
        }
        let n = counter.fetch_add(1, Ordering::SeqCst);
        Reply::text(&format!("Answer {n} to {}", last_user_text(request)))
    });
    let r = drive("branches", &model.base_url);
    let tid = r["thread_id"].as_str().unwrap();
    let before = contents(&r["before"]);
    assert_eq!(
        before,
        [
            pair("human", "First question?"),
            pair("ai", "Answer 0 to First question?"),
            pair("human", "Second question?"),
            pair("ai", "Answer 1 to Second question?"),
        ]
    );

    // The branch: a new thread of alice's holding the first turn and nothing after.
    let branch = &r["branch"];
    let branch_id = branch["thread_id"].as_str().unwrap();
    assert_ne!(branch_id, tid);
    assert_eq!(branch["parent_thread_id"], tid);
    assert_eq!(branch["branched_from_message_id"], r["before"][1]["id"]);
    assert_eq!(branch["workspace_clone_mode"], "skipped_historical_turn");
    assert_eq!(branch["history_seed_mode"], "seeded");
    assert!(branch["parent_checkpoint_id"]
        .as_str()
        .is_some_and(|c| !c.is_empty()));
    let metadata = &r["branch_thread"]["metadata"];
    assert_eq!(metadata["deerflow_branch"], true);
    assert_eq!(metadata["branch_parent_thread_id"], tid);
    assert_eq!(
        metadata["branch_parent_checkpoint_id"],
        branch["parent_checkpoint_id"]
    );
    assert_eq!(metadata["branch_parent_message_id"], r["before"][1]["id"]);
    assert_eq!(
        contents(&r["branch_state"]["values"]["messages"]),
        before[..2]
    );
    // A run on the branch goes on from the first turn: the model never saw the second.
    let on_branch = contents(&r["branch_after"]["values"]["messages"]);
    assert_eq!(on_branch.len(), 4, "{on_branch:?}");
    assert_eq!(on_branch[2], pair("human", "Branch question?"));
    let requests = model.requests.lock().unwrap().clone();
    let branch_request = requests
        .iter()
        .find(|q| last_user_text(q) == "Branch question?")
        .expect("the branch's model request");
    let sent = branch_request["messages"].to_string();
    assert!(sent.contains("Answer 0 to First question?"), "{sent}");
    assert!(!sent.contains("Second question?"), "{sent}");
    // The parent is untouched.
    assert_eq!(
        contents(&r["parent_after_branch"]["values"]["messages"]),
        before
    );
    // From the latest turn: the files go too, and the title given is the name.
    assert_ne!(
        r["branch_latest"]["workspace_clone_mode"],
        "skipped_historical_turn"
    );
    assert_eq!(
        r["branch_latest_thread"]["metadata"]["deerflow_branch"],
        true
    );
    assert_eq!(
        r["branch_human"],
        json!([409, "This turn can no longer be branched from."])
    );

    // Regenerate: DeerFlow's payload, then a run from its checkpoint.
    let prepared = &r["prepared"];
    let regenerated_run = prepared["target_run_id"].as_str().unwrap();
    assert_eq!(
        prepared["input"]["messages"][0]["content"],
        json!([{"type": "text", "text": "Second question?"}])
    );
    assert_eq!(prepared["input"]["messages"][0]["id"], r["before"][2]["id"]);
    assert_eq!(prepared["checkpoint"]["checkpoint_ns"], "");
    let checkpoint_id = prepared["checkpoint"]["checkpoint_id"].as_str().unwrap();
    assert_eq!(
        prepared["metadata"],
        json!({
            "regenerate_from_message_id": r["before"][3]["id"],
            "regenerate_from_run_id": regenerated_run,
            "regenerate_checkpoint_id": checkpoint_id,
        })
    );
    assert_eq!(
        r["bad_model_replay"],
        json!([400, "Model 'nope' is not in the configured model allowlist"])
    );
    assert_eq!(contents(&r["after_bad_model"]), before);
    // The model was sent the history before the regenerated answer only.
    let requests = model.requests.lock().unwrap().clone();
    let replays: Vec<&Value> = requests
        .iter()
        .filter(|q| last_user_text(q) == "Second question?")
        .collect();
    assert_eq!(replays.len(), 2, "the original and the replay");
    let sent = replays[1]["messages"].to_string();
    assert!(sent.contains("Answer 0 to First question?"), "{sent}");
    assert!(!sent.contains("Answer 1 to Second question?"), "{sent}");
    let after = contents(&r["after_regenerate"]);
    assert_eq!(after.len(), 4, "the thread forked: {after:?}");
    assert_eq!(after[..3], before[..3]);
    assert!(after[3].1.ends_with("to Second question?") && after[3] != before[3]);
    assert_eq!(
        r["prepare_old"],
        json!([409, "Only the latest assistant message can be regenerated"])
    );
    assert_eq!(
        r["prepare_missing"],
        json!([404, "Message ai-99 not found"])
    );

    // Edit: the new text replaces the question, from the same point.
    assert_eq!(
        r["edit_unchanged"],
        json!([409, "Edited message is unchanged"])
    );
    let edit = &r["edit"];
    assert_eq!(edit["metadata"]["replay_kind"], "edit");
    assert_eq!(
        edit["input"]["messages"][0]["content"],
        json!([{"type": "text", "text": "Edited question?"}])
    );
    let after_edit = contents(&r["after_edit"]);
    assert_eq!(after_edit.len(), 4, "{after_edit:?}");
    assert_eq!(after_edit[..2], before[..2]);
    assert_eq!(after_edit[2], pair("human", "Edited question?"));
    assert_eq!(
        r["after_edit"][2]["id"], edit["replacement_human_message_id"],
        "the id the edit announced"
    );
    assert_eq!(
        edit["source_message_ids"],
        json!([
            r["after_regenerate"][2]["id"],
            r["after_regenerate"][3]["id"]
        ])
    );

    // A clarification's answer regenerated: from the step before the answer, the same
    // run's question kept, the answer sent again as the new message.
    let answered = contents(&r["answered"]);
    assert_eq!(answered.last().unwrap().0, "ai", "{answered:?}");
    let replay = &r["answer_prepared"];
    assert_eq!(
        replay["input"]["messages"][0]["content"],
        json!([{"type": "text", "text": "Paris"}])
    );
    let replay_checkpoint = replay["checkpoint"]["checkpoint_id"].as_str().unwrap();
    assert!(
        replay_checkpoint.starts_with(replay["target_run_id"].as_str().unwrap())
            && !replay_checkpoint.ends_with(":before"),
        "{replay}"
    );
    let regenerated = contents(&r["answer_regenerated"]);
    assert_eq!(regenerated.len(), answered.len(), "{regenerated:?}");
    assert_eq!(
        regenerated[..answered.len() - 1],
        answered[..answered.len() - 1]
    );
    assert_ne!(regenerated.last(), answered.last());

    // Bob: the same 404 as a thread that does not exist, on every route.
    let not_found = json!([404, format!("Thread {tid} not found")]);
    for key in ["bob_branch", "bob_prepare", "bob_edit"] {
        assert_eq!(r[key], not_found, "{key}");
    }
    assert_eq!(
        r["bob_checkpoint"],
        json!([404, format!("Checkpoint {checkpoint_id} not found")])
    );
}
