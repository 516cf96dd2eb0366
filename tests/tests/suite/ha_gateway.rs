//! The gateway on every lead (issue 38): two `antler up` leads on one PostgreSQL, each with
//! its gateway, the same operator token and the same user tokens. A run lead A drives and
//! that waits for a clarification answer is read on lead B from the store, answered
//! through B (forwarded to A, which holds the run's lease: the run goes on there, at the
//! same epoch, and succeeds), refused on B to another user as a missing run is, and a
//! second such run is cancelled through B, and a third run's approval is decided through
//! B. Each lead advertises its gateway in `leads`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use antler_tests::wait_for;
use serde_json::{json, Value};

use crate::lead_support::http_full;
use crate::pg_support::leads::{self, advertised, call, workdir, Lead};
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

/// A push that waits for a person's approval (the `push` rule).
const PUSH: &str = r#"
turns:
  - tool_calls:
      - {name: bash, id: push-1, args: {description: push, command: "git push origin main"}}
  - content: Done pushing.
"#;

/// Starts a run of [`ASK`] as alice on `addr`; its id, once it waits for its answer.
fn asking_run(addr: &str) -> String {
    started(addr, ASK)
}

/// Starts a run of `playbook` as alice on `addr`; its id, once it waits for a person.
fn started(addr: &str, playbook: &str) -> String {
    let (code, body) = call(
        addr,
        ALICE,
        "POST",
        "/api/runs",
        Some(&json!({"task": "Note the year", "playbook_yaml": playbook, "clarification": true})),
    );
    assert_eq!(code, 201, "{body}");
    let run_id = body["run_id"].as_str().unwrap().to_owned();
    status_becomes(addr, &run_id, "interrupted");
    run_id
}

/// Waits until `addr` shows alice's run `run_id` with `status`; its view.
fn status_becomes(addr: &str, run_id: &str, status: &str) -> Value {
    wait_for(Duration::from_secs(60), || {
        let (code, view) = call(addr, ALICE, "GET", &format!("/api/runs/{run_id}"), None);
        (code == 200 && view["status"] == status).then_some(view)
    })
    .unwrap_or_else(|| panic!("run {run_id} never showed {status} on {addr}"))
}

