//! Escapes from a bwrap sandbox of a real sandbox-host: each attempt must fail and leave the
//! host untouched: reading a host file outside the mounts, writing outside the thread's
//! directories, a symlink in the workspace to a host path, `..` traversal, a TCP port on
//! the host's loopback with the network off, host processes in /proc, and a fork bomb
//! (bounded by the limits while the host stays responsive).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    io::ErrorKind,
    net::TcpListener,
    os::unix::fs::symlink,
    time::{Duration, Instant},
};

use crate::sandbox_support::*;
use serde_json::json;

/// A host file the sandbox must not see.
fn host_secret() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("antler-secret")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let path = dir.path().join("secret.txt");
    std::fs::write(&path, "host-secret-value").expect("secret");
    (dir, path)
}

#[tokio::test]
async fn a_host_file_outside_the_mounts_cannot_be_read() {
    let h = SandboxHost::start(BWRAP_CONFIG);
    let c = h.connect().await;
    let a = c.acquire("u", "t").await.expect("acquire");
    let (_d, secret) = host_secret();
    let out = c
        .bash(&a.sandbox_id, &format!("cat {}", secret.display()))
        .await;
    assert_eq!(
        out,
        format!(
            "\nStd Error:\ncat: {}: No such file or directory\n\nExit Code: 1",
            secret.display()
        )
    );
    // Nothing of the host's tree beyond the minimal root is there.
    assert_eq!(
        c.bash(&a.sandbox_id, "ls /").await,
        "bin\ndev\netc\nlib\nlib64\nmnt\nproc\nsbin\ntmp\nusr\n"
    );
    assert!(c
        .bash(&a.sandbox_id, "cat /etc/shadow /etc/passwd")
        .await
        .contains("No such file or directory"));
    assert!(c
        .bash(&a.sandbox_id, "ls /work /root /home")
        .await
        .contains("Exit Code: 2"));
    // read_file refuses host paths outright.
    let r = c
        .text(
            &a.sandbox_id,
            "read_file",
            json!({"description": "d", "path": secret.display().to_string()}),
        )
        .await;
    assert_eq!(
        r,
        format!(
            "Error: Permission denied reading file: {}",
            secret.display()
        )
    );
}

#[tokio::test]
async fn writes_outside_the_thread_directories_fail_and_the_host_is_untouched() {
    let h = SandboxHost::start(BWRAP_CONFIG);
    let c = h.connect().await;
    let a = c.acquire("u", "t").await.expect("acquire");
    for target in ["/mnt/user-data/x", "/usr/x", "/etc/x", "/x", "/mnt/x"] {
        let out = c
            .bash(&a.sandbox_id, &format!("echo pwned > {target}"))
            .await;
        assert!(
            out.contains("Read-only file system") || out.contains("Permission denied"),
            "{target}: {out}"
        );
        assert!(out.ends_with("Exit Code: 1"), "{target}: {out}");
    }
    assert!(!std::path::Path::new("/usr/x").exists() && !std::path::Path::new("/x").exists());
    assert!(!h.user_data("u", "t").join("x").exists());
    // /tmp is private: a file written there is not the host's.
    assert_eq!(
        c.bash(
            &a.sandbox_id,
            "echo private > /tmp/antler-private-probe && cat /tmp/antler-private-probe"
        )
        .await,
        "private\n"
    );
    assert!(!std::path::Path::new("/tmp/antler-private-probe").exists());
    // The three user-data directories are writable.
    for d in ["workspace", "uploads", "outputs"] {
        assert_eq!(
            c.bash(&a.sandbox_id, &format!("echo ok > /mnt/user-data/{d}/f"))
                .await,
            "(no output)"
        );
        assert!(h.user_data("u", "t").join(d).join("f").exists());
    }
    // Skills are read-only.
    let w = c
        .text(
            &a.sandbox_id,
            "write_file",
            json!({"description": "d", "path": "/mnt/skills/x", "content": "x"}),
        )
        .await;
    assert_eq!(w, "Error: Permission denied writing to file: /mnt/skills/x");
}

#[tokio::test]
async fn a_symlink_in_the_workspace_to_a_host_path_leads_nowhere() {
    let h = SandboxHost::start(BWRAP_CONFIG);
    let c = h.connect().await;
    let a = c.acquire("u", "t").await.expect("acquire");
    let (_d, secret) = host_secret();
    symlink(&secret, h.user_data("u", "t").join("workspace/link")).expect("symlink");
    let out = c.bash(&a.sandbox_id, "cat link").await;
    assert!(
        out.contains("No such file or directory") && !out.contains("host-secret-value"),
        "{out}"
    );
    // A link made inside the sandbox is no better, through bash or the file tools.
    let made = c
        .bash(
            &a.sandbox_id,
            &format!("ln -s {} inside && cat inside", secret.display()),
        )
        .await;
    assert!(!made.contains("host-secret-value"), "{made}");
    for link in ["link", "inside"] {
        let r = c
            .text(
                &a.sandbox_id,
                "read_file",
                json!({"description": "d", "path": format!("/mnt/user-data/workspace/{link}")}),
            )
            .await;
        assert_eq!(
            r,
            format!("Error: Permission denied reading file: /mnt/user-data/workspace/{link}")
        );
        let w = c
            .text(&a.sandbox_id, "write_file", json!({"description": "d", "path": format!("/mnt/user-data/workspace/{link}"), "content": "overwritten"}))
            .await;
        assert_eq!(
            w,
            format!("Error: Permission denied writing to file: /mnt/user-data/workspace/{link}")
        );
    }
    assert_eq!(
        std::fs::read_to_string(&secret).expect("secret"),
        "host-secret-value"
    );
}

