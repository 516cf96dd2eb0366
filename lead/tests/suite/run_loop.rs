//! The run loop end to end inside the lead: a scripted playbook, a real catalog, a real
//! SQLite checkpoint file, and hosts that cannot be reached (so sandbox and MCP calls
//! show the error a model sees when a host is down, and the run goes on).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use antler_engine::{
    catalog::{Catalog, ToolSource, ToolSpec},
    HostError, Message, RunBuilder, RunContext, RunEvent, RunLoop, RunOutcome, RunSettings,
    ScriptedModel, StateUpdate, StopReason, ToolHosts, ToolState, ToolStatus,
};
use antler_lead::runs::{CheckpointStore, RunStatus};
use antler_protocol::messages::{Reply, Request};
use antler_protocol::Role;
use futures::future::BoxFuture;
use serde_json::json;

/// Hosts that are down: every request fails as an unreachable host does.
struct UnreachableHosts;

impl ToolHosts for UnreachableHosts {
    fn request(
        &self,
        role: Role,
        _: Request,
        _: Duration,
    ) -> BoxFuture<'_, Result<Reply, HostError>> {
        Box::pin(async move {
            Err(HostError::failed(format!(
                "{role:?} unreachable: connection refused"
            )))
        })
    }
}

struct Fixture {
    dir: tempfile::TempDir,
    catalog: Arc<Catalog>,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let mut write_file = ToolSpec::builtin(
            "write_file",
            "Write a file.",
            json!({"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}),
        );
        write_file.source = ToolSource::Config {
            use_id: "deerflow.sandbox.tools:write_file_tool".into(),
        };
        let catalog = Catalog::build(
            vec![
                write_file,
                antler_engine::catalog::builtins::present_files(),
                antler_engine::catalog::builtins::ask_clarification(),
                ToolSpec::mcp(
                    "everything_echo",
                    "Echoes back the input.",
                    json!({"type": "object", "properties": {"message": {"type": "string"}}}),
                    Some("everything".into()),
                    "echo",
                ),
            ],
            true,
        )
        .unwrap();
        Fixture {
            dir,
            catalog: Arc::new(catalog),
        }
    }

    fn context(&self, run_id: &str, clarification: bool) -> RunContext {
        let context = RunContext {
            clarification_enabled: clarification,
            ..RunContext::local(&self.dir.path().join("data"), "u1", "t1", run_id)
        };
        context.paths.create().unwrap();
        context
    }

    fn store(&self) -> CheckpointStore {
        CheckpointStore::open(&self.dir.path().join("checkpoints.sqlite")).unwrap()
    }

    /// A run of `playbook` on the fixture's catalog, journaled in its store, with hosts
    /// that are down.
    fn builder(&self, run_id: &str, playbook: &str, clarification: bool) -> RunBuilder {
        RunLoop::builder(
            self.context(run_id, clarification),
            Arc::new(ScriptedModel::from_yaml(playbook, "inline").unwrap()),
            Arc::clone(&self.catalog),
            Arc::new(UnreachableHosts),
        )
        .journal(Arc::new(self.store()))
        .settings(RunSettings::default())
    }

    fn start(&self, run_id: &str, playbook: &str, clarification: bool) -> RunLoop {
        block_on(
            self.builder(run_id, playbook, clarification)
                .model_label("scripted")
                .start("write a report"),
        )
        .unwrap()
    }

    /// [`Fixture::start`], then the run driven to its end.
    fn drive(&self, run_id: &str, playbook: &str, clarification: bool) -> (RunLoop, RunOutcome) {
        let mut run = self.start(run_id, playbook, clarification);
        let outcome = block_on(run.drive());
        (run, outcome)
    }

    fn resume(&self, run_id: &str, playbook: &str) -> RunLoop {
        block_on(self.builder(run_id, playbook, true).resume()).unwrap()
    }
}

fn tool_message<'a>(state: &'a [Message], id: &str) -> (&'a str, ToolStatus) {
    state
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

fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

#[test]
fn a_deferred_tool_is_refused_until_tool_search_promotes_it() {
    let fixture = Fixture::new();
    let playbook = r#"
turns:
  - tool_calls:
      - {name: everything_echo, args: {message: hi}}
  - tool_calls:
      - {name: tool_search, args: {query: "select:everything_echo"}}
  - tool_calls:
      - {name: everything_echo, args: {message: hi}}
  - content: Done.
"#;
    let mut run = fixture.start("run-1", playbook, false);
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&events);
    run.on_event(move |e| sink.lock().unwrap().push(e.clone()));
    let outcome = block_on(run.drive());
    assert_eq!(outcome.status, RunStatus::Success);
    assert_eq!(outcome.final_answer.as_deref(), Some("Done."));
    let messages = &run.state().messages;
    assert_eq!(
        tool_message(messages, "call-1-1"),
        ("Error: Tool 'everything_echo' is deferred and has not been promoted yet. Call tool_search first to expose and promote this tool's schema, then retry.", ToolStatus::Error)
    );
    assert!(tool_message(messages, "call-2-1")
        .0
        .contains("\"name\": \"everything_echo\""));
    assert_eq!(
        run.state().promoted.as_ref().unwrap().names,
        ["everything_echo"]
    );
    assert_eq!(
        tool_message(messages, "call-3-1"),
        ("Error: Tool 'everything_echo' failed with HostUnavailable: McpHost unreachable: connection refused. Continue with available context, or choose an alternative tool.", ToolStatus::Error)
    );
    let events = events.lock().unwrap();
    assert!(events.contains(&RunEvent::ModelStarted { turn: 4 }));
    assert!(events.contains(&RunEvent::ToolFinished {
        name: "tool_search".into(),
        tool_call_id: "call-2-1".into(),
        error: false,
        message: None,
    }));
    assert!(events.contains(&RunEvent::ToolFinished {
        name: "everything_echo".into(),
        tool_call_id: "call-3-1".into(),
        error: true,
        message: Some("Error: Tool 'everything_echo' failed with HostUnavailable: McpHost unreachable: connection refused. Continue with available context, or choose an alternative tool.".into()),
    }));
    let store = fixture.store();
    let (step, saved) = store.latest("run-1").unwrap().unwrap();
    assert_eq!(
        step, 7,
        "each model reply is checkpointed before its calls, then each result"
    );
    assert_eq!(&saved, run.state());
    assert_eq!(
        store.run("run-1").unwrap().unwrap().status,
        RunStatus::Success
    );
}

