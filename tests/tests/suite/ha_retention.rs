//! Retention of the lease tables (lead/src/ha/retention.rs, docs/ha.md) against a real
//! PostgreSQL: a sweep removes the released leases of finished runs (`success`, `error`)
//! released longer than the retention ago on the database's clock, and the rows of leads
//! not renewed for as long; it keeps a lease still held or lapsed, the lease of a run
//! waiting for an answer (its epoch must keep growing), of a running run, of a run the
//! runs table does not know, and anything younger than the retention; it removes at most
//! a batch per table. A lead whose row was removed writes it again at its next renewal.
//! Then an `antler up` lead with a short retention sweeps on its own: a finished run's
//! lease row and a dead lead's row go, its own row and the run's record stay.
//! "Long ago" is made by moving a row's time back in SQL: nothing waits on the wall clock.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use antler_lead::ha::{Epoch, LeadId, Leases, Swept};
use serde_json::json;

use crate::pg_support::leads::{advertised, call, lease, workdir, Lead};
use crate::pg_support::{connect, database};

/// A time to live no test outlasts.
const LONG: Duration = Duration::from_secs(600);
const HOUR: Duration = Duration::from_secs(3600);
const OPERATOR: &str = "operator-token-0000000000000003";

/// Records `run_id` in the runs table with `status`, as the runs store would.
async fn run_row(pg: &tokio_postgres::Client, run_id: &str, status: &str) {
    pg.execute(
        "INSERT INTO runs (run_id, user_id, thread_id, task, model, status)
         VALUES ($1, 'alice', 't-1', 'a task', 'scripted', $2)",
        &[&run_id, &status],
    )
    .await
    .unwrap();
}

/// Moves `run_id`'s lease expiry (a release's time) two hours back.
async fn two_hours_ago(pg: &tokio_postgres::Client, run_id: &str) {
    let moved = pg
        .execute(
            "UPDATE run_leases SET expires_at = now() - interval '2 hours' WHERE run_id = $1",
            &[&run_id],
        )
        .await
        .unwrap();
    assert_eq!(moved, 1, "{run_id}");
}