#[tokio::test]
async fn dot_dot_traversal_stays_inside() {
    let h = SandboxHost::start(BWRAP_CONFIG);
    let c = h.connect().await;
    let a = c.acquire("u", "t").await.expect("acquire");
    let (_d, secret) = host_secret();
    let up = format!("/mnt/user-data/workspace/../../../..{}", secret.display());
    let out = c.bash(&a.sandbox_id, &format!("cat {up}")).await;
    assert!(out.contains("No such file or directory"), "{out}");
    let r = c
        .text(
            &a.sandbox_id,
            "read_file",
            json!({"description": "d", "path": up}),
        )
        .await;
    assert_eq!(r, format!("Error: Permission denied reading file: {up}"));
    let w = c
        .text(&a.sandbox_id, "write_file", json!({"description": "d", "path": "/mnt/user-data/outputs/../../../../tmp/escape", "content": "x"}))
        .await;
    assert_eq!(
        w,
        "Error: Permission denied writing to file: /mnt/user-data/outputs/../../../../tmp/escape"
    );
    assert!(!std::path::Path::new("/tmp/escape").exists());
}

#[tokio::test]
async fn a_tcp_port_on_the_host_loopback_is_unreachable_with_the_network_off() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();
    let h = SandboxHost::start(BWRAP_CONFIG);
    let c = h.connect().await;
    let a = c.acquire("u", "t").await.expect("acquire");
    let out = c
        .bash(
            &a.sandbox_id,
            &format!("echo hello > /dev/tcp/127.0.0.1/{port} && echo CONNECTED"),
        )
        .await;
    assert!(
        !out.contains("CONNECTED") && out.contains("Connection refused"),
        "{out}"
    );
    match listener.accept() {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        other => panic!("the host listener saw a connection: {other:?}"),
    }
    // Only a loopback interface, and no route out.
    let ifs = c
        .bash(
            &a.sandbox_id,
            "ls /sys/class/net 2>/dev/null; cat /proc/net/dev | tail -n +3 | cut -d: -f1",
        )
        .await;
    assert_eq!(ifs.split_whitespace().collect::<Vec<_>>(), ["lo"], "{ifs}");
}

#[tokio::test]
async fn host_processes_are_not_visible_in_proc() {
    let h = SandboxHost::start(BWRAP_CONFIG);
    let c = h.connect().await;
    let a = c.acquire("u", "t").await.expect("acquire");
    let cmdlines = c
        .bash(
            &a.sandbox_id,
            "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done",
        )
        .await;
    assert!(
        !cmdlines.contains("--listen"),
        "the host process is visible: {cmdlines}"
    );
    assert!(
        !cmdlines.contains("sandbox_escape"),
        "the test process is visible: {cmdlines}"
    );
    let count = c.bash(&a.sandbox_id, "ls -d /proc/[0-9]* | wc -l").await;
    let n: u32 = count.trim().parse().expect("count");
    assert!(n < 10, "{n} processes visible: {cmdlines}");
    let host_pid = std::process::id();
    assert!(c
        .bash(&a.sandbox_id, &format!("cat /proc/{host_pid}/cmdline"))
        .await
        .contains("No such file"));
}

#[tokio::test]
async fn a_fork_bomb_is_bounded_and_the_host_stays_responsive() {
    let cfg = "sandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n  bash_command_timeout: 4\n  limits:\n    max_processes: 64\n";
    let h = SandboxHost::start(cfg);
    let c = h.connect().await;
    let bomb = c.acquire("u", "bomb").await.expect("acquire");
    let calm = c.acquire("u", "calm").await.expect("acquire");
    let started = Instant::now();
    let bombing = {
        let c = c.clone();
        let id = bomb.sandbox_id.clone();
        tokio::spawn(async move {
            c.bash(&id, "bomb() { bomb | bomb & }; bomb; sleep 10")
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The host answers and another sandbox works while the bomb runs.
    let t = Instant::now();
    assert_eq!(c.bash(&calm.sandbox_id, "echo alive").await, "alive\n");
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "the host was slow: {:?}",
        t.elapsed()
    );
    let bomb_pid = c
        .status()
        .await
        .sandboxes
        .iter()
        .find(|s| s.thread_id == "bomb")
        .and_then(|s| s.supervisor_pid)
        .expect("bomb supervisor");
    let host_procs_during = descendants(bomb_pid);
    let out = bombing.await.expect("join");
    assert!(out.contains("Command timed out after 4 seconds"), "{out}");
    assert!(started.elapsed() < Duration::from_secs(15));
    // max_processes is 64; processes caught between fork and the limit check, and the
    // supervisor's own, add a margin. An unbounded bomb reaches thousands.
    assert!(
        host_procs_during <= 64 * 2,
        "{host_procs_during} sandbox processes during the bomb"
    );
    // The group was killed: the sandbox's process count falls back.
    let settled = antler_tests::wait_for(Duration::from_secs(5), || {
        (descendants(bomb_pid) <= 3).then_some(())
    });
    assert!(
        settled.is_some(),
        "{} sandbox processes left",
        descendants(bomb_pid)
    );
    assert_eq!(
        c.bash(&bomb.sandbox_id, "echo recovered").await,
        "recovered\n"
    );
}

/// How many processes descend from `root` (the sandbox's bubblewrap), root excluded.
fn descendants(root: u32) -> usize {
    let mut parent: Vec<(u32, u32)> = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        if let Some(ppid) = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().nth(1))
            .and_then(|x| x.parse::<u32>().ok())
        {
            parent.push((pid, ppid));
        }
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parent.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found.len() - 1
}
