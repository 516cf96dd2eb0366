//! A skill activated by a slash command in a run: the model gets the skill's SKILL.md
//! and only its `allowed-tools` (plus the framework tools), a call outside them gets
//! DeerFlow's denial while an allowed one runs, and the activation survives the run
//! being interrupted and resumed from its checkpoint. Real catalog, real SQLite, real
//! skills on disk; hosts that cannot be reached.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use antler_engine::{
    catalog::{Catalog, ToolSource, ToolSpec},
    ActiveSkill, ChatModel, HostError, Message, ModelError, ModelReply, ModelRequest, RunContext,
    RunLoop, RunSettings, ScriptedModel, SkillSource, SkillStore, ToolHosts, ToolStatus,
};
use antler_lead::runs::{CheckpointStore, RunStatus};
use antler_protocol::messages::{Reply, Request};
use antler_protocol::Role;
use futures::future::BoxFuture;
use serde_json::json;

/// Hosts that are down.
struct UnreachableHosts;

impl ToolHosts for UnreachableHosts {
    fn request(
        &self,
        role: Role,
        _: Request,
        _: Duration,
    ) -> BoxFuture<'_, Result<Reply, HostError>> {
        Box::pin(async move { Err(HostError::failed(format!("{role:?} unreachable"))) })
    }
}

/// The scripted model, keeping what each call was shown.
struct Recording {
    model: ScriptedModel,
    seen: Mutex<Vec<(Vec<Message>, Vec<String>)>>,
}

impl ChatModel for Recording {
    fn name(&self) -> &str {
        self.model.name()
    }

    fn complete<'a>(
        &'a self,
        request: ModelRequest<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        self.seen.lock().unwrap().push((
            request.messages.to_vec(),
            request.tools.iter().map(|t| t.name.clone()).collect(),
        ));
        self.model.complete(request)
    }
}

const PLAYBOOK: &str = r#"
turns:
  - tool_calls:
      - {name: write_file, args: {path: /mnt/user-data/outputs/a.md, content: a}}
      - {name: present_files, args: {filepaths: [/mnt/user-data/outputs/report.md]}}
  - tool_calls:
      - {name: ask_clarification, args: {question: "Which year?", clarification_type: missing_info}}
  - tool_calls:
      - {name: write_file, args: {path: /mnt/user-data/outputs/b.md, content: b}}
  - content: Done.
"#;

fn tool_message<'a>(messages: &'a [Message], id: &str) -> (&'a str, ToolStatus) {
    messages
        .iter()
        .find_map(|m| match m {
            Message::Tool {
                tool_call_id,
                content,
                status,
                ..
            } if tool_call_id == id => Some((content.as_str(), *status)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result for {id}"))
}

#[test]
fn a_slash_skill_limits_the_tools_of_the_run_across_a_resume() {
    let dir = tempfile::tempdir().unwrap();
    let skill_dir = dir.path().join("data/skills/public/my-skill");
    std::fs::create_dir_all(&skill_dir).unwrap();
    std::fs::write(
        skill_dir.join("SKILL.md"),
        "---\nname: my-skill\ndescription: Reports\nallowed-tools: [present_files, ask_clarification]\n---\n# Present the report\n",
    )
    .unwrap();
    let mut write_file = ToolSpec::builtin(
        "write_file",
        "Write a file.",
        json!({"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}),
    );
    write_file.source = ToolSource::Config {
        use_id: "deerflow.sandbox.tools:write_file_tool".into(),
    };
    let catalog = Arc::new(
        Catalog::build(
            vec![
                write_file,
                antler_engine::catalog::builtins::present_files(),
                antler_engine::catalog::builtins::ask_clarification(),
            ],
            true,
        )
        .unwrap(),
    );
    let base = dir.path().join("data");
    let context = RunContext {
        clarification_enabled: true,
        ..RunContext::local(&base, "u1", "t1", "run-1")
    };
    context.paths.create().unwrap();
    std::fs::write(context.paths.outputs().join("report.md"), "# Report").unwrap();
    let settings = || RunSettings {
        skills: SkillStore {
            root: Some(base.join("skills")),
            ..SkillStore::default()
        },
        ..RunSettings::default()
    };
    let model = Arc::new(Recording {
        model: ScriptedModel::from_yaml(PLAYBOOK, "inline").unwrap(),
        seen: Mutex::new(Vec::new()),
    });
    let store = || CheckpointStore::open(&dir.path().join("checkpoints.sqlite")).unwrap();
    let mut run = block_on(
        RunLoop::builder(
            context.clone(),
            model.clone(),
            Arc::clone(&catalog),
            Arc::new(UnreachableHosts),
        )
        .journal(Arc::new(store()))
        .model_label("scripted")
        .settings(settings())
        .start("/my-skill write the yearly report"),
    )
    .unwrap();
    let outcome = block_on(run.drive());
    assert_eq!(outcome.status, RunStatus::Interrupted);
    let messages = &run.state().messages;
    assert_eq!(
        tool_message(messages, "call-1-1"),
        (
            "Error: Tool 'write_file' is not allowed by the active skill policy.",
            ToolStatus::Error
        )
    );
    assert_eq!(tool_message(messages, "call-1-2").1, ToolStatus::Success);
    assert_eq!(run.state().artifacts, ["/mnt/user-data/outputs/report.md"]);
    let skill = ActiveSkill {
        name: "my-skill".into(),
        path: "/mnt/skills/public/my-skill/SKILL.md".into(),
        source: SkillSource::Slash,
    };
    assert_eq!(run.state().active_skills, std::slice::from_ref(&skill));
    {
        let seen = model.seen.lock().unwrap();
        let (first_messages, first_tools) = &seen[0];
        assert_eq!(first_tools, &["present_files", "ask_clarification"]);
        // The skill's content goes before the user's message, for that call only.
        assert!(
            matches!(&first_messages[0], Message::Human { content, hide_from_ui: true, .. }
            if content.starts_with("<slash_skill_activation>\nThe user explicitly activated the `my-skill` skill for this turn.")
                && content.contains("# Present the report"))
        );
        assert!(
            !seen[1].0.iter().any(|m| matches!(
                m,
                Message::Human {
                    hide_from_ui: true,
                    ..
                }
            )),
            "the reminder is not replayed on later calls"
        );
        assert!(!run.state().messages.iter().any(|m| matches!(
            m,
            Message::Human {
                hide_from_ui: true,
                ..
            }
        )));
    }
    drop(run);

    // Resumed from its checkpoint and answered: the skill is still active.
    let mut resumed = block_on(
        RunLoop::builder(
            context,
            model.clone(),
            Arc::clone(&catalog),
            Arc::new(UnreachableHosts),
        )
        .journal(Arc::new(store()))
        .settings(settings())
        .resume(),
    )
    .unwrap();
    assert_eq!(resumed.state().active_skills, [skill]);
    block_on(resumed.answer("2025")).unwrap();
    let outcome = block_on(resumed.drive());
    assert_eq!(outcome.final_answer.as_deref(), Some("Done."));
    assert_eq!(
        tool_message(&resumed.state().messages, "call-3-1"),
        (
            "Error: Tool 'write_file' is not allowed by the active skill policy.",
            ToolStatus::Error
        )
    );
    assert_eq!(
        model.seen.lock().unwrap()[2].1,
        ["present_files", "ask_clarification"]
    );
}

fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}
