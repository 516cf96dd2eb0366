//! What one sandbox may take from the host and from other users, against a real
//! sandbox-host with real bubblewrap, cgroups and filesystems: thread and user directories
//! belong to the sandbox's user alone; a sandbox cannot make user namespaces or use
//! keyrings (seccomp and bubblewrap's lockdown); its memory and processes are bounded for
//! all its processes together (cgroups), an OOM kill reaching the model as a clear error;
//! the disk quota is a filesystem limit a write cannot pass.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::MetadataExt;

use crate::sandbox_support::*;

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
    // The host says what the sandboxes get: bubblewrap's own lockdown too, where it has
    // one (0.8 and later).
    let status = c.status().await;
    assert!(
        status.provider_note.contains("seccomp filter on"),
        "{}",
        status.provider_note
    );
    let help = std::process::Command::new("bwrap")
        .arg("--help")
        .output()
        .expect("bwrap");
    if String::from_utf8_lossy(&help.stdout).contains("--disable-userns") {
        assert!(
            status
                .provider_note
                .contains("user namespaces locked (--disable-userns)"),
            "{}",
            status.provider_note
        );
    }
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

/// The directory of `pid`'s cgroup in the v1 hierarchy of `controller` (or v2's).
fn cgroup_dir(pid: u32, controller: &str) -> std::path::PathBuf {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("cgroup");
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next().unwrap(), parts.next().unwrap());
        if controllers.split(',').any(|c| c == controller) {
            return std::path::Path::new("/sys/fs/cgroup")
                .join(controller)
                .join(path.trim_start_matches('/'));
        }
    }
    let path = text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .expect("a cgroup");
    std::path::Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'))
}

fn read_trimmed(path: &std::path::Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .to_string()
}

/// The sandbox's supervisor (bubblewrap) pid from the pool's status.
async fn supervisor_of(c: &Client, id: &str) -> u32 {
    c.status()
        .await
        .sandboxes
        .iter()
        .find(|s| s.sandbox_id == id)
        .and_then(|s| s.supervisor_pid)
        .expect("a supervisor")
}

const LIMITED: &str = "sandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n  bash_command_timeout: 30\n  limits:\n    max_memory_mb: 256\n    max_processes: 40\n    cpu_weight: 50\n    user_max_memory_mb: 400\n    user_max_processes: 60\n";

#[tokio::test]
async fn a_sandbox_out_of_memory_gets_a_clear_error_and_the_host_keeps_answering() {
    let mut h = SandboxHost::start(LIMITED);
    let c = h.connect().await;
    let a = c.acquire("alice", "t1").await.expect("acquire");
    let b = c.acquire("bob", "t1").await.expect("acquire");
    // Three processes of 150 MiB each: every one within the per-process limit, together
    // past the sandbox's 256 MiB.
    let out = c
        .bash(
            &a.sandbox_id,
            "for i in 1 2 3; do python3 -c 'import time; b = bytearray(150 << 20); time.sleep(4)' & done; wait; echo finished",
        )
        .await;
    assert!(
        out.starts_with("Error: Out of memory: the sandbox's processes together passed its memory limit of 256 MiB (sandbox.limits.max_memory_mb), and the kernel killed one of them."),
        "{out}"
    );
    assert!(out.contains("finished"), "{out}");
    // The sandbox, the other user's sandbox and the host all keep answering.
    assert_eq!(c.bash(&a.sandbox_id, "echo alive").await, "alive\n");
    assert_eq!(c.bash(&b.sandbox_id, "echo bob").await, "bob\n");
    // The caps are the kernel's: the sandbox's and its user's.
    let pid = supervisor_of(&c, &a.sandbox_id).await;
    let memory = cgroup_dir(pid, "memory");
    let status = c.status().await;
    assert!(
        status
            .provider_note
            .contains("256 MiB and 40 processes per sandbox"),
        "{}",
        status.provider_note
    );
    if memory.join("memory.limit_in_bytes").exists() {
        assert_eq!(
            read_trimmed(&memory.join("memory.limit_in_bytes")),
            (256u64 << 20).to_string()
        );
        assert_eq!(
            read_trimmed(&memory.parent().unwrap().join("memory.limit_in_bytes")),
            (400u64 << 20).to_string()
        );
        // Half the CPU share of a default sandbox (cpu_weight 50).
        let cpu = cgroup_dir(pid, "cpu");
        assert_eq!(read_trimmed(&cpu.join("cpu.shares")), "512");
    } else {
        assert_eq!(
            read_trimmed(&memory.join("memory.max")),
            (256u64 << 20).to_string()
        );
        assert_eq!(read_trimmed(&memory.join("cpu.weight")), "50");
    }
    // Stopped, the host leaves no cgroup behind.
    let subtree = memory.parent().unwrap().parent().unwrap().to_path_buf();
    assert!(subtree
        .file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with("antler-"));
    h.stop_with(libc::SIGTERM);
    assert!(!subtree.exists(), "{} is left", subtree.display());
}

