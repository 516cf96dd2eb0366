//! A child that hangs (frozen with SIGSTOP: alive, but its heartbeats stop) is declared
//! dead by its link, killed by the supervisor after two more heartbeat windows, and
//! restarted: it is healthy again under a new pid and the others were never touched.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use antler_tests::{freeze, signal, wait_for, Cluster};

#[test]
fn a_hung_child_is_killed_and_restarted() {
    let c = Cluster::up(1);
    let before = c.process("sandbox-host", 0).unwrap();
    let pid = before["pid"].as_u64().unwrap() as u32;
    let others: Vec<u64> = ["mcp-host", "subagent"]
        .iter()
        .map(|r| c.process(r, 0).unwrap()["pid"].as_u64().unwrap())
        .collect();
    freeze(pid);
    let unhealthy = wait_for(Duration::from_secs(8), || {
        c.process("sandbox-host", 0)
            .filter(|p| p["healthy"] == false)
    });
    assert!(unhealthy.is_some(), "a frozen child must show as unhealthy");
    let after = wait_for(Duration::from_secs(25), || {
        c.process("sandbox-host", 0)
            .filter(|p| p["healthy"] == true && p["pid"].as_u64() != Some(pid as u64))
    });
    signal(pid, libc::SIGCONT);
    let after =
        after.unwrap_or_else(|| panic!("not restarted: {:?}", c.process("sandbox-host", 0)));
    assert_eq!(after["restarts"], 1);
    assert!(!antler_tests::alive(pid), "the hung process was killed");
    let now: Vec<u64> = ["mcp-host", "subagent"]
        .iter()
        .map(|r| c.process(r, 0).unwrap()["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(now, others);
}
