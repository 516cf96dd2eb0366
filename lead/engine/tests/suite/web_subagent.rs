//! A subagent's web tools run on its worker as the lead's do: the lead puts the config's
//! web entries in the task spec (their keys hidden from its `Debug` form), and a task whose
//! catalog has `web_search` gets the SearXNG stand-in's results rather than "no executor".
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use crate::web_support::{entry, Reply, StandIn};
use antler_engine::{
    catalog::{Catalog, ToolSource, ToolSpec},
    drive_task, CancelFlag, HostError, Message, Playbook, ScriptedCall, ScriptedTurn, TaskSpec,
    ToolHosts, WireCatalog, WireModel, WireWebTools,
};
use antler_protocol::messages::{Reply as HostReply, Request};
use antler_protocol::Role;
use futures::future::BoxFuture;
use serde_json::json;

/// No host is needed: web tools run in the engine.
struct NoHosts;

impl ToolHosts for NoHosts {
    fn request(
        &self,
        role: Role,
        _r: Request,
        _t: Duration,
    ) -> BoxFuture<'_, Result<HostReply, HostError>> {
        Box::pin(async move {
            Err(HostError::unavailable(format!(
                "{role:?}: NoHosts stand-in"
            )))
        })
    }
}

#[tokio::test]
async fn a_subagent_task_runs_web_search_on_its_worker() {
    let api = StandIn::start(|_| Reply::json(json!({"results": [{"title": "Found", "url": "https://found.example/", "content": "by the subagent"}]}))).await;
    let use_id = "deerflow.community.searxng.tools:web_search_tool";
    let config = [entry(
        "web_search",
        use_id,
        json!({"base_url": api.base(), "api_key": "secret-key"}),
    )];
    let web_tools = WireWebTools::of(&config);
    assert!(
        !format!("{web_tools:?}").contains("secret-key"),
        "{web_tools:?}"
    );
    let catalog = Catalog::build(
        vec![ToolSpec {
            name: "web_search".into(),
            description: "Search the web using SearXNG.".into(),
            parameters: json!({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}).into(),
            source: ToolSource::Config { use_id: use_id.into() },
            group: Some("web".into()),
            routing: None,
        }],
        false,
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let spec = TaskSpec {
        run_id: "run-1".into(),
        tool_call_id: "call-task-1".into(),
        user_id: "alice".into(),
        thread_id: "thread-1".into(),
        data_root: dir.path().to_path_buf(),
        thread_files: Default::default(),
        subagent_type: "general-purpose".into(),
        description: "search".into(),
        prompt: "Search.".into(),
        system_prompt: None,
        catalog: WireCatalog::of(&catalog, false),
        model: WireModel::Scripted {
            playbook: Playbook {
                turns: vec![
                    ScriptedTurn {
                        tool_calls: vec![ScriptedCall {
                            name: "web_search".into(),
                            args: json!({"query": "q"}),
                            id: None,
                        }],
                        ..ScriptedTurn::default()
                    },
                    ScriptedTurn {
                        content: "Done.".into(),
                        ..ScriptedTurn::default()
                    },
                ],
                ..Playbook::default()
            },
        },
        max_turns: 5,
        timeout_s: 30,
        tool_timeout_s: 10,
        token_budget: None,
        web_tools,
        sandbox_host: None,
        mcp_host: None,
        summarization: None,
        loop_detection: Default::default(),
        tool_output: Default::default(),
        approvals: None,
    };
    let run = drive_task(
        &spec,
        Arc::new(NoHosts),
        Arc::new(CancelFlag::default()),
        Arc::new(|_| {}),
    )
    .await;
    let messages = &run.state.as_ref().expect("the task ran").messages;
    let tool = messages
        .iter()
        .find_map(|m| match m {
            Message::Tool { content, .. } => Some(content.clone()),
            _ => None,
        })
        .expect("a tool message");
    assert_eq!(tool, "[\n  {\n    \"title\": \"Found\",\n    \"url\": \"https://found.example/\",\n    \"snippet\": \"by the subagent\"\n  }\n]");
    assert_eq!(api.seen().len(), 1);
}
