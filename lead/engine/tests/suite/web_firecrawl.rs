//! Firecrawl and fastCRW (`firecrawl.tools:*`, `fastcrw.tools:*`) against a stand-in for
//! the v2 API: `origin` in every body, fastCRW's base path dropped, a 502 retried, and
//! E.6's texts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::web_support::{call, entry, Reply, Seen, StandIn};
use serde_json::json;

#[tokio::test]
async fn firecrawl_search_and_scrape() {
    let api = StandIn::start(|seen: &Seen| match seen.path() {
        "/v2/search" => Reply::json(json!({"success": true, "data": {"web": [{"title": "F", "url": "https://f.example/", "description": "d"}]}})),
        "/v2/scrape" if seen.body.contains("empty") => Reply::json(json!({"success": true, "data": {"markdown": ""}})),
        "/v2/scrape" => Reply::json(json!({"success": true, "data": {"markdown": "Hello **world**", "metadata": {"title": "Page"}}})),
        _ => Reply::with(404, "application/json", "{}".into()),
    })
    .await;
    let entries = [
        entry(
            "web_search",
            "deerflow.community.firecrawl.tools:web_search_tool",
            json!({"api_key": "fc", "max_results": 2, "base_url": api.base()}),
        ),
        entry(
            "web_fetch",
            "deerflow.community.firecrawl.tools:web_fetch_tool",
            json!({"api_key": "fc", "base_url": api.base()}),
        ),
    ];
    let s = call(&entries, "web_search", json!({"query": "q"})).await;
    assert_eq!(s.text, "[\n  {\n    \"title\": \"F\",\n    \"url\": \"https://f.example/\",\n    \"snippet\": \"d\"\n  }\n]");
    assert_eq!(
        call(
            &entries,
            "web_fetch",
            json!({"url": "https://93.184.216.34/"})
        )
        .await
        .text,
        "# Page\n\nHello **world**"
    );
    assert_eq!(
        call(
            &entries,
            "web_fetch",
            json!({"url": "https://93.184.216.34/empty"})
        )
        .await
        .text,
        "Error: No content found"
    );
    let seen = api.seen();
    assert_eq!(
        seen[0].json(),
        json!({"query": "q", "limit": 2, "origin": "python-sdk@4.23.0"})
    );
    assert_eq!(seen[0].header("authorization"), Some("Bearer fc"));
    assert_eq!(
        seen[1].json(),
        json!({"url": "https://93.184.216.34/", "formats": ["markdown"], "origin": "python-sdk@4.23.0"})
    );
}

#[tokio::test]
async fn fastcrw_drops_the_base_path_and_retries_a_502() {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&hits);
    let api = StandIn::start(move |_seen: &Seen| {
        if counter.fetch_add(1, Ordering::SeqCst) == 0 {
            Reply::with(502, "text/plain", "bad gateway".into())
        } else {
            Reply::json(json!({"success": true, "data": {"web": []}}))
        }
    })
    .await;
    let entries = [entry(
        "web_search",
        "deerflow.community.fastcrw.tools:web_search_tool",
        json!({"base_url": format!("{}/api", api.base())}),
    )];
    assert_eq!(
        call(&entries, "web_search", json!({"query": "q"}))
            .await
            .text,
        "[]"
    );
    let seen = api.seen();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|s| s.path() == "/v2/search"));
    assert_eq!(seen[1].header("authorization"), None);
}

#[tokio::test]
async fn an_unauthorised_reply_is_the_sdks_error_text() {
    let api = StandIn::start(|_| {
        Reply::with(
            401,
            "application/json",
            json!({"success": false, "error": "Invalid token"}).to_string(),
        )
    })
    .await;
    let entries = [entry(
        "web_search",
        "deerflow.community.firecrawl.tools:web_search_tool",
        json!({"api_key": "x", "base_url": api.base()}),
    )];
    assert_eq!(
        call(&entries, "web_search", json!({"query": "q"})).await.text,
        "Error: Unauthorized: Failed to search. Invalid token - No additional error details provided."
    );
}
