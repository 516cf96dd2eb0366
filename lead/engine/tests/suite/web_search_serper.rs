//! Serper (`deerflow.community.serper.tools:web_search_tool` and `image_search_tool`)
//! against a stand-in for google.serper.dev: headers, body (`num` capped at 10), outputs,
//! and E.4's error texts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::web_support::{call, entry, Reply, Seen, StandIn};
use serde_json::json;

fn serper(seen: &Seen) -> Reply {
    match seen.path() {
        "/search" if seen.json()["q"] == "bad" => Reply::json(json!({"organic": "nope"})),
        "/search" => Reply::json(
            json!({"organic": [{"title": "Tokio", "link": "https://tokio.rs/", "snippet": "Runtime."}, "junk"]}),
        ),
        "/images" => Reply::json(
            json!({"images": [{"title": "T", "imageUrl": "https://img.example/a.png", "thumbnailUrl": "http://192.168.0.1/t.png"}]}),
        ),
        _ => Reply::with(500, "text/plain", "".into()),
    }
}

fn entries(api: &StandIn, name: &str, use_: &str) -> Vec<antler_protocol::config::ToolConfig> {
    vec![entry(
        name,
        use_,
        json!({"api_key": "sk", "max_results": 30, "base_url": api.base()}),
    )]
}

#[tokio::test]
async fn web_search_posts_q_and_num() {
    let api = StandIn::start(serper).await;
    let out = call(
        &entries(
            &api,
            "web_search",
            "deerflow.community.serper.tools:web_search_tool",
        ),
        "web_search",
        json!({"query": "tokio"}),
    )
    .await;
    assert_eq!(out.text, "{\n  \"query\": \"tokio\",\n  \"total_results\": 1,\n  \"results\": [\n    {\n      \"title\": \"Tokio\",\n      \"url\": \"https://tokio.rs/\",\n      \"content\": \"Runtime.\"\n    }\n  ]\n}");
    let seen = api.one();
    assert_eq!((seen.method.as_str(), seen.path()), ("POST", "/search"));
    assert_eq!(seen.header("x-api-key"), Some("sk"));
    assert_eq!(seen.json(), json!({"q": "tokio", "num": 10}));
}

#[tokio::test]
async fn a_bad_shape_and_a_filtered_thumbnail() {
    let api = StandIn::start(serper).await;
    let bad = call(
        &entries(
            &api,
            "web_search",
            "deerflow.community.serper.tools:web_search_tool",
        ),
        "web_search",
        json!({"query": "bad"}),
    )
    .await;
    assert_eq!(
        bad.text,
        r#"{"error": "Serper returned an unexpected response format", "query": "bad"}"#
    );
    let images = call(
        &entries(
            &api,
            "image_search",
            "deerflow.community.serper.tools:image_search_tool",
        ),
        "image_search",
        json!({"query": "x"}),
    )
    .await;
    let v: serde_json::Value = serde_json::from_str(&images.text).unwrap();
    assert_eq!(
        v["results"][0],
        json!({"title": "T", "image_url": "https://img.example/a.png", "thumbnail_url": ""})
    );
}
