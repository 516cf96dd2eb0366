//! One lead per runtime directory: `antler up` holds an exclusive lock on it, so a second
//! `up` is refused while the first runs; `antler down` returns only once the lead has
//! exited, so an `up` right after starts cleanly and keeps its pid file and sockets; a
//! gateway address that was asked for and cannot be bound fails start-up.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::Duration;

use antler_tests::{alive, antler, bin, wait_for, Cluster};

fn up(runtime: &std::path::Path, env: &[(&str, &str)]) -> std::process::Child {
    let mut cmd = Command::new(bin("antler"));
    cmd.arg("--runtime-dir")
        .arg(runtime)
        .args(["up", "--workers", "0"])
        .env("RUST_LOG", "warn")
        .env("ANTLER_GATEWAY_ADDR", "off")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

/// A child killed when the test ends, however it ends.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn healthy(runtime: &std::path::Path) -> bool {
    let out = antler(runtime, &["status", "--json"]);
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&out.stdout) else {
        return false;
    };
    v.as_array()
        .is_some_and(|a| a.len() == 3 && a.iter().all(|p| p["healthy"] == true))
}

#[test]
fn down_waits_for_the_exit_and_a_second_up_is_refused() {
    let c = Cluster::up_ready(0, &[("ANTLER_GATEWAY_ADDR", "off")]);
    let runtime = c.runtime_dir();

    // A second `up` on the same directory is refused at once and leaves the first intact.
    let second = up(&runtime, &[]).wait_with_output().unwrap();
    assert!(!second.status.success());
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(stderr.contains("already running"), "{stderr}");
    assert!(healthy(&runtime), "the first cluster was disturbed");

    let lead_pid = c.lead.id();
    let children = c.child_pids();
    assert_eq!(children.len(), 2);
    let out = antler(&runtime, &["down"]);
    assert!(out.status.success(), "{out:?}");
    // When down returns, the lead and its children are gone.
    assert!(!alive(lead_pid), "down returned before the lead exited");
    for pid in children {
        assert!(!alive(pid), "child {pid} outlived down");
    }

    // An immediate `up` starts cleanly, and stays reachable (nobody deletes its files).
    let mut next = Reaped(up(&runtime, &[]));
    assert!(
        wait_for(Duration::from_secs(20), || healthy(&runtime).then_some(())).is_some(),
        "the next cluster did not come up"
    );
    std::thread::sleep(Duration::from_secs(1));
    assert!(runtime.join("lead.pid").exists());
    assert!(healthy(&runtime));
    let out = antler(&runtime, &["down"]);
    assert!(out.status.success(), "{out:?}");
    assert!(next.0.try_wait().unwrap().is_some(), "down returned early");

    // down with nothing running says so.
    let out = antler(&runtime, &["down"]);
    assert!(!out.status.success());
}

#[test]
fn a_gateway_address_that_cannot_be_bound_fails_start_up() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let runtime = dir.path().join("run");
    let mut child = Reaped(up(&runtime, &[("ANTLER_GATEWAY_ADDR", &addr)]));
    let status = wait_for(Duration::from_secs(20), || child.0.try_wait().unwrap())
        .expect("antler up kept running without the gateway it was asked for");
    assert!(!status.success());
    let mut stderr = String::new();
    use std::io::Read;
    child
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(stderr.contains(&addr), "{stderr}");
    assert!(!healthy(&runtime));
}
