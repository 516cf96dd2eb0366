//! `skill_evolution.moderation_model_name`: the LLM scan asks the named model, not the
//! run's; a named model that cannot be built refuses the write (fail closed).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use crate::skill_manage_support::{run_with_settings, runtime, skill_md, Data, ALLOW};
use antler_engine::{ScriptedModel, SkillManageSettings, ToolStatus, UnavailableModel};
use serde_json::json;

fn playbook() -> String {
    // The run's model has no scan reply: only the moderation model can allow the write.
    json!({
        "turns": [
            {"tool_calls": [{"name": "skill_manage", "args": {"action": "create", "name": "notes", "content": skill_md("notes", "Takes notes.")}}]},
            {"content": "Done."}
        ]
    })
    .to_string()
}

#[test]
fn the_named_moderation_model_scans_the_write() {
    let data = Data::new();
    let run_model = Arc::new(ScriptedModel::from_yaml(&playbook(), "run").unwrap());
    let moderator =
        json!({"turns": [{"content": "unused"}], "security_scan": [{"content": ALLOW}]})
            .to_string();
    let settings = SkillManageSettings {
        moderation_model: Some(Arc::new(
            ScriptedModel::from_yaml(&moderator, "moderator").unwrap(),
        )),
        ..SkillManageSettings::default()
    };
    let results = runtime().block_on(run_with_settings(&data, "alice", "t1", run_model, settings));
    assert_eq!(
        (results[0].1.as_str(), results[0].2),
        ("Created custom skill 'notes'.", ToolStatus::Success)
    );
    assert!(data.custom("alice", "notes").join("SKILL.md").exists());
}

#[test]
fn a_moderation_model_that_cannot_be_built_refuses_the_write() {
    let data = Data::new();
    let run_model = Arc::new(ScriptedModel::from_yaml(&playbook(), "run").unwrap());
    let settings = SkillManageSettings {
        moderation_model: Some(Arc::new(UnavailableModel {
            name: "guard".into(),
            reason: "no model named `guard`; configured models: (none)".into(),
        })),
        ..SkillManageSettings::default()
    };
    let results = runtime().block_on(run_with_settings(&data, "alice", "t1", run_model, settings));
    assert_eq!(results[0].2, ToolStatus::Error, "{results:?}");
    assert!(!data.custom("alice", "notes").exists());
}

#[test]
fn a_scripted_run_never_moderates_its_own_write() {
    // The playbook answers its own scan with `allow`: that answer is never asked for.
    let data = Data::new();
    let scripted = json!({
        "turns": [
            {"tool_calls": [{"name": "skill_manage", "args": {"action": "create", "name": "notes", "content": skill_md("notes", "Takes notes.")}}]},
            {"content": "Done."}
        ],
        "security_scan": [{"content": ALLOW}]
    })
    .to_string();
    let run_model = Arc::new(ScriptedModel::from_yaml(&scripted, "run").unwrap());
    let results = runtime().block_on(run_with_settings(
        &data,
        "alice",
        "t1",
        run_model,
        SkillManageSettings::default(),
    ));
    assert_eq!(results[0].2, ToolStatus::Error, "{results:?}");
    assert!(
        results[0].1.contains("Security scan unavailable"),
        "{results:?}"
    );
    assert!(!data.custom("alice", "notes").exists());
}
