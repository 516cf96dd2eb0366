//! Leads driving their runs under leases (docs/ha.md, issue 38) against a real PostgreSQL:
//! the decisions of one lead's [`Ownership`] (renewed leases stay held across many times to
//! live; a lead that stopped renewing is told it lost its run once another lead took it,
//! with a higher epoch; a run given up is no longer offered for takeover), and two `antler
//! up` leads sharing one runs store file and one leases database: lead A drives a run, is
//! killed with SIGKILL, and lead B takes the run over once A's lease lapses, resumes it from
//! its checkpoint and completes it with every tool call answered exactly once and a
//! `lead_takeover` event in its events.
//! Nothing waits on the wall clock as an assertion: leases lapse on the database's clock,
//! and the tests poll until they have; the takeover's time has a generous upper bound only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use antler_lead::ha::{Hold, LeadId, Leases, Ownership};
use antler_tests::{antler, bin, signal, wait_for};
use serde_json::Value;

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

/// `antler up` on `runtime`, with the leases' DSN from the environment when `dsn` is given
/// (else config.yaml's).
fn up(dir: &Path, runtime: &Path, dsn: Option<&str>) -> Lead {
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
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(
            std::fs::File::create(runtime.with_extension("log"))
                .map(Stdio::from)
                .unwrap_or_else(|_| Stdio::null()),
        );
    if let Some(dsn) = dsn {
        command.env("ANTLER_HA_DSN", dsn);
    }
    Lead(command.spawn().expect("start antler up"))
}

fn healthy(runtime: &Path) -> bool {
    wait_for(Duration::from_secs(30), || {
        let out = antler(runtime, &["status", "--json"]);
        let list: Value = serde_json::from_slice(&out.stdout).ok()?;
        let list = list.as_array()?;
        (list.len() == 3 && list.iter().all(|p| p["healthy"] == true)).then_some(())
    })
    .is_some()
}

