//! Leads driving their runs under leases (docs/ha.md, issue 38) against a real PostgreSQL:
//! the decisions of one lead's [`Ownership`] (renewed leases stay held across many times to
//! live; a lead that stopped renewing is told it lost its run once another lead took it,
//! with a higher epoch; a run given up is no longer offered for takeover), and `antler up`
//! leads sharing one PostgreSQL database as production runs them (`ANTLER_STORE_DSN`, the
//! leases in the store's database): lead A drives a run and is killed with SIGKILL, paused
//! with SIGSTOP, or cut from PostgreSQL (a forwarder the test owns); lead B takes the run
//! over once A's lease lapses, resumes it from its checkpoint and completes it with every
//! tool call answered exactly once and one `lead_takeover` event in its events; A, woken or
//! reconnected, does not act for the run. Two leads started together on a run whose lead
//! died: exactly one takes it over.
//! Nothing waits on the wall clock as an assertion: leases lapse on the database's clock,
//! and the tests poll until they have; the takeover's time has a generous upper bound only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use antler_lead::ha::{Hold, LeadId, Leases, Ownership};
use antler_lead::runs::store::STORE_DSN_ENV;
use antler_tests::{bin, signal, wait_for};
use serde_json::Value;

use crate::pg_support::forwarder::Forwarder;
use crate::pg_support::leads;
use crate::pg_support::{connect, database};