#[test]
fn presented_files_become_artifacts_and_unknown_tools_get_langgraphs_error() {
    let fixture = Fixture::new();
    let outputs = fixture.context("x", false).paths.outputs();
    std::fs::write(outputs.join("report.md"), "# Report").unwrap();
    let playbook = r#"
turns:
  - tool_calls:
      - {name: web_search, args: {query: x}}
      - {name: present_files, args: {filepaths: ["/mnt/user-data/outputs/report.md"]}}
  - content: Here is the report.
"#;
    let (run, outcome) = fixture.drive("run-2", playbook, false);
    assert_eq!(outcome.artifacts, ["/mnt/user-data/outputs/report.md"]);
    assert_eq!(
        tool_message(&run.state().messages, "call-1-1").0,
        "Error: web_search is not a valid tool, try one of [write_file, present_files, ask_clarification, everything_echo, tool_search]."
    );
    assert_eq!(
        tool_message(&run.state().messages, "call-1-2"),
        ("Successfully presented files", ToolStatus::Success)
    );
}

#[test]
fn a_clarification_interrupts_and_the_answered_run_resumes() {
    let fixture = Fixture::new();
    let playbook = r#"
turns:
  - tool_calls:
      - name: ask_clarification
        args: {question: "Which year?", clarification_type: missing_info, options: ["2024", "2025"]}
  - content: Report for the year you chose.
"#;
    let (run, outcome) = fixture.drive("run-3", playbook, true);
    assert_eq!(outcome.status, RunStatus::Interrupted);
    assert_eq!(
        outcome.question.as_deref(),
        Some("❓ Which year?\n\n  1. 2024\n  2. 2025")
    );
    assert_eq!(
        fixture.store().run("run-3").unwrap().unwrap().status,
        RunStatus::Interrupted
    );
    drop(run);
    let mut resumed = fixture.resume("run-3", playbook);
    block_on(resumed.answer("2025")).unwrap();
    let outcome = block_on(resumed.drive());
    assert_eq!(outcome.status, RunStatus::Success);
    assert_eq!(
        outcome.final_answer.as_deref(),
        Some("Report for the year you chose.")
    );
    assert_eq!(
        resumed
            .state()
            .messages
            .last()
            .map(|m| matches!(m, Message::Ai { .. })),
        Some(true)
    );
}

