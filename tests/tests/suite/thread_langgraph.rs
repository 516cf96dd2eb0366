//! The LangGraph-compatible API against the official client: `langgraph-sdk` (PyPI, pinned
//! in tests/requirements.txt; `tests/peers/langgraph_client.py`) drives the real gateway
//! with a member's token, as DeerFlow's frontend would. A thread is created (idempotent,
//! the owner keys stripped), runs stream in every accepted mode and continue the thread
//! (the model's second request holds the first exchange), state, history, search and
//! runs read back; another user's thread is 404 through the SDK too; DeerFlow's
//! refusals keep its texts; a second run on a busy thread is 409; a stream joined again
//! with `Last-Event-ID` goes on after that frame; `rollback` and `interrupt` take over a
//! live run; a clarification answered with `human_input_response` drives the same run
//! on; cancel and delete.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::lead_support::LeadCluster;
use crate::model_support::standin::{respond, standin, text_answer, Serve};
use crate::model_support::{recording_server, Reply};
use serde_json::Value;

const ALICE: &str = "alice-token-000000000001";
const BOB: &str = "bob-token-00000000000002";

/// A model endpoint that answers every request after `delay`, so a run stays busy
/// meanwhile (a stand-in: the suites' recording server answers at once).
fn slow_server(delay: Duration) -> String {
    let base = standin(Serve::Concurrently, move |_, stream| {
        std::thread::sleep(delay);
        respond(
            stream,
            "200 OK",
            "text/event-stream",
            &text_answer("slow", "Slow answer."),
        );
    });
    format!("{base}/v1")
}

/// The events of a stream the driver recorded: `[event, data, id]`.
fn events(stream: &Value) -> Vec<&str> {
    stream
        .as_array()
        .unwrap_or_else(|| panic!("not a stream: {stream}"))
        .iter()
        .map(|p| p[0].as_str().unwrap())
        .collect()
}

/// The `data` of the last frame named `event`.
fn last<'a>(stream: &'a Value, event: &str) -> &'a Value {
    &stream
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|p| p[0] == event)
        .unwrap_or_else(|| panic!("no {event} frame in {stream}"))[1]
}

