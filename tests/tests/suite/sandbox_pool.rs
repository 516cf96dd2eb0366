//! The warm pool of a real sandbox-host with bubblewrap: deterministic ids, idempotent
//! concurrent acquire, release to warm (not destroy), the replicas cap, idle eviction,
//! capacity with its overflow policies, id conflicts, pre-warmed sandboxes, acquire-time
//! authorization, and thread directories that survive a `kill -9` of the host.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::sandbox_support::*;
use antler_protocol::messages::{AcquireSource, SandboxError};
use sha2::{Digest, Sha256};

fn expected_id(user: &str, thread: &str) -> String {
    hex::encode(Sha256::digest(format!("{user}:{thread}").as_bytes()))[..16].to_string()
}

#[tokio::test]
async fn a_hundred_concurrent_acquires_of_one_thread_yield_one_sandbox() {
    let h = SandboxHost::start(BWRAP_CONFIG);
    let c = h.connect().await;
    let all = futures::future::join_all((0..100).map(|_| {
        let c = c.clone();
        async move { c.acquire("alice", "thread-1").await.expect("acquire") }
    }))
    .await;
    let id = expected_id("alice", "thread-1");
    assert!(all.iter().all(|a| a.sandbox_id == id), "{all:?}");
    assert_eq!(
        all.iter()
            .filter(|a| a.source == AcquireSource::Created)
            .count(),
        1
    );
    let st = c.status().await;
    assert_eq!(st.provider, "bwrap");
    assert_eq!(st.sandboxes.len(), 1, "{st:?}");
    assert_eq!(
        (st.sandboxes[0].state.as_str(), st.sandboxes[0].holders),
        ("active", 100)
    );
    for _ in 0..100 {
        c.release(&id).await.expect("release");
    }
    let st = c.status().await;
    assert_eq!(
        (st.sandboxes[0].state.as_str(), st.sandboxes[0].holders),
        ("warm", 0)
    );
}

#[tokio::test]
async fn release_parks_the_sandbox_warm_and_the_next_acquire_reuses_it() {
    let h = SandboxHost::start(BWRAP_CONFIG);
    let c = h.connect().await;
    let a = c.acquire("alice", "t1").await.expect("acquire");
    assert_eq!(a.source, AcquireSource::Created);
    assert_eq!(
        c.bash(&a.sandbox_id, "echo kept > notes.txt").await,
        "(no output)"
    );
    let pid = c.status().await.sandboxes[0].supervisor_pid.expect("pid");
    c.release(&a.sandbox_id).await.expect("release");
    let st = c.status().await;
    assert_eq!(st.sandboxes[0].state, "warm");
    assert!(antler_tests::alive(pid), "release destroyed the supervisor");
    let b = c.acquire("alice", "t1").await.expect("acquire");
    assert_eq!(
        (b.sandbox_id.as_str(), b.source),
        (a.sandbox_id.as_str(), AcquireSource::Warm)
    );
    assert_eq!(c.status().await.sandboxes[0].supervisor_pid, Some(pid));
    assert_eq!(c.bash(&b.sandbox_id, "cat notes.txt").await, "kept\n");
    // A different id for the same thread is a conflict, not an overwrite.
    let conflict = c
        .acquire_known("alice", "t1", Some("0000000000000000"))
        .await;
    assert_eq!(
        conflict.map_err(|e| e.to_string()),
        Err(format!(
            "sandbox id conflict for thread 't1': the thread holds 0000000000000000 but its sandbox is {}",
            a.sandbox_id
        ))
    );
    assert!(c
        .acquire_known("alice", "t1", Some(&a.sandbox_id))
        .await
        .is_ok());
}

