//! Skills `skill_manage` may not change, through a run: a public skill and a shared
//! (legacy) one get DeerFlow's read-only texts for every editing action, an unknown
//! action on them says they are read-only, and creating a custom skill of the same
//! name shadows the public one for this user.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::skill_manage_support::{failed, run_blocking, skill_md, Data, ALLOW};
use serde_json::json;

#[test]
fn public_and_shared_skills_are_read_only() {
    let data = Data::new();
    data.install("public", "deep-research");
    data.install("custom", "team-flow");
    let public_md = data.skills().join("public/deep-research/SKILL.md");
    let before = std::fs::read_to_string(&public_md).unwrap();
    let call = |args: serde_json::Value| json!({"name": "skill_manage", "args": args});
    let playbook = json!({
        "turns": [
            {"tool_calls": [
                call(json!({"action": "edit", "name": "deep-research", "content": skill_md("deep-research", "Mine.")})),
                call(json!({"action": "patch", "name": "deep-research", "find": "Step", "replace": "Stage"})),
                call(json!({"action": "delete", "name": "deep-research"})),
                call(json!({"action": "write_file", "name": "deep-research", "path": "scripts/x.sh", "content": "echo\n"})),
                call(json!({"action": "remove_file", "name": "team-flow", "path": "scripts/x.sh"})),
                call(json!({"action": "rename", "name": "deep-research"})),
                call(json!({"action": "rename", "name": "nothing-here"})),
                call(json!({"action": "delete", "name": "nothing-here"})),
            ]},
            {"tool_calls": [call(json!({"action": "create", "name": "deep-research", "content": skill_md("deep-research", "My own research.")})),
                            {"name": "describe_skill", "args": {"name": "deep-research"}}]},
            {"content": "Done."}
        ],
        "security_scan": [{"content": ALLOW}]
    });
    let results = run_blocking(&data, "alice", &playbook.to_string());
    let texts: Vec<&str> = results.iter().map(|r| r.1.as_str()).collect();
    let built_in = "'deep-research' is a built-in skill. Use the skill_manage tool to create your own version — it will shadow the built-in one.";
    let expected = [
        failed("ValueError", built_in),
        failed("ValueError", built_in),
        failed("ValueError", built_in),
        failed("ValueError", built_in),
        failed("ValueError", "'team-flow' is a legacy shared skill (not editable). To customise it, create your own version with the same name — it will shadow the shared one."),
        failed("ValueError", "'deep-research' is a read-only skill (built-in or legacy shared). Create a custom skill with the same name to shadow it."),
        failed("ValueError", "Unsupported action 'rename'."),
        failed("FileNotFoundError", "Custom skill 'nothing-here' not found."),
        "Created custom skill 'deep-research'.".to_owned(),
        "## Skill: deep-research\n- Description: My own research. [custom, editable]\n- Allowed tools: (all)\n- Location: /mnt/skills/users/alice/custom/deep-research/SKILL.md".to_owned(),
    ];
    assert_eq!(texts, expected);
    assert_eq!(std::fs::read_to_string(&public_md).unwrap(), before);
    assert!(data.skills().join("custom/team-flow/SKILL.md").is_file());
}
