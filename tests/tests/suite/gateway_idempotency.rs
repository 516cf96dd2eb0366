//! `POST /api/runs` with an `Idempotency-Key` is safe to repeat: a client whose reply was
//! lost (a timeout, a lead restart) sends the submission again with the same key and gets
//! the first one's run, not a second run doing the same work twice. Another user's same
//! key is another run; a malformed key is refused with a clear error.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use antler_tests::{http, wait_for, Cluster};
use serde_json::{json, Value};

const PLAYBOOK: &str = "turns:\n  - delay_ms: 300\n    content: Done once.\n";

fn submit(c: &Cluster, key: Option<&str>, body: &Value) -> (u16, Value) {
    let addr = c.gateway_addr().unwrap();
    let auth = format!("Bearer {}", c.gateway_token());
    let mut headers = vec![("Authorization", auth.as_str())];
    if let Some(k) = key {
        headers.push(("Idempotency-Key", k));
    }
    let (status, text) = http(
        &addr,
        "POST",
        "/api/runs",
        &headers,
        Some(&body.to_string()),
    );
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn runs_of(c: &Cluster, thread: &str) -> Vec<Value> {
    let (status, text) = c.gateway_http("GET", "/api/runs", None);
    assert_eq!(status, 200, "{text}");
    let list: Value = serde_json::from_str(&text).unwrap();
    let runs = list
        .as_array()
        .or_else(|| list["runs"].as_array())
        .cloned()
        .unwrap_or_default();
    runs.into_iter()
        .filter(|r| r["thread_id"] == thread || r["thread"] == thread)
        .collect()
}

#[test]
fn a_repeated_submission_with_its_key_is_the_same_run() {
    let c = Cluster::up_ready(0, &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")]);
    let body = json!({"task": "once", "thread": "idem-1", "playbook_yaml": PLAYBOOK});

    let (first, a) = submit(&c, Some("order-42"), &body);
    assert_eq!(first, 201, "{a}");
    let (again, b) = submit(&c, Some("order-42"), &body);
    assert!(again == 201 || again == 200, "{again} {b}");
    assert_eq!(a["run_id"], b["run_id"], "the repeat started another run");

    // Once the run has ended, a repeat still answers it.
    let id = a["run_id"].as_str().unwrap().to_owned();
    let ended = wait_for(Duration::from_secs(60), || {
        let (_, text) = c.gateway_http("GET", &format!("/api/runs/{id}"), None);
        let v: Value = serde_json::from_str(&text).ok()?;
        (v["status"] == "success").then_some(v)
    });
    assert!(ended.is_some(), "the run did not end");
    let (_, late) = submit(&c, Some("order-42"), &body);
    assert_eq!(late["run_id"], a["run_id"]);
    assert_eq!(runs_of(&c, "idem-1").len(), 1, "one run for one key");

    // Without a key, or with another, each submission is a run of its own (each on a
    // thread of its own: runs of one thread are serialised, a second is 409).
    let on = |thread: &str| json!({"task": "once", "thread": thread, "playbook_yaml": PLAYBOOK});
    let (_, plain1) = submit(&c, None, &on("idem-2"));
    let (_, plain2) = submit(&c, None, &on("idem-3"));
    let (_, other) = submit(&c, Some("order-43"), &on("idem-4"));
    let ids = [
        &a["run_id"],
        &plain1["run_id"],
        &plain2["run_id"],
        &other["run_id"],
    ];
    for (i, x) in ids.iter().enumerate() {
        assert!(x.is_string(), "{x}");
        for y in &ids[i + 1..] {
            assert_ne!(x, y);
        }
    }

    // A malformed key is refused, and says what a key must be.
    for bad in ["", "has space", &"k".repeat(201)] {
        let (status, reply) = submit(&c, Some(bad), &body);
        assert_eq!(status, 400, "{bad:?}: {reply}");
        assert!(
            reply.to_string().contains("Idempotency-Key"),
            "{bad:?}: {reply}"
        );
    }
}