#[tokio::test]
async fn warm_sandboxes_beyond_replicas_are_evicted_oldest_first() {
    let h = SandboxHost::start(&format!("{BWRAP_CONFIG}  replicas: 2\n"));
    let c = h.connect().await;
    let mut ids = Vec::new();
    for t in ["t1", "t2", "t3"] {
        let a = c.acquire("u", t).await.expect("acquire");
        c.release(&a.sandbox_id).await.expect("release");
        ids.push(a.sandbox_id);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let st = c.status().await;
    let mut warm: Vec<&str> = st.sandboxes.iter().map(|s| s.thread_id.as_str()).collect();
    warm.sort();
    assert_eq!(warm, ["t2", "t3"], "{st:?}");
    // The evicted thread's files are still there for its next acquire.
    assert!(h.user_data("u", "t1").join("workspace").is_dir());
}

#[tokio::test]
async fn idle_warm_sandboxes_are_destroyed_after_idle_timeout() {
    let cfg = format!("{BWRAP_CONFIG}  idle_timeout: 1\n  idle_check_interval: 0.2\n");
    let h = SandboxHost::start(&cfg);
    let c = h.connect().await;
    let held = c.acquire("u", "held").await.expect("acquire");
    let a = c.acquire("u", "idle").await.expect("acquire");
    let pid = c
        .status()
        .await
        .sandboxes
        .iter()
        .find(|s| s.thread_id == "idle")
        .and_then(|s| s.supervisor_pid)
        .expect("pid");
    c.release(&a.sandbox_id).await.expect("release");
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    let st = c.status().await;
    let threads: Vec<&str> = st.sandboxes.iter().map(|s| s.thread_id.as_str()).collect();
    assert_eq!(threads, ["held"], "an active sandbox is never idle-evicted");
    let gone = antler_tests::wait_for(Duration::from_secs(3), || {
        (!antler_tests::alive(pid)).then_some(())
    });
    assert!(gone.is_some(), "the idle sandbox's supervisor still runs");
    c.release(&held.sandbox_id).await.expect("release");
}

#[tokio::test]
async fn capacity_rejects_or_waits_as_configured() {
    let h = SandboxHost::start(&format!(
        "{BWRAP_CONFIG}  capacity: 1\n  overflow_policy: reject\n"
    ));
    let c = h.connect().await;
    let a = c.acquire("u", "t1").await.expect("acquire");
    assert_eq!(
        c.acquire("v", "t2").await.map_err(|e| e.to_string()),
        Err("the sandbox pool is at capacity (1 sandboxes)".to_string())
    );
    // A warm sandbox gives its slot up.
    c.release(&a.sandbox_id).await.expect("release");
    assert!(c.acquire("v", "t2").await.is_ok());

    let h = SandboxHost::start(&format!(
        "{BWRAP_CONFIG}  capacity: 1\n  acquire_timeout: 1\n"
    ));
    let c = h.connect().await;
    let a = c.acquire("u", "t1").await.expect("acquire");
    let started = std::time::Instant::now();
    assert_eq!(
        c.acquire("v", "t2").await,
        Err(SandboxError::WaitTimedOut {
            capacity: 1,
            waited_ms: 1000
        })
    );
    assert!(started.elapsed() >= Duration::from_millis(900));
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move { c.acquire("v", "t2").await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    c.release(&a.sandbox_id).await.expect("release");
    let got = waiter
        .await
        .expect("join")
        .expect("acquired after the release");
    assert_eq!(got.source, AcquireSource::Created);
}

#[tokio::test]
async fn one_user_holds_its_share_of_the_pool_and_another_still_gets_a_sandbox() {
    // Capacity 4: a user's share is 2 active sandboxes by default.
    let h = SandboxHost::start(&format!(
        "{BWRAP_CONFIG}  capacity: 4\n  overflow_policy: reject\n"
    ));
    let c = h.connect().await;
    let a1 = c.acquire("alice", "t1").await.expect("alice's first");
    c.acquire("alice", "t2").await.expect("alice's second");
    let third = c.acquire("alice", "t3").await;
    assert_eq!(
        third,
        Err(SandboxError::UserAtLimit {
            user_id: "alice".into(),
            limit: 2
        })
    );
    assert!(
        third
            .unwrap_err()
            .to_string()
            .contains("sandbox.limits.user_max_sandboxes"),
        "the error names the setting"
    );
    // Her held threads still reach their sandboxes; bob gets his.
    assert!(c.acquire("alice", "t1").await.is_ok());
    c.acquire("bob", "t1").await.expect("bob is not alice");
    // A sandbox of hers that goes warm gives her room again.
    c.release(&a1.sandbox_id).await.expect("release");
    c.release(&a1.sandbox_id).await.expect("release");
    assert!(c.acquire("alice", "t3").await.is_ok());

    // The setting overrides the default share.
    let h = SandboxHost::start(&format!(
        "{BWRAP_CONFIG}  capacity: 4\n  limits:\n    user_max_sandboxes: 1\n"
    ));
    let c = h.connect().await;
    c.acquire("alice", "t1").await.expect("acquire");
    assert!(matches!(
        c.acquire("alice", "t2").await,
        Err(SandboxError::UserAtLimit { limit: 1, .. })
    ));
}

#[tokio::test]
async fn a_prewarmed_sandbox_serves_the_first_acquire_of_a_new_thread() {
    let h = SandboxHost::start(&format!("{BWRAP_CONFIG}  prewarm: 1\n"));
    let c = h.connect().await;
    let mut ready = false;
    for _ in 0..100 {
        let st = c.status().await;
        if st.sandboxes.len() == 1 && st.sandboxes[0].state == "prewarmed" {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ready, "no pre-warmed sandbox");
    let a = c.acquire("bob", "fresh").await.expect("acquire");
    assert_eq!(a.source, AcquireSource::Prewarmed);
    assert_eq!(
        c.bash(&a.sandbox_id, "echo mine > w.txt && pwd").await,
        "/mnt/user-data/workspace\n"
    );
    let file = h.user_data("bob", "fresh").join("workspace/w.txt");
    assert_eq!(
        std::fs::read_to_string(file).expect("file in the thread's directory"),
        "mine\n"
    );
    // The pool refills: a new sandbox is pre-warming, then ready.
    let mut refilled = false;
    for _ in 0..100 {
        let st = c.status().await;
        if st
            .sandboxes
            .iter()
            .filter(|s| s.state == "prewarmed")
            .count()
            == 1
        {
            refilled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(refilled, "{:?}", c.status().await);
    // A thread that already has files gets a sandbox over them, not a pre-warmed one.
    c.release(&a.sandbox_id).await.expect("release");
    drop(c);
    drop(h);
}

#[tokio::test]
async fn authorization_at_acquire_refuses_users_not_allowed() {
    let cfg = format!(
        "{BWRAP_CONFIG}authorization:\n  enabled: true\n  provider:\n    use: antler:static\n    config:\n      sandbox_users: [alice]\n"
    );
    let h = SandboxHost::start(&cfg);
    let c = h.connect().await;
    assert!(c.acquire("alice", "t").await.is_ok());
    assert_eq!(
        c.acquire("bob", "t").await.map_err(|e| e.to_string()),
        Err("user 'bob' is not allowed to use a sandbox".to_string())
    );
    assert!(
        !h.user_data("bob", "t").exists(),
        "a refused acquire created directories"
    );
}

#[tokio::test]
async fn after_kill_9_of_the_host_the_same_thread_gets_the_same_id_over_the_same_files() {
    let mut h = SandboxHost::start(BWRAP_CONFIG);
    let c = h.connect().await;
    let a = c.acquire("alice", "t1").await.expect("acquire");
    assert_eq!(
        c.bash(&a.sandbox_id, "echo survived > /mnt/user-data/outputs/r.md")
            .await,
        "(no output)"
    );
    let old_pid = c.status().await.sandboxes[0].supervisor_pid.expect("pid");
    h.kill_and_restart();
    // The old supervisor died with its host (--die-with-parent).
    let gone = antler_tests::wait_for(Duration::from_secs(3), || {
        (!antler_tests::alive(old_pid)).then_some(())
    });
    assert!(gone.is_some(), "a supervisor outlived its host");
    let c = h.connect().await;
    let b = c.acquire("alice", "t1").await.expect("acquire");
    assert_eq!(b.sandbox_id, a.sandbox_id);
    assert_eq!(
        c.bash(&b.sandbox_id, "cat /mnt/user-data/outputs/r.md")
            .await,
        "survived\n"
    );
}

#[tokio::test]
async fn without_bubblewrap_the_host_refuses_sandboxed_tools_unless_fallback_is_allowed() {
    let no_bwrap = [("ANTLER_BWRAP", "/nonexistent/bwrap")];
    let h = SandboxHost::start_with(BWRAP_CONFIG, &no_bwrap);
    let c = h.connect().await;
    let err = c.acquire("u", "t").await.map_err(|e| e.to_string());
    assert_eq!(
        err,
        Err("sandboxed tools are unavailable: bubblewrap cannot create its namespaces (cannot run bwrap: No such file or directory (os error 2)); sandboxed tools are refused. Install bubblewrap and allow unprivileged user namespaces, or set sandbox.allow_local_fallback: true to run them unisolated".to_string())
    );
    assert_eq!(c.status().await.provider, "none");

    let h = SandboxHost::start_with(
        &format!("{BWRAP_CONFIG}  allow_local_fallback: true\n"),
        &no_bwrap,
    );
    let c = h.connect().await;
    let st = c.status().await;
    assert_eq!(st.provider, "local");
    assert!(
        st.provider_note
            .contains("falling back to the local provider"),
        "{}",
        st.provider_note
    );
    let a = c.acquire("u", "t").await.expect("acquire");
    // The local provider's own rule still holds: no host bash unless allowed.
    assert!(c
        .bash(&a.sandbox_id, "echo hi")
        .await
        .starts_with("Error: Host bash execution is disabled"));
}
