//! `kill -9` of the lead in the middle of a run: the lead's children go with it, a new
//! `antler up` on the same runtime directory resumes the run by itself from its last
//! checkpoint, and the run completes with its artifacts, outputs and receipt written
//! exactly once and no tool call answered twice.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use antler_tests::{alive, antler, bin, signal, wait_for};
use serde_json::Value;

const PLAYBOOK: &str = r#"
turns:
  - tool_calls:
      - {name: write_file, args: {description: first, path: /mnt/user-data/outputs/a.md, content: a}}
  - delay_ms: 6000
    tool_calls:
      - {name: write_file, args: {description: second, path: /mnt/user-data/outputs/b.md, content: b}}
  - tool_calls:
      - {name: present_files, args: {filepaths: ["/mnt/user-data/outputs/a.md", "/mnt/user-data/outputs/b.md"]}}
  - content: Both files are written and presented.
"#;

fn up(dir: &Path) -> Child {
    Command::new(bin("antler"))
        .arg("--runtime-dir")
        .arg(dir.join("run"))
        .args(["up", "--workers", "0", "--config"])
        .arg(dir.join("config.yaml"))
        .env("ANTLER_SANDBOX_BASE_DIR", dir.join("base"))
        .env("ANTLER_GATEWAY_ADDR", "off")
        .env("RUST_LOG", "warn")
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start antler up")
}

fn healthy(runtime: &Path) -> bool {
    wait_for(Duration::from_secs(30), || {
        let out = antler(runtime, &["status", "--json"]);
        let list: Value = serde_json::from_slice(&out.stdout).ok()?;
        let list = list.as_array()?;
        (list.len() == 3 && list.iter().all(|p| p["healthy"] == true)).then_some(())
    })
    .is_some()
}

fn sql(store: &Path, query: &str, run_id: &str) -> String {
    let out = Command::new("python3")
        .arg("-c")
        .arg("import sqlite3,sys,json;c=sqlite3.connect(sys.argv[1]);print(json.dumps(c.execute(sys.argv[2],(sys.argv[3],)).fetchall()))")
        .arg(store)
        .arg(query)
        .arg(run_id)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn a_run_survives_kill_9_of_the_lead_and_delivers_exactly_once() {
    let dir = tempfile::Builder::new()
        .prefix("antler-lr")
        .tempdir_in("/tmp")
        .unwrap();
    let dir = dir.path();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        dir.join("config.yaml"),
        "tools:\n  - {name: write_file, group: file:write, use: deerflow.sandbox.tools:write_file_tool}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\ntool_search:\n  enabled: false\n",
    )
    .unwrap();
    std::fs::write(dir.join("playbook.yaml"), PLAYBOOK).unwrap();
    let runtime = dir.join("run");
    let mut lead = up(dir);
    assert!(healthy(&runtime), "the first cluster did not come up");

    let out = antler(
        &runtime,
        &[
            "run",
            "Write two files and present them",
            "--detach",
            "--json",
            "--playbook",
            dir.join("playbook.yaml").to_str().unwrap(),
        ],
    );
    let submitted: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
    });
    let run_id = submitted["run_id"].as_str().unwrap().to_owned();
    let outputs: PathBuf = dir
        .join("base/users/default/threads")
        .join(&run_id)
        .join("user-data/outputs");
    let store = runtime.join("runs.sqlite");
    // The first step (a.md) is merged and checkpointed; the model is "thinking" for 6 s.
    let first_step = wait_for(Duration::from_secs(30), || {
        let steps = sql(
            &store,
            "select count(*) from checkpoints where run_id = ?",
            &run_id,
        );
        (steps == "[[3]]").then_some(())
    });
    assert!(
        first_step.is_some(),
        "the first step was never checkpointed"
    );
    assert!(outputs.join("a.md").exists());
    let children = {
        let out = antler(&runtime, &["status", "--json"]);
        let list: Value = serde_json::from_slice(&out.stdout).unwrap();
        list.as_array()
            .unwrap()
            .iter()
            .filter(|p| p["role"] != "lead")
            .filter_map(|p| p["pid"].as_u64().map(|p| p as u32))
            .collect::<Vec<_>>()
    };
    signal(lead.id(), libc::SIGKILL);
    let _ = lead.wait();
    let gone = wait_for(Duration::from_secs(10), || {
        children.iter().all(|p| !alive(*p)).then_some(())
    });
    assert!(gone.is_some(), "the children outlived the lead");
    assert_eq!(
        sql(&store, "select status from runs where run_id = ?", &run_id),
        "[[\"running\"]]"
    );
    assert!(!outputs.join("b.md").exists());

    // A new lead resumes the run by itself: nobody asks it to.
    let mut lead = up(dir);
    assert!(healthy(&runtime), "the second cluster did not come up");
    let done = wait_for(Duration::from_secs(60), || {
        let status = sql(&store, "select status from runs where run_id = ?", &run_id);
        (status != "[[\"running\"]]").then_some(status)
    });
    assert_eq!(done.as_deref(), Some("[[\"success\"]]"));

    // Following the finished run shows it as it ended.
    let out = antler(&runtime, &["run", "--resume", &run_id, "--json"]);
    let view: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
    });
    assert_eq!(view["status"], "success", "{view}");
    assert_eq!(
        view["final_answer"], "Both files are written and presented.",
        "{view}"
    );
    assert_eq!(
        view["artifacts"],
        serde_json::json!(["/mnt/user-data/outputs/a.md", "/mnt/user-data/outputs/b.md"])
    );
    assert_eq!(std::fs::read_to_string(outputs.join("a.md")).unwrap(), "a");
    assert_eq!(std::fs::read_to_string(outputs.join("b.md")).unwrap(), "b");
    assert_eq!(
        sql(
            &store,
            "select count(*) from receipts where run_id = ?",
            &run_id
        ),
        "[[1]]"
    );
    let receipt = &view["delivery"];
    assert_eq!(
        receipt["matched_paths"].as_array().map(Vec::len),
        Some(2),
        "{receipt}"
    );

    // Every tool call was answered exactly once, across the crash.
    let state = sql(
        &store,
        "select state from checkpoints where run_id = ? order by step desc limit 1",
        &run_id,
    );
    let rows: Value = serde_json::from_str(&state).unwrap();
    let state: Value = serde_json::from_str(rows[0][0].as_str().unwrap()).unwrap();
    let mut answered = HashSet::new();
    for message in state["messages"].as_array().unwrap() {
        if let Some(id) = message["tool_call_id"].as_str() {
            assert!(
                answered.insert(id.to_owned()),
                "{id} answered twice: {state}"
            );
        }
    }
    assert_eq!(answered.len(), 3, "{state}");
    signal(lead.id(), libc::SIGTERM);
    let _ = lead.wait();
}
