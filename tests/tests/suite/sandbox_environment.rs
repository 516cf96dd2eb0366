//! The operator's environment stays out of the sandbox: a secret in sandbox-host's
//! environment is in no process's environment inside the sandbox (bubblewrap's own
//! included), and bubblewrap on the host starts with an empty environment.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::sandbox_support::*;

const SECRET: &str = "sk-operator-secret-9f1c2e7a";

#[tokio::test]
async fn no_process_in_the_sandbox_sees_the_operators_environment() {
    let h = SandboxHost::start_with(BWRAP_CONFIG, &[("ANTLER_TEST_MODEL_KEY", SECRET)]);
    let c = h.connect().await;
    let a = c.acquire("u", "t").await.expect("acquire");
    // A process left running, so more than the command's own processes are read.
    let _ = c.bash(&a.sandbox_id, "sleep 60 &").await;
    let out = c
        .bash(
            &a.sandbox_id,
            "cat /proc/1/environ; for f in /proc/[0-9]*/environ /proc/[0-9]*/task/*/environ; do cat $f; echo; done; env",
        )
        .await;
    assert!(!out.contains(SECRET), "{out}");
    assert!(!out.contains("ANTLER_TEST_MODEL_KEY"), "{out}");
    // The declared environment is there.
    assert!(out.contains("HOME=/mnt/user-data/workspace"), "{out}");
    // bubblewrap itself, on the host, carries nothing of the operator's.
    let bwrap = c.status().await.sandboxes[0]
        .supervisor_pid
        .expect("bubblewrap pid");
    let env = std::fs::read(format!("/proc/{bwrap}/environ")).expect("bubblewrap environ");
    assert!(
        env.is_empty(),
        "bubblewrap's environment: {}",
        String::from_utf8_lossy(&env)
    );
}