#[test]
fn a_non_interactive_clarification_proceeds_with_deerflows_text() {
    let fixture = Fixture::new();
    let playbook = r#"
turns:
  - tool_calls:
      - {name: ask_clarification, args: {question: "Which year?"}}
  - content: Assumed 2025.
"#;
    let (run, outcome) = fixture.drive("run-4", playbook, false);
    assert_eq!(outcome.status, RunStatus::Success);
    assert!(tool_message(&run.state().messages, "call-1-1")
        .0
        .starts_with("Clarification is disabled in this context — the human is not present"));
}

#[test]
fn a_run_cut_mid_call_resumes_with_the_interrupted_result() {
    let fixture = Fixture::new();
    let playbook = r#"
turns:
  - tool_calls:
      - {name: write_file, args: {path: /mnt/user-data/outputs/a.md, content: a}}
  - content: Finished after the crash.
"#;
    let run = fixture.start("run-5", playbook, false);
    let ai = Message::Ai {
        id: "ai-1".into(),
        content: String::new(),
        tool_calls: vec![antler_engine::ToolCall {
            id: "call-1-1".into(),
            name: "write_file".into(),
            args: json!({}),
        }],
        reasoning: None,
    };
    let mut crashed = run.state().clone();
    crashed.apply(StateUpdate::messages([ai])).unwrap();
    fixture.store().save("run-5", 1, &crashed).unwrap();
    drop(run);
    assert_eq!(fixture.store().in_progress().unwrap()[0].run_id, "run-5");
    let mut resumed = fixture.resume("run-5", playbook);
    assert_eq!(
        tool_message(&resumed.state().messages, "call-1-1"),
        (
            "[Tool call was interrupted and did not return a result.]",
            ToolStatus::Error
        )
    );
    let outcome = block_on(resumed.drive());
    assert_eq!(
        outcome.final_answer.as_deref(),
        Some("Finished after the crash.")
    );
    let results = resumed
        .state()
        .messages
        .iter()
        .filter(|m| matches!(m, Message::Tool { tool_call_id, .. } if tool_call_id == "call-1-1"))
        .count();
    assert_eq!(results, 1, "the interrupted call is answered exactly once");
}

#[test]
fn repeating_the_same_call_is_warned_then_forced_to_stop() {
    let fixture = Fixture::new();
    let turn = "  - tool_calls:\n      - {name: write_file, args: {path: /mnt/user-data/outputs/a.md, content: a}}\n";
    let playbook = format!("turns:\n{}", turn.repeat(6));
    let (run, outcome) = fixture.drive("run-6", &playbook, false);
    assert_eq!(outcome.status, RunStatus::Success);
    assert_eq!(outcome.stop_reason, Some(StopReason::LoopCapped));
    assert_eq!(
        outcome.final_answer.as_deref(),
        Some("\n\n[FORCED STOP] Repeated tool calls exceeded the safety limit. Producing final answer with results collected so far.")
    );
    let warnings = run
        .state()
        .messages
        .iter()
        .filter(|m| matches!(m, Message::Human { content, .. } if content.starts_with("[LOOP DETECTED] You are repeating the same tool calls.")))
        .count();
    // The warning goes with the next request only (spec C.7), never into the thread.
    assert_eq!(warnings, 0);
    assert_eq!(
        tool_message(&run.state().messages, "call-1-1").0,
        "Error: Tool 'write_file' failed with HostUnavailable: SandboxHost unreachable: connection refused. Continue with available context, or choose an alternative tool."
    );
}

