//! What a sandbox runs cannot reach its supervisor: the supervisor's fds, environment and
//! memory are closed to the sandbox's user, a signal from inside does not reach it, and the
//! calls that follow still get true results from the same supervisor.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::sandbox_support::*;

/// Prints the in-sandbox pids of every process running the supervisor.
const FIND_SUPERVISOR: &str = "for p in /proc/[0-9]*; do if tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q '[_]_supervise'; then echo ${p#/proc/}; fi; done 2>/dev/null";

#[tokio::test]
async fn commands_cannot_read_write_signal_or_trace_the_supervisor() {
    let h = SandboxHost::start(BWRAP_CONFIG);
    let c = h.connect().await;
    let a = c.acquire("u", "t").await.expect("acquire");
    let id = a.sandbox_id.as_str();
    let host_pid = c.status().await.sandboxes[0].supervisor_pid.expect("pid");
    let found = c.bash(id, FIND_SUPERVISOR).await;
    let pids: Vec<&str> = found.split_whitespace().collect();
    assert!(!pids.is_empty(), "no supervisor visible: {found}");
    // pid 2 too: where the supervisor used to be.
    let mut targets: Vec<String> = pids.iter().map(|p| p.to_string()).collect();
    if !targets.iter().any(|p| p == "2") {
        targets.push("2".into());
    }
    for pid in &pids {
        for probe in [
            format!("ls /proc/{pid}/fd"),
            format!("cat /proc/{pid}/environ"),
            format!("head -c 16 /proc/{pid}/mem"),
            format!("ls -l /proc/{pid}/fd/0"),
            format!("echo '{{\"id\":1,\"result\":{{\"Ok\":{{\"stdout\":\"forged\"}}}}}}' > /proc/{pid}/fd/1"),
            format!("echo forged > /proc/{pid}/fd/0"),
        ] {
            let out = c.bash(id, &probe).await;
            assert!(
                out.contains("Exit Code: ") && !out.contains("Exit Code: 0"),
                "`{probe}` succeeded: {out}"
            );
        }
    }
    for pid in &pids {
        let _ = c
            .bash(
                id,
                &format!("kill -9 {pid}; kill -STOP {pid}; kill -TERM {pid}"),
            )
            .await;
    }
    // A process left running tries again after the call returned.
    let _ = c
        .bash(
            id,
            &format!("(sleep 0.5; for p in {}; do kill -9 $p; cat /proc/$p/fd/1 & done) > /dev/null 2>&1 &", pids.join(" ")),
        )
        .await;
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    // The same supervisor answers, truly.
    for i in 0..5 {
        assert_eq!(
            c.bash(id, &format!("echo call-{i}")).await,
            format!("call-{i}\n")
        );
    }
    assert_eq!(
        c.status().await.sandboxes[0].supervisor_pid,
        Some(host_pid),
        "the supervisor was replaced"
    );
    assert!(antler_tests::alive(host_pid));
    assert_eq!(c.bash(id, FIND_SUPERVISOR).await, found);
}
