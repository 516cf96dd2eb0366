//! Resource bounds on a sandbox's storage: its private `/tmp` has `sandbox.tmp_size`, and a
//! thread's user-data directories hold at most `sandbox.disk_quota` (a clear error after a
//! command that passed it, and writes refused that would pass it). The filesystem limit
//! (`sandbox.user_disk_quota`, a write past it fails inside) is `sandbox_limits.rs`'s; here
//! it is set above the thread's quota so the thread's own accounting is what shows.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::sandbox_support::*;
use serde_json::json;

#[tokio::test]
async fn writing_past_tmp_size_fails_inside_the_sandbox() {
    let cfg = "sandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n  bash_command_timeout: 20\n  tmp_size: 8MiB\n";
    let h = SandboxHost::start(cfg);
    let c = h.connect().await;
    let a = c.acquire("u", "t").await.expect("acquire");
    assert_eq!(
        c.bash(
            &a.sandbox_id,
            "head -c 4M /dev/zero > /tmp/small && echo fits"
        )
        .await,
        "fits\n"
    );
    let out = c
        .bash(
            &a.sandbox_id,
            "head -c 16M /dev/zero > /tmp/big && echo fits",
        )
        .await;
    assert!(
        out.contains("No space left on device") && !out.contains("fits"),
        "{out}"
    );
    let size = c
        .bash(&a.sandbox_id, "df -B1 --output=size /tmp | tail -1")
        .await;
    assert_eq!(size.trim(), (8u64 << 20).to_string(), "{size}");
}

#[tokio::test]
async fn passing_disk_quota_gives_a_clear_error_and_refuses_writes() {
    let cfg = "sandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n  bash_command_timeout: 20\n  disk_quota: 2MiB\n  user_disk_quota: 64MiB\n";
    let h = SandboxHost::start(cfg);
    let c = h.connect().await;
    let a = c.acquire("u", "t").await.expect("acquire");
    let id = a.sandbox_id.as_str();
    assert_eq!(
        c.bash(
            id,
            "head -c 1M /dev/zero > /mnt/user-data/workspace/a && echo ok"
        )
        .await,
        "ok\n"
    );
    let out = c
        .bash(
            id,
            "head -c 2M /dev/zero > /mnt/user-data/outputs/b && echo ok",
        )
        .await;
    let expected = format!(
        "Error: Disk quota exceeded: the thread's files under /mnt/user-data would use {} bytes, over the sandbox.disk_quota of {} bytes. Delete files under /mnt/user-data to make room.\n\nok\n",
        3u64 << 20,
        2u64 << 20
    );
    assert_eq!(out, expected);
    let r = c
        .call(
            id,
            "write_file",
            json!({"description": "d", "path": "/mnt/user-data/workspace/c.txt", "content": "more"}),
        )
        .await
        .expect("result");
    assert!(r.is_error, "{}", r.content);
    assert!(
        r.content.starts_with("Error: Disk quota exceeded:"),
        "{}",
        r.content
    );
    assert!(!h.user_data("u", "t").join("workspace/c.txt").exists());
    // Deleting makes room again.
    assert_eq!(
        c.bash(id, "rm /mnt/user-data/outputs/b").await,
        "(no output)"
    );
    assert_eq!(
        c.text(
            id,
            "write_file",
            json!({"description": "d", "path": "/mnt/user-data/workspace/c.txt", "content": "more"}),
        )
        .await,
        "OK"
    );
}
