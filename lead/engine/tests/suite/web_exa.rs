//! Exa (`deerflow.community.exa.tools:web_search_tool` and `web_fetch_tool`) against a
//! stand-in for api.exa.ai: the camel-cased bodies, the client's headers, outputs, and a
//! status error as `Error: Request failed with status code ...`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::web_support::{call, entry, Reply, Seen, StandIn};
use serde_json::json;

fn exa(seen: &Seen) -> Reply {
    match seen.path() {
        "/search" => Reply::json(
            json!({"results": [{"title": "Exa", "url": "https://exa.ai/", "highlights": ["one", "two"]}]}),
        ),
        "/contents" if seen.body.contains("gone") => {
            Reply::with(404, "application/json", "{\"error\":\"not found\"}".into())
        }
        "/contents" => Reply::json(json!({"results": [{"title": null, "text": "body text"}]})),
        _ => Reply::with(500, "text/plain", "".into()),
    }
}

#[tokio::test]
async fn search_and_fetch_have_deerflows_shapes() {
    let api = StandIn::start(exa).await;
    let entries = [
        entry(
            "web_search",
            "deerflow.community.exa.tools:web_search_tool",
            json!({"api_key": "ek", "max_results": 3, "base_url": api.base()}),
        ),
        entry(
            "web_fetch",
            "deerflow.community.exa.tools:web_fetch_tool",
            json!({"api_key": "ek", "base_url": api.base()}),
        ),
    ];
    let search = call(&entries, "web_search", json!({"query": "q"})).await;
    assert_eq!(search.text, "[\n  {\n    \"title\": \"Exa\",\n    \"url\": \"https://exa.ai/\",\n    \"snippet\": \"one\\ntwo\"\n  }\n]");
    let fetch = call(
        &entries,
        "web_fetch",
        json!({"url": "https://93.184.216.34/a"}),
    )
    .await;
    assert_eq!(fetch.text, "# Untitled\n\nbody text");
    let gone = call(
        &entries,
        "web_fetch",
        json!({"url": "https://93.184.216.34/gone"}),
    )
    .await;
    assert_eq!(
        gone.text,
        "Error: Request failed with status code 404: {\"error\":\"not found\"}"
    );
    let seen = api.seen();
    assert_eq!(
        seen[0].json(),
        json!({"query": "q", "type": "auto", "numResults": 3, "contents": {"highlights": {"maxCharacters": 1000}}})
    );
    assert_eq!(seen[0].header("x-api-key"), Some("ek"));
    assert_eq!(seen[0].header("user-agent"), Some("exa-py/2.12.1"));
    assert_eq!(
        seen[1].json(),
        json!({"urls": ["https://93.184.216.34/a"], "text": {"maxCharacters": 4096}})
    );
}
