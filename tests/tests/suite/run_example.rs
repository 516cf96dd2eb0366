//! `antler run` end to end with the bundled example (`examples/report`): the scripted
//! playbook promotes server-everything's `echo` through tool_search, calls it on the real
//! server through mcp-host, writes a report with `write_file` in sandbox-host, presents
//! it, and the run settles as delivered; `--resume` of the finished run keeps its receipt.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::mcp_support::npm_bin;
use antler_tests::bin;
use serde_json::{json, Value};

fn example_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/report")
}

fn antler_run(dir: &Path, args: &[&str]) -> (i32, Value, String) {
    let out = Command::new(bin("antler"))
        .arg("--runtime-dir")
        .arg(dir.join("run"))
        .arg("run")
        .args(args)
        .arg("--config")
        .arg(example_dir().join("config.yaml"))
        .arg("--json")
        .current_dir(dir)
        .env(
            "ANTLER_EXTENSIONS_CONFIG_PATH",
            dir.join("extensions_config.json"),
        )
        .env("ANTLER_SANDBOX_BASE_DIR", dir.join("base"))
        .env("RUST_LOG", "error")
        .output()
        .expect("run antler");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let json = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}): {stdout}\n{stderr}"));
    (out.status.code().unwrap_or(-1), json, stderr)
}

#[test]
fn the_example_run_finds_an_mcp_tool_writes_presents_and_delivers_a_report() {
    let dir = tempfile::Builder::new()
        .prefix("antler-run")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let everything = npm_bin("mcp-server-everything").display().to_string();
    std::fs::write(
        dir.path().join("extensions_config.json"),
        serde_json::to_vec(&json!({"mcpServers": {"everything": {"type": "stdio", "command": everything, "args": ["stdio"]}}})).unwrap(),
    )
    .unwrap();
    let playbook = example_dir().join("playbook.yaml");
    let (code, out, err) = antler_run(
        dir.path(),
        &[
            "Write a short report",
            "--playbook",
            playbook.to_str().unwrap(),
            "--user",
            "alice",
            "--thread",
            "t1",
        ],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(out["status"], "success", "{out}\n{err}");
    assert_eq!(
        out["final_answer"],
        "The report is ready at /mnt/user-data/outputs/report.md."
    );
    assert_eq!(
        out["artifacts"],
        json!(["/mnt/user-data/outputs/report.md"])
    );
    assert_eq!(out["delivery"]["stage"], "presented", "{out}");
    assert_eq!(
        out["delivery"]["matched_paths"],
        json!(["/mnt/user-data/outputs/report.md"])
    );
    let report = dir
        .path()
        .join("base/users/alice/threads/t1/user-data/outputs/report.md");
    assert_eq!(
        std::fs::read_to_string(report).unwrap(),
        "# Report\n\nThe everything server's echo tool answered.\n"
    );
    let run_id = out["run_id"].as_str().unwrap().to_owned();
    let (code, again, err) = antler_run(dir.path(), &["--resume", &run_id]);
    assert_eq!(code, 0, "{again}\n{err}");
    assert_eq!(again["status"], "success");
    assert_eq!(
        again["delivery"], out["delivery"],
        "the receipt is written once"
    );
}
