//! A model's mistakes through the real run loop with a scripted model: invalid calls
//! (unreadable arguments, arguments that do not fit the schema, an unknown or empty
//! name) are never executed, each answered at once with DeerFlow's text while the valid
//! calls of the same reply run, and the model reads the answers on its very next
//! request; replies of only invalid calls end the run at the limit with
//! `invalid_tool_calls_capped`; an empty reply is asked again once with the hidden
//! reminder, and a second empty one fails the run with DeerFlow's fallback text.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use antler_engine::{
    catalog::{builtins, Catalog},
    ChatModel, HostError, InvalidCallLimit, Message, ModelError, ModelReply, ModelRequest,
    RunContext, RunEvent, RunLoop, RunOutcome, RunSettings, RunStatus, ScriptedModel, ToolHosts,
    ToolStatus, EMPTY_REPLY_FALLBACK, RECOVERY_PROMPT,
};
use antler_protocol::messages::{Reply, Request};
use antler_protocol::Role;
use futures::future::BoxFuture;

/// Hosts that are down (the tools of these runs need none).
pub struct NoHosts;

impl ToolHosts for NoHosts {
    fn request(
        &self,
        role: Role,
        _: Request,
        _: Duration,
    ) -> BoxFuture<'_, Result<Reply, HostError>> {
        Box::pin(async move { Err(HostError::failed(format!("{role:?} unreachable"))) })
    }
}

/// Run `run_id` of user `u1` on thread `t1` under `dir`, its thread's directories made
/// there and its files read there.
pub fn local_context(dir: &std::path::Path, run_id: &str) -> RunContext {
    let context = RunContext::local(dir, "u1", "t1", run_id);
    context.paths.create().unwrap();
    context
}

/// A model that keeps every request's messages, then lets `inner` answer.
pub struct Recording {
    pub inner: Arc<dyn ChatModel>,
    pub requests: Mutex<Vec<Vec<Message>>>,
}

impl ChatModel for Recording {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn complete<'a>(
        &'a self,
        request: ModelRequest<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        self.requests
            .lock()
            .unwrap()
            .push(request.messages.to_vec());
        self.inner.complete(request)
    }

    fn reads_prompt(&self) -> bool {
        false
    }
}

/// One run of `model` over `describe_skill` to its end: the outcome, the final state's
/// messages and the events.
pub async fn drive(
    model: Arc<dyn ChatModel>,
    settings: RunSettings,
) -> (RunOutcome, Vec<Message>, Vec<RunEvent>) {
    let dir = tempfile::tempdir().unwrap();
    // A builtin (it checks its own arguments) and an MCP server's tool (its schema is
    // checked before a call could reach the server; NoHosts would fail any that did).
    let weather = antler_engine::catalog::ToolSpec::mcp(
        "weather_get",
        "Weather.",
        serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        Some("weather".to_owned()),
        "get",
    );
    let catalog =
        Arc::new(Catalog::build(vec![builtins::describe_skill(), weather], false).unwrap());
    let context = local_context(dir.path(), "run-1");
    let settings = RunSettings {
        settle: false,
        ..settings
    };
    let mut run = RunLoop::builder(context, model, catalog, Arc::new(NoHosts))
        .settings(settings)
        .start("go")
        .await
        .unwrap();
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&events);
    run.on_event(move |e| seen.lock().unwrap().push(e.clone()));
    let outcome = run.drive().await;
    let messages = run.state().messages.clone();
    let events = events.lock().unwrap().clone();
    (outcome, messages, events)
}

fn recording(yaml: &str) -> Arc<Recording> {
    Arc::new(Recording {
        inner: Arc::new(ScriptedModel::from_yaml(yaml, "inline").unwrap()),
        requests: Mutex::new(Vec::new()),
    })
}

