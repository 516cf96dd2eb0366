//! The runs store on PostgreSQL (issue 38, docs/ha.md) against a real PostgreSQL: the store's
//! API round trip (a run, its steps written once, its latest state, events, a receipt
//! written once, MCP credentials, approvals, a subagent's held call, threads, memory); an
//! `antler run` with `ANTLER_STORE_DSN` whose record, events and checkpoints land in
//! PostgreSQL, which a lead started again serves from there (the gateway's runs list and
//! run) and `antler threads` reads with the same DSN; the schema migrated from an empty database and from schema 1 with a lease kept; a
//! DSN that does not connect stops the store's open, `antler up` and `antler run` with a
//! clear error that does not show the password.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};

use antler_engine::{
    ApprovalChoice, ApprovalDecision, DeliveryReceipt, Message, OutputsSnapshot, PendingApproval,
    RunRecord, RunStatus, StateUpdate, SubagentCall, ThreadState,
};
use antler_lead::ha::{Postgres, SCHEMA_VERSION};
use antler_lead::runs::store::memory::{
    Enqueued, Fact, MemoryDoc, MemoryMessage, QueueItem, QueueKey, DEFAULT_AGENT,
};
use antler_lead::runs::store::{
    CheckpointError, CheckpointStore, EventId, Recorded, SubagentAsk, STORE_DSN_ENV,
};
use antler_protocol::messages::SealedCredential;
use antler_tests::{antler, bin};
use serde_json::{json, Map, Value};

use crate::lead_support::{http_full, LeadCluster};
use crate::pg_support::{connect, database};

/// A runtime for the suite's own async work (making databases, reading them back); the
/// store's synchronous API is called outside it.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn record(run_id: &str, thread: &str) -> RunRecord {
    RunRecord {
        run_id: run_id.into(),
        user_id: "alice".into(),
        thread_id: thread.into(),
        task: "write a report".into(),
        model: "scripted:play.yaml".into(),
        status: RunStatus::Running,
        detail: None,
        clarification: true,
        agent: Some("writer".into()),
        bootstrap: false,
        non_interactive: true,
        subagents: true,
        role: Some("member".into()),
    }
}

