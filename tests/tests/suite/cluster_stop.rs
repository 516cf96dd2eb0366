//! Stopping `antler up` leaves no child behind: SIGTERM drains and stops every child,
//! SIGKILL of the lead takes its hosts with it (they die with their parent) while a worker
//! outlives it for a while (a new lead adopts it) and then exits by itself, and a
//! command run with no cluster up starts an ephemeral one and cleans it away.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use antler_tests::{alive, antler, exists, signal, wait_for, Cluster};

#[test]
fn sigterm_stops_every_child_and_reaps_it() {
    let mut c = Cluster::up(2);
    let pids = c.child_pids();
    assert_eq!(pids.len(), 4);
    signal(c.lead.id(), libc::SIGTERM);
    let status =
        wait_for(Duration::from_secs(15), || c.lead.try_wait().ok().flatten()).expect("lead exits");
    assert!(status.success(), "{status:?}");
    for pid in pids {
        assert!(!exists(pid), "child {pid} left behind");
    }
    let out = antler(&c.runtime_dir(), &["status"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("no cluster is running"));
}

#[test]
fn sigkill_of_the_lead_takes_the_hosts_and_an_orphaned_worker_leaves_alone() {
    let mut c = Cluster::up(1);
    let status = c.status().expect("status");
    let pid_of = |role: &str| -> Vec<u32> {
        status
            .iter()
            .filter(|p| p["role"] == role)
            .filter_map(|p| p["pid"].as_u64().map(|x| x as u32))
            .collect()
    };
    let hosts: Vec<u32> = [pid_of("mcp-host"), pid_of("sandbox-host")].concat();
    let workers = pid_of("subagent");
    assert_eq!((hosts.len(), workers.len()), (2, 1), "{status:?}");
    signal(c.lead.id(), libc::SIGKILL);
    let _ = c.lead.wait();
    // The hosts die with the lead.
    let gone = wait_for(Duration::from_secs(5), || {
        hosts.iter().all(|p| !alive(*p)).then_some(())
    });
    assert!(
        gone.is_some(),
        "hosts still alive: {:?}",
        hosts.iter().filter(|p| alive(**p)).collect::<Vec<_>>()
    );
    // A worker outlives its lead, so a new lead can adopt it and its tasks finish...
    assert!(alive(workers[0]), "the worker died with its lead");
    // ...and with no lead back within its grace (60 s) it exits by itself.
    let left = wait_for(Duration::from_secs(80), || {
        (!alive(workers[0])).then_some(())
    });
    if left.is_none() {
        signal(workers[0], libc::SIGKILL);
    }
    assert!(left.is_some(), "an orphaned worker never exited");
}

#[test]
fn a_command_without_a_cluster_runs_on_an_ephemeral_one() {
    let dir = tempfile::Builder::new()
        .prefix("antler-e")
        .tempdir_in("/tmp")
        .expect("tmp");
    let rd = dir.path().join("run");
    let out = antler(&rd, &["ping", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pings: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let pings = pings.as_array().expect("array");
    assert_eq!(pings.len(), 4, "mcp-host, sandbox-host and two workers");
    assert!(pings.iter().all(|p| p["ok"] == true), "{pings:?}");
    // Nothing of the ephemeral cluster is left: no directory, no process using it.
    let leftovers: Vec<_> = std::fs::read_dir(&rd)
        .expect("runtime dir")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("ephemeral-"))
        .collect();
    assert!(leftovers.is_empty());
    let procs = std::fs::read_dir("/proc").expect("proc");
    for p in procs.filter_map(Result::ok) {
        if let Ok(cmd) = std::fs::read(p.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd);
            assert!(!cmd.contains(&*rd.to_string_lossy()), "left behind: {cmd}");
        }
    }
}