#[test]
fn an_output_produced_and_never_presented_fails_the_run_with_the_receipt_saying_so() {
    let fixture = Fixture::new();
    let mut run = fixture.start("run-7", "turns:\n  - content: Done.\n", false);
    std::fs::write(run.context.paths.outputs().join("draft.md"), "draft").unwrap();
    let outcome = block_on(run.drive());
    assert_eq!(outcome.status, RunStatus::Error);
    assert_eq!(
        outcome.error.as_deref(),
        Some("Artifact delivery incomplete: no produced output artifact was presented")
    );
    let receipt = fixture.store().receipt("run-7").unwrap().unwrap();
    assert_eq!(Some(&receipt), outcome.delivery.as_ref());
    assert_eq!(receipt.stage.as_deref(), Some("not_started"));
    assert_eq!(receipt.satisfied, Some(false));
    assert_eq!(receipt.produced_paths, ["/mnt/user-data/outputs/draft.md"]);
    assert_eq!(
        fixture.store().run("run-7").unwrap().unwrap().status,
        RunStatus::Error
    );
}

#[test]
fn a_presented_output_is_delivered_and_the_receipt_matches_it() {
    let fixture = Fixture::new();
    let playbook = r#"
turns:
  - tool_calls:
      - {name: present_files, args: {filepaths: ["/mnt/user-data/outputs/reports"]}}
  - content: Delivered.
"#;
    let mut run = fixture.start("run-8", playbook, false);
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&events);
    run.on_event(move |e| sink.lock().unwrap().push(e.clone()));
    let reports = run.context.paths.outputs().join("reports");
    std::fs::create_dir_all(&reports).unwrap();
    std::fs::write(reports.join("a.md"), "a").unwrap();
    let outcome = block_on(run.drive());
    let states: Vec<(ToolState, String, Option<String>)> = events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            RunEvent::Lifecycle {
                state,
                tool,
                tool_call_id,
            } if tool == "present_files" || tool == "everything_echo" => {
                Some((*state, tool.clone(), tool_call_id.clone()))
            }
            _ => None,
        })
        .collect();
    let present =
        |state, id: Option<&str>| (state, "present_files".to_owned(), id.map(str::to_owned));
    let echo = |state| (state, "everything_echo".to_owned(), None);
    assert_eq!(
        states,
        [
            present(ToolState::Available, None),
            echo(ToolState::Available),
            present(ToolState::Authorized, None),
            echo(ToolState::Authorized),
            present(ToolState::Visible, None),
            present(ToolState::Executed, Some("call-1-1")),
            present(ToolState::Returned, Some("call-1-1")),
            present(ToolState::Visible, None),
            present(
                ToolState::Delivered,
                Some("/mnt/user-data/outputs/reports/a.md")
            ),
        ],
        "the deferred echo tool is never visible: it was not promoted"
    );
    assert_eq!(outcome.status, RunStatus::Success, "{:?}", outcome.error);
    let receipt = outcome.delivery.unwrap();
    assert_eq!(
        receipt.matched_paths,
        ["/mnt/user-data/outputs/reports/a.md"]
    );
    assert_eq!(receipt.stage.as_deref(), Some("presented"));
}