/// The tool messages, as (call id, content, status).
fn results(messages: &[Message]) -> Vec<(String, String, ToolStatus)> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool {
                tool_call_id,
                content,
                status,
                ..
            } => Some((tool_call_id.clone(), content.clone(), *status)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn invalid_calls_are_answered_at_once_and_the_valid_ones_run() {
    let model = recording(
        r#"
turns:
  - tool_calls:
      - name: describe_skill
        args: {name: none-such}
      - name: weather_get
        args: {town: x}
      - name: web_serch
        args: {query: x}
    invalid_calls:
      - name: describe_skill
        arguments: '{"name": "cut'
      - name: ""
        arguments: '{}'
  - content: Done.
"#,
    );
    let (outcome, messages, events) = drive(model.clone(), RunSettings::default()).await;
    assert_eq!(outcome.status, RunStatus::Success, "{outcome:?}");
    assert_eq!(outcome.final_answer.as_deref(), Some("Done."));
    assert_eq!(outcome.stop_reason, None);
    // The AI message keeps every call, so each answer has its call.
    let Message::Ai { tool_calls, .. } = &messages[1] else {
        panic!("{messages:?}")
    };
    let calls: Vec<(&str, &str)> = tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str()))
        .collect();
    assert_eq!(
        calls,
        [
            ("call-1-1", "describe_skill"),
            ("call-1-4", "describe_skill"),
            ("call-1-5", "unknown_tool"),
            ("call-1-2", "weather_get"),
            ("call-1-3", "web_serch"),
        ]
    );
    let results = results(&messages);
    let by_id = |id: &str| results.iter().find(|r| r.0 == id).unwrap().1.clone();
    assert_eq!(
        by_id("call-1-4"),
        "[Tool call could not be executed because its arguments were invalid: EOF while parsing a string at line 1 column 13]"
    );
    assert_eq!(
        by_id("call-1-5"),
        "[Tool call could not be executed because its name was missing or empty. Use one of the available tool names when retrying.]"
    );
    assert_eq!(
        by_id("call-1-2"),
        "[Tool call could not be executed because its arguments were invalid: `city` is a required property]"
    );
    assert_eq!(
        by_id("call-1-3"),
        "Error: web_serch is not a valid tool, try one of [describe_skill, weather_get]."
    );
    // The valid call ran (describe_skill's own answer, not an invalid-call text).
    let ran = by_id("call-1-1");
    assert!(!ran.starts_with("[Tool call could not"), "{ran}");
    assert!(results
        .iter()
        .all(|r| r.0 == "call-1-1" || r.2 == ToolStatus::Error));
    // Only the valid call was executed.
    let executed: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            RunEvent::Lifecycle {
                state: antler_engine::ToolState::Executed,
                tool_call_id: Some(id),
                ..
            } => Some(id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(executed, ["call-1-1"]);
    // The model's next request holds every answer.
    let requests = model.requests.lock().unwrap();
    assert_eq!(requests.len(), 2);
    assert_eq!(results.len(), 5);
    assert_eq!(
        requests[1]
            .iter()
            .filter(|m| matches!(m, Message::Tool { .. }))
            .count(),
        5
    );
}

#[tokio::test]
async fn replies_of_only_invalid_calls_end_the_run_at_the_limit() {
    let bad =
        "  - invalid_calls:\n      - name: describe_skill\n        arguments: '{\"name\": '\n";
    let yaml = format!("turns:\n{bad}{bad}{bad}  - content: never\n");
    let (outcome, messages, _) = drive(recording(&yaml), RunSettings::default()).await;
    assert_eq!(outcome.status, RunStatus::Success, "{outcome:?}");
    assert_eq!(
        serde_json::to_value(outcome.stop_reason).unwrap(),
        "invalid_tool_calls_capped"
    );
    assert_eq!(
        outcome.final_answer.as_deref(),
        Some("\n\n[FORCED STOP] The model's tool calls were invalid in 3 consecutive replies, so none of them was executed. Producing final answer with results collected so far.")
    );
    // Two replies were answered; the third's calls were dropped.
    assert_eq!(results(&messages).len(), 2);
    assert!(
        matches!(messages.last(), Some(Message::Ai { tool_calls, .. }) if tool_calls.is_empty())
    );

    // A valid reply in between starts the count again; the limit is configurable.
    let good = "  - tool_calls:\n      - name: describe_skill\n        args: {name: x}\n";
    let yaml = format!("turns:\n{bad}{good}{bad}  - content: Done.\n");
    let settings = RunSettings {
        invalid_calls: InvalidCallLimit { max_consecutive: 2 },
        ..RunSettings::default()
    };
    let (outcome, _, _) = drive(recording(&yaml), settings).await;
    assert_eq!(outcome.final_answer.as_deref(), Some("Done."));
    assert_eq!(outcome.stop_reason, None);
    let yaml = format!("turns:\n{good}{bad}{bad}  - content: never\n");
    let settings = RunSettings {
        invalid_calls: InvalidCallLimit { max_consecutive: 2 },
        ..RunSettings::default()
    };
    let (outcome, _, _) = drive(recording(&yaml), settings).await;
    assert_eq!(
        serde_json::to_value(outcome.stop_reason).unwrap(),
        "invalid_tool_calls_capped"
    );
}

#[tokio::test]
async fn an_empty_reply_is_asked_again_once_with_the_hidden_reminder() {
    let model = recording("turns:\n  - attempts:\n      - content: ''\n    content: Hello.\n");
    let (outcome, messages, events) = drive(model.clone(), RunSettings::default()).await;
    assert_eq!(outcome.status, RunStatus::Success, "{outcome:?}");
    assert_eq!(outcome.final_answer.as_deref(), Some("Hello."));
    assert!(events.contains(&RunEvent::EmptyReplyRetried { turn: 1 }));
    let requests = model.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[1].last(),
        Some(&Message::Human {
            content: RECOVERY_PROMPT.to_owned(),
            name: Some("terminal_response_recovery".to_owned()),
            hide_from_ui: true,
            additional_kwargs: None,
        })
    );
    // The reminder went with that request only.
    assert!(!messages
        .iter()
        .any(|m| matches!(m, Message::Human { content, .. } if content == RECOVERY_PROMPT)));

    let twice = recording("turns:\n  - content: ''\n");
    let (outcome, messages, _) = drive(twice, RunSettings::default()).await;
    assert_eq!(outcome.status, RunStatus::Error);
    assert_eq!(outcome.error.as_deref(), Some(EMPTY_REPLY_FALLBACK));
    assert!(
        matches!(messages.last(), Some(Message::Ai { content, .. }) if content == EMPTY_REPLY_FALLBACK)
    );
}
