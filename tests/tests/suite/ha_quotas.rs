//! The submissions-per-minute limit shared by every lead (issue 38, lead/src/ha/submissions.rs)
//! against a real PostgreSQL: takes racing on several connections spend a user's budget
//! exactly (a burst of `per_minute`, then a wait of about one interval), each user its own;
//! and two `antler up` leads on one database hold alice to 3 submissions a minute between
//! them: her fourth is refused (429, `Retry-After`, the limit's detail) on either lead,
//! while bob's goes through.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use antler_lead::ha::Leases;
use futures::future::join_all;
use serde_json::json;

use crate::lead_support::http_full;
use crate::pg_support::leads::{advertised, call, workdir, Lead};
use crate::pg_support::{connect, database};

const ALICE: &str = "alice-token-000000000001";
const BOB: &str = "bob-token-00000000000002";
const OPERATOR: &str = "operator-token-0000000000000003";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_takes_on_several_connections_spend_a_budget_exactly() {
    let db = database("ha_quotas").await;
    let leads: Vec<Leases> = join_all((0..4).map(|_| Leases::open(&db.dsn)))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    // 20 takes of alice's 6 a minute, five on each of four connections, all at once.
    let takes = (0..20).map(|i| leads[i % 4].take_submission("alice", 6));
    let answers: Vec<Option<Duration>> = join_all(takes)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let taken = answers.iter().filter(|a| a.is_none()).count();
    assert_eq!(taken, 6, "{answers:?}");
    // A refusal waits for the next submission's place: one interval (10 s) at most.
    for wait in answers.iter().flatten() {
        assert!(
            *wait > Duration::ZERO && *wait <= Duration::from_secs(10),
            "{wait:?}"
        );
    }
    // Each user has a budget of their own.
    assert_eq!(leads[1].take_submission("bob", 6).await.unwrap(), None);
    let pg = connect(&db.dsn).await;
    let users: Vec<String> = pg
        .query(
            "SELECT user_id FROM gateway_submissions ORDER BY user_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(users, ["alice", "bob"]);
    // A budget full again is swept (its next arrival time moved into the past here).
    pg.execute(
        "UPDATE gateway_submissions SET tat = now() - interval '1 second' WHERE user_id = 'bob'",
        &[],
    )
    .await
    .unwrap();
    let swept = leads[0]
        .sweep(Duration::from_secs(3600), 1000)
        .await
        .unwrap();
    assert_eq!(swept.submissions, 1);
    assert_eq!(leads[0].take_submission("bob", 6).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_leads_hold_a_user_to_one_submissions_per_minute_limit() {
    let db = database("ha_quotas_leads").await;
    let pg = connect(&db.dsn).await;
    let tmp = workdir(
        "antler-ha-quota",
        &format!(
            "sandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\ntool_search:\n  enabled: false\nantler:\n  ha:\n    lease_ttl_ms: 3000\n  gateway:\n    allow_scripted_models: true\n    limits:\n      submissions_per_minute: 3\n      concurrent_runs: 10\n    tokens:\n      - {{token: {ALICE}, user: alice}}\n      - {{token: {BOB}, user: bob}}\n"
        ),
    );
    let dir = tmp.path();
    let lead_a = Lead::up(dir, dir.join("a"), &db.dsn, OPERATOR);
    let lead_b = Lead::up(dir, dir.join("b"), &db.dsn, OPERATOR);
    let (a, b) = (lead_a.gateway(), lead_b.gateway());
    assert_eq!(advertised(&pg, 2).await.len(), 2);

    let run =
        json!({"task": "Say done", "playbook_yaml": "turns:\n  - content: Done.\n"}).to_string();
    let submit = |addr: &str, token: &str| http_full(addr, token, "POST", "/api/runs", Some(&run));
    // Three of alice's through A, B and A: each lead alone would allow three.
    for addr in [&a, &b, &a] {
        let (code, _, body) = submit(addr, ALICE);
        assert_eq!(code, 201, "{addr}: {body}");
    }
    // Her fourth, on either lead, is over the limit they share.
    for addr in [&b, &a] {
        let (code, head, body) = submit(addr, ALICE);
        assert_eq!(code, 429, "{addr}: {body}");
        let detail: serde_json::Value = serde_json::from_str(&body).unwrap();
        let detail = detail["detail"].as_str().unwrap();
        assert!(
            detail.starts_with("user alice submitted more than 3 runs in a minute: retry after "),
            "{detail}"
        );
        let retry_after: u64 = head
            .lines()
            .find_map(|l| l.strip_prefix("retry-after: "))
            .expect("a Retry-After header")
            .trim()
            .parse()
            .unwrap();
        // The next place comes one interval (20 s) after the burst at most.
        assert!((1..=20).contains(&retry_after), "{retry_after}");
    }
    // Bob's budget is his own.
    let (code, _, body) = submit(&b, BOB);
    assert_eq!(code, 201, "{body}");
    // The operator is not limited.
    let (code, body) = call(
        &b,
        OPERATOR,
        "POST",
        "/api/runs",
        Some(&json!({"task": "Say done", "playbook_yaml": "turns:\n  - content: Done.\n"})),
    );
    assert_eq!(code, 201, "{body}");

    drop(lead_b);
    drop(lead_a);
}