#[test]
fn the_store_api_round_trips_on_postgres() {
    let rt = runtime();
    let db = rt.block_on(database("ha_store_api"));
    let store = CheckpointStore::open_postgres(&db.dsn).unwrap();
    assert!(store.is_postgres());

    // A thread, claimed by the run about to be created on it.
    let mut metadata = Map::new();
    metadata.insert("topic".into(), json!("rust"));
    let (thread, created) = store.create_thread("alice", "t1", &metadata).unwrap();
    assert!(created && thread.metadata == metadata);
    assert!(!store.create_thread("alice", "t1", &Map::new()).unwrap().1);
    assert!(
        store.thread("bob", "t1").unwrap().is_none(),
        "another user's thread"
    );
    store.claim_thread("alice", "t1", "run-1").unwrap().unwrap();

    // The run, its steps written once, its latest state.
    let first = ThreadState::new("write a report");
    store.create_run(&record("run-1", "t1"), &first).unwrap();
    assert_eq!(store.run("run-1").unwrap(), Some(record("run-1", "t1")));
    let mut second = first.clone();
    second
        .apply(StateUpdate::messages([Message::human("more")]))
        .unwrap();
    assert!(store.save("run-1", 1, &second).unwrap());
    assert!(
        !store.save("run-1", 1, &first).unwrap(),
        "a step is written once"
    );
    assert_eq!(store.latest("run-1").unwrap(), Some((1, second.clone())));
    assert_eq!(store.checkpoint_at("run-1", 0).unwrap(), Some(first));
    assert_eq!(store.in_progress().unwrap().len(), 1);
    assert_eq!(
        store.run_ids("alice", RunStatus::Running).unwrap(),
        ["run-1"]
    );
    let busy = store.claim_thread("alice", "t1", "run-2").unwrap();
    assert!(busy.is_err(), "one active run per thread");

    // Events, journaled with their ids; a write tried again changes nothing.
    let id = |gen, seq| EventId { gen, seq };
    let a = [
        (id(1, 0), "{\"a\":1}".into()),
        (id(1, 1), "{\"b\":2}".into()),
    ];
    assert!(store.append_events("run-1", &a, None).unwrap());
    assert!(store.append_events("run-1", &a[1..], None).unwrap());
    assert_eq!(store.last_event("run-1").unwrap(), Some(id(1, 1)));
    // A lead that lost the run's lease (epoch 1, a newer one holds epoch 2) writes nothing.
    rt.block_on(async {
        connect(&db.dsn)
            .await
            .execute(
                "INSERT INTO run_leases (run_id, lead_id, epoch, expires_at) VALUES ('run-1', 'b', 2, now()), ('run-f', 'b', 2, now())",
                &[],
            )
            .await
            .unwrap();
    });
    let late = [(id(1, 2), "{\"late\":1}".into())];
    assert!(
        !store.append_events("run-1", &late, Some(1)).unwrap(),
        "fenced"
    );
    // The new owner's events come after, in a newer generation.
    let b = [(id(2, 2), "{\"c\":3}".into())];
    assert!(store.append_events("run-1", &b, Some(2)).unwrap());
    let texts =
        |events: Vec<(EventId, String)>| events.into_iter().map(|(_, e)| e).collect::<Vec<_>>();
    assert_eq!(
        texts(store.events("run-1").unwrap()),
        ["{\"a\":1}", "{\"b\":2}", "{\"c\":3}"]
    );
    // After an id an old lead showed but never stored: every event of the newer generation.
    assert_eq!(
        texts(store.events_after("run-1", Some(id(1, 7)), 100).unwrap()),
        ["{\"c\":3}"]
    );
    assert_eq!(
        texts(store.events_after("run-1", Some(id(1, 0)), 1).unwrap()),
        ["{\"b\":2}"]
    );

    // Writes fenced by the lease: the lead at the lease's epoch (2) writes; one fenced at
    // epoch 1 is refused, and from then on refuses every write of the run unasked.
    store.fence_run("run-f", 2);
    assert!(store.save("run-f", 7, &second).unwrap());
    assert!(
        !store
            .save("run-f", 7, &ThreadState::new("another"))
            .unwrap(),
        "a step stored already is kept, fenced or not"
    );
    let stale = CheckpointStore::open_postgres(&db.dsn).unwrap();
    stale.fence_run("run-f", 1);
    assert!(matches!(
        stale.save("run-f", 8, &second),
        Err(CheckpointError::Fenced(_))
    ));
    assert!(stale.is_lost("run-f"));
    // A stale lead writing a step its successor stored is refused too, not told "kept".
    let stale_again = CheckpointStore::open_postgres(&db.dsn).unwrap();
    stale_again.fence_run("run-f", 1);
    assert!(matches!(
        stale_again.save("run-f", 7, &second),
        Err(CheckpointError::Fenced(_))
    ));
    // Nor does it write the run's receipt or outputs snapshot.
    let stale_receipt = CheckpointStore::open_postgres(&db.dsn).unwrap();
    stale_receipt.fence_run("run-f", 1);
    assert!(matches!(
        stale_receipt.put_receipt_if_absent("run-f", &DeliveryReceipt::settle(&[], &[])),
        Err(CheckpointError::Fenced(_))
    ));
    assert_eq!(store.receipt("run-f").unwrap(), None);
    let stale_snapshot = CheckpointStore::open_postgres(&db.dsn).unwrap();
    stale_snapshot.fence_run("run-f", 1);
    assert!(matches!(
        stale_snapshot.save_outputs_snapshot("run-f", &OutputsSnapshot::default()),
        Err(CheckpointError::Fenced(_))
    ));
    assert_eq!(store.outputs_snapshot("run-f").unwrap(), None);
    assert!(matches!(
        stale.set_status("run-f", RunStatus::Error, Some("stale")),
        Err(CheckpointError::Fenced(_))
    ));
    assert_eq!(
        store.latest("run-f").unwrap().map(|(step, _)| step),
        Some(7)
    );
    store.unfence_run("run-f");

    // The receipt, written once.
    let receipt = DeliveryReceipt::settle(&["/mnt/user-data/outputs/r.md".into()], &[]);
    assert!(store.put_receipt_if_absent("run-1", &receipt).unwrap());
    assert!(!store
        .put_receipt_if_absent("run-1", &DeliveryReceipt::settle(&[], &[]))
        .unwrap());
    assert_eq!(store.receipt("run-1").unwrap(), Some(receipt.clone()));
    // A caller inside a runtime (an actor's thread) cannot drive the client's runtime: its
    // statements go to the client's thread, with the same answers, and a write made there
    // is read back from outside.
    let inside = rt.block_on(async {
        let written = store.save("run-f", 9, &ThreadState::new("inside")).unwrap();
        (written, store.receipt("run-1").unwrap())
    });
    assert_eq!(inside, (true, Some(receipt)));
    assert_eq!(
        store.latest("run-f").unwrap().map(|(step, _)| step),
        Some(9)
    );

    // The run ends: the thread takes its state and lets go.
    store.set_status("run-1", RunStatus::Success, None).unwrap();
    let thread = store.thread("alice", "t1").unwrap().unwrap();
    assert_eq!(thread.active_run_id, None);
    assert_eq!(thread.last_run_id.as_deref(), Some("run-1"));
    assert_eq!(store.thread_state("alice", "t1").unwrap(), Some(second));
    let list = store.list_summaries(Some("alice"), None, 10).unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].delivery.as_ref().map(|d| d.presented), Some(1));
    assert!(list[0].ended_ms.is_some());
    assert_eq!(store.thread_runs("alice", "t1", 10, 0).unwrap().len(), 1);
    assert_eq!(
        store.thread_checkpoints("alice", "t1", 10).unwrap().len(),
        2
    );
    assert_eq!(
        store
            .set_status("ghost", RunStatus::Success, None)
            .unwrap_err()
            .to_string(),
        "checkpoint store: no run ghost"
    );

    // MCP credentials: the newer one wins, bytes kept as they are.
    let credential = |at: u64, sealed: &[u8]| SealedCredential {
        server: "github".into(),
        user: "alice".into(),
        updated_ms: at,
        sealed: Some(sealed.to_vec()),
    };
    assert!(store
        .keep_credential(&credential(10, &[0, 1, 255]))
        .unwrap());
    assert!(!store.keep_credential(&credential(5, b"older")).unwrap());
    assert_eq!(store.credentials().unwrap(), [credential(10, &[0, 1, 255])]);

    // Approvals: the first answer stands.
    let pending = PendingApproval {
        tool_call_id: "call-1".into(),
        tool: "bash".into(),
        args: json!({"command": "ls"}),
        rule: Some("approvals.rules[0]".into()),
        origin: None,
        justification: None,
        asked_at: 1,
        deadline_at: 2,
    };
    let decision = |choice| ApprovalDecision {
        choice,
        by: Some("alice".into()),
        at: 3,
        reason: None,
    };
    assert_eq!(
        store
            .record_approval("run-1", &pending, &decision(ApprovalChoice::Approve))
            .unwrap(),
        Recorded::New
    );
    assert_eq!(
        store
            .record_approval("run-1", &pending, &decision(ApprovalChoice::Deny))
            .unwrap(),
        Recorded::AlreadyDecided(ApprovalChoice::Approve)
    );
    assert_eq!(
        store.approval_decisions("run-1").unwrap(),
        [("call-1".to_owned(), decision(ApprovalChoice::Approve))]
    );

    // A subagent's held call, asked again, then forgotten.
    let ask = SubagentAsk {
        run_id: "run-1".into(),
        pending: pending.clone(),
        subagent: SubagentCall {
            task_call_id: "task-1".into(),
            subagent_type: "general-purpose".into(),
            call_id: "c1".into(),
        },
    };
    store.record_subagent_ask(&ask).unwrap();
    store.record_subagent_ask(&ask).unwrap();
    assert_eq!(store.subagent_asks().unwrap(), [ask]);
    store.forget_subagent_task("run-1", "task-1").unwrap();
    assert!(store.subagent_asks().unwrap().is_empty());

    // Memory: a revision-checked write, the queue and its watermark.
    let mut doc = MemoryDoc::default();
    doc.sections[0].summary = "Writes Rust.".into();
    doc.facts.push(Fact {
        id: "f1".into(),
        content: "Prefers short reports".into(),
        category: "preference".into(),
        confidence: 0.75,
        created_at: "2026-01-01T00:00:00Z".into(),
        updated_at: None,
        source: "t1".into(),
        source_error: None,
        expected_valid_days: None,
        last_confirmed_at: None,
    });
    let now = "2026-12-05T00:00:00Z";
    assert_eq!(
        store
            .write_memory("alice", DEFAULT_AGENT, &doc, now)
            .unwrap(),
        Some(1)
    );
    assert_eq!(
        store
            .write_memory("alice", DEFAULT_AGENT, &doc, now)
            .unwrap(),
        None
    );
    let read = store.memory("alice", DEFAULT_AGENT).unwrap();
    assert_eq!((read.revision, read.facts.clone()), (1, doc.facts.clone()));
    assert_eq!(read.sections[0].summary, "Writes Rust.");
    let key = QueueKey {
        user: "alice".into(),
        agent: DEFAULT_AGENT.into(),
        thread: "t1".into(),
    };
    let item = QueueItem {
        key: key.clone(),
        messages: vec![MemoryMessage {
            role: "human".into(),
            content: "hi".into(),
        }],
        last_identity: "id-1".into(),
        signal: true,
        first_ms: 100,
        enqueued_ms: 100,
        attempts: 0,
        next_attempt_ms: 0,
    };
    assert_eq!(store.enqueue_memory(&item, 1).unwrap(), Enqueued::Queued);
    assert_eq!(store.memory_pending("alice").unwrap(), 1);
    assert_eq!(store.memory_queue_item(&key).unwrap(), Some(item));
    store.memory_update_done(&key, 100, "id-1", 1).unwrap();
    assert_eq!(store.memory_pending("alice").unwrap(), 0);
    assert_eq!(store.memory_given(&key).unwrap().as_deref(), Some("id-1"));

    // Another store on the same database (another lead) reads it all.
    let other = CheckpointStore::open_postgres(&db.dsn).unwrap();
    assert_eq!(
        other.run("run-1").unwrap().unwrap().status,
        RunStatus::Success
    );
    assert_eq!(other.events("run-1").unwrap().len(), 3);
}