fn sql(store: &Path, query: &str, run_id: &str) -> String {
    let out = Command::new("python3")
        .arg("-c")
        .arg("import sqlite3,sys,json;c=sqlite3.connect(sys.argv[1]);print(json.dumps(c.execute(sys.argv[2],(sys.argv[3],)).fetchall()))")
        .arg(store)
        .arg(query)
        .arg(run_id)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
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

/// Two leads sharing one runs store file and one leases database, and a run lead A drives,
/// its first step checkpointed and its model "thinking" (the playbook's delay).
struct TwoLeads {
    _tmp: tempfile::TempDir,
    pg: tokio_postgres::Client,
    lead_a: Option<Lead>,
    _lead_b: Lead,
    /// Lead A's stderr.
    log_a: std::path::PathBuf,
    store: std::path::PathBuf,
    outputs: std::path::PathBuf,
    run_id: String,
    owner_a: String,
}

impl TwoLeads {
    async fn start(label: &str, playbook: &str) -> TwoLeads {
        let db = database(label).await;
        let pg = connect(&db.dsn).await;
        let tmp = tempfile::Builder::new()
            .prefix("antler-ha")
            .tempdir_in("/tmp")
            .unwrap();
        let dir = tmp.path();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(
            dir.join("config.yaml"),
            format!(
                "tools:\n  - {{name: write_file, group: file:write, use: deerflow.sandbox.tools:write_file_tool}}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\ntool_search:\n  enabled: false\nantler:\n  ha:\n    leases_dsn: \"{}\"\n    lease_ttl_ms: {TTL_MS}\n",
                db.dsn
            ),
        )
        .unwrap();
        std::fs::write(dir.join("playbook.yaml"), playbook).unwrap();

        // Lead A (its DSN from config.yaml) and lead B (from ANTLER_HA_DSN) share one runs
        // store file: B's runtime directory names A's.
        let (runtime_a, runtime_b) = (dir.join("a"), dir.join("b"));
        let lead_a = up(dir, &runtime_a, None);
        assert!(healthy(&runtime_a), "lead A did not come up");
        let store = runtime_a.join("runs.sqlite");
        std::fs::DirBuilder::new().create(&runtime_b).unwrap();
        std::fs::set_permissions(&runtime_b, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink(&store, runtime_b.join("runs.sqlite")).unwrap();
        let lead_b = up(dir, &runtime_b, Some(&db.dsn));
        assert!(healthy(&runtime_b), "lead B did not come up");

        let out = antler(
            &runtime_a,
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
        let first_step = wait_for(Duration::from_secs(30), || {
            let steps = sql(
                &store,
                "select count(*) from checkpoints where run_id = ?",
                &run_id,
            );
            (steps == "[[3]]").then_some(())
        });
        assert!(
            first_step.is_some(),
            "the first step was never checkpointed"
        );
        assert!(outputs.join("a.md").exists());
        assert_eq!(
            lease(&pg, &run_id).await,
            Some((Some(owner_a.clone()), 1)),
            "B takes nothing A renews"
        );
        TwoLeads {
            _tmp: tmp,
            pg,
            lead_a: Some(lead_a),
            _lead_b: lead_b,
            log_a: runtime_a.with_extension("log"),
            store,
            outputs,
            run_id,
            owner_a,
        }
    }

    /// Waits until another lead holds the run at epoch 2: that lead.
    async fn taken_over(&self) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some((owner, _)) = lease(&self.pg, &self.run_id)
                .await
                .filter(|(_, epoch)| *epoch == 2)
            {
                let owner_b = owner.expect("a taken lease has an owner");
                assert_ne!(owner_b, self.owner_a);
                return owner_b;
            }
            assert!(Instant::now() < deadline, "no lead took the run over");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The run completed under B: both files written once, every tool call answered
    /// exactly once, one `lead_takeover` event from A at epoch 1 to B at epoch 2, and B's
    /// lease released with its epoch kept.
    async fn completed_under(&self, owner_b: &str) {
        let (store, run_id) = (&self.store, &self.run_id);
        let done = wait_for(Duration::from_secs(90), || {
            let status = sql(store, "select status from runs where run_id = ?", run_id);
            (status != "[[\"running\"]]").then_some(status)
        });
        assert_eq!(done.as_deref(), Some("[[\"success\"]]"));
        let read = |name: &str| std::fs::read_to_string(self.outputs.join(name)).unwrap();
        assert_eq!(
            (read("a.md"), read("b.md")),
            ("a".to_owned(), "b".to_owned())
        );

        let state = sql(
            store,
            "select state from checkpoints where run_id = ? order by step desc limit 1",
            run_id,
        );
        let rows: Value = serde_json::from_str(&state).unwrap();
        let state: Value = serde_json::from_str(rows[0][0].as_str().unwrap()).unwrap();
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

        let events = wait_for(Duration::from_secs(10), || {
            let rows = sql(
                store,
                "select event from run_events where run_id = ? order by seq",
                run_id,
            );
            let rows: Vec<Vec<String>> = serde_json::from_str(&rows).ok()?;
            let events: Vec<Value> = rows
                .iter()
                .filter_map(|row| serde_json::from_str(row.first()?).ok())
                .collect();
            events
                .iter()
                .any(|e| e["event"] == "lead_takeover")
                .then_some(events)
        })
        .expect("the run's events keep its takeover");
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

        let deadline = Instant::now() + Duration::from_secs(30);
        while lease(&self.pg, run_id).await != Some((None, 2)) {
            assert!(
                Instant::now() < deadline,
                "B never released the ended run's lease"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leads_run_is_taken_over_and_completes_exactly_once() {
    let mut leads = TwoLeads::start("ha_takeover_kill", PLAYBOOK).await;
    // A dies; B takes the run over once A's lease lapses.
    let killed = Instant::now();
    drop(leads.lead_a.take());
    let owner_b = leads.taken_over().await;
    let took = killed.elapsed();
    // A's lease lapses at most a time to live after its death; B takes over within 5 s
    // of that (a generous bound: a third of a time to live is the period of its look).
    assert!(
        took < Duration::from_millis(TTL_MS) + Duration::from_secs(5),
        "the takeover took {took:?}"
    );
    eprintln!("takeover {took:?} after the kill (lease ttl {TTL_MS} ms)");
    leads.completed_under(&owner_b).await;
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_lead_woken_after_the_takeover_stops_acting_for_the_run() {
    let leads = TwoLeads::start("ha_takeover_pause", SLOW_PLAYBOOK).await;
    let pid_a = leads.lead_a.as_ref().unwrap().0.id();
    // A pauses mid-run; B takes the run over once A's lease lapses.
    signal(pid_a, libc::SIGSTOP);
    let owner_b = leads.taken_over().await;
    // A wakes: its lease's time to live passed unrenewed, so it stops the run at once,
    // before its model's reply could make it act (B owns the run now).
    signal(pid_a, libc::SIGCONT);
    let stopped = wait_for(Duration::from_secs(30), || {
        let log = std::fs::read_to_string(&leads.log_a).ok()?;
        log.contains("lost the run's lease").then_some(())
    });
    assert!(stopped.is_some(), "lead A never stopped the run it lost");
    assert!(antler_tests::alive(pid_a), "lead A lives on");
    leads.completed_under(&owner_b).await;
    // A wrote nothing for the run after the takeover: its status and lease are B's.
    assert_eq!(
        sql(
            &leads.store,
            "select status from runs where run_id = ?",
            &leads.run_id
        ),
        "[[\"success\"]]"
    );
}
