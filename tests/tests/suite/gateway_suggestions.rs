//! DeerFlow's one-call routes through the real gateway (spec C.8), the model being
//! `recording_server` (a stand-in OpenAI-compatible endpoint that records each request):
//! `GET /api/suggestions/config` says what config.yaml set; `POST
//! /api/threads/{id}/suggestions` sends DeerFlow's prompt once and returns at most
//! `max_suggestions` questions parsed out of a reply with thoughts and a code fence;
//! `POST /api/input-polish` returns the rewritten draft, and refuses an empty or a too
//! long one with DeerFlow's texts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lead_support::{http_full, LeadCluster};
use crate::model_support::{recording_server, Reply};
use serde_json::{json, Value};

const ALICE: &str = "alice-token-000000000001";

#[test]
fn suggestions_and_input_polish_make_one_call_each_with_deerflows_prompts() {
    let server = recording_server(vec![
        Reply::text("<think>They asked about Rust.</think>\n```json\n[\"Why is Rust fast?\", \"Is it safe?\", \"Who uses it?\"]\n```"),
        Reply::text("```\nList the three largest files under /mnt/user-data/uploads, with their sizes.\n```"),
    ]);
    let config = format!(
        "models:\n  - name: rec\n    use: langchain_openai:ChatOpenAI\n    model: recorded\n    base_url: {}\n    api_key: sk-x\nsuggestions:\n  enabled: true\n  max_suggestions: 2\ninput_polish:\n  max_chars: 100\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\nantler:\n  gateway:\n    tokens:\n      - {{token: {ALICE}, user: alice}}\n",
        server.base_url
    );
    let cluster = LeadCluster::up(&config, &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")]);
    let addr = cluster.gateway();
    let call = |method: &str, path: &str, body: Option<Value>| {
        let body = body.map(|b| b.to_string());
        let (code, _, text) = http_full(&addr, ALICE, method, path, body.as_deref());
        (
            code,
            serde_json::from_str::<Value>(&text).unwrap_or(Value::Null),
        )
    };

    assert_eq!(
        call("GET", "/api/suggestions/config", None),
        (200, json!({"enabled": true, "max_suggestions": 2}))
    );
    let (code, body) = call(
        "POST",
        "/api/threads/t1/suggestions",
        Some(json!({"messages": [
            {"role": "user", "content": "Tell me about Rust."},
            {"role": "assistant", "content": "Rust is a systems language."}
        ], "n": 3})),
    );
    assert_eq!(code, 200);
    assert_eq!(
        body,
        json!({"suggestions": ["Why is Rust fast?", "Is it safe?"]}),
        "min(n, max_suggestions) questions"
    );
    let sent = server.requests.lock().unwrap()[0].clone();
    let messages = sent["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["role"], "system");
    assert!(messages[0]["content"]
        .as_str()
        .unwrap()
        .contains("produce EXACTLY 2 short questions"));
    assert_eq!(
        messages[1]["content"],
        "Conversation Context:\nUser: Tell me about Rust.\nAssistant: Rust is a systems language.\n\nGenerate 2 follow-up questions"
    );
    assert!(sent["tools"].is_null() || sent["tools"] == json!([]));

    let (code, body) = call(
        "POST",
        "/api/input-polish",
        Some(json!({"text": " biggest uploads? ", "locale": "en-US"})),
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        body,
        json!({"rewritten_text": "List the three largest files under /mnt/user-data/uploads, with their sizes.", "changed": true})
    );
    let sent = server.requests.lock().unwrap()[1].clone();
    assert!(sent["messages"][0]["content"]
        .as_str()
        .unwrap()
        .starts_with("You are DeerFlow's pre-send prompt optimizer."));
    assert_eq!(
        sent["messages"][1]["content"],
        "Locale hint: en-US\n\nRewrite this draft while preserving its intent:\n<draft>\nbiggest uploads?\n</draft>"
    );
    assert_eq!(
        call("POST", "/api/input-polish", Some(json!({"text": "   "}))),
        (400, json!({"detail": "Input text is required"}))
    );
    assert_eq!(
        call(
            "POST",
            "/api/input-polish",
            Some(json!({"text": "x".repeat(101)}))
        ),
        (400, json!({"detail": "Input text exceeds 100 characters"}))
    );
    assert_eq!(
        server.requests.lock().unwrap().len(),
        2,
        "refused drafts call no model"
    );
}
