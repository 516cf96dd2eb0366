//! A clarification through `antler run`: without a terminal the run stops as
//! `interrupted` with DeerFlow's formatted question, and `--resume RUN_ID --answer TEXT`
//! continues it to its final answer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use antler_tests::bin;
use serde_json::Value;

const PLAYBOOK: &str = r#"
turns:
  - tool_calls:
      - name: ask_clarification
        args: {question: "Which year?", clarification_type: missing_info, options: ["2024", "2025"]}
  - content: The report covers the year you chose.
"#;

fn antler_run(dir: &Path, args: &[&str]) -> Value {
    let out = Command::new(bin("antler"))
        .arg("--runtime-dir")
        .arg(dir.join("run"))
        .arg("run")
        .args(args)
        .arg("--config")
        .arg(dir.join("config.yaml"))
        .arg("--json")
        .current_dir(dir)
        .env("ANTLER_SANDBOX_BASE_DIR", dir.join("base"))
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn an_interrupted_run_is_answered_and_resumed() {
    let dir = tempfile::Builder::new()
        .prefix("antler-rc")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        dir.path().join("config.yaml"),
        "tool_search:\n  enabled: false\n",
    )
    .unwrap();
    let playbook = dir.path().join("playbook.yaml");
    std::fs::write(&playbook, PLAYBOOK).unwrap();
    let first = antler_run(
        dir.path(),
        &["Write a report", "--playbook", playbook.to_str().unwrap()],
    );
    assert_eq!(first["status"], "interrupted", "{first}");
    assert_eq!(first["question"], "❓ Which year?\n\n  1. 2024\n  2. 2025");
    let run_id = first["run_id"].as_str().unwrap();
    let resumed = antler_run(dir.path(), &["--resume", run_id, "--answer", "2025"]);
    assert_eq!(resumed["status"], "success", "{resumed}");
    assert_eq!(resumed["run_id"], run_id);
    assert_eq!(
        resumed["final_answer"],
        "The report covers the year you chose."
    );
}
