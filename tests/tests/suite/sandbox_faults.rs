//! Faults of a real sandbox-host with bubblewrap: `kill -9` of a sandbox's supervisor (the
//! next call gets a new one over the same files), a command that outlives its timeout (its
//! whole process group is killed and the result says so), and a call in flight when the
//! supervisor dies (an error result, not a hang).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use crate::sandbox_support::*;

#[tokio::test]
async fn kill_9_of_a_supervisor_gives_the_next_call_a_new_one_over_the_same_files() {
    let h = SandboxHost::start(BWRAP_CONFIG);
    let c = h.connect().await;
    let a = c.acquire("u", "t").await.expect("acquire");
    assert_eq!(
        c.bash(&a.sandbox_id, "echo before > keep.txt").await,
        "(no output)"
    );
    let pid = c.status().await.sandboxes[0].supervisor_pid.expect("pid");
    antler_tests::signal(pid, libc::SIGKILL);
    let dead = antler_tests::wait_for(Duration::from_secs(3), || {
        (!antler_tests::alive(pid)).then_some(())
    });
    assert!(dead.is_some());
    assert_eq!(c.bash(&a.sandbox_id, "cat keep.txt").await, "before\n");
    let new_pid = c.status().await.sandboxes[0].supervisor_pid.expect("pid");
    assert_ne!(new_pid, pid);
    assert!(antler_tests::alive(new_pid));
}

#[tokio::test]
async fn a_call_in_flight_when_its_supervisor_dies_gets_an_error_result() {
    let h = SandboxHost::start(BWRAP_CONFIG);
    let c = h.connect().await;
    let a = c.acquire("u", "t").await.expect("acquire");
    let pid = c.status().await.sandboxes[0].supervisor_pid.expect("pid");
    let running = {
        let c = c.clone();
        let id = a.sandbox_id.clone();
        tokio::spawn(async move { c.bash(&id, "sleep 15").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    antler_tests::signal(pid, libc::SIGKILL);
    let out = running.await.expect("join");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        out,
        "Error: Unexpected error executing command: the sandbox supervisor exited"
    );
    assert_eq!(c.bash(&a.sandbox_id, "echo again").await, "again\n");
}

#[tokio::test]
async fn a_command_that_outlives_its_timeout_has_its_whole_group_killed() {
    let cfg = "sandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n  bash_command_timeout: 1.5\n";
    let h = SandboxHost::start(cfg);
    let c = h.connect().await;
    let a = c.acquire("u", "t").await.expect("acquire");
    let started = Instant::now();
    let out = c
        .bash(&a.sandbox_id, "sleep 100.37 & sleep 100.37; echo never")
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        out,
        "Command timed out after 1.5 seconds and was terminated. To run a long-lived process such as a web server, start it in the background and redirect its output, e.g. `your-command > /mnt/user-data/workspace/server.log 2>&1 &`.\nThe command's whole process group was killed."
    );
    let left = antler_tests::wait_for(Duration::from_secs(3), || {
        (sleepers("100.37") == 0).then_some(())
    });
    assert!(
        left.is_some(),
        "{} sleep processes survived the timeout",
        sleepers("100.37")
    );
    // A background process redirected away from the pipes is the documented way out: the
    // call returns at once and names it.
    let out = c
        .bash(
            &a.sandbox_id,
            "sleep 100.41 > /mnt/user-data/workspace/server.log 2>&1 & echo started",
        )
        .await;
    assert!(
        out.starts_with("started\n\nStill running in the background"),
        "{out}"
    );
    assert!(out.contains(": sleep 100.41"), "{out}");
}

/// Host processes running `sleep ARG`.
fn sleepers(arg: &str) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .filter(|c| c.split(|b| *b == 0).any(|part| part == arg.as_bytes()))
        .count()
}
