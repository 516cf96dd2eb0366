//! The LangGraph-compatible resume on every lead (issue 38): two `antler up` leads on one
//! PostgreSQL. Lead A drives alice's runs, each on a thread of hers, until each waits for a
//! clarification answer (its lease on A at epoch 1). Through lead B, `command.resume` of
//! such a thread's run goes to A in each of its three forms: `POST /api/threads/{tid}/runs`
//! answers the run's `Run`, `/runs/stream` streams A's frames through B as A writes them
//! (metadata, the values with the answer and the model's reply, `end`), and `/runs/wait`
//! answers the thread's final values, as does the stateless `/api/runs/wait` naming the
//! thread in `config.configurable.thread_id`; each run goes on on A, at the same epoch,
//! with no takeover, and succeeds. Bob's resume of alice's thread through B is the 404 of
//! a thread that does not exist.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use antler_tests::wait_for;
use serde_json::{json, Value};

use crate::lead_support::http_full;
use crate::pg_support::leads::{advertised, call, lease, workdir, Lead};
use crate::pg_support::{connect, database};

const ALICE: &str = "alice-token-000000000001";
const BOB: &str = "bob-token-00000000000002";
const OPERATOR: &str = "operator-token-0000000000000003";

const ASK: &str = r#"
turns:
  - tool_calls:
      - name: ask_clarification
        args: {question: "Which year?", clarification_type: missing_info}
  - content: The year is noted.
"#;

/// Waits until `addr` shows alice's run `run_id` with `status`; its view.
fn status_becomes(addr: &str, run_id: &str, status: &str) -> Value {
    wait_for(Duration::from_secs(60), || {
        let (code, view) = call(addr, ALICE, "GET", &format!("/api/runs/{run_id}"), None);
        (code == 200 && view["status"] == status).then_some(view)
    })
    .unwrap_or_else(|| panic!("run {run_id} never showed {status} on {addr}"))
}

/// Alice's thread `thread` on `addr`, with a run of [`ASK`] on it waiting for its answer:
/// the run's id.
fn waiting_on_thread(addr: &str, thread: &str) -> String {
    let (code, body) = call(
        addr,
        ALICE,
        "POST",
        "/api/threads",
        Some(&json!({"thread_id": thread})),
    );
    assert_eq!(code, 200, "{body}");
    let (code, body) = call(
        addr,
        ALICE,
        "POST",
        "/api/runs",
        Some(&json!({
            "task": "Note the year",
            "thread": thread,
            "playbook_yaml": ASK,
            "clarification": true,
        })),
    );
    assert_eq!(code, 201, "{body}");
    let run_id = body["run_id"].as_str().unwrap().to_owned();
    status_becomes(addr, &run_id, "interrupted");
    run_id
}

/// The `lead_takeover` events the store holds for `run_id`.
async fn takeovers(pg: &tokio_postgres::Client, run_id: &str) -> usize {
    pg.query(
        "SELECT event FROM run_events WHERE run_id = $1 AND event LIKE '%lead_takeover%'",
        &[&run_id],
    )
    .await
    .unwrap()
    .len()
}

/// The run's lease is still A's, at epoch 1, and no lead took it over.
async fn still_on_a(pg: &tokio_postgres::Client, run_id: &str, owner_a: &str) {
    let (owner, epoch) = lease(pg, run_id).await.expect("the run has a lease");
    assert_eq!(epoch, 1, "{run_id}");
    // Released at its end, or still held by A.
    assert!(
        owner.is_none() || owner.as_deref() == Some(owner_a),
        "{owner:?}"
    );
    assert_eq!(takeovers(pg, run_id).await, 0, "{run_id}");
}

