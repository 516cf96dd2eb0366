//! The lead's PostgreSQL store for several leads (lead/src/ha, docs/ha.md) against a real
//! PostgreSQL: the schema migrated from an empty database, again as a no-op, by leads
//! starting together, and refused when newer than the lead; run leases where one epoch wins
//! a race, a lead that stops renewing loses the run to a higher epoch and is fenced, a
//! released run goes to another lead, and a renewed lease outlives its time to live; a
//! server that never answers is a timeout, not a hang.
//! Nothing waits on the wall clock: leases lapse on the database's clock, and the tests
//! poll the database until they have.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use antler_lead::ha::{Epoch, HaError, LeadId, Lease, Leases, Migrated, Postgres, SCHEMA_VERSION};
use futures::future::join_all;
use tokio::sync::Barrier;

use crate::pg_support::{connect, database};

/// A time to live no test outlasts: a lease taken with it lapses only when a test makes it.
const LONG: Duration = Duration::from_secs(600);

/// Polls `check` (every 20 ms, on the database's state) until it holds.
async fn until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..3000 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("never happened: {what}");
}

/// The schema versions and names recorded, in order, with when each was applied.
async fn recorded(dsn: &str) -> Vec<(i64, String, String)> {
    connect(dsn)
        .await
        .query(
            "SELECT version, name, applied_at::text FROM schema_migrations ORDER BY version",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

async fn table_exists(dsn: &str, table: &str) -> bool {
    connect(dsn)
        .await
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
        .await
        .unwrap()
        .get(0)
}

/// The run's lease, which must exist.
async fn lease(leases: &Leases, run: &str) -> Lease {
    leases.lease(run).await.unwrap().expect("a lease row")
}

#[tokio::test]
async fn migrations_apply_to_an_empty_database_then_are_a_no_op() {
    let db = database("ha_migrate").await;
    assert!(!table_exists(&db.dsn, "schema_migrations").await);
    assert!(!table_exists(&db.dsn, "run_leases").await);

    let mut first = Postgres::connect(&db.dsn).await.unwrap();
    assert_eq!(
        first.migrate().await.unwrap(),
        Migrated {
            from: 0,
            to: SCHEMA_VERSION
        }
    );
    assert!(table_exists(&db.dsn, "run_leases").await);
    let after_first = recorded(&db.dsn).await;
    let versions: Vec<i64> = after_first.iter().map(|(v, _, _)| *v).collect();
    assert_eq!(versions, (1..=SCHEMA_VERSION).collect::<Vec<_>>());
    assert_eq!(after_first[0].1, "run_leases");

    // Again, on the same connection and on a new one: nothing to apply, nothing recorded.
    assert_eq!(
        first.migrate().await.unwrap(),
        Migrated {
            from: SCHEMA_VERSION,
            to: SCHEMA_VERSION
        }
    );
    let mut second = Postgres::connect(&db.dsn).await.unwrap();
    assert_eq!(
        second.migrate().await.unwrap(),
        Migrated {
            from: SCHEMA_VERSION,
            to: SCHEMA_VERSION
        }
    );
    assert_eq!(recorded(&db.dsn).await, after_first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leads_starting_together_apply_each_migration_once() {
    let db = database("ha_migrate_together").await;
    let mut leads = Vec::new();
    for _ in 0..8 {
        leads.push(Postgres::connect(&db.dsn).await.unwrap());
    }
    let barrier = Arc::new(Barrier::new(leads.len()));
    let tasks = leads.into_iter().map(|mut pg| {
        let barrier = barrier.clone();
        tokio::spawn(async move {
            barrier.wait().await;
            pg.migrate().await
        })
    });
    let results: Vec<Migrated> = join_all(tasks)
        .await
        .into_iter()
        .map(|r| r.unwrap().unwrap())
        .collect();
    assert_eq!(
        results.iter().filter(|m| m.from == 0).count(),
        1,
        "exactly one lead migrates from empty: {results:?}"
    );
    assert!(results.iter().all(|m| m.to == SCHEMA_VERSION));
    assert_eq!(recorded(&db.dsn).await.len() as i64, SCHEMA_VERSION);
}

#[tokio::test]
async fn a_schema_newer_than_the_lead_is_refused() {
    let db = database("ha_newer").await;
    Postgres::connect(&db.dsn)
        .await
        .unwrap()
        .migrate()
        .await
        .unwrap();
    let future = SCHEMA_VERSION + 1;
    connect(&db.dsn)
        .await
        .execute(
            "INSERT INTO schema_migrations (version, name) VALUES ($1, 'from a newer lead')",
            &[&future],
        )
        .await
        .unwrap();
    let before = recorded(&db.dsn).await;

    let err = Postgres::connect(&db.dsn)
        .await
        .unwrap()
        .migrate()
        .await
        .unwrap_err();
    assert!(
        matches!(err, HaError::SchemaTooNew { found, known } if found == future && known == SCHEMA_VERSION),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "the database's schema is at version {future}, newer than this lead knows \
             ({SCHEMA_VERSION}): run a lead of the newer release"
        )
    );
    // A lead starting in cluster mode stops there, and the database is left as it was.
    assert!(matches!(
        Leases::open(&db.dsn).await,
        Err(HaError::SchemaTooNew { .. })
    ));
    assert_eq!(recorded(&db.dsn).await, before);
}

/// `leads` leads (a connection each) with `tasks` tasks each, all acquiring `run` at once:
/// the epochs won, with their lead.
async fn race(leads: &[(LeadId, Leases)], tasks: usize, run: &str) -> Vec<(LeadId, Epoch)> {
    let barrier = Arc::new(Barrier::new(leads.len() * tasks));
    let mut racers = Vec::new();
    for (lead, leases) in leads {
        for _ in 0..tasks {
            let (lead, leases, barrier, run) = (
                lead.clone(),
                leases.clone(),
                barrier.clone(),
                run.to_owned(),
            );
            racers.push(tokio::spawn(async move {
                barrier.wait().await;
                let won = leases.acquire(&run, &lead, LONG).await.unwrap();
                won.map(|epoch| (lead, epoch))
            }));
        }
    }
    join_all(racers)
        .await
        .into_iter()
        .filter_map(|r| r.unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leads_racing_for_a_run_one_epoch_wins() {
    let db = database("ha_race").await;
    let mut leads = Vec::new();
    for name in ["lead-a", "lead-b", "lead-c"] {
        leads.push((LeadId::new(name), Leases::open(&db.dsn).await.unwrap()));
    }

    // A new run: 48 acquisitions at once, one wins epoch 1.
    let won = race(&leads, 16, "run-1").await;
    assert_eq!(won.len(), 1, "{won:?}");
    let (first, epoch) = won[0].clone();
    assert_eq!(epoch.get(), 1);
    let (_, leases) = &leads[0];
    assert_eq!(
        lease(leases, "run-1").await,
        Lease {
            owner: Some(first.clone()),
            epoch,
            live: true
        }
    );

    // Its owner lets it lapse (a last renewal of 1 ms); the takeover is raced the same way.
    let owner = &leads.iter().find(|(id, _)| *id == first).unwrap().1;
    assert!(owner
        .renew("run-1", &first, epoch, Duration::from_millis(1))
        .await
        .unwrap());
    until("run-1's lease lapsed", || async {
        leases
            .expired(100)
            .await
            .unwrap()
            .iter()
            .any(|e| e.run_id == "run-1")
    })
    .await;
    let won = race(&leads, 16, "run-1").await;
    assert_eq!(won.len(), 1, "{won:?}");
    assert_eq!(won[0].1.get(), 2);
    assert_eq!(leases.current_epoch("run-1").await.unwrap(), Some(won[0].1));
}

#[tokio::test]
async fn a_lead_that_stops_renewing_loses_the_run_and_is_fenced() {
    let db = database("ha_fence").await;
    let (a, b) = (LeadId::new("lead-a"), LeadId::new("lead-b"));
    let (lead_a, lead_b) = (
        Leases::open(&db.dsn).await.unwrap(),
        Leases::open(&db.dsn).await.unwrap(),
    );

    let first = lead_a.acquire("run-1", &a, LONG).await.unwrap().unwrap();
    assert_eq!(lead_b.acquire("run-1", &b, LONG).await.unwrap(), None);
    assert_eq!(lead_b.current_epoch("run-1").await.unwrap(), Some(first));
    assert!(lead_b.expired(100).await.unwrap().is_empty());

    // A's last renewal is 1 ms long; then A stops (paused, cut off) and its lease lapses.
    assert!(lead_a
        .renew("run-1", &a, first, Duration::from_millis(1))
        .await
        .unwrap());
    until("A's lease is listed as lapsed", || async {
        let expired = lead_b.expired(100).await.unwrap();
        expired
            .iter()
            .any(|e| e.run_id == "run-1" && e.owner == a && e.epoch == first)
    })
    .await;
    // A lapsed lease cannot be renewed, even before anyone takes it.
    assert!(!lead_a.renew("run-1", &a, first, LONG).await.unwrap());
    let second = lead_b.acquire("run-1", &b, LONG).await.unwrap().unwrap();
    assert!(second > first, "{second} > {first}");

    // A wakes: its renewal and its release fail, and the run's calls need B's epoch.
    assert!(!lead_a.renew("run-1", &a, first, LONG).await.unwrap());
    assert!(!lead_a.release("run-1", &a, first).await.unwrap());
    assert_eq!(lead_a.acquire("run-1", &a, LONG).await.unwrap(), None);
    assert_eq!(lead_a.current_epoch("run-1").await.unwrap(), Some(second));
    assert_eq!(
        lease(&lead_a, "run-1").await,
        Lease {
            owner: Some(b.clone()),
            epoch: second,
            live: true
        }
    );
    assert!(lead_a.expired(100).await.unwrap().is_empty());
    assert!(lead_b.renew("run-1", &b, second, LONG).await.unwrap());
}

#[tokio::test]
async fn a_released_run_goes_to_another_lead_with_a_higher_epoch() {
    let db = database("ha_release").await;
    let (a, b) = (LeadId::new("lead-a"), LeadId::new("lead-b"));
    let (lead_a, lead_b) = (
        Leases::open(&db.dsn).await.unwrap(),
        Leases::open(&db.dsn).await.unwrap(),
    );
    assert_eq!(lead_a.current_epoch("run-1").await.unwrap(), None);
    let first = lead_a.acquire("run-1", &a, LONG).await.unwrap().unwrap();
    assert!(lead_a.release("run-1", &a, first).await.unwrap());
    assert_eq!(
        lease(&lead_b, "run-1").await,
        Lease {
            owner: None,
            epoch: first,
            live: false
        }
    );
    // A released run awaits no takeover.
    assert!(lead_b.expired(100).await.unwrap().is_empty());

    let second = lead_b.acquire("run-1", &b, LONG).await.unwrap().unwrap();
    assert_eq!(second.get(), first.get() + 1);
    assert!(!lead_a.renew("run-1", &a, first, LONG).await.unwrap());
    assert_eq!(lead_a.acquire("run-1", &a, LONG).await.unwrap(), None);
    // Another run is independent of this one.
    assert_eq!(
        lead_a
            .acquire("run-2", &a, LONG)
            .await
            .unwrap()
            .map(Epoch::get),
        Some(1)
    );
}

/// The database's clock, in seconds.
async fn db_now(client: &tokio_postgres::Client) -> f64 {
    client
        .query_one("SELECT extract(epoch FROM now())::float8", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn a_renewed_lease_outlives_its_time_to_live() {
    let db = database("ha_renew").await;
    let (a, b) = (LeadId::new("lead-a"), LeadId::new("lead-b"));
    let (lead_a, lead_b) = (
        Leases::open(&db.dsn).await.unwrap(),
        Leases::open(&db.dsn).await.unwrap(),
    );
    let clock = connect(&db.dsn).await;
    let ttl = Duration::from_secs(2);

    let started = db_now(&clock).await;
    let epoch = lead_a.acquire("run-1", &a, ttl).await.unwrap().unwrap();
    // A renews (every 100 ms) until the database's clock is two lifetimes past the
    // acquisition; B never gets the run meanwhile.
    let mut renewals = 0;
    while db_now(&clock).await < started + 2.0 * ttl.as_secs_f64() {
        assert!(lead_a.renew("run-1", &a, epoch, ttl).await.unwrap());
        assert_eq!(lead_b.acquire("run-1", &b, ttl).await.unwrap(), None);
        renewals += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(renewals > 1);
    assert_eq!(
        lease(&lead_b, "run-1").await,
        Lease {
            owner: Some(a.clone()),
            epoch,
            live: true
        }
    );
    assert!(lead_b.expired(100).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_server_that_never_answers_is_a_timeout_and_a_bad_dsn_an_error() {
    // A listener nobody accepts from: the kernel completes the TCP handshake, and the
    // startup message gets no answer.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let dsn = format!("postgres://postgres@127.0.0.1:{port}/none?connect_timeout=1");
    let err = Postgres::connect(&dsn).await.err().expect("no connection");
    assert!(
        matches!(err, HaError::Timeout { what: "connect", after } if after == Duration::from_secs(1)),
        "{err:?}"
    );
    assert!(matches!(
        Postgres::connect("postgres://127.0.0.1:notaport/x").await,
        Err(HaError::Dsn(_))
    ));
}