/// `(type, content)` of each message of `values`.
fn contents(values: &Value) -> Vec<(String, String)> {
    values["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["type"].as_str().unwrap().to_owned(),
                m["content"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn langgraph_sdk_clients_continue_threads_and_never_see_another_users() {
    let model = recording_server(vec![
        Reply::text("Antler is an agent runtime."),
        Reply::text("Second answer."),
        Reply::text("Third answer."),
        Reply::text("Fourth answer."),
        Reply::text("Waited answer."),
    ]);
    let clarify = recording_server(vec![
        Reply::call(
            "ask_clarification",
            serde_json::json!({"question": "Which year?", "clarification_type": "missing_info", "options": ["2024", "2025"]}),
        ),
        Reply::text("The report covers 2025."),
    ]);
    let slow = slow_server(Duration::from_secs(3));
    // Never answers while the test lasts: only a cancel ends its run.
    let stall = slow_server(Duration::from_secs(600));
    let config = format!(
        "models:\n  - name: fast\n    use: langchain_openai:ChatOpenAI\n    model: fast\n    base_url: {}\n    api_key: sk-test\n  - name: slow\n    use: langchain_openai:ChatOpenAI\n    model: slow\n    base_url: {slow}\n    api_key: sk-test\n  - name: stall\n    use: langchain_openai:ChatOpenAI\n    model: stall\n    base_url: {stall}\n    api_key: sk-test\n  - name: clarify\n    use: langchain_openai:ChatOpenAI\n    model: clarify\n    base_url: {}\n    api_key: sk-test\ntool_search:\n  enabled: false\nantler:\n  gateway:\n    tokens:\n      - {{token: {ALICE}, user: alice, role: member}}\n      - {{token: {BOB}, user: bob, role: member}}\n",
        model.base_url, clarify.base_url
    );
    let cluster = LeadCluster::up(&config, &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")]);
    let base = format!("http://{}/api", cluster.gateway());
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("peers/langgraph_client.py");
    let out = Command::new("python3")
        .arg(script)
        .args([&base, ALICE, BOB])
        .output()
        .expect("run the langgraph-sdk driver");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the driver failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_str(stdout.trim()).expect("one JSON report");

    // Created once, as the caller's, without the owner keys it tried to set.
    let thread = r["created"]["thread_id"].as_str().unwrap();
    assert_eq!(r["created"]["status"], "idle");
    assert_eq!(
        r["created"]["metadata"],
        serde_json::json!({"suite": "langgraph"})
    );
    assert_eq!(r["created_again"]["thread_id"], thread);
    assert_eq!(r["created_again"]["metadata"]["suite"], "langgraph");

    // The SDK read the run from `Content-Location`.
    assert_eq!(
        r["run_created"][0]["run_id"],
        r["stream_all"][0][1]["run_id"]
    );
    assert_eq!(r["run_created"][0]["thread_id"], thread);

    // Every accepted mode: `metadata` first, `end` last; the modes asked, no others.
    let all = &r["stream_all"];
    let names = events(all);
    assert_eq!(names.first(), Some(&"metadata"), "{names:?}");
    assert_eq!(names.last(), Some(&"end"), "{names:?}");
    assert_eq!(all[0][1]["thread_id"], thread);
    for mode in ["values", "updates", "messages"] {
        assert!(names.contains(&mode), "no {mode} frame: {names:?}");
    }
    assert_eq!(
        contents(last(all, "values")),
        [
            ("human".to_owned(), "What is Antler?".to_owned()),
            ("ai".to_owned(), "Antler is an agent runtime.".to_owned())
        ]
    );
    // The reply as `messages` frames: token chunks (`AIMessageChunk`, one id) whose text
    // adds up to the reply, or the whole message when the model did not stream.
    let frames: Vec<&Value> = all
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f[0] == "messages")
        .map(|f| &f[1])
        .collect();
    let chunks: String = frames
        .iter()
        .filter(|f| f[0]["type"] == "AIMessageChunk")
        .map(|f| f[0]["content"].as_str().unwrap_or(""))
        .collect();
    let whole = frames
        .iter()
        .any(|f| f[0]["type"] == "ai" && f[0]["content"] == "Antler is an agent runtime.");
    assert!(
        chunks == "Antler is an agent runtime." || whole,
        "{frames:?}"
    );
    assert_eq!(last(all, "messages")[1]["thread_id"], thread);
    assert_eq!(
        last(all, "updates")["model"]["messages"][0]["content"],
        "Antler is an agent runtime."
    );
    // One mode alone: only its frames.
    let values_only = events(&r["stream_values"]);
    assert!(values_only.contains(&"values"), "{values_only:?}");
    assert!(
        values_only
            .iter()
            .all(|e| matches!(*e, "metadata" | "values" | "end")),
        "{values_only:?}"
    );
    assert!(events(&r["stream_messages"])
        .iter()
        .all(|e| matches!(*e, "metadata" | "messages" | "end")));
    assert!(events(&r["stream_updates"]).contains(&"updates"));

    // The thread continued: the model's second request held the first exchange, and
    // the state holds all four, with AI message ids unique across runs.
    let requests = model.requests.lock().unwrap().clone();
    let second = serde_json::to_string(&requests[1]["messages"]).unwrap();
    assert!(
        second.contains("What is Antler?")
            && second.contains("Antler is an agent runtime.")
            && second.contains("And a second question?"),
        "{second}"
    );
    let state = &r["state"]["values"];
    let messages = contents(state);
    assert_eq!(messages.len(), 8, "{messages:?}");
    assert_eq!(messages[7], ("ai".to_owned(), "Fourth answer.".to_owned()));
    let ids: std::collections::HashSet<&str> = state["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 8, "message ids repeat: {state}");
    assert_eq!(r["thread"]["values"]["messages"], state["messages"]);
    assert_eq!(r["history"].as_array().unwrap().len(), 4);
    assert_eq!(r["history"][0]["values"]["messages"], state["messages"]);
    assert_eq!(r["search"][0]["thread_id"], thread);
    assert_eq!(r["search_none"], serde_json::json!([]));
    assert_eq!(r["runs"].as_array().unwrap().len(), 4);
    assert!(r["runs"]
        .as_array()
        .unwrap()
        .iter()
        .all(|run| run["status"] == "success"));
    assert_eq!(r["run"]["thread_id"], thread);

    // Another user: the same 404 as a thread that does not exist, everywhere.
    let not_found = serde_json::json!([404, format!("Thread {thread} not found")]);
    for key in ["bob_get", "bob_state", "bob_stream", "bob_delete"] {
        assert_eq!(r[key], not_found, "{key}");
    }
    assert_eq!(r["bob_search"], serde_json::json!([]));
    assert_eq!(r["bob_run"][0], 404);

    // DeerFlow's refusals, with its texts.
    assert_eq!(
        r["bad_mode"],
        serde_json::json!([422, "Unsupported stream mode(s): messages"])
    );
    assert_eq!(
        r["bad_option"],
        serde_json::json!([422, "Run option 'webhook' is not supported by DeerFlow"])
    );
    assert_eq!(
        r["bad_thread"],
        serde_json::json!([
            422,
            "Invalid thread_id: expected 1-64 ASCII letters, digits, hyphens, or underscores"
        ])
    );

    assert_eq!(
        r["bad_model"],
        serde_json::json!([400, "Model 'nope' is not in the configured model allowlist"])
    );

    // A busy thread refuses a second run and a delete, then the run ends.
    assert_eq!(
        r["busy_run"],
        serde_json::json!([409, format!("Thread {thread} already has an active run")])
    );
    assert_eq!(
        r["busy_delete"],
        serde_json::json!([
            409,
            "Thread has work in flight. Delete it after the work finishes."
        ])
    );
    assert_eq!(contents(&r["joined"]).last().unwrap().1, "Slow answer.");

    // Joined again after its first frame's id (a reconnect): from the store's kept events,
    // what follows it and nothing before it (no second `metadata`), to the same final
    // state and `end`, every id past the one given; joined whole: the whole run.
    let cursor = |id: &Value| -> (u64, u64) {
        let (e, s) = id.as_str().unwrap().split_once('-').unwrap();
        (e.parse().unwrap(), s.parse().unwrap())
    };
    let after = events(&r["replay_after"]);
    assert!(
        !after.contains(&"metadata") && after.last() == Some(&"end"),
        "{after:?}"
    );
    assert_eq!(last(&r["replay_after"], "values"), last(all, "values"));
    let from = cursor(&r["replay_from"]);
    for frame in r["replay_after"].as_array().unwrap() {
        if !frame[2].is_null() {
            assert!(
                cursor(&frame[2]) > from,
                "{frame} repeats what came before {from:?}"
            );
        }
    }
    assert_eq!(events(&r["replay"]).first(), Some(&"metadata"));
    assert_eq!(last(&r["replay"], "values"), last(all, "values"));

    // Waited for; cancelled (interrupted), and not cancellable again.
    assert_eq!(contents(&r["waited"]).last().unwrap().1, "Waited answer.");
    assert_eq!(r["cancelled"]["status"], "interrupted");
    let cancelled = r["cancelled"]["run_id"].as_str().unwrap();
    assert_eq!(
        r["cancel_again"],
        serde_json::json!([
            409,
            format!("Run {cancelled} is not cancellable (status: interrupted)")
        ])
    );

    // `rollback`: the live run ends `error` and the thread forgets it; `interrupt`: the
    // live run ends `interrupted` and its message stays.
    assert_eq!(r["rolled_back"]["status"], "error");
    assert_eq!(r["rolled_back"]["error"], "Rolled back by user");
    let after_rollback = contents(&r["rollback_values"]);
    assert!(
        !after_rollback.iter().any(|(_, c)| c == "Take this back."),
        "{after_rollback:?}"
    );
    assert_eq!(after_rollback[after_rollback.len() - 2].1, "Instead, this.");
    assert_eq!(r["interrupted"]["status"], "interrupted");
    let after_interrupt = contents(&r["interrupt_values"]);
    assert!(
        after_interrupt.iter().any(|(_, c)| c == "Keep this."),
        "{after_interrupt:?}"
    );
    assert_eq!(
        after_interrupt[after_interrupt.len() - 2].1,
        "And now this."
    );

    // A clarification: the run stops at the question, the thread is `interrupted`; the
    // answer drives the same run to its answer.
    let first = &r["clarify_first"];
    let asked_run = first[0][1]["run_id"].as_str().unwrap();
    assert_eq!(events(first).last(), Some(&"end"));
    assert_eq!(r["clarify_thread"]["status"], "interrupted");
    let answered = &r["clarify_answer"];
    assert_eq!(answered[0][1]["run_id"], asked_run, "{answered}");
    assert_eq!(
        contents(last(answered, "values")).last().unwrap().1,
        "The report covers 2025."
    );
    let second_ask = serde_json::to_string(&clarify.requests.lock().unwrap()[1]).unwrap();
    assert!(second_ask.contains("2025"), "{second_ask}");

    // Antler's own `POST /api/runs` with the thread continues it, and the LangGraph
    // routes join that run.
    assert_eq!(r["own_run"][0], 201, "{}", r["own_run"]);
    let own = contents(&r["own_joined"]);
    assert_eq!(own[own.len() - 2].1, "Through Antler's own route.");

    // The client hung up mid-stream: the run was cancelled (on_disconnect: cancel).
    assert_eq!(r["hung_up"], "interrupted");

    // Deleted, with its files.
    assert_eq!(r["delete"][0], 200);
    assert_eq!(r["after_delete"], not_found);
    assert!(!cluster
        .base()
        .join("users/alice/threads")
        .join(thread)
        .exists());
}

/// The driver's report for `args` against the gateway of `cluster`.
fn driver(cluster: &LeadCluster, args: &[&str]) -> Value {
    let base = format!("http://{}/api", cluster.gateway());
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("peers/langgraph_client.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(&base)
        .args(args)
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

#[test]
fn a_stream_is_joined_again_after_a_lead_restart_from_the_kept_events() {
    let model = recording_server(vec![Reply::text("Kept across the restart.")]);
    let config = format!(
        "models:\n  - name: fast\n    use: langchain_openai:ChatOpenAI\n    model: fast\n    base_url: {}\n    api_key: sk-test\ntool_search:\n  enabled: false\nantler:\n  gateway:\n    tokens:\n      - {{token: {ALICE}, user: alice, role: member}}\n",
        model.base_url
    );
    let mut cluster = LeadCluster::up(&config, &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")]);
    let started = driver(&cluster, &[ALICE, "start"]);
    let live = &started["stream"];
    assert_eq!(events(live).last(), Some(&"end"), "{live}");
    // The lead is killed and started again: nothing of the run is in its memory now.
    cluster.kill_lead();
    let _ = std::fs::remove_file(cluster.runtime().join("gateway.addr"));
    cluster.start();
    let (thread, run) = (
        started["thread"].as_str().unwrap(),
        started["run"].as_str().unwrap(),
    );
    let first_id = live[0][2].as_str().unwrap();
    let joined = driver(&cluster, &[ALICE, "join", thread, run, first_id]);
    let frames = &joined["stream"];
    let names = events(frames);
    // What followed the first frame, from the store: no `gap`, no second `metadata`, the
    // same final state, then `end`.
    assert!(
        !names.contains(&"gap") && !names.contains(&"metadata"),
        "{names:?}"
    );
    assert_eq!(names.last(), Some(&"end"), "{names:?}");
    assert_eq!(last(frames, "values"), last(live, "values"));
    assert_eq!(
        contents(last(frames, "values")).last().unwrap().1,
        "Kept across the restart."
    );
}