/// The run ids that have a lease row, sorted.
async fn leased(pg: &tokio_postgres::Client) -> Vec<String> {
    pg.query("SELECT run_id FROM run_leases ORDER BY run_id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// The lead ids in `leads`, sorted.
async fn lead_rows(pg: &tokio_postgres::Client) -> Vec<String> {
    pg.query("SELECT lead_id FROM leads ORDER BY lead_id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test]
async fn a_sweep_removes_only_old_released_leases_of_finished_runs_and_silent_leads() {
    let db = database("ha_retention").await;
    let leases = Leases::open(&db.dsn).await.unwrap();
    let pg = connect(&db.dsn).await;
    let a = LeadId::new("lead-a");

    // Each run gets a lease at epoch 1, and all but the held ones are released.
    let runs = [
        ("done", Some("success")),
        ("failed", Some("error")),
        ("waiting", Some("interrupted")),
        ("running", Some("running")),
        ("unknown", None),
        ("recent", Some("success")),
        ("held", Some("success")),
        ("lapsed", Some("success")),
    ];
    for (run, status) in runs {
        if let Some(status) = status {
            run_row(&pg, run, status).await;
        }
        let epoch = leases.acquire(run, &a, LONG).await.unwrap();
        assert_eq!(epoch.map(Epoch::get), Some(1), "{run}");
        if !["held", "lapsed"].contains(&run) {
            assert!(leases.release(run, &a, epoch.unwrap()).await.unwrap());
        }
    }
    // Released (or, for `lapsed`, let lapse) two hours ago, all but `recent` and `held`.
    for run in ["done", "failed", "waiting", "running", "unknown", "lapsed"] {
        two_hours_ago(&pg, run).await;
    }

    // Three leads advertised; one of them went silent two hours ago.
    for lead in ["lead-a", "lead-b", "lead-c"] {
        leases
            .advertise(&LeadId::new(lead), &format!("http://{lead}:8001"))
            .await
            .unwrap();
    }
    pg.execute(
        "UPDATE leads SET renewed_at = now() - interval '2 hours' WHERE lead_id = 'lead-b'",
        &[],
    )
    .await
    .unwrap();

    let swept = leases.sweep(HOUR, 1000).await.unwrap();
    assert_eq!(
        swept,
        Swept {
            leases: 2,
            leads: 1,
            submissions: 0,
        }
    );
    assert_eq!(
        leased(&pg).await,
        ["held", "lapsed", "recent", "running", "unknown", "waiting"]
    );
    assert_eq!(lead_rows(&pg).await, ["lead-a", "lead-c"]);
    // Nothing more to remove.
    assert_eq!(leases.sweep(HOUR, 1000).await.unwrap(), Swept::default());

    // The lapsed lease is still a takeover's: its next owner gets epoch 2.
    let lapsed = leases.expired(10).await.unwrap();
    assert_eq!(lapsed.len(), 1);
    assert_eq!(lapsed[0].run_id, "lapsed");
    // The waiting run's epoch is kept, so its next owner's is higher than every earlier one.
    let b = LeadId::new("lead-b");
    assert_eq!(
        leases
            .acquire("waiting", &b, LONG)
            .await
            .unwrap()
            .map(Epoch::get),
        Some(2)
    );
    // A swept finished run has no lease row left: its epoch is gone with it.
    assert_eq!(leases.lease("done").await.unwrap(), None);

    // A lead whose row was swept (it was only paused) writes it again at its next renewal.
    leases.advertise(&b, "http://lead-b:8001").await.unwrap();
    assert_eq!(lead_rows(&pg).await, ["lead-a", "lead-b", "lead-c"]);

    // The retention is judged on the database's clock: with none, what was just released
    // goes too (`recent`), and still only finished and released runs.
    let swept = leases.sweep(Duration::ZERO, 1000).await.unwrap();
    assert_eq!(swept.leases, 1);
    assert_eq!(
        leased(&pg).await,
        ["held", "lapsed", "running", "unknown", "waiting"]
    );

    // At most a batch per sweep, the longest released first.
    for i in 0..5 {
        let run = format!("old-{i}");
        run_row(&pg, &run, "success").await;
        let epoch = leases.acquire(&run, &a, LONG).await.unwrap().unwrap();
        assert!(leases.release(&run, &a, epoch).await.unwrap());
        pg.execute(
            "UPDATE run_leases SET expires_at = now() - interval '2 hours' - $2::int * interval '1 minute'
             WHERE run_id = $1",
            &[&run, &(10 - i)],
        )
        .await
        .unwrap();
    }
    let first = leases.sweep(HOUR, 2).await.unwrap();
    assert_eq!(first.leases, 2);
    assert!(first.full(2));
    let left = leased(&pg).await;
    assert!(!left.contains(&"old-0".to_owned()) && !left.contains(&"old-1".to_owned()));
    assert!(left.contains(&"old-2".to_owned()), "{left:?}");
    assert_eq!(leases.sweep(HOUR, 2).await.unwrap().leases, 2);
    let last = leases.sweep(HOUR, 2).await.unwrap();
    assert_eq!(last.leases, 1);
    assert!(!last.full(2));
    assert_eq!(
        leased(&pg).await,
        ["held", "lapsed", "running", "unknown", "waiting"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lead_sweeps_a_finished_runs_lease_and_a_dead_leads_row_on_its_own() {
    let db = database("ha_retention_lead").await;
    let pg = connect(&db.dsn).await;
    let tmp = workdir(
        "antler-ha-ret",
        "sandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\ntool_search:\n  enabled: false\nantler:\n  ha:\n    lease_ttl_ms: 3000\n    lease_retention_ms: 3000\n  gateway:\n    allow_scripted_models: true\n",
    );
    let dir = tmp.path();
    let lead = Lead::up(dir, dir.join("a"), &db.dsn, OPERATOR);
    let addr = lead.gateway();
    let own = advertised(&pg, 1).await;
    assert_eq!(own, [format!("http://{addr}")]);

    // A lead that died long ago left its row.
    pg.execute(
        "INSERT INTO leads (lead_id, gateway_url, renewed_at)
         VALUES ('dead-lead', 'http://10.9.9.9:8001', now() - interval '1 day')",
        &[],
    )
    .await
    .unwrap();

    let (code, body) = call(
        &addr,
        OPERATOR,
        "POST",
        "/api/runs",
        Some(&json!({"task": "Say done", "playbook_yaml": "turns:\n  - content: Done.\n"})),
    );
    assert_eq!(code, 201, "{body}");
    let run_id = body["run_id"].as_str().unwrap().to_owned();
    let view = antler_tests::wait_for(Duration::from_secs(60), || {
        let (code, view) = call(&addr, OPERATOR, "GET", &format!("/api/runs/{run_id}"), None);
        (code == 200 && view["status"] == "success").then_some(view)
    })
    .expect("the run succeeds");
    assert_eq!(view["run_id"], run_id.as_str());
    // Leased at epoch 1 and released at its end (kept for the retention).
    let mut row = lease(&pg, &run_id).await;
    for _ in 0..100 {
        if row.as_ref().is_none_or(|(owner, _)| owner.is_none()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        row = lease(&pg, &run_id).await;
    }
    assert_eq!(row, Some((None, 1)), "the run was leased, then released");

    // Released at its end, then swept once the retention has passed.
    let mut gone = false;
    for _ in 0..600 {
        let dead: i64 = pg
            .query_one(
                "SELECT count(*) FROM leads WHERE lead_id = 'dead-lead'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if lease(&pg, &run_id).await.is_none() && dead == 0 {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        gone,
        "the finished run's lease {:?} and the dead lead's row were never swept",
        lease(&pg, &run_id).await
    );
    // The lead's own row stays (renewed every second), and so does the run's record.
    assert_eq!(advertised(&pg, 1).await, [format!("http://{addr}")]);
    let (code, view) = call(&addr, OPERATOR, "GET", &format!("/api/runs/{run_id}"), None);
    assert_eq!(code, 200, "{view}");
    assert_eq!(view["status"], "success");
    drop(lead);
}
