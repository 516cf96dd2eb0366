//! Jina reader (`deerflow.community.jina_ai.tools:web_fetch_tool`, DeerFlow's default
//! `web_fetch`) against a stand-in for r.jina.ai: the request's headers and body, the
//! readability step on the HTML it returns, and E.7's error texts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::web_support::{call, entry, Reply, Seen, StandIn};
use serde_json::json;

fn jina(seen: &Seen) -> Reply {
    match seen.json()["url"].as_str().unwrap_or("") {
        u if u.ends_with("/down") => Reply::with(503, "text/plain", "upstream unavailable".into()),
        u if u.ends_with("/blank") => Reply::with(200, "text/html", "   ".into()),
        _ => Reply::html("<html><head><title>Reader page</title></head><body><nav>Menu Login Signup</nav><article><h1>Reader page</h1><p>The reader returned this page as HTML, and the readability step keeps its article: a paragraph long enough to be the content of the page.</p></article></body></html>"),
    }
}

fn entries(api: &StandIn) -> Vec<antler_protocol::config::ToolConfig> {
    vec![entry(
        "web_fetch",
        "deerflow.community.jina_ai.tools:web_fetch_tool",
        json!({"timeout": 10, "base_url": api.base()}),
    )]
}

#[tokio::test]
async fn the_reader_is_asked_for_html_and_its_article_returned_as_markdown() {
    let api = StandIn::start(jina).await;
    let out = call(
        &entries(&api),
        "web_fetch",
        json!({"url": "https://93.184.216.34/page"}),
    )
    .await;
    assert!(out.text.starts_with("# Reader page\n\n"), "{}", out.text);
    assert!(
        out.text.contains("the readability step keeps its article"),
        "{}",
        out.text
    );
    assert!(!out.text.contains("Signup"), "{}", out.text);
    let seen = api.one();
    assert_eq!((seen.method.as_str(), seen.target.as_str()), ("POST", "/"));
    assert_eq!(seen.header("x-return-format"), Some("html"));
    assert_eq!(seen.header("x-timeout"), Some("10"));
    assert_eq!(seen.header("content-type"), Some("application/json"));
    assert_eq!(seen.json(), json!({"url": "https://93.184.216.34/page"}));
}

#[tokio::test]
async fn status_and_empty_replies_have_e7s_texts() {
    let api = StandIn::start(jina).await;
    let down = call(
        &entries(&api),
        "web_fetch",
        json!({"url": "https://93.184.216.34/down"}),
    )
    .await;
    assert_eq!(
        down.text,
        "Error: Jina API returned status 503: upstream unavailable"
    );
    assert!(down.error);
    let blank = call(
        &entries(&api),
        "web_fetch",
        json!({"url": "https://93.184.216.34/blank"}),
    )
    .await;
    assert_eq!(blank.text, "Error: Jina API returned empty response");
}

#[tokio::test]
async fn an_unreachable_reader_is_a_request_failure() {
    let api = StandIn::start(jina).await;
    let port = api.port;
    drop(api);
    let entries = [entry(
        "web_fetch",
        "deerflow.community.jina_ai.tools:web_fetch_tool",
        json!({"base_url": format!("http://127.0.0.1:{port}")}),
    )];
    let out = call(
        &entries,
        "web_fetch",
        json!({"url": "https://93.184.216.34/x"}),
    )
    .await;
    assert!(
        out.text
            .starts_with("Error: Request to Jina API failed: ConnectError: "),
        "{}",
        out.text
    );
}