#[tokio::test]
async fn a_lead_keeps_what_it_renews_and_learns_what_it_lost() {
    let db = database("ha_ownership").await;
    let ttl = Duration::from_millis(600);
    let a = Ownership::new(
        Leases::open(&db.dsn).await.unwrap(),
        LeadId::new("lead-a"),
        ttl,
    );
    let b = Ownership::new(
        Leases::open(&db.dsn).await.unwrap(),
        LeadId::new("lead-b"),
        ttl,
    );

    // A holds two runs; held again, a run keeps its epoch.
    let Hold::Held(first) = a.hold("run-1").await.unwrap() else {
        panic!("a new run is free")
    };
    assert_eq!(first.get(), 1);
    assert_eq!(a.hold("run-1").await.unwrap(), Hold::Held(first));
    assert!(matches!(a.hold("run-2").await.unwrap(), Hold::Held(_)));
    assert_eq!(b.hold("run-1").await.unwrap(), Hold::Elsewhere);

    // Renewed a third of a time to live apart, A's leases outlive several of them: B
    // finds nothing to take meanwhile.
    let started = Instant::now();
    while started.elapsed() < ttl * 4 {
        assert_eq!(a.renew().await, Vec::new(), "a renewed lease is not lost");
        assert_eq!(b.takeable().await.unwrap(), Vec::new());
        tokio::time::sleep(a.period()).await;
    }

    // A gives run-2 up: it is not offered for takeover, and whoever takes it next gets a
    // higher epoch.
    a.release("run-2").await;
    assert_eq!(a.epoch("run-2"), None);
    let Hold::Held(again) = b.hold("run-2").await.unwrap() else {
        panic!("a released run is free")
    };
    assert_eq!(again.get(), 2);

    // A stops renewing (paused): its lease on run-1 lapses on the database's clock and B
    // takes it over at epoch 2.
    let deadline = Instant::now() + Duration::from_secs(60);
    let lapsed = loop {
        let lapsed = b.takeable().await.unwrap();
        if !lapsed.is_empty() {
            break lapsed;
        }
        assert!(Instant::now() < deadline, "A's lease never lapsed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(lapsed.len(), 1, "{lapsed:?}");
    assert_eq!(lapsed[0].run_id, "run-1");
    assert_eq!(lapsed[0].owner, LeadId::new("lead-a"));
    assert_eq!(lapsed[0].epoch, first);
    let taken = b.take(&lapsed[0]).await.unwrap().expect("B takes run-1");
    assert_eq!(taken.get(), 2);
    // Only one lead wins a lapsed lease.
    let c = Ownership::new(
        Leases::open(&db.dsn).await.unwrap(),
        LeadId::new("lead-c"),
        ttl,
    );
    assert_eq!(c.take(&lapsed[0]).await.unwrap(), None);

    // A wakes: a time to live passed since its last renewal, so run-1 is lost (at the
    // epoch it held) before the database is even asked, and A forgets it.
    assert_eq!(a.renew().await, vec![("run-1".to_owned(), first)]);
    assert_eq!(a.epoch("run-1"), None);
    assert_eq!(a.renew().await, Vec::new());
    // B renews what it took.
    assert!(!b.renew().await.iter().any(|(run, _)| run == "run-1"));
    assert_eq!(b.epoch("run-1"), Some(taken));

    // A lease the database says lapsed (its clock ran past it) is lost at the next
    // renewal, though the lead renewed it recently.
    let Hold::Held(third) = a.hold("run-3").await.unwrap() else {
        panic!("a new run is free")
    };
    assert_eq!(a.renew().await, Vec::new());
    connect(&db.dsn)
        .await
        .execute(
            "UPDATE run_leases SET expires_at = now() WHERE run_id = 'run-3'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(a.renew().await, vec![("run-3".to_owned(), third)]);
    assert_eq!(a.epoch("run-3"), None);
}

const PLAYBOOK: &str = r#"
turns:
  - tool_calls:
      - {name: write_file, args: {description: first, path: /mnt/user-data/outputs/a.md, content: a}}
  - delay_ms: 6000
    tool_calls:
      - {name: write_file, args: {description: second, path: /mnt/user-data/outputs/b.md, content: b}}
  - tool_calls:
      - {name: present_files, args: {filepaths: ["/mnt/user-data/outputs/a.md", "/mnt/user-data/outputs/b.md"]}}
  - content: Both files are written and presented.
"#;

/// Like [`PLAYBOOK`], with the model "thinking" long enough that a lead paused in it and
/// woken after its takeover still has a while of it left.
const SLOW_PLAYBOOK: &str = r#"
turns:
  - tool_calls:
      - {name: write_file, args: {description: first, path: /mnt/user-data/outputs/a.md, content: a}}
  - delay_ms: 20000
    tool_calls:
      - {name: write_file, args: {description: second, path: /mnt/user-data/outputs/b.md, content: b}}
  - tool_calls:
      - {name: present_files, args: {filepaths: ["/mnt/user-data/outputs/a.md", "/mnt/user-data/outputs/b.md"]}}
  - content: Both files are written and presented.
"#;

/// The lease time to live of the leads: takeover within 5 s of a lead's death.
const TTL_MS: u64 = 3000;

/// A lead started by `antler up`; killed (with its children) when dropped.
struct Lead(Child);

impl Drop for Lead {
    fn drop(&mut self) {
        signal(self.0.id(), libc::SIGKILL);
        let _ = self.0.wait();
    }
}

/// `antler up` on `runtime`, its runs store (and so its leases) in the PostgreSQL database
/// `dsn` names (`ANTLER_STORE_DSN`, as a Kubernetes Secret gives it).
fn up(dir: &Path, runtime: &Path, dsn: &str) -> Lead {
    let mut command = Command::new(bin("antler"));
    command
        .arg("--runtime-dir")
        .arg(runtime)
        .args(["up", "--workers", "0", "--config"])
        .arg(dir.join("config.yaml"))
        .env("ANTLER_SANDBOX_BASE_DIR", dir.join("base"))
        .env("ANTLER_GATEWAY_ADDR", "off")
        .env("RUST_LOG", "warn")
        .env_remove("ANTLER_HA_DSN")
        .env(STORE_DSN_ENV, dsn)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(
            std::fs::File::create(runtime.with_extension("log"))
                .map(Stdio::from)
                .unwrap_or_else(|_| Stdio::null()),
        );
    Lead(command.spawn().expect("start antler up"))
}

/// `antler` on a lead's runtime directory, with its store's DSN.
fn cli(runtime: &Path, dsn: &str, args: &[&str]) -> std::process::Output {
    Command::new(bin("antler"))
        .arg("--runtime-dir")
        .arg(runtime)
        .args(args)
        .env("RUST_LOG", "warn")
        .env_remove("ANTLER_HA_DSN")
        .env(STORE_DSN_ENV, dsn)
        .output()
        .expect("run antler")
}

fn healthy(runtime: &Path, dsn: &str) -> bool {
    wait_for(Duration::from_secs(30), || {
        let out = cli(runtime, dsn, &["status", "--json"]);
        let list: Value = serde_json::from_slice(&out.stdout).ok()?;
        let list = list.as_array()?;
        (list.len() == 3 && list.iter().all(|p| p["healthy"] == true)).then_some(())
    })
    .is_some()
}

/// The run's lease row: (owner, epoch).
async fn lease(client: &tokio_postgres::Client, run_id: &str) -> Option<(Option<String>, i64)> {
    client
        .query_opt(
            "SELECT lead_id, epoch FROM run_leases WHERE run_id = $1",
            &[&run_id],
        )
        .await
        .unwrap()
        .map(|row| (row.get(0), row.get(1)))
}

/// The run's status in the store.
async fn status(client: &tokio_postgres::Client, run_id: &str) -> Option<String> {
    client
        .query_opt("SELECT status FROM runs WHERE run_id = $1", &[&run_id])
        .await
        .unwrap()
        .map(|row| row.get(0))
}

/// The run's checkpoints in the store: (step, state).
async fn checkpoints(client: &tokio_postgres::Client, run_id: &str) -> Vec<(i64, String)> {
    client
        .query(
            "SELECT step, state FROM checkpoints WHERE run_id = $1 ORDER BY step",
            &[&run_id],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

/// The run's events in the store, in order.
async fn events(client: &tokio_postgres::Client, run_id: &str) -> Vec<Value> {
    client
        .query(
            "SELECT event FROM run_events WHERE run_id = $1 ORDER BY seq",
            &[&run_id],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| serde_json::from_str(row.get::<_, &str>(0)).unwrap())
        .collect()
}

/// Polls `check` every 20 ms until it gives a value; panics with `what` after `limit`.
async fn until<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A temporary directory with the leads' config.yaml (a write tool, the sandbox, leases of
/// [`TTL_MS`]) and `playbook`.
fn workdir(playbook: &str) -> tempfile::TempDir {
    let tmp = leads::workdir(
        "antler-ha",
        &format!(
            "tools:\n  - {{name: write_file, group: file:write, use: deerflow.sandbox.tools:write_file_tool}}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\ntool_search:\n  enabled: false\nantler:\n  ha:\n    lease_ttl_ms: {TTL_MS}\n"
        ),
    );
    let dir = tmp.path();
    std::fs::write(dir.join("playbook.yaml"), playbook).unwrap();
    tmp
}

/// Leads sharing one PostgreSQL database for their runs store and leases, and a run lead A
/// drives, its first step checkpointed and its model "thinking" (the playbook's delay).
struct TwoLeads {
    /// The test's own connection to the database (never through the forwarder).
    pg: tokio_postgres::Client,
    lead_a: Option<Lead>,
    /// Between lead A and PostgreSQL, when the test cuts the network there.
    forwarder: Option<Forwarder>,
    /// The other leads (B; none before [`TwoLeads::start_more`]).
    others: Vec<Lead>,
    /// Lead A's stderr.
    log_a: PathBuf,
    dir: PathBuf,
    dsn: String,
    outputs: PathBuf,
    run_id: String,
    owner_a: String,
    /// Removed last, once the leads are gone (fields drop in order).
    _tmp: tempfile::TempDir,
}

impl TwoLeads {
    /// Lead A (through a [`Forwarder`] when `forwarded`) and lead B on one database.
    async fn start(label: &str, playbook: &str, forwarded: bool) -> TwoLeads {
        let mut leads = TwoLeads::lead_a(label, playbook, forwarded).await;
        leads.start_more(1);
        leads
    }

    /// Lead A alone, driving the run.
    async fn lead_a(label: &str, playbook: &str, forwarded: bool) -> TwoLeads {
        let db = database(label).await;
        let pg = connect(&db.dsn).await;
        let tmp = workdir(playbook);
        let dir = tmp.path().to_owned();
        let forwarder = forwarded.then(|| {
            Forwarder::start(([127, 0, 0, 1], db.port).into()).expect("start the forwarder")
        });
        let dsn_a = forwarder
            .as_ref()
            .map_or_else(|| db.dsn.clone(), |f| db.dsn_via(f.port));
        let runtime_a = dir.join("a");
        let lead_a = up(&dir, &runtime_a, &dsn_a);
        assert!(healthy(&runtime_a, &dsn_a), "lead A did not come up");

        let out = cli(
            &runtime_a,
            &dsn_a,
            &[
                "run",
                "Write two files and present them",
                "--detach",
                "--json",
                "--playbook",
                dir.join("playbook.yaml").to_str().unwrap(),
            ],
        );
        let submitted: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        let run_id = submitted["run_id"].as_str().unwrap().to_owned();
        let outputs = dir
            .join("base/users/default/threads")
            .join(&run_id)
            .join("user-data/outputs");

        // A holds the run at epoch 1 and drives it: the first step is checkpointed, and
        // the model is "thinking".
        let (owner_a, epoch_a) = lease(&pg, &run_id).await.expect("the run is leased");
        let owner_a = owner_a.expect("A holds the run");
        assert_eq!(epoch_a, 1);
        until(
            Duration::from_secs(30),
            "the first step was never checkpointed",
            || async { (checkpoints(&pg, &run_id).await.len() == 3).then_some(()) },
        )
        .await;
        assert!(outputs.join("a.md").exists());
        TwoLeads {
            _tmp: tmp,
            pg,
            lead_a: Some(lead_a),
            forwarder,
            others: Vec::new(),
            log_a: runtime_a.with_extension("log"),
            dir,
            dsn: db.dsn,
            outputs,
            run_id,
            owner_a,
        }
    }

    /// Starts `count` more leads on the database (directly, never through a forwarder),
    /// all at once, and waits until they are up.
    fn start_more(&mut self, count: usize) {
        let first = self.others.len();
        let runtimes: Vec<PathBuf> = (first..first + count)
            .map(|n| self.dir.join(format!("lead-{n}")))
            .collect();
        for runtime in &runtimes {
            self.others.push(up(&self.dir, runtime, &self.dsn));
        }
        for runtime in &runtimes {
            assert!(
                healthy(runtime, &self.dsn),
                "{} did not come up",
                runtime.display()
            );
        }
    }

    /// Waits until another lead holds the run at epoch 2: that lead.
    async fn taken_over(&self) -> String {
        let owner_b = until(
            Duration::from_secs(60),
            "no lead took the run over",
            || async {
                lease(&self.pg, &self.run_id)
                    .await
                    .filter(|(_, epoch)| *epoch == 2)
                    .map(|(owner, _)| owner.expect("a taken lease has an owner"))
            },
        )
        .await;
        assert_ne!(owner_b, self.owner_a);
        owner_b
    }

    /// The run completed under B: both files written once, every tool call answered
    /// exactly once, one `lead_takeover` event from A at epoch 1 to B at epoch 2, and B's
    /// lease released with its epoch kept. The run's events.
    async fn completed_under(&self, owner_b: &str) -> Vec<Value> {
        let (pg, run_id) = (&self.pg, self.run_id.as_str());
        let done = until(Duration::from_secs(90), "the run never ended", || async {
            status(pg, run_id).await.filter(|s| s != "running")
        })
        .await;
        assert_eq!(done, "success");
        let read = |name: &str| std::fs::read_to_string(self.outputs.join(name)).unwrap();
        assert_eq!(
            (read("a.md"), read("b.md")),
            ("a".to_owned(), "b".to_owned())
        );

        let (_, state) = checkpoints(pg, run_id).await.pop().unwrap();
        let state: Value = serde_json::from_str(&state).unwrap();
        let mut answered = HashSet::new();
        for message in state["messages"].as_array().unwrap() {
            if let Some(id) = message["tool_call_id"].as_str() {
                assert!(
                    answered.insert(id.to_owned()),
                    "{id} answered twice: {state}"
                );
            }
        }
        assert_eq!(answered.len(), 3, "{state}");

        let events = until(
            Duration::from_secs(10),
            "the run's events never kept its takeover",
            || async {
                let events = events(pg, run_id).await;
                events
                    .iter()
                    .any(|e| e["event"] == "lead_takeover")
                    .then_some(events)
            },
        )
        .await;
        let takeovers: Vec<&Value> = events
            .iter()
            .filter(|e| e["event"] == "lead_takeover")
            .collect();
        assert_eq!(takeovers.len(), 1, "{takeovers:?}");
        let takeover = takeovers[0];
        assert_eq!(takeover["from_lead"], self.owner_a.as_str(), "{takeover}");
        assert_eq!(takeover["from_epoch"], 1, "{takeover}");
        assert_eq!(takeover["lead"], owner_b, "{takeover}");
        assert_eq!(takeover["epoch"], 2, "{takeover}");

        until(
            Duration::from_secs(30),
            "B never released the ended run's lease",
            || async { (lease(pg, run_id).await == Some((None, 2))).then_some(()) },
        )
        .await;
        events
    }

    /// Lead A's log says it stopped the run it lost; A lives on.
    fn a_stopped_the_run(&self) {
        let stopped = wait_for(Duration::from_secs(30), || {
            let log = std::fs::read_to_string(&self.log_a).ok()?;
            log.contains("lost the run's lease").then_some(())
        });
        assert!(stopped.is_some(), "lead A never stopped the run it lost");
        let pid_a = self.lead_a.as_ref().unwrap().0.id();
        assert!(antler_tests::alive(pid_a), "lead A lives on");
    }
}

/// A takeover's time: A's lease lapses at most a time to live after A stopped renewing,
/// and B takes over within 5 s of that (a generous bound: a third of a time to live is the
/// period of its look).
fn within_bound(took: Duration) {
    assert!(
        took < Duration::from_millis(TTL_MS) + Duration::from_secs(5),
        "the takeover took {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leads_run_is_taken_over_and_completes_exactly_once() {
    let mut leads = TwoLeads::start("ha_takeover_kill", PLAYBOOK, false).await;
    // A dies; B takes the run over once A's lease lapses.
    let killed = Instant::now();
    drop(leads.lead_a.take());
    let owner_b = leads.taken_over().await;
    let took = killed.elapsed();
    within_bound(took);
    eprintln!("takeover {took:?} after the kill (lease ttl {TTL_MS} ms)");
    leads.completed_under(&owner_b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_lead_woken_after_the_takeover_stops_acting_for_the_run() {
    let leads = TwoLeads::start("ha_takeover_pause", SLOW_PLAYBOOK, false).await;
    let pid_a = leads.lead_a.as_ref().unwrap().0.id();
    // A pauses mid-run; B takes the run over once A's lease lapses.
    let paused = Instant::now();
    signal(pid_a, libc::SIGSTOP);
    let owner_b = leads.taken_over().await;
    within_bound(paused.elapsed());
    // A wakes: its lease's time to live passed unrenewed, so it stops the run at once,
    // before its model's reply could make it act (B owns the run now).
    signal(pid_a, libc::SIGCONT);
    leads.a_stopped_the_run();
    leads.completed_under(&owner_b).await;
    // A wrote nothing for the run after the takeover: its status and lease are B's.
    assert_eq!(
        status(&leads.pg, &leads.run_id).await.as_deref(),
        Some("success")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lead_cut_from_postgres_loses_its_run_and_stays_out_when_the_cut_heals() {
    let leads = TwoLeads::start("ha_takeover_cut", PLAYBOOK, true).await;
    let forwarder = leads.forwarder.as_ref().unwrap();

    // The network between A and PostgreSQL is cut mid-run: A's renewals fail, its lease
    // lapses, and B takes the run over.
    let cut = Instant::now();
    let dropped: Vec<i32> = forwarder.cut().into_iter().map(i32::from).collect();
    assert!(!dropped.is_empty(), "A was connected through the forwarder");
    // What A wrote at epoch 1: all there is once the server has ended A's sessions (a
    // transaction of A's cut short is rolled back).
    until(
        Duration::from_secs(10),
        "the server never ended A's sessions",
        || async {
            let row = leads
                .pg
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE client_port = ANY($1)",
                    &[&dropped],
                )
                .await
                .unwrap();
            (row.get::<_, i64>(0) == 0).then_some(())
        },
    )
    .await;
    let steps_a = checkpoints(&leads.pg, &leads.run_id).await;
    let events_a = events(&leads.pg, &leads.run_id).await;
    let owner_b = leads.taken_over().await;
    let took = cut.elapsed();
    within_bound(took);
    eprintln!("takeover {took:?} after the cut (lease ttl {TTL_MS} ms)");
    // The cut heals: A reaches PostgreSQL again, and has stopped the run it lost.
    forwarder.heal();
    leads.a_stopped_the_run();
    let events = leads.completed_under(&owner_b).await;

    // Nothing of A's epoch after the takeover: the steps and events A wrote before the cut
    // are as it left them, and the first event after them is B's takeover, with none of
    // A's between (A could write nothing during the cut).
    let steps = checkpoints(&leads.pg, &leads.run_id).await;
    assert_eq!(steps[..steps_a.len()], steps_a[..]);
    assert_eq!(events[..events_a.len()], events_a[..]);
    let takeover = events
        .iter()
        .position(|e| e["event"] == "lead_takeover")
        .unwrap();
    assert_eq!(takeover, events_a.len(), "{events:?}");
    // A, reconnected, holds nothing and writes nothing more: the run ended as B left it.
    assert_eq!(lease(&leads.pg, &leads.run_id).await, Some((None, 2)));
    assert_eq!(
        status(&leads.pg, &leads.run_id).await.as_deref(),
        Some("success")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_leads_racing_for_one_run_resume_it_once() {
    // A drives the run and dies; its lease lapses with no other lead running.
    let mut leads = TwoLeads::lead_a("ha_takeover_race", PLAYBOOK, false).await;
    drop(leads.lead_a.take());
    until(
        Duration::from_secs(30),
        "A's lease never lapsed",
        || async {
            let row = leads
                .pg
                .query_one(
                    "SELECT expires_at < now() FROM run_leases WHERE run_id = $1",
                    &[&leads.run_id],
                )
                .await
                .unwrap();
            row.get::<_, bool>(0).then_some(())
        },
    )
    .await;
    assert_eq!(
        status(&leads.pg, &leads.run_id).await.as_deref(),
        Some("running")
    );

    // Two leads start together on the store holding one `running` run with a lapsed
    // lease: exactly one resumes it, at epoch 2 (one increment), with one takeover event.
    leads.start_more(2);
    let winner = leads.taken_over().await;
    leads.completed_under(&winner).await;
    assert_eq!(lease(&leads.pg, &leads.run_id).await, Some((None, 2)));
}