/// The run's lease row: (owner, epoch).
async fn lease(client: &tokio_postgres::Client, run_id: &str) -> (Option<String>, i64) {
    leads::lease(client, run_id)
        .await
        .expect("the run has a lease")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_posted_to_the_lead_that_does_not_drive_the_run_reaches_its_owner() {
    let db = database("ha_gateway").await;
    let pg = connect(&db.dsn).await;
    let tmp = workdir(
        "antler-ha-gw",
        &format!(
            "tools:\n  - {{name: bash, group: bash, use: deerflow.sandbox.tools:bash_tool}}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\ntool_search:\n  enabled: false\napprovals:\n  defaults: false\n  deadline_seconds: 3600\n  rules:\n    - {{name: push, tool: bash, command: [git, push], decision: ask, justification: Pushing publishes commits}}\nantler:\n  ha:\n    lease_ttl_ms: 3000\n  gateway:\n    allow_scripted_models: true\n    tokens:\n      - {{token: {ALICE}, user: alice}}\n      - {{token: {BOB}, user: bob}}\n"
        ),
    );
    let dir = tmp.path();
    let lead_a = Lead::up(dir, dir.join("a"), &db.dsn, OPERATOR);
    let lead_b = Lead::up(dir, dir.join("b"), &db.dsn, OPERATOR);
    let (a, b) = (lead_a.gateway(), lead_b.gateway());

    // Each lead advertised its own gateway.
    let advertised = advertised(&pg, 2).await;
    let mut expected = vec![format!("http://{a}"), format!("http://{b}")];
    expected.sort();
    assert_eq!(advertised, expected);

    // A drives alice's run, which waits for its answer and keeps its lease on A.
    let run_id = asking_run(&a);
    let (owner_a, epoch) = lease(&pg, &run_id).await;
    let owner_a = owner_a.expect("A holds the waiting run");
    assert_eq!(epoch, 1);

    // B reads it from the store.
    let view = status_becomes(&b, &run_id, "interrupted");
    assert_eq!(view["run_id"], run_id.as_str());

    // Bob's answer through B is the 404 of a run that does not exist.
    let answer = json!({"answer": "2025"});
    let (code, refused) = call(
        &b,
        BOB,
        "POST",
        &format!("/api/runs/{run_id}/answer"),
        Some(&answer),
    );
    assert_eq!(code, 404, "{refused}");
    let (code, missing) = call(&b, BOB, "POST", "/api/runs/run-nope/answer", Some(&answer));
    assert_eq!(code, 404, "{missing}");
    assert_eq!(
        refused["detail"].as_str().unwrap().replace(&run_id, "ID"),
        missing["detail"]
            .as_str()
            .unwrap()
            .replace("run-nope", "ID"),
    );
    // The owner checks the principal too: a forwarded request is not trusted blindly.
    let (code, _, text) = http_full_forwarded(&a, BOB, &format!("/api/runs/{run_id}/answer"));
    assert_eq!(code, 404, "{text}");

    // Alice's answer through B: forwarded to A, where the run goes on and succeeds.
    let (code, body) = call(
        &b,
        ALICE,
        "POST",
        &format!("/api/runs/{run_id}/answer"),
        Some(&answer),
    );
    assert_eq!(code, 202, "{body}");
    assert_eq!(body["run_id"], run_id.as_str());
    status_becomes(&a, &run_id, "success");
    status_becomes(&b, &run_id, "success");
    // Driven on by A: no takeover, no new epoch.
    let (_, epoch) = lease(&pg, &run_id).await;
    assert_eq!(epoch, 1);
    let takeovers = pg
        .query(
            "SELECT event FROM run_events WHERE run_id = $1 AND event LIKE '%lead_takeover%'",
            &[&run_id],
        )
        .await
        .unwrap();
    assert!(takeovers.is_empty());
    let (code, state) = call(
        &b,
        ALICE,
        "GET",
        &format!("/api/runs/{run_id}/messages"),
        None,
    );
    assert_eq!(code, 200, "{state}");
    assert!(state.to_string().contains("2025"), "{state}");
    // Its events on B: the stored view at its end.
    let (code, _, events) = http_full(
        &b,
        ALICE,
        "GET",
        &format!("/api/runs/{run_id}/events"),
        None,
    );
    assert_eq!(code, 200, "{events}");
    assert!(
        events.contains("event: end") && events.contains("success"),
        "{events}"
    );

    // A cancel posted to B cancels A's run.
    let second = asking_run(&a);
    let (owner, _) = lease(&pg, &second).await;
    assert_eq!(owner.as_deref(), Some(owner_a.as_str()));
    let (code, body) = call(&b, BOB, "POST", &format!("/api/runs/{second}/cancel"), None);
    assert_eq!(code, 404, "{body}");
    let (code, body) = call(
        &b,
        ALICE,
        "POST",
        &format!("/api/runs/{second}/cancel"),
        None,
    );
    assert_eq!(code, 202, "{body}");
    assert_eq!(body["cancelled"], true, "{body}");
    status_becomes(&b, &second, "error");

    // An approval posted to B is decided on A, where the run goes on.
    let third = started(&a, PUSH);
    let (owner, _) = lease(&pg, &third).await;
    assert_eq!(owner.as_deref(), Some(owner_a.as_str()));
    let path = format!("/api/runs/{third}/approvals/push-1");
    let deny = json!({"decision": "deny", "reason": "not today"});
    let (code, body) = call(&b, BOB, "POST", &path, Some(&deny));
    assert_eq!(code, 404, "{body}");
    let (code, body) = call(&b, ALICE, "POST", &path, Some(&deny));
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["decision"], "deny", "{body}");
    status_becomes(&b, &third, "success");
    let (_, epoch) = lease(&pg, &third).await;
    assert_eq!(epoch, 1);

    drop(lead_b);
    drop(lead_a);
}

/// A `POST` of an answer to `addr` marked as forwarded already (as another lead sends it).
fn http_full_forwarded(addr: &str, token: &str, path: &str) -> (u16, String, String) {
    use std::io::{Read, Write};
    let body = json!({"answer": "2025"}).to_string();
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAuthorization: Bearer {token}\r\nx-antler-forwarded: 1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, String::new(), text)
}
