//! A sandbox's supervisor under signals from the host's side: paused (SIGSTOP), it stops
//! answering the host's pings and the host says so in its log, and again when it answers
//! after SIGCONT, with the same supervisor serving the next call; a SIGTERM from outside
//! ends it (as the namespace's pid 1 it would otherwise never see one), the host logs the
//! exit, and the sandbox's next call gets a new supervisor. (A signal from inside the
//! sandbox still does not reach it: `sandbox_supervisor`.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::sandbox_support::*;
use antler_tests::{signal, wait_for};

/// The supervisor's pid: bubblewrap's child (the sandbox's pid 1).
fn supervisor_of(bwrap: u32) -> u32 {
    let children =
        std::fs::read_to_string(format!("/proc/{bwrap}/task/{bwrap}/children")).unwrap_or_default();
    children
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("bubblewrap {bwrap} has no child"))
}

/// Lets a paused supervisor go on when the test ends, whatever its outcome: one left stopped
/// would never read the end of its stdin when sandbox-host is killed, and would outlive
/// the test with its bubblewrap.
struct Resume(u32);

impl Drop for Resume {
    fn drop(&mut self) {
        signal(self.0, libc::SIGCONT);
    }
}

fn logged(h: &SandboxHost, needle: &str) -> bool {
    wait_for(Duration::from_secs(15), || {
        h.log().contains(needle).then_some(())
    })
    .is_some()
}

#[tokio::test]
async fn a_paused_supervisor_is_noticed_and_a_terminated_one_replaced() {
    let h = SandboxHost::start_logged(BWRAP_CONFIG);
    let c = h.connect().await;
    let a = c.acquire("u", "t").await.expect("acquire");
    let id = a.sandbox_id.as_str();
    assert_eq!(c.bash(id, "echo one").await, "one\n");
    let bwrap = c.status().await.sandboxes[0]
        .supervisor_pid
        .expect("supervisor pid");
    let supervisor = supervisor_of(bwrap);
    let _resume = Resume(supervisor);

    signal(supervisor, libc::SIGSTOP);
    assert!(
        logged(&h, "sandbox supervisor did not answer a ping"),
        "no word of the paused supervisor: {}",
        h.log()
    );
    signal(supervisor, libc::SIGCONT);
    assert!(
        logged(&h, "sandbox supervisor answers pings again"),
        "no word of the supervisor answering again: {}",
        h.log()
    );
    assert_eq!(c.bash(id, "echo two").await, "two\n");
    assert_eq!(
        c.status().await.sandboxes[0].supervisor_pid,
        Some(bwrap),
        "a pause replaced the supervisor"
    );

    signal(supervisor, libc::SIGTERM);
    assert!(
        logged(&h, "sandbox supervisor exited unexpectedly"),
        "the SIGTERM'd supervisor's exit is not logged: {}",
        h.log()
    );
    assert!(
        h.log().contains("36608") || h.log().contains("143"),
        "not the exit of a SIGTERM: {}",
        h.log()
    );
    assert_eq!(c.bash(id, "echo three").await, "three\n");
    let now = c.status().await.sandboxes[0].supervisor_pid;
    assert!(
        now.is_some() && now != Some(bwrap),
        "the sandbox did not get a new supervisor: {now:?}"
    );
}
