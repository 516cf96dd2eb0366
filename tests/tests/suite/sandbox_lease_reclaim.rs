//! Sandbox leases have an owner and an expiry. Runs that hold their sandboxes through a
//! long model turn keep them past several lease TTLs (the lead renews them); when the
//! lead is stopped with SIGSTOP, sandbox-host reclaims the leases once they expire and
//! the pool drains back to zero active; after SIGCONT the runs finish.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use crate::lead_support::{active, LeadCluster};
use antler_tests::{freeze, signal, wait_for};

const CONFIG: &str = "tools:\n  - {name: write_file, group: file:write, use: deerflow.sandbox.tools:write_file_tool}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n  lease_ttl: 2\n  replicas: 8\ntool_search:\n  enabled: false\n";

/// Takes the run's sandbox, then "thinks" for 25 s holding it.
const HOLDER: &str = r#"
turns:
  - tool_calls:
      - {name: write_file, args: {description: note, path: /mnt/user-data/outputs/note.md, content: held}}
  - delay_ms: 25000
    tool_calls:
      - {name: present_files, args: {filepaths: ["/mnt/user-data/outputs/note.md"]}}
  - content: Held and done.
"#;

const RUNS: usize = 3;

#[test]
fn leases_are_renewed_while_runs_hold_them_and_reclaimed_when_the_lead_stops() {
    let c = LeadCluster::up(CONFIG, &[]);
    let playbook = c.write("holder.yaml", HOLDER);
    let runs: Vec<String> = (0..RUNS)
        .map(|i| c.submit(&format!("Hold a sandbox {i}"), &playbook, &[]))
        .collect();
    let held = wait_for(Duration::from_secs(60), || {
        let pool = c.pool_from_host()?;
        (active(&pool) == RUNS).then_some(())
    });
    assert!(
        held.is_some(),
        "the runs never held their sandboxes: {:?}",
        c.sandboxes()
    );

    // Three lease TTLs later the runs, still thinking, hold them still.
    std::thread::sleep(Duration::from_secs(6));
    let pool = c.pool_from_host().expect("the pool");
    assert_eq!(
        active(&pool),
        RUNS,
        "a lease the lead renews was reclaimed: {pool:?}"
    );
    assert!(
        pool.sandboxes
            .iter()
            .filter(|s| s.state == "active")
            .all(|s| s.holders == 1),
        "{pool:?}"
    );

    // The lead stops: nobody renews, and the pool drains within a few TTLs.
    freeze(c.lead_pid());
    let stopped = Instant::now();
    let drained = wait_for(Duration::from_secs(30), || {
        let pool = c.pool_from_host()?;
        (active(&pool) == 0).then_some(pool)
    });
    let waited = stopped.elapsed();
    signal(c.lead_pid(), libc::SIGCONT);
    let pool = drained.unwrap_or_else(|| {
        panic!(
            "the pool kept its leases with the lead stopped: {:?}",
            c.pool_from_host()
        )
    });
    assert!(
        pool.sandboxes.iter().all(|s| s.state != "active"),
        "{pool:?}"
    );
    eprintln!("the pool drained {waited:?} after the lead stopped");

    // The runs go on once the lead does, and the pool ends with nothing active.
    for run in &runs {
        let ended = wait_for(Duration::from_secs(90), || {
            let status = c.run_status(run);
            (status != "running" && !status.is_empty()).then_some(status)
        });
        assert_eq!(ended.as_deref(), Some("success"), "run {run}");
    }
    let idle = wait_for(Duration::from_secs(30), || {
        let list = c.sandboxes()?;
        list.iter().all(|s| s["state"] != "active").then_some(())
    });
    assert!(idle.is_some(), "{:?}", c.sandboxes());
}
