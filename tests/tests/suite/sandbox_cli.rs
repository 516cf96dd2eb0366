//! The sandbox CLI against real processes: `antler tool call` runs sandbox tools through
//! the lead and sandbox-host (its own ephemeral cluster, or a running one) and exits 1 on
//! an error result; `antler sandbox status` shows the pool with ids, users and threads.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{os::unix::fs::PermissionsExt, path::Path, process::Command, time::Duration};

use antler_tests::{antler, bin, wait_for, Cluster};
use sha2::{Digest, Sha256};

const CONFIG: &str = "sandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n  bash_command_timeout: 20\n";

fn private_dir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("antler-sc")
        .tempdir_in("/tmp")
        .expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::write(dir.path().join("config.yaml"), CONFIG).expect("config");
    dir
}

fn tool_call(dir: &Path, name: &str, args: &str) -> (i32, String, String) {
    let out = Command::new(bin("antler"))
        .arg("--runtime-dir")
        .arg(dir.join("run"))
        .args([
            "tool", "call", name, "--args", args, "--user", "alice", "--thread", "t1", "--config",
        ])
        .arg(dir.join("config.yaml"))
        .env("ANTLER_SANDBOX_BASE_DIR", dir.join("base"))
        .env("RUST_LOG", "error")
        .output()
        .expect("run antler");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn tool_call_runs_sandbox_tools_and_exits_1_on_an_error_result() {
    let dir = private_dir();
    let (code, out, err) = tool_call(
        dir.path(),
        "write_file",
        r#"{"description":"d","path":"/mnt/user-data/outputs/report.md","content":"hello"}"#,
    );
    assert_eq!((code, out.as_str()), (0, "OK\n"), "{err}");
    let file = dir
        .path()
        .join("base/users/alice/threads/t1/user-data/outputs/report.md");
    assert_eq!(std::fs::read_to_string(file).expect("written"), "hello");
    let (code, out, _) = tool_call(
        dir.path(),
        "bash",
        r#"{"description":"d","command":"cat /mnt/user-data/outputs/report.md; whoami 2>/dev/null || id -u"}"#,
    );
    assert_eq!(code, 0);
    assert!(out.starts_with("hello"), "{out}");
    let (code, out, _) = tool_call(
        dir.path(),
        "read_file",
        r#"{"description":"d","path":"/mnt/user-data/outputs/missing.md"}"#,
    );
    assert_eq!(
        (code, out.as_str()),
        (
            1,
            "Error: File not found: /mnt/user-data/outputs/missing.md\n"
        )
    );
    let (code, _, err) = tool_call(dir.path(), "no_such_tool", "{}");
    assert_eq!(code, 2);
    assert!(
        err.contains("`no_such_tool` is not a tool `antler tool call` can run; it runs: bash, "),
        "{err}"
    );
}

#[test]
fn sandbox_status_shows_the_warm_sandbox_of_a_running_cluster() {
    let dir = private_dir();
    let config = dir.path().join("config.yaml").display().to_string();
    let base = dir.path().join("base").display().to_string();
    let c = Cluster::up_with(
        1,
        &[
            ("ANTLER_CONFIG", &config),
            ("ANTLER_SANDBOX_BASE_DIR", &base),
        ],
    );
    let healthy = wait_for(Duration::from_secs(20), || {
        let st = c.status()?;
        (st.len() == 4 && st.iter().all(|p| p["healthy"] == true)).then_some(())
    });
    assert!(healthy.is_some(), "{:?}", c.status());
    let out = antler(
        &c.runtime_dir(),
        &[
            "tool",
            "call",
            "bash",
            "--args",
            r#"{"description":"d","command":"echo hi"}"#,
            "--user",
            "alice",
            "--thread",
            "t1",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n\n");
    let out = antler(&c.runtime_dir(), &["sandbox", "status", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(st["provider"], "bwrap");
    assert_eq!(st["base_dir"], base.as_str());
    let id = hex::encode(Sha256::digest(b"alice:t1"))[..16].to_string();
    let boxes = st["sandboxes"].as_array().expect("sandboxes");
    assert_eq!(boxes.len(), 1, "{st}");
    assert_eq!(boxes[0]["sandbox_id"], id.as_str());
    assert_eq!(
        (boxes[0]["user_id"].as_str(), boxes[0]["thread_id"].as_str()),
        (Some("alice"), Some("t1"))
    );
    assert_eq!(boxes[0]["state"], "warm");
    assert!(boxes[0]["supervisor_pid"].is_u64() && boxes[0]["age_s"].is_number());
    let table = antler(&c.runtime_dir(), &["sandbox", "status"]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.starts_with("provider: bwrap (bubblewrap "), "{table}");
    assert!(
        table.contains(&id) && table.contains("warm") && table.contains("alice"),
        "{table}"
    );
}
