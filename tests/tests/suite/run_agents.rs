//! Custom agents through `antler run`: a bootstrap run (`--bootstrap --agent NAME`) is
//! offered `setup_agent` and creates the agent's files under the user's agents directory;
//! a run as that agent (`--agent NAME`) is offered `update_agent` and changes them; a
//! plain run is offered neither, and a call to either gets the unknown-tool error.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use antler_tests::bin;
use serde_json::Value;

const SETUP: &str = r#"
turns:
  - tool_calls:
      - name: setup_agent
        args: {soul: "You write crisp weekly reports.", description: "Writes weekly reports"}
  - content: Your agent is ready.
"#;

const UPDATE: &str = r#"
turns:
  - tool_calls:
      - name: update_agent
        args: {description: "Writes crisp monthly reports"}
  - content: Updated.
"#;

fn antler_run(dir: &Path, playbook: &str, extra: &[&str]) -> Value {
    let path = dir.join("playbook.yaml");
    std::fs::write(&path, playbook).unwrap();
    let out = Command::new(bin("antler"))
        .arg("--runtime-dir")
        .arg(dir.join("run"))
        .args(["run", "Set up my agent", "--json", "--playbook"])
        .arg(&path)
        .args(extra)
        .arg("--config")
        .arg(dir.join("config.yaml"))
        .current_dir(dir)
        .env("ANTLER_SANDBOX_BASE_DIR", dir.join("base"))
        .env("ANTLER_GATEWAY_ADDR", "off")
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

/// The tool message the run's checkpoint holds for its first call.
fn first_tool_message(dir: &Path, run_id: &str) -> String {
    let out = Command::new("python3")
        .arg("-c")
        .arg(
            "import sqlite3,sys,json;c=sqlite3.connect(sys.argv[1]);\
             s=json.loads(c.execute('select state from checkpoints where run_id=? order by step desc limit 1',(sys.argv[2],)).fetchone()[0]);\
             print([m for m in s['messages'] if m['role']=='tool'][0]['content'])",
        )
        .arg(dir.join("run/runs.sqlite"))
        .arg(run_id)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn a_bootstrap_run_creates_an_agent_and_the_agents_run_updates_it() {
    let dir = tempfile::Builder::new()
        .prefix("antler-ag")
        .tempdir_in("/tmp")
        .unwrap();
    let dir = dir.path();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(dir.join("config.yaml"), "tool_search:\n  enabled: false\n").unwrap();
    let agent_dir = dir.join("base/users/default/agents/writer");

    // A plain run is offered neither tool.
    let plain = antler_run(dir, SETUP, &[]);
    assert_eq!(plain["status"], "success", "{plain}");
    let refused = first_tool_message(dir, plain["run_id"].as_str().unwrap());
    assert!(
        refused.starts_with("Error: setup_agent is not a valid tool"),
        "{refused}"
    );
    assert!(!agent_dir.exists());

    let setup = antler_run(dir, SETUP, &["--bootstrap", "--agent", "writer"]);
    assert_eq!(setup["status"], "success", "{setup}");
    assert_eq!(
        first_tool_message(dir, setup["run_id"].as_str().unwrap()),
        "Agent 'writer' created successfully!"
    );
    assert_eq!(
        std::fs::read_to_string(agent_dir.join("SOUL.md")).unwrap(),
        "You write crisp weekly reports."
    );
    let config = std::fs::read_to_string(agent_dir.join("config.yaml")).unwrap();
    assert!(config.contains("Writes weekly reports"), "{config}");

    let update = antler_run(dir, UPDATE, &["--agent", "writer"]);
    assert_eq!(update["status"], "success", "{update}");
    let message = first_tool_message(dir, update["run_id"].as_str().unwrap());
    assert!(
        message.starts_with("Agent 'writer' updated successfully. Changed: description."),
        "{message}"
    );
    let config = std::fs::read_to_string(agent_dir.join("config.yaml")).unwrap();
    assert!(config.contains("Writes crisp monthly reports"), "{config}");
    assert_eq!(
        std::fs::read_to_string(agent_dir.join("SOUL.md")).unwrap(),
        "You write crisp weekly reports.",
        "an update of the description leaves the soul as it was"
    );
}
