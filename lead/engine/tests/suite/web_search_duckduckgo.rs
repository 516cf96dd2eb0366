//! DuckDuckGo (`deerflow.community.ddg_search.tools:web_search_tool` and
//! `image_search.tools:image_search_tool`) against a stand-in for DuckDuckGo's HTML
//! results page and image API: the form sent, the results read (ads skipped, redirect
//! links unwrapped, `max_results` from config winning), DeerFlow's output and empty texts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::web_support::{call, entry, Reply, Seen, StandIn};
use serde_json::json;

const RESULTS_PAGE: &str = r#"<html><body><div class="results">
<div class="result results_links result--ad"><a class="result__a" href="https://ads.example/">Sponsored thing</a><a class="result__snippet">Buy it</a></div>
<div class="result results_links"><h2><a class="result__a" href="//duckduckgo.com/l/?uddg=https%3A%2F%2Fwww.rust-lang.org%2F&amp;rut=abc">Rust Programming Language</a></h2><a class="result__snippet">A language empowering everyone to build reliable software.</a></div>
<div class="result results_links"><h2><a class="result__a" href="https://actix.rs/">Actix</a></h2><a class="result__snippet">Actor framework for Rust.</a></div>
<div class="result results_links"><h2><a class="result__a" href="https://tokio.rs/">Tokio</a></h2><a class="result__snippet">An asynchronous runtime.</a></div>
</div></body></html>"#;

fn ddg(seen: &Seen) -> Reply {
    match (seen.method.as_str(), seen.path()) {
        ("POST", "/html/") if seen.body.contains("q=nothing") => {
            Reply::html("<html><body><div class=\"no-results\"></div></body></html>")
        }
        ("POST", "/html/") => Reply::html(RESULTS_PAGE),
        ("GET", "/") => Reply::html("<script>vqd=\"4-31415\";</script>"),
        ("GET", "/i.js") => Reply::json(json!({"results": [
            {"title": "Red panda", "image": "https://img.example/panda.jpg", "thumbnail": "https://tse.example/panda.jpg", "url": "https://zoo.example/", "height": 600, "width": 800, "source": "Bing"},
            {"title": "Red panda 2", "image": "https://img.example/panda2.jpg", "thumbnail": "https://tse.example/panda2.jpg", "url": "https://zoo.example/2", "height": 600, "width": 800, "source": "Bing"}
        ]})),
        _ => Reply::with(404, "text/plain", "no".into()),
    }
}

#[tokio::test]
async fn web_search_posts_the_form_and_returns_deerflows_json() {
    let api = StandIn::start(ddg).await;
    let entries = [entry(
        "web_search",
        "deerflow.community.ddg_search.tools:web_search_tool",
        json!({"max_results": 2, "base_url": api.base()}),
    )];
    let out = call(
        &entries,
        "web_search",
        json!({"query": "rust actors", "max_results": 9}),
    )
    .await;
    let expected = r#"{
  "query": "rust actors",
  "total_results": 2,
  "results": [
    {
      "title": "Rust Programming Language",
      "url": "https://www.rust-lang.org/",
      "content": "A language empowering everyone to build reliable software."
    },
    {
      "title": "Actix",
      "url": "https://actix.rs/",
      "content": "Actor framework for Rust."
    }
  ]
}"#;
    assert_eq!(out.text, expected);
    assert!(!out.error);
    let seen = api.one();
    assert_eq!(seen.method, "POST");
    assert_eq!(seen.path(), "/html/");
    assert_eq!(
        seen.header("content-type"),
        Some("application/x-www-form-urlencoded")
    );
    assert_eq!(seen.body, "q=rust+actors&b=&kl=wt-wt&kp=-1");
}

#[tokio::test]
async fn no_results_is_deerflows_error_object() {
    let api = StandIn::start(ddg).await;
    let entries = [entry(
        "web_search",
        "deerflow.community.ddg_search.tools:web_search_tool",
        json!({"base_url": api.base()}),
    )];
    let out = call(&entries, "web_search", json!({"query": "nothing"})).await;
    assert_eq!(
        out.text,
        r#"{"error": "No results found", "query": "nothing"}"#
    );
    assert!(out.error);
}

#[tokio::test]
async fn image_search_gets_the_token_then_the_images() {
    let api = StandIn::start(ddg).await;
    let entries = [entry(
        "image_search",
        "deerflow.community.image_search.tools:image_search_tool",
        json!({"max_results": 1, "base_url": api.base()}),
    )];
    let out = call(
        &entries,
        "image_search",
        json!({"query": "red panda", "size": "Large"}),
    )
    .await;
    let expected = r#"{
  "query": "red panda",
  "total_results": 1,
  "results": [
    {
      "title": "Red panda",
      "image_url": "https://img.example/panda.jpg",
      "thumbnail_url": "https://tse.example/panda.jpg"
    }
  ],
  "usage_hint": "Use the 'image_url' values as reference images in image generation. Download them first if needed."
}"#;
    assert_eq!(out.text, expected);
    let seen = api.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[0].query(),
        vec![("q".to_owned(), "red panda".to_owned())]
    );
    let images = seen[1].query();
    assert!(
        images.contains(&("vqd".into(), "4-31415".into())),
        "{images:?}"
    );
    assert!(
        images.contains(&(
            "f".into(),
            "size:Large,color:,type:,layout:,license:".into()
        )),
        "{images:?}"
    );
}

#[tokio::test]
async fn an_unreachable_backend_is_no_images() {
    let api = StandIn::start(|_| Reply::with(500, "text/plain", "down".into())).await;
    let entries = [entry(
        "image_search",
        "deerflow.community.image_search.tools:image_search_tool",
        json!({"base_url": api.base()}),
    )];
    let out = call(&entries, "image_search", json!({"query": "x"})).await;
    assert_eq!(out.text, r#"{"error": "No images found", "query": "x"}"#);
}
