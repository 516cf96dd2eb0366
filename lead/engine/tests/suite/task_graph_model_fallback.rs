//! A subagent's model on the worker is its run's whole chain (`WireModel::Resilient`):
//! a task whose primary model is unreachable is answered by its fallback, after the task
//! crossed the wire as a worker receives it. The primary is an OpenAI entry on a port
//! nothing listens on; the fallback is an `openai_standin` ([`StandIn`]) answering one
//! whole chat completion and checking the request it got.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use antler_engine::{
    catalog::Catalog, drive_task, BreakerSettings, CancelFlag, HostError, LlmCall, TaskSpec,
    TaskStatus, ToolHosts, WireCatalog, WireModel,
};
use antler_protocol::codec;
use antler_protocol::config::ModelConfig;
use antler_protocol::messages::{self as wire, Reply as HostReply, Request};
use antler_protocol::Role;
use futures::future::BoxFuture;
use serde_json::json;

use crate::web_support::{Reply, StandIn};

/// These tasks call no tool: every host request is an error.
struct NoHosts;

impl ToolHosts for NoHosts {
    fn request(
        &self,
        role: Role,
        _request: Request,
        _timeout: Duration,
    ) -> BoxFuture<'_, Result<HostReply, HostError>> {
        Box::pin(async move { Err(HostError::unavailable(format!("{role:?}: no hosts here"))) })
    }
}

fn entry(name: &str, base_url: &str, key: &str) -> ModelConfig {
    serde_json::from_value(json!({
        "name": name, "use": "langchain_openai:ChatOpenAI", "model": "smol",
        "base_url": base_url, "api_key": key, "max_retries": 0
    }))
    .unwrap()
}

/// One whole chat completion, as OpenAI's API documents it.
fn completion(content: &str) -> serde_json::Value {
    json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "smol",
        "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}
    })
}

#[tokio::test]
async fn a_task_whose_primary_model_is_down_is_answered_by_its_fallback() {
    let spare = StandIn::start(|seen| {
        let body = seen.json();
        let ok = seen.method == "POST"
            && seen.path() == "/v1/chat/completions"
            && body["model"] == "smol"
            && body["messages"].as_array().is_some_and(|m| {
                m.iter()
                    .all(|m| m["role"].is_string() && m.get("content").is_some())
            });
        if ok {
            Reply::json(completion("The fallback found it."))
        } else {
            Reply::with(
                400,
                "application/json",
                json!({"error": "bad request"}).to_string(),
            )
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let spec = TaskSpec {
        run_id: "run-1".to_owned(),
        tool_call_id: "call-task-1".to_owned(),
        user_id: "alice".to_owned(),
        thread_id: "thread-1".to_owned(),
        data_root: dir.path().to_path_buf(),
        thread_files: Default::default(),
        subagent_type: "general-purpose".to_owned(),
        description: "find the answer".to_owned(),
        prompt: "Find the answer.".to_owned(),
        system_prompt: Some("You are a subagent.".to_owned()),
        catalog: WireCatalog::of(&Catalog::build(Vec::new(), false).unwrap(), false),
        model: WireModel::Resilient {
            entry: entry("tg-primary", "http://127.0.0.1:1/v1", "sk-primary"),
            fallbacks: vec![entry(
                "tg-spare",
                &format!("{}/v1", spare.base()),
                "sk-spare",
            )],
            llm_call: LlmCall {
                retry_max_attempts: 1,
                ..LlmCall::default()
            },
            circuit_breaker: BreakerSettings::default(),
        },
        max_turns: 5,
        timeout_s: 60,
        tool_timeout_s: 5,
        token_budget: None,
        web_tools: Default::default(),
        sandbox_host: None,
        mcp_host: None,
        summarization: None,
        loop_detection: Default::default(),
        tool_output: Default::default(),
        approvals: None,
    };
    // As the worker receives it.
    let sent = codec::encode(&spec.to_wire().unwrap()).unwrap();
    let received = TaskSpec::from_wire(codec::decode::<wire::TaskSpec>(&sent).unwrap()).unwrap();

    let run = drive_task(
        &received,
        Arc::new(NoHosts),
        Arc::new(CancelFlag::default()),
        Arc::new(|_| {}),
    )
    .await;

    assert_eq!(run.result.status, TaskStatus::Completed, "{:?}", run.result);
    assert_eq!(run.result.result.as_deref(), Some("The fallback found it."));
    assert_eq!(run.result.model_name.as_deref(), Some("tg-primary"));
    assert_eq!(run.result.token_usage.total_tokens, 17);
    let asked = spare.one();
    assert_eq!(asked.header("authorization"), Some("Bearer sk-spare"));
    let messages = asked.json()["messages"].clone();
    assert_eq!(messages[0]["role"], "system");
    assert!(
        messages[0]["content"]
            .as_str()
            .is_some_and(|s| s.starts_with("You are a subagent.")),
        "{messages}"
    );
    assert!(
        messages.to_string().contains("Find the answer."),
        "{messages}"
    );
}
