//! InfoQuest (`deerflow.community.infoquest.tools:web_search_tool | web_fetch_tool`)
//! against stand-ins for its search and reader hosts: the cleaned result list (pages and
//! news, deduplicated by URL), the reader's HTML through readability, and E.9's texts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod web_support;

use serde_json::json;
use web_support::{call, entry, Reply, Seen, StandIn};

fn search(seen: &Seen) -> Reply {
    if seen.json()["query"] == "wrong" {
        return Reply::json(json!({"content": "x"}));
    }
    Reply::json(
        json!({"search_result": {"results": [{"content": {"results": {
            "organic": [{"title": "P", "desc": "d", "url": "https://p.example/"}, {"title": "dup", "url": "https://p.example/"}],
            "top_stories": {"items": [{"title": "N", "source": "S", "url": "https://n.example/"}, {"url": "https://untitled.example/"}]}
        }}}]}}),
    )
}

fn reader(_seen: &Seen) -> Reply {
    Reply::json(
        json!({"reader_result": "<html><head><title>Read</title></head><body><article><p>What the reader fetched, long enough to be the article that readability keeps here.</p></article></body></html>"}),
    )
}

#[tokio::test]
async fn search_cleans_the_reply_and_fetch_reads_the_html() {
    let api = StandIn::start(search).await;
    let read = StandIn::start(reader).await;
    let entries = [
        entry(
            "web_search",
            "deerflow.community.infoquest.tools:web_search_tool",
            json!({"base_url": api.base(), "search_time_range": 7}),
        ),
        entry(
            "web_fetch",
            "deerflow.community.infoquest.tools:web_fetch_tool",
            json!({"reader_url": read.base(), "fetch_time": 5}),
        ),
    ];
    let s = call(&entries, "web_search", json!({"query": "q"})).await;
    let v: serde_json::Value = serde_json::from_str(&s.text).unwrap();
    assert_eq!(
        v,
        json!([
            {"type": "page", "title": "P", "desc": "d", "snippet": "d", "url": "https://p.example/"},
            {"type": "news", "source": "S", "title": "N", "url": "https://n.example/"}
        ])
    );
    assert_eq!(
        api.one().json(),
        json!({"format": "JSON", "query": "q", "time_range": 7})
    );
    let wrong = call(&entries, "web_search", json!({"query": "wrong"})).await;
    assert_eq!(wrong.text, "Error: web search API return wrong format");
    let f = call(
        &entries,
        "web_fetch",
        json!({"url": "https://93.184.216.34/r"}),
    )
    .await;
    assert!(
        f.text.starts_with("# Read\n\nWhat the reader fetched"),
        "{}",
        f.text
    );
    assert_eq!(
        read.one().json(),
        json!({"url": "https://93.184.216.34/r", "format": "HTML", "fetch_time": 5})
    );
}
