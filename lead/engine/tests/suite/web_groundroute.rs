//! GroundRoute (`deerflow.community.groundroute.tools:web_search_tool | web_fetch_tool`)
//! against a stand-in for api.groundroute.ai: the argument's `max_results` winning and
//! clamped, the page mode of fetch, and E.10's texts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::web_support::{call, entry, Reply, Seen, StandIn};
use serde_json::json;

fn groundroute(seen: &Seen) -> Reply {
    if seen.json()["query"] == "down" {
        return Reply::with(503, "text/plain", "".into());
    }
    match seen.json()["mode"].as_str() {
        Some("page") => Reply::json(
            json!({"results": [{"title": "Doc", "content": "", "snippet": "only a snippet"}]}),
        ),
        _ => Reply::json(
            json!({"results": [{"title": "G", "url": "https://g.example/", "snippet": "s", "source_engine": "bing"}]}),
        ),
    }
}

#[tokio::test]
async fn search_fetch_and_errors() {
    let api = StandIn::start(groundroute).await;
    let entries = [
        entry(
            "web_search",
            "deerflow.community.groundroute.tools:web_search_tool",
            json!({"api_key": "gr", "max_results": 3, "base_url": api.base()}),
        ),
        entry(
            "web_fetch",
            "deerflow.community.groundroute.tools:web_fetch_tool",
            json!({"api_key": "gr", "base_url": api.base()}),
        ),
    ];
    let s = call(
        &entries,
        "web_search",
        json!({"query": "q", "max_results": 99}),
    )
    .await;
    assert_eq!(s.text, "[\n  {\n    \"title\": \"G\",\n    \"url\": \"https://g.example/\",\n    \"snippet\": \"s\",\n    \"source_engine\": \"bing\"\n  }\n]");
    let f = call(
        &entries,
        "web_fetch",
        json!({"url": "https://93.184.216.34/doc"}),
    )
    .await;
    assert_eq!(f.text, "# Doc\n\nonly a snippet");
    let down = call(&entries, "web_search", json!({"query": "down"})).await;
    assert_eq!(
        down.text,
        r#"{"error": "GroundRoute API error: HTTP 503", "query": "down"}"#
    );
    let seen = api.seen();
    assert_eq!(seen[0].json(), json!({"query": "q", "max_results": 50}));
    assert_eq!(seen[0].header("authorization"), Some("Bearer gr"));
    assert_eq!(
        seen[1].json(),
        json!({"query": "https://93.184.216.34/doc", "mode": "page", "max_results": 1})
    );
}
