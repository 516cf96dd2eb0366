//! Brave (`deerflow.community.brave.tools:web_search_tool` and `image_search_tool`) against
//! a stand-in for api.search.brave.com: token header, query string, DeerFlow's outputs,
//! the unsafe-image filter and E.3's error texts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::web_support::{call, entry, Reply, Seen, StandIn};
use serde_json::json;

fn brave(seen: &Seen) -> Reply {
    if seen.header("x-subscription-token") != Some("bk") {
        return Reply::with(401, "application/json", "{}".into());
    }
    match seen.path() {
        "/res/v1/web/search" => Reply::json(
            json!({"web": {"results": [{"title": "Actix", "url": "https://actix.rs/", "description": "Actors."}]}}),
        ),
        "/res/v1/images/search" => Reply::json(json!({"results": [
            {"title": "Internal", "url": "http://10.0.0.1/", "properties": {"url": "http://127.0.0.1/x.png"}, "thumbnail": {"src": "http://localhost/t.png"}},
            {"title": "Panda", "url": "https://zoo.example/", "source": "zoo.example", "properties": {"url": "https://img.example/p.jpg", "width": 800, "height": 600}, "thumbnail": {"src": "https://tn.example/p.jpg"}}
        ]})),
        _ => Reply::with(404, "text/plain", "".into()),
    }
}

#[tokio::test]
async fn web_search_sends_the_token_and_returns_deerflows_object() {
    let api = StandIn::start(brave).await;
    let entries = [entry(
        "web_search",
        "deerflow.community.brave.tools:web_search_tool",
        json!({"api_key": "bk", "max_results": 50, "base_url": api.base()}),
    )];
    let out = call(&entries, "web_search", json!({"query": "  actors  "})).await;
    assert_eq!(out.text, "{\n  \"query\": \"  actors  \",\n  \"total_results\": 1,\n  \"results\": [\n    {\n      \"title\": \"Actix\",\n      \"url\": \"https://actix.rs/\",\n      \"content\": \"Actors.\"\n    }\n  ]\n}");
    let seen = api.one();
    assert_eq!(
        seen.target,
        "/res/v1/web/search?q=actors&count=20&text_decorations=false"
    );
    assert_eq!(seen.header("accept"), Some("application/json"));
}

#[tokio::test]
async fn image_search_drops_unsafe_urls() {
    let api = StandIn::start(brave).await;
    let entries = [entry(
        "image_search",
        "deerflow.community.brave.tools:image_search_tool",
        json!({"api_key": "bk", "country": "US", "base_url": api.base()}),
    )];
    let out = call(
        &entries,
        "image_search",
        json!({"query": "panda", "max_results": 3}),
    )
    .await;
    let v: serde_json::Value = serde_json::from_str(&out.text).unwrap();
    assert_eq!(v["total_results"], 1, "{}", out.text);
    assert_eq!(
        v["results"][0],
        json!({"title": "Panda", "image_url": "https://img.example/p.jpg", "thumbnail_url": "https://tn.example/p.jpg", "source_url": "https://zoo.example/", "source": "zoo.example", "width": 800, "height": 600})
    );
    assert_eq!(
        api.one().target,
        "/res/v1/images/search?q=panda&count=3&country=US"
    );
}

#[tokio::test]
async fn errors_have_e3s_texts() {
    let api = StandIn::start(brave).await;
    std::env::remove_var("BRAVE_SEARCH_API_KEY");
    let bad = [entry(
        "web_search",
        "deerflow.community.brave.tools:web_search_tool",
        json!({"api_key": "wrong", "base_url": api.base()}),
    )];
    assert_eq!(
        call(&bad, "web_search", json!({"query": "q"})).await.text,
        r#"{"error": "Brave Search API error: HTTP 401", "query": "q"}"#
    );
    let none = [entry(
        "web_search",
        "deerflow.community.brave.tools:web_search_tool",
        json!({"base_url": api.base()}),
    )];
    assert_eq!(
        call(&none, "web_search", json!({"query": "q"})).await.text,
        r#"{"error": "BRAVE_SEARCH_API_KEY is not configured", "query": "q"}"#
    );
}