/// The `data` of every `event` frame of a server-sent events text, in order.
fn frames<'a>(text: &'a str, event: &str) -> Vec<&'a str> {
    let mut found = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim_end() == format!("event: {event}") {
            if let Some(data) = lines.next().and_then(|l| l.strip_prefix("data: ")) {
                found.push(data);
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_langgraph_resume_sent_to_the_lead_that_does_not_drive_the_run_reaches_its_owner() {
    let db = database("ha_lg_resume").await;
    let pg = connect(&db.dsn).await;
    let tmp = workdir(
        "antler-ha-lg",
        &format!(
            "sandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\ntool_search:\n  enabled: false\nantler:\n  ha:\n    lease_ttl_ms: 3000\n  gateway:\n    allow_scripted_models: true\n    tokens:\n      - {{token: {ALICE}, user: alice}}\n      - {{token: {BOB}, user: bob}}\n"
        ),
    );
    let dir = tmp.path();
    let lead_a = Lead::up(dir, dir.join("a"), &db.dsn, OPERATOR);
    let lead_b = Lead::up(dir, dir.join("b"), &db.dsn, OPERATOR);
    let (a, b) = (lead_a.gateway(), lead_b.gateway());
    assert_eq!(advertised(&pg, 2).await.len(), 2);

    // The streamed form: B streams A's frames through as A writes them.
    let run_id = waiting_on_thread(&a, "t-stream");
    let (owner_a, epoch) = lease(&pg, &run_id).await.unwrap();
    let owner_a = owner_a.expect("A holds the waiting run");
    assert_eq!(epoch, 1);
    let resume = json!({"command": {"resume": "2025"}, "stream_mode": ["values"]});
    // Bob's resume of alice's thread: the 404 of a thread that does not exist.
    let (code, refused) = call(
        &b,
        BOB,
        "POST",
        "/api/threads/t-stream/runs/stream",
        Some(&resume),
    );
    assert_eq!(code, 404, "{refused}");
    let (code, missing) = call(
        &b,
        BOB,
        "POST",
        "/api/threads/t-nope/runs/stream",
        Some(&resume),
    );
    assert_eq!(code, 404, "{missing}");
    assert_eq!(
        refused["detail"]
            .as_str()
            .unwrap()
            .replace("t-stream", "ID"),
        missing["detail"].as_str().unwrap().replace("t-nope", "ID"),
    );
    let (code, head, stream) = http_full(
        &b,
        ALICE,
        "POST",
        "/api/threads/t-stream/runs/stream",
        Some(&resume.to_string()),
    );
    assert_eq!(code, 200, "{head}\n{stream}");
    assert!(head.contains("text/event-stream"), "{head}");
    assert!(
        head.contains(&format!("/api/threads/t-stream/runs/{run_id}").to_ascii_lowercase()),
        "A's Content-Location: {head}"
    );
    let metadata = frames(&stream, "metadata");
    assert!(metadata.iter().any(|m| m.contains(&run_id)), "{stream}");
    let values = frames(&stream, "values");
    let last = values.last().expect("values frames");
    assert!(
        last.contains("2025") && last.contains("The year is noted."),
        "{stream}"
    );
    assert_eq!(frames(&stream, "end").len(), 1, "{stream}");
    status_becomes(&b, &run_id, "success");
    still_on_a(&pg, &run_id, &owner_a).await;

    // The waited form: the thread's values once the run ended on A.
    let run_id = waiting_on_thread(&a, "t-wait");
    let (code, values) = call(
        &b,
        ALICE,
        "POST",
        "/api/threads/t-wait/runs/wait",
        Some(&json!({"command": {"resume": "2024"}})),
    );
    assert_eq!(code, 200, "{values}");
    let text = values["messages"].to_string();
    assert!(
        text.contains("2024") && text.contains("The year is noted."),
        "{values}"
    );
    status_becomes(&b, &run_id, "success");
    still_on_a(&pg, &run_id, &owner_a).await;

    // The background form: A's `Run`, the same run, which goes on there.
    let run_id = waiting_on_thread(&a, "t-bg");
    let (code, run) = call(
        &b,
        ALICE,
        "POST",
        "/api/threads/t-bg/runs",
        Some(&json!({"command": {"resume": "2023"}})),
    );
    assert_eq!(code, 200, "{run}");
    assert_eq!(run["run_id"], run_id.as_str());
    assert_eq!(run["thread_id"], "t-bg");
    status_becomes(&b, &run_id, "success");
    let (code, messages) = call(
        &b,
        ALICE,
        "GET",
        &format!("/api/runs/{run_id}/messages"),
        None,
    );
    assert_eq!(code, 200, "{messages}");
    assert!(messages.to_string().contains("2023"), "{messages}");
    still_on_a(&pg, &run_id, &owner_a).await;

    // The stateless waited form, its thread named by `config.configurable.thread_id`.
    let run_id = waiting_on_thread(&a, "t-stateless");
    let (code, values) = call(
        &b,
        ALICE,
        "POST",
        "/api/runs/wait",
        Some(&json!({
            "command": {"resume": "2022"},
            "config": {"configurable": {"thread_id": "t-stateless"}},
        })),
    );
    assert_eq!(code, 200, "{values}");
    let text = values["messages"].to_string();
    assert!(
        text.contains("2022") && text.contains("The year is noted."),
        "{values}"
    );
    status_becomes(&b, &run_id, "success");
    still_on_a(&pg, &run_id, &owner_a).await;

    drop(lead_b);
    drop(lead_a);
}
