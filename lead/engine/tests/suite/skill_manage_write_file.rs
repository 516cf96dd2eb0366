//! `skill_manage write_file` and `remove_file` through a run: a script under `scripts/`
//! is written when the scan allows it, is executable content for the scan (so a `warn`
//! refuses it while the same verdict lets a reference through), and is removed again;
//! a file that is not there gets DeerFlow's not-found text.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::skill_manage_support::{failed, history, run_blocking, skill_md, Data, ALLOW};
use serde_json::json;

const WARN: &str = r#"{"decision":"warn","reason":"Calls an external API."}"#;

#[test]
fn a_script_is_written_under_scripts_and_removed() {
    let data = Data::new();
    let dir = data.custom("alice", "charts");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("SKILL.md"), skill_md("charts", "Draws charts.")).unwrap();
    let script = "#!/bin/sh\nset -eu\necho \"plotting $1\"\n";
    let call = |args: serde_json::Value| json!({"name": "skill_manage", "args": args});
    let playbook = json!({
        "turns": [
            {"tool_calls": [call(json!({"action": "write_file", "name": "charts", "path": "scripts/plot.sh", "content": script}))]},
            {"tool_calls": [call(json!({"action": "write_file", "name": "charts", "path": "scripts/fetch.sh", "content": "#!/bin/sh\ncurl -s https://api.example.org/data\n"}))]},
            {"tool_calls": [call(json!({"action": "write_file", "name": "charts", "path": "references/api.md", "content": "# API\nSee https://api.example.org\n"}))]},
            {"tool_calls": [call(json!({"action": "remove_file", "name": "charts", "path": "scripts/plot.sh"}))]},
            {"tool_calls": [call(json!({"action": "remove_file", "name": "charts", "path": "scripts/plot.sh"})), call(json!({"action": "write_file", "name": "charts", "path": "scripts/x.sh"}))]},
            {"content": "Done."}
        ],
        "security_scan": [{"content": ALLOW}, {"content": WARN}, {"content": WARN}]
    });
    let results = run_blocking(&data, "alice", &playbook.to_string());
    let texts: Vec<&str> = results.iter().map(|r| r.1.as_str()).collect();
    assert_eq!(
        texts,
        [
            "Wrote 'scripts/plot.sh' for custom skill 'charts'.",
            failed(
                "ValueError",
                "Security scan rejected executable content: Calls an external API."
            )
            .as_str(),
            "Wrote 'references/api.md' for custom skill 'charts'.",
            "Removed 'scripts/plot.sh' from custom skill 'charts'.",
            failed(
                "FileNotFoundError",
                "Supporting file 'scripts/plot.sh' not found for skill 'charts'."
            )
            .as_str(),
            failed(
                "ValueError",
                "path and content are required for write_file."
            )
            .as_str(),
        ]
    );
    assert!(!dir.join("scripts/plot.sh").exists());
    assert!(!dir.join("scripts/fetch.sh").exists());
    assert!(dir.join("references/api.md").is_file());
    let actions: Vec<String> = history(&data, "alice", "charts")
        .iter()
        .map(|r| {
            format!(
                "{} {}",
                r["action"].as_str().unwrap(),
                r["file_path"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        actions,
        [
            "write_file scripts/plot.sh",
            "write_file references/api.md",
            "remove_file scripts/plot.sh"
        ]
    );
}
