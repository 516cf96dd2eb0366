//! What one sandbox may take from the host and from other users, against a real
//! sandbox-host with real bubblewrap, cgroups and filesystems: thread and user directories
//! belong to the sandbox's user alone; a sandbox cannot make user namespaces or use
//! keyrings (seccomp and bubblewrap's lockdown); its memory and processes are bounded for
//! all its processes together (cgroups), an OOM kill reaching the model as a clear error;
//! the disk quota is a filesystem limit a write cannot pass.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod sandbox_support;

use std::os::unix::fs::MetadataExt;

use sandbox_support::*;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Runs `sh -c script` as an unprivileged local user (uid and gid 4242, no groups).
fn as_local_user(script: &str) -> std::process::Output {
    std::process::Command::new("setpriv")
        .args([
            "--reuid=4242",
            "--regid=4242",
            "--clear-groups",
            "sh",
            "-c",
            script,
        ])
        .output()
        .expect("setpriv")
}

#[tokio::test]
async fn thread_and_user_directories_are_the_sandbox_users_alone() {
    let h = SandboxHost::start(BWRAP_CONFIG);
    let c = h.connect().await;
    let a = c.acquire("alice", "t1").await.expect("acquire");
    assert_eq!(
        c.bash(
            &a.sandbox_id,
            "echo alice-report > /mnt/user-data/outputs/report.md"
        )
        .await,
        "(no output)"
    );
    let user = h.base().join("users/alice");
    let data = h.user_data("alice", "t1");
    let (uid, gid) = if is_root() {
        (65534, 65534)
    } else {
        // SAFETY: getuid and getgid have no preconditions.
        unsafe { (libc::getuid(), libc::getgid()) }
    };
    for dir in [
        user.clone(),
        user.join("threads"),
        user.join("threads/t1"),
        data.clone(),
        data.join("workspace"),
        data.join("uploads"),
        data.join("outputs"),
    ] {
        let meta = std::fs::metadata(&dir).expect("dir");
        assert_eq!(meta.mode() & 0o777, 0o700, "{}", dir.display());
        assert_eq!((meta.uid(), meta.gid()), (uid, gid), "{}", dir.display());
    }
    // `users/` lists nobody.
    let users = std::fs::metadata(h.base().join("users")).expect("users");
    assert_eq!(users.mode() & 0o777, 0o711);
    if !is_root() {
        return;
    }
    // Another local user can neither read alice's report nor replace it.
    let report = data.join("outputs/report.md");
    let read = as_local_user(&format!("cat {}", report.display()));
    assert!(!read.status.success());
    assert!(
        String::from_utf8_lossy(&read.stderr).contains("Permission denied"),
        "{read:?}"
    );
    let replace = as_local_user(&format!(
        "echo pwned > {p}.new && mv {p}.new {p}",
        p = report.display()
    ));
    assert!(!replace.status.success(), "{replace:?}");
    assert!(String::from_utf8_lossy(&replace.stderr).contains("Permission denied"));
    assert_eq!(std::fs::read_to_string(&report).unwrap(), "alice-report\n");
    // The sandbox still reads and writes its own files, and the tools still do.
    assert_eq!(
        c.bash(
            &a.sandbox_id,
            "cat /mnt/user-data/outputs/report.md && mkdir -p /mnt/user-data/workspace/d && echo x > /mnt/user-data/workspace/d/f && cat /mnt/user-data/workspace/d/f"
        )
        .await,
        "alice-report\nx\n"
    );
    assert_eq!(
        c.text(
            &a.sandbox_id,
            "read_file",
            serde_json::json!({"description": "d", "path": "/mnt/user-data/outputs/report.md"}),
        )
        .await,
        "alice-report\n"
    );
}

#[tokio::test]
async fn a_sandbox_cannot_make_user_namespaces() {
    let h = SandboxHost::start(BWRAP_CONFIG);
    let c = h.connect().await;
    let a = c.acquire("u", "t").await.expect("acquire");
    let out = c.bash(&a.sandbox_id, "unshare -U true; echo rc=$?").await;
    assert!(
        out.contains("unshare failed: Operation not permitted") && out.contains("rc=1"),
        "{out}"
    );
    let out = c
        .bash(&a.sandbox_id, "unshare -U -r -n true; echo rc=$?")
        .await;
    assert!(out.contains("Operation not permitted"), "{out}");
    // `clone` with CLONE_NEWUSER, straight to the kernel.
    let clone = format!(
        "python3 -c 'import ctypes,os; l=ctypes.CDLL(None, use_errno=True); r=l.syscall({}, {}, 0, 0, 0, 0); print(r, os.strerror(ctypes.get_errno()))'",
        libc::SYS_clone,
        libc::CLONE_NEWUSER | libc::SIGCHLD
    );
    assert_eq!(
        c.bash(&a.sandbox_id, &clone).await,
        "-1 Operation not permitted\n"
    );
    // Threads and processes still start (`clone3` falls back to `clone`).
    assert_eq!(
        c.bash(
            &a.sandbox_id,
            "python3 -c 'import threading; t=threading.Thread(target=print, args=(\"thread ok\",)); t.start(); t.join()' && (sleep 0 & wait) && echo spawned"
        )
        .await,
        "thread ok\nspawned\n"
    );
    // The host says what the sandboxes get.
    let status = c.status().await;
    assert!(
        status.provider_note.contains("seccomp filter on"),
        "{}",
        status.provider_note
    );
}

#[tokio::test]
async fn a_sandbox_cannot_use_keyrings_or_perf_events() {
    let h = SandboxHost::start(BWRAP_CONFIG);
    let c = h.connect().await;
    let a = c.acquire("u", "t").await.expect("acquire");
    let out = c
        .bash(
            &a.sandbox_id,
            "keyctl add user antler secret @s; echo rc=$?",
        )
        .await;
    assert!(
        out.contains("Operation not permitted") && out.contains("rc=1"),
        "{out}"
    );
    // Each call straight to the kernel (with arguments it would otherwise refuse with
    // another error, or accept).
    for (call, args) in [
        (libc::SYS_keyctl, "0, 0, 0, 0"),
        (libc::SYS_add_key, "b'user', b'k', b'v', 1, -2"),
        (libc::SYS_request_key, "b'user', b'k', 0, 0"),
        (libc::SYS_perf_event_open, "0, 0, -1, -1, 0"),
        (libc::SYS_setns, "0, 0"),
        (libc::SYS_ptrace, "0, 0, 0, 0"),
    ] {
        let py = format!(
            "python3 -c \"import ctypes,os; l=ctypes.CDLL(None, use_errno=True); r=l.syscall({call}, {args}); print(r, os.strerror(ctypes.get_errno()))\""
        );
        assert_eq!(
            c.bash(&a.sandbox_id, &py).await,
            "-1 Operation not permitted\n",
            "syscall {call}"
        );
    }
}
