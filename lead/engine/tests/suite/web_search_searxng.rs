//! SearXNG (`deerflow.community.searxng.tools:web_search_tool`) against a stand-in for a
//! SearXNG instance: the query string and headers, `max_results` cutting the list,
//! DeerFlow's list output, and an HTTP error as `{"error", "query"}`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::web_support::{call, entry, Reply, Seen, StandIn};
use serde_json::json;

fn searxng(seen: &Seen) -> Reply {
    if seen.query().iter().any(|(k, v)| k == "q" && v == "boom") {
        return Reply::with(500, "text/plain", "boom".into());
    }
    Reply::json(json!({"query": "q", "results": [
        {"title": "One", "url": "https://one.example/", "content": "first", "engine": "ddg"},
        {"title": "Two", "url": "https://two.example/", "content": "second"},
        {"title": "Three", "url": "https://three.example/", "content": "third"}
    ]}))
}

fn entries(api: &StandIn) -> Vec<antler_protocol::config::ToolConfig> {
    vec![entry(
        "web_search",
        "deerflow.community.searxng.tools:web_search_tool",
        json!({"base_url": format!("{}/", api.base()), "max_results": 2}),
    )]
}

#[tokio::test]
async fn the_search_is_a_json_get_cut_to_max_results() {
    let api = StandIn::start(searxng).await;
    let out = call(
        &entries(&api),
        "web_search",
        json!({"query": "actor model"}),
    )
    .await;
    assert_eq!(
        out.text,
        "[\n  {\n    \"title\": \"One\",\n    \"url\": \"https://one.example/\",\n    \"snippet\": \"first\"\n  },\n  {\n    \"title\": \"Two\",\n    \"url\": \"https://two.example/\",\n    \"snippet\": \"second\"\n  }\n]"
    );
    let seen = api.one();
    assert_eq!((seen.method.as_str(), seen.path()), ("GET", "/search"));
    assert_eq!(
        seen.target,
        "/search?q=actor+model&format=json&language=auto&pageno=1&limit=2"
    );
    assert_eq!(
        seen.header("user-agent"),
        Some("Mozilla/5.0 (compatible; DeerFlow/1.0)")
    );
    assert_eq!(seen.header("accept"), Some("application/json"));
}

#[tokio::test]
async fn an_http_error_is_the_error_object() {
    let api = StandIn::start(searxng).await;
    let out = call(&entries(&api), "web_search", json!({"query": "boom"})).await;
    let expected = format!(
        "{{\"error\": \"Server error '500 Internal Server Error' for url '{}/search?q=boom&format=json&language=auto&pageno=1&limit=2'\", \"query\": \"boom\"}}",
        api.base()
    );
    assert_eq!(out.text, expected);
    assert!(out.error);
}
