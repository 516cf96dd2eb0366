//! Tavily (`deerflow.community.tavily.tools:web_search_tool` and `web_fetch_tool`) against a
//! stand-in for api.tavily.com: the headers and bodies of `/search` and `/extract`, the
//! `web_search` entry's key used by both tools, DeerFlow's output shapes, `failed_results`,
//! and the client's exceptions (missing key, 401) as failures the model sees.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::web_support::{call, entry, failure, Reply, Seen, StandIn};
use serde_json::json;

fn tavily(seen: &Seen) -> Reply {
    if seen.header("authorization") != Some("Bearer tvly-test") {
        return Reply::with(
            401,
            "application/json",
            json!({"detail": {"error": "Unauthorized: missing or invalid API key."}}).to_string(),
        );
    }
    match seen.path() {
        "/search" => Reply::json(json!({"query": "q", "results": [
            {"title": "Tokio", "url": "https://tokio.rs/", "content": "An asynchronous runtime for Rust.", "score": 0.9},
            {"title": "Actix", "url": "https://actix.rs/", "content": "Actors.", "score": 0.8}
        ], "response_time": 0.5})),
        "/extract" if seen.body.contains("fail.example") => Reply::json(
            json!({"results": [], "failed_results": [{"url": "https://fail.example/", "error": "Failed to fetch url"}]}),
        ),
        "/extract" if seen.body.contains("none.example") => {
            Reply::json(json!({"results": [], "failed_results": []}))
        }
        "/extract" => Reply::json(
            json!({"results": [{"url": "https://93.184.216.34/post", "title": "A post", "raw_content": "x".repeat(5000)}], "failed_results": []}),
        ),
        _ => Reply::with(404, "application/json", "{}".into()),
    }
}

fn entries(api: &StandIn, key: &str) -> Vec<antler_protocol::config::ToolConfig> {
    vec![
        entry(
            "web_search",
            "deerflow.community.tavily.tools:web_search_tool",
            json!({"api_key": key, "max_results": 3, "base_url": api.base()}),
        ),
        // DeerFlow reads the key from the web_search entry for web_fetch too.
        entry(
            "web_fetch",
            "deerflow.community.tavily.tools:web_fetch_tool",
            json!({}),
        ),
    ]
}

#[tokio::test]
async fn web_search_sends_the_clients_request_and_returns_a_list() {
    let api = StandIn::start(tavily).await;
    let out = call(
        &entries(&api, "tvly-test"),
        "web_search",
        json!({"query": "rust runtimes"}),
    )
    .await;
    assert_eq!(
        out.text,
        "[\n  {\n    \"title\": \"Tokio\",\n    \"url\": \"https://tokio.rs/\",\n    \"snippet\": \"An asynchronous runtime for Rust.\"\n  },\n  {\n    \"title\": \"Actix\",\n    \"url\": \"https://actix.rs/\",\n    \"snippet\": \"Actors.\"\n  }\n]"
    );
    let seen = api.one();
    assert_eq!((seen.method.as_str(), seen.path()), ("POST", "/search"));
    assert_eq!(seen.header("content-type"), Some("application/json"));
    assert_eq!(seen.header("x-client-source"), Some("tavily-python"));
    assert_eq!(
        seen.json(),
        json!({"query": "rust runtimes", "max_results": 3})
    );
}

#[tokio::test]
async fn web_fetch_extracts_with_the_search_entrys_key_and_cuts_the_content() {
    let api = StandIn::start(tavily).await;
    let out = call(
        &entries(&api, "tvly-test"),
        "web_fetch",
        json!({"url": "https://93.184.216.34/post"}),
    )
    .await;
    assert_eq!(out.text, format!("# A post\n\n{}", "x".repeat(4096)));
    let seen = api.one();
    assert_eq!(seen.path(), "/extract");
    assert_eq!(
        seen.json(),
        json!({"urls": ["https://93.184.216.34/post"], "timeout": 30})
    );
}

#[tokio::test]
async fn failed_and_empty_extractions_have_deerflows_texts() {
    let api = StandIn::start(tavily).await;
    let e = entries(&api, "tvly-test");
    let allow = |mut e: Vec<antler_protocol::config::ToolConfig>| {
        e[1].extra
            .insert("allow_private_addresses".into(), json!(true));
        e
    };
    let failed = call(
        &allow(e.clone()),
        "web_fetch",
        json!({"url": "https://fail.example/"}),
    )
    .await;
    assert_eq!(failed.text, "Error: Failed to fetch url");
    assert!(failed.error);
    let none = call(
        &allow(e),
        "web_fetch",
        json!({"url": "https://none.example/"}),
    )
    .await;
    assert_eq!(none.text, "Error: No results found");
}

#[tokio::test]
async fn a_bad_key_and_a_missing_key_are_the_clients_exceptions() {
    let api = StandIn::start(tavily).await;
    let bad = failure(&entries(&api, "wrong"), "web_search", json!({"query": "q"})).await;
    assert_eq!(bad.class, "InvalidAPIKeyError");
    assert_eq!(bad.detail, "Unauthorized: missing or invalid API key.");
    std::env::remove_var("TAVILY_API_KEY");
    let mut no_key = entries(&api, "");
    no_key[0].extra.remove("api_key");
    let missing = failure(&no_key, "web_search", json!({"query": "q"})).await;
    assert_eq!(missing.class, "MissingAPIKeyError");
    assert_eq!(missing.detail, "No API key provided. Please provide the api_key attribute or set the TAVILY_API_KEY environment variable.");
}
