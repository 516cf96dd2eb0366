//! `skill_manage create` through a run: the skill is written under the user's own
//! custom directory, the reply is DeerFlow's text, the history records the write with
//! the scan's decision, the same run's `describe_skill` finds the new skill as
//! `[custom, editable]`, and creating it again is refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::skill_manage_support::{failed, history, run_blocking, skill_md, Data, ALLOW};
use antler_engine::ToolStatus;
use serde_json::json;

#[test]
fn a_created_skill_is_on_disk_recorded_and_described() {
    let data = Data::new();
    let content = skill_md("weekly-report", "Writes the weekly report.");
    let create = json!({"name": "skill_manage", "args": {"action": "create", "name": "weekly-report", "content": content}});
    let playbook = json!({
        "turns": [
            {"tool_calls": [create.clone()]},
            {"tool_calls": [{"name": "describe_skill", "args": {"name": "weekly-report"}}]},
            {"tool_calls": [create, {"name": "skill_manage", "args": {"action": "create", "name": "Weekly_Report", "content": "x"}}]},
            {"tool_calls": [{"name": "skill_manage", "args": {"action": "create", "name": "other", "content": skill_md("weekly-report", "Mismatch.")}}]},
            {"content": "Done."}
        ],
        "security_scan": [{"content": ALLOW}]
    });
    let results = run_blocking(&data, "alice", &playbook.to_string());
    assert_eq!(
        results[0],
        (
            "call-1-1".into(),
            "Created custom skill 'weekly-report'.".into(),
            ToolStatus::Success
        )
    );
    let dir = data.custom("alice", "weekly-report");
    assert_eq!(
        std::fs::read_to_string(dir.join("SKILL.md")).unwrap(),
        content
    );
    assert_eq!(
        results[1].1,
        "## Skill: weekly-report\n- Description: Writes the weekly report. [custom, editable]\n- Allowed tools: (all)\n- Location: /mnt/skills/users/alice/custom/weekly-report/SKILL.md"
    );
    assert_eq!(
        (results[2].1.as_str(), results[2].2),
        (
            failed("ValueError", "Custom skill 'weekly-report' already exists.").as_str(),
            ToolStatus::Error
        )
    );
    assert_eq!(
        results[3].1,
        failed(
            "ValueError",
            "Skill name must be hyphen-case using lowercase letters, digits, and hyphens only."
        )
    );
    assert_eq!(
        results[4].1,
        failed(
            "ValueError",
            "Frontmatter name 'weekly-report' must match requested skill name 'other'."
        )
    );
    let records = history(&data, "alice", "weekly-report");
    assert_eq!(records.len(), 1, "{records:?}");
    let record = &records[0];
    assert_eq!(record["action"], "create");
    assert_eq!(record["author"], "agent");
    assert_eq!(record["thread_id"], "t1");
    assert_eq!(record["file_path"], "SKILL.md");
    assert_eq!(record["prev_content"], serde_json::Value::Null);
    assert_eq!(record["new_content"], content.as_str());
    assert_eq!(record["scanner"]["decision"], "allow");
    assert_eq!(record["scanner"]["reason"], "Plain workflow instructions.");
    assert!(record["ts"].as_str().unwrap().ends_with('Z'));
    assert!(!data.custom("alice", "other").exists());
}