#[test]
fn resuming_a_finished_run_ends_with_its_answer_without_asking_the_model() {
    let fixture = Fixture::new();
    let playbook = "turns:\n  - content: Done once.\n";
    let mut run = fixture.start("run-9", playbook, false);
    assert_eq!(block_on(run.drive()).status, RunStatus::Success);
    drop(run);
    let mut resumed = fixture.resume("run-9", playbook);
    let outcome = block_on(resumed.drive());
    assert_eq!(outcome.status, RunStatus::Success);
    assert_eq!(outcome.final_answer.as_deref(), Some("Done once."));
    assert_eq!(fixture.store().latest("run-9").unwrap().unwrap().0, 1);
}

#[test]
fn a_tool_the_guardrail_denies_gets_the_denial_and_the_run_goes_on() {
    use antler_engine::{AllowlistProvider, Guardrail};
    let fixture = Fixture::new();
    let playbook = r#"
turns:
  - tool_calls:
      - {name: write_file, args: {path: /mnt/user-data/outputs/a.md, content: a}}
  - content: Could not write.
"#;
    let mut run = block_on(
        RunLoop::builder(
            fixture.context("run-10", false),
            Arc::new(ScriptedModel::from_yaml(playbook, "inline").unwrap()),
            Arc::clone(&fixture.catalog),
            Arc::new(UnreachableHosts),
        )
        .journal(Arc::new(fixture.store()))
        .model_label("scripted")
        .settings(RunSettings {
            guardrail: Some(Guardrail::new(
                Box::new(AllowlistProvider::new(
                    None,
                    Some(vec!["write_file".into()]),
                )),
                true,
            )),
            ..RunSettings::default()
        })
        .start("write a report"),
    )
    .unwrap();
    let outcome = block_on(run.drive());
    assert_eq!(outcome.final_answer.as_deref(), Some("Could not write."));
    assert_eq!(
        tool_message(&run.state().messages, "call-1-1"),
        ("Guardrail denied: tool 'write_file' was blocked (oap.tool_not_allowed). Reason: tool 'write_file' is denied. Choose an alternative approach.", ToolStatus::Error)
    );
}

#[test]
fn a_skill_policy_blocks_a_call_and_narrows_tool_search() {
    use antler_engine::{Skill, SkillPolicy};
    let fixture = Fixture::new();
    let skill_dir = fixture.dir.path().join("skills/report");
    std::fs::create_dir_all(&skill_dir).unwrap();
    std::fs::write(
        skill_dir.join("SKILL.md"),
        "---\nname: report\nallowed-tools: [present_files]\n---\n# Report\n",
    )
    .unwrap();
    let playbook = r#"
turns:
  - tool_calls:
      - {name: write_file, args: {path: /mnt/user-data/outputs/a.md, content: a}}
      - {name: tool_search, args: {query: "select:everything_echo"}}
  - content: Blocked.
"#;
    let mut run = block_on(
        RunLoop::builder(
            fixture.context("run-11", false),
            Arc::new(ScriptedModel::from_yaml(playbook, "inline").unwrap()),
            Arc::clone(&fixture.catalog),
            Arc::new(UnreachableHosts),
        )
        .journal(Arc::new(fixture.store()))
        .model_label("scripted")
        .settings(RunSettings {
            skill_policy: Some(SkillPolicy::resolve(vec![Skill::load(&skill_dir)])),
            ..RunSettings::default()
        })
        .start("write a report"),
    )
    .unwrap();
    block_on(run.drive());
    let messages = &run.state().messages;
    assert_eq!(
        tool_message(messages, "call-1-1"),
        (
            "Error: Tool 'write_file' is not allowed by the active skill policy.",
            ToolStatus::Error
        )
    );
    assert_eq!(
        tool_message(messages, "call-1-2"),
        (
            "No tools found matching the active skill policy.",
            ToolStatus::Success
        )
    );
    assert_eq!(
        run.state().promoted.as_ref().unwrap().names,
        Vec::<String>::new()
    );
}
