//! `skill_manage patch` through a run: `expected_count` replacements are applied and the
//! reply gives the counts; a count that differs and a target that is absent are refused
//! with DeerFlow's texts and leave the skill as it was; the history keeps both versions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::skill_manage_support::{failed, history, run_blocking, Data, ALLOW};
use serde_json::json;

#[test]
fn a_patch_applies_the_expected_count_and_says_so() {
    let data = Data::new();
    let dir = data.custom("alice", "deploy");
    std::fs::create_dir_all(&dir).unwrap();
    let before = "---\nname: deploy\ndescription: Deploys.\n---\n# Deploy\n\nRun make. Then run make again.\n";
    std::fs::write(dir.join("SKILL.md"), before).unwrap();
    let patch = |find: &str, replace: &str, count: Option<u64>| {
        let mut args =
            json!({"action": "patch", "name": "deploy", "find": find, "replace": replace});
        if let Some(n) = count {
            args["expected_count"] = json!(n);
        }
        json!({"name": "skill_manage", "args": args})
    };
    let playbook = json!({
        "turns": [
            {"tool_calls": [patch("make", "cargo", Some(3))]},
            {"tool_calls": [patch("make", "cargo", None)]},
            {"tool_calls": [patch("absent", "x", None)]},
            {"tool_calls": [patch("make", "cargo", Some(2))]},
            {"tool_calls": [patch("cargo", "just", Some(2)), {"name": "skill_manage", "args": {"action": "patch", "name": "deploy", "find": "x"}}]},
            {"content": "Done."}
        ],
        "security_scan": [{"content": ALLOW}]
    });
    let results = run_blocking(&data, "alice", &playbook.to_string());
    let texts: Vec<&str> = results.iter().map(|r| r.1.as_str()).collect();
    assert_eq!(
        texts,
        [
            failed("ValueError", "Expected 3 replacements but found 2.").as_str(),
            failed("ValueError", "Expected 1 replacements but found 2.").as_str(),
            failed("ValueError", "Patch target not found in SKILL.md.").as_str(),
            "Patched custom skill 'deploy' (2 replacement(s) applied, 2 match(es) found).",
            "Patched custom skill 'deploy' (2 replacement(s) applied, 2 match(es) found).",
            failed("ValueError", "find and replace are required for patch.").as_str(),
        ]
    );
    let after = std::fs::read_to_string(dir.join("SKILL.md")).unwrap();
    assert_eq!(after, before.replace("make", "just"));
    let records = history(&data, "alice", "deploy");
    assert_eq!(records.len(), 2);
    assert_eq!(records[0]["action"], "patch");
    assert_eq!(records[0]["prev_content"], before);
    assert_eq!(records[0]["new_content"], before.replace("make", "cargo"));
}
