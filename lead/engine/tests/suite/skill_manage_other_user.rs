//! A user's custom skill belongs to that user: another user's run does not see it in
//! `describe_skill`, in the skills it loads or through slash activation, and cannot
//! edit or delete it (it is "not found" for them), while the owner's next run sees it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::skill_manage_support::{failed, run_blocking, skill_md, Data, ALLOW};
use antler_engine::{Message, SlashActivation};
use serde_json::json;

#[test]
fn another_user_does_not_see_a_users_custom_skill() {
    let data = Data::new();
    let created = json!({
        "turns": [
            {"tool_calls": [{"name": "skill_manage", "args": {"action": "create", "name": "private-flow", "content": skill_md("private-flow", "Alice's flow.")}}]},
            {"content": "Done."}
        ],
        "security_scan": [{"content": ALLOW}]
    });
    assert_eq!(
        run_blocking(&data, "alice", &created.to_string())[0].1,
        "Created custom skill 'private-flow'."
    );
    let call = |args: serde_json::Value| json!({"name": "skill_manage", "args": args});
    let bob = json!({
        "turns": [
            {"tool_calls": [
                {"name": "describe_skill", "args": {"name": "private-flow"}},
                call(json!({"action": "edit", "name": "private-flow", "content": skill_md("private-flow", "Bob's now.")})),
                call(json!({"action": "delete", "name": "private-flow"})),
            ]},
            {"content": "Done."}
        ],
        "security_scan": [{"content": ALLOW}]
    });
    let results = run_blocking(&data, "bob", &bob.to_string());
    let texts: Vec<&str> = results.iter().map(|r| r.1.as_str()).collect();
    assert_eq!(
        texts,
        [
            "No skills matched: private-flow".to_owned(),
            failed(
                "FileNotFoundError",
                "Custom skill 'private-flow' not found."
            ),
            failed(
                "FileNotFoundError",
                "Custom skill 'private-flow' not found."
            ),
        ]
    );
    assert!(data.store("bob").scan().is_empty());
    assert_eq!(
        data.store("bob")
            .slash_activation(&[Message::human("/private-flow go")]),
        Some(SlashActivation::Failed(
            "Skill `/private-flow` is not installed.".into()
        ))
    );
    let alice = data.store("alice").scan();
    assert_eq!(alice.len(), 1);
    assert_eq!(alice[0].category, "custom");
    assert!(matches!(
        data.store("alice")
            .slash_activation(&[Message::human("/private-flow go")]),
        Some(SlashActivation::Activated { .. })
    ));
    assert_eq!(
        std::fs::read_to_string(data.custom("alice", "private-flow").join("SKILL.md")).unwrap(),
        skill_md("private-flow", "Alice's flow.")
    );
}