const PLAYBOOK: &str = "turns:\n  - content: Stored in PostgreSQL.\n";

#[test]
fn antler_run_keeps_its_run_in_postgres_and_a_new_lead_reads_it_back() {
    let rt = runtime();
    let db = rt.block_on(database("ha_store_run"));
    let mut c = LeadCluster::up(
        "tool_search:\n  enabled: false\n",
        &[
            ("ANTLER_GATEWAY_ADDR", "127.0.0.1:0"),
            (STORE_DSN_ENV, db.dsn.as_str()),
        ],
    );
    let playbook = c.write("playbook.yaml", PLAYBOOK);
    let out = antler(
        &c.runtime(),
        &[
            "run",
            "Say it",
            "--playbook",
            &playbook,
            "--thread",
            "pg-thread",
            "--json",
        ],
    );
    let view: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
    });
    assert_eq!(view["status"], "success", "{view}");
    let run_id = view["run_id"].as_str().unwrap().to_owned();

    // The run's record, checkpoints and events are in PostgreSQL, not in a SQLite file.
    let (status, thread, checkpoints, events) = rt.block_on(async {
        let client = connect(&db.dsn).await;
        let row = client
            .query_one(
                "SELECT status, thread_id FROM runs WHERE run_id = $1",
                &[&run_id],
            )
            .await
            .unwrap();
        let (status, thread): (String, String) = (row.get(0), row.get(1));
        let checkpoints: Vec<String> = client
            .query(
                "SELECT state FROM checkpoints WHERE run_id = $1 ORDER BY step",
                &[&run_id],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        // An ended run's events are kept by the store's thread after the run's answer:
        // wait for them (bounded).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let events = loop {
            let events: Vec<String> = client
                .query(
                    "SELECT event FROM run_events WHERE run_id = $1 ORDER BY seq",
                    &[&run_id],
                )
                .await
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
            if !events.is_empty() || std::time::Instant::now() > deadline {
                break events;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        };
        (status, thread, checkpoints, events)
    });
    assert_eq!((status.as_str(), thread.as_str()), ("success", "pg-thread"));
    assert!(checkpoints.len() >= 2, "step 0 and the steps after");
    assert!(
        checkpoints
            .last()
            .unwrap()
            .contains("Stored in PostgreSQL."),
        "{checkpoints:?}"
    );
    assert!(
        events.iter().any(|e| e.contains("\"model_finished\"")),
        "{events:?}"
    );
    assert!(!c.runtime().join("runs.sqlite").exists());

    // A lead started again (its SQLite would be empty) reads the run back from PostgreSQL:
    // the gateway's runs list and the run, as its operator (the token `antler up` wrote).
    c.kill_lead();
    c.start();
    let (addr, token) = (c.gateway(), c.gateway_token());
    let (code, _, body) = http_full(&addr, &token, "GET", "/api/runs", None);
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(&run_id), "{body}");
    let (code, _, body) = http_full(&addr, &token, "GET", &format!("/api/runs/{run_id}"), None);
    assert_eq!(code, 200, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["status"], "success", "{body}");

    // `antler threads` reads the store itself, with the same DSN: the run's thread is there.
    let out = Command::new(bin("antler"))
        .arg("--runtime-dir")
        .arg(c.runtime())
        .args(["threads", "list", "--json"])
        .env(STORE_DSN_ENV, &db.dsn)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(&thread),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_schema_migrates_from_empty_and_from_schema_1_keeping_its_leases() {
    let rt = runtime();
    rt.block_on(async {
        let empty = database("ha_store_empty").await;
        let mut pg = Postgres::connect(&empty.dsn).await.unwrap();
        let migrated = pg.migrate().await.unwrap();
        assert_eq!((migrated.from, migrated.to), (0, SCHEMA_VERSION));
        assert_eq!(SCHEMA_VERSION, 5);

        // A database a lead of schema 1 made: leases only, one of them held.
        let old = database("ha_store_v1").await;
        let client = connect(&old.dsn).await;
        client
            .batch_execute(
                "CREATE TABLE schema_migrations (version bigint PRIMARY KEY, name text NOT NULL,
                     applied_at timestamptz NOT NULL DEFAULT now());
                 CREATE TABLE run_leases (run_id text PRIMARY KEY, lead_id text,
                     epoch bigint NOT NULL CHECK (epoch > 0), expires_at timestamptz NOT NULL);
                 CREATE INDEX run_leases_owned_expiry ON run_leases (expires_at)
                     WHERE lead_id IS NOT NULL;
                 INSERT INTO schema_migrations (version, name) VALUES (1, 'run_leases');
                 INSERT INTO run_leases VALUES ('run-7', 'lead-a', 3, now() + interval '1 hour');",
            )
            .await
            .unwrap();
        let mut pg = Postgres::connect(&old.dsn).await.unwrap();
        let migrated = pg.migrate().await.unwrap();
        assert_eq!((migrated.from, migrated.to), (1, 5));
        let lease = client
            .query_one(
                "SELECT lead_id, epoch FROM run_leases WHERE run_id = 'run-7'",
                &[],
            )
            .await
            .unwrap();
        assert_eq!(
            (lease.get::<_, String>(0), lease.get::<_, i64>(1)),
            ("lead-a".to_owned(), 3)
        );
        let names: Vec<String> = client
            .query("SELECT name FROM schema_migrations ORDER BY version", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(names, [
                "run_leases",
                "runs_store",
                "leads",
                "run_events_gen",
                "gateway_submissions"
            ]);
        // Schema 4: each run event has its generation.
        let gen: i64 = client
            .query_one(
                "SELECT count(*) FROM information_schema.columns WHERE table_name = 'run_events' AND column_name = 'gen'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(gen, 1);
        for table in [
            "runs",
            "checkpoints",
            "run_events",
            "threads",
            "memory_queue",
            "leads",
        ] {
            let exists: bool = client
                .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
                .await
                .unwrap()
                .get(0);
            assert!(exists, "{table}");
        }
    });
    // The store opens on both.
    let db = rt.block_on(database("ha_store_reopen"));
    CheckpointStore::open_postgres(&db.dsn).unwrap();
    CheckpointStore::open_postgres(&db.dsn).unwrap();
}

/// A DSN whose server is not there, with a password that must not be printed.
const BAD_DSN: &str = "postgres://antler:hunter2-secret@127.0.0.1:1/antler?connect_timeout=5";

#[test]
fn a_dsn_that_does_not_connect_is_a_clear_error_without_the_password() {
    let error = match CheckpointStore::open_postgres(BAD_DSN) {
        Ok(_) => panic!("a store on a closed port"),
        Err(e) => e.to_string(),
    };
    assert!(
        error.starts_with("checkpoint store: cannot connect to PostgreSQL at 127.0.0.1:1: "),
        "{error}"
    );
    assert_eq!(error.matches("cannot connect").count(), 1, "{error}");
    assert!(!error.contains("hunter2"), "{error}");

    // `antler up` stops at start with that error.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("config.yaml"),
        "tool_search:\n  enabled: false\n",
    )
    .unwrap();
    let out = Command::new(bin("antler"))
        .arg("--runtime-dir")
        .arg(dir.path().join("run"))
        .args(["up", "--workers", "0", "--config"])
        .arg(dir.path().join("config.yaml"))
        .env(STORE_DSN_ENV, BAD_DSN)
        .env("ANTLER_GATEWAY_ADDR", "off")
        .env("ANTLER_SANDBOX_BASE_DIR", dir.path().join("base"))
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("cannot connect to PostgreSQL"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
}