#[tokio::test]
async fn one_users_sandboxes_share_a_process_cap_that_others_do_not() {
    let mut h = SandboxHost::start(LIMITED);
    let c = h.connect().await;
    let a1 = c.acquire("alice", "t1").await.expect("acquire");
    let a2 = c.acquire("alice", "t2").await.expect("acquire");
    let b = c.acquire("bob", "t1").await.expect("acquire");
    // 25 processes fit in one sandbox (40, its supervisor's threads counted), but not
    // twice that in two of one user's (60).
    let spawn = "for i in $(seq 25); do sleep 30 & done; jobs -p | wc -l; kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; true";
    let hold = "for i in $(seq 25); do sleep 8 & done; echo held";
    let held = c.bash(&a1.sandbox_id, hold).await;
    assert_eq!(held.lines().next(), Some("held"), "{held}");
    let second = c.bash(&a2.sandbox_id, spawn).await;
    assert!(
        second.contains("Resource temporarily unavailable") || second.contains("fork"),
        "{second}"
    );
    // Bob's sandbox is not alice's: all 25 start.
    let bobs = c.bash(&b.sandbox_id, spawn).await;
    assert_eq!(bobs.lines().next(), Some("25"), "{bobs}");
    let pid = supervisor_of(&c, &a1.sandbox_id).await;
    let pids = cgroup_dir(pid, "pids");
    assert_eq!(read_trimmed(&pids.join("pids.max")), "40");
    assert_eq!(read_trimmed(&pids.parent().unwrap().join("pids.max")), "60");
    h.stop_with(libc::SIGTERM);
    assert!(!pids.exists(), "{} is left", pids.display());
}

const QUOTA: &str = "sandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n  bash_command_timeout: 30\n  disk_quota: 64MiB\n";

/// Whether something is mounted at `dir`.
fn mounted_at(dir: &std::path::Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dir = dir.to_string_lossy();
    info.lines()
        .any(|l| l.split(' ').nth(4) == Some(dir.as_ref()))
}

#[tokio::test]
async fn a_write_past_the_disk_quota_fails_inside_and_other_users_keep_their_room() {
    if !is_root() {
        eprintln!("skipped: the disk quota is a loop-mounted filesystem, which needs root");
        return;
    }
    let mut h = SandboxHost::start(QUOTA);
    let c = h.connect().await;
    let a = c.acquire("alice", "t1").await.expect("acquire");
    let b = c.acquire("bob", "t1").await.expect("acquire");
    let a2 = c.acquire("alice", "t2").await.expect("acquire");
    let out = c
        .bash(
            &a.sandbox_id,
            "head -c 192M /dev/zero > /mnt/user-data/workspace/big; echo rc=$?",
        )
        .await;
    assert!(
        out.contains("No space left on device") && out.contains("rc=1"),
        "{out}"
    );
    let written = std::fs::metadata(h.user_data("alice", "t1").join("workspace/big"))
        .unwrap()
        .len();
    assert!(written <= 64 << 20, "{written} bytes written");
    // Alice's other threads share her quota, and a new one cannot start while it is
    // full; bob's room is his own.
    let full = c.acquire("alice", "t3").await.unwrap_err().to_string();
    assert!(full.contains("alice's files fill the disk quota"), "{full}");
    let out = c
        .bash(
            &a2.sandbox_id,
            "head -c 8M /dev/zero > /mnt/user-data/outputs/more; echo rc=$?",
        )
        .await;
    assert!(out.contains("No space left on device"), "{out}");
    assert_eq!(
        c.bash(
            &b.sandbox_id,
            "head -c 32M /dev/zero > /mnt/user-data/workspace/f && echo ok"
        )
        .await,
        "ok\n"
    );
    // Deleting makes room again.
    assert_eq!(
        c.bash(
            &a.sandbox_id,
            "rm /mnt/user-data/workspace/big && head -c 16M /dev/zero > /mnt/user-data/workspace/f && echo keep > /mnt/user-data/outputs/kept && echo ok"
        )
        .await,
        "ok\n"
    );
    let status = c.status().await;
    assert!(
        status
            .provider_note
            .contains("disk quota enforced: a 64 MiB ext4 filesystem per user"),
        "{}",
        status.provider_note
    );
    // After a crash and a restart the files are there, on the same filesystem.
    let alice = h.base().join("users/alice");
    h.kill_and_restart();
    let c = h.connect().await;
    let a = c.acquire("alice", "t1").await.expect("acquire");
    assert_eq!(
        c.bash(&a.sandbox_id, "cat /mnt/user-data/outputs/kept")
            .await,
        "keep\n"
    );
    assert!(mounted_at(&alice));
    // Stopped, the host unmounts every user's filesystem, and the loop devices go.
    h.stop_with(libc::SIGTERM);
    assert!(!mounted_at(&alice));
    assert!(!mounted_at(&h.base().join("users/bob")));
    let image = h.base().join("volumes/alice.ext4");
    assert!(image.exists());
    let loops = std::process::Command::new("losetup")
        .arg("-j")
        .arg(&image)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&loops.stdout), "");
}

#[tokio::test]
async fn a_quota_set_on_an_existing_install_keeps_the_users_files() {
    if !is_root() {
        eprintln!("skipped: the disk quota is a loop-mounted filesystem, which needs root");
        return;
    }
    let mut h = SandboxHost::start(BWRAP_CONFIG);
    let c = h.connect().await;
    let a = c.acquire("alice", "t1").await.expect("acquire");
    assert_eq!(
        c.bash(&a.sandbox_id, "echo before > /mnt/user-data/outputs/r.md")
            .await,
        "(no output)"
    );
    h.stop_with(libc::SIGTERM);
    std::fs::write(h.dir.path().join("config.yaml"), QUOTA).unwrap();
    h.kill_and_restart();
    let c = h.connect().await;
    let a = c.acquire("alice", "t1").await.expect("acquire");
    let out = c
        .bash(
            &a.sandbox_id,
            "cat /mnt/user-data/outputs/r.md; head -c 100M /dev/zero > /mnt/user-data/workspace/big; echo rc=$?",
        )
        .await;
    assert!(out.starts_with("before\n"), "{out}");
    assert!(
        out.contains("No space left on device") && out.contains("rc=1"),
        "{out}"
    );
    assert!(mounted_at(&h.base().join("users/alice")));
    assert!(!h.base().join("users/.alice.before-quota").exists());
}
