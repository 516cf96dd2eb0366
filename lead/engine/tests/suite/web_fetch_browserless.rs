//! Browserless (`deerflow.community.browserless.tools:web_fetch_tool`) against a stand-in
//! for a Browserless server: `POST /content` with the token in the body, the readability
//! step on its HTML, and the warning suffix for a target page's error status.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::web_support::{call, entry, Reply, Seen, StandIn};
use serde_json::json;

fn browserless(seen: &Seen) -> Reply {
    let mut reply = Reply::html("<html><head><title>Rendered</title></head><body><article><p>The page as the browser rendered it, with enough words to be kept as the article of the page.</p></article></body></html>");
    if seen.body.contains("missing") {
        reply.headers.push(("X-Response-Code".into(), "404".into()));
        reply
            .headers
            .push(("X-Response-Status".into(), "Not Found".into()));
    }
    reply
}

#[tokio::test]
async fn content_is_rendered_then_read_and_an_error_status_is_noted() {
    let api = StandIn::start(browserless).await;
    let entries = [entry(
        "web_fetch",
        "deerflow.community.browserless.tools:web_fetch_tool",
        json!({"base_url": api.base(), "token": "bt", "wait_for_timeout": 500}),
    )];
    let ok = call(
        &entries,
        "web_fetch",
        json!({"url": "https://93.184.216.34/page"}),
    )
    .await;
    assert!(
        ok.text
            .starts_with("# Rendered\n\nThe page as the browser rendered it"),
        "{}",
        ok.text
    );
    let missing = call(
        &entries,
        "web_fetch",
        json!({"url": "https://93.184.216.34/missing"}),
    )
    .await;
    assert!(
        missing
            .text
            .ends_with(" (warning: target page responded 404 Not Found)"),
        "{}",
        missing.text
    );
    let seen = &api.seen()[0];
    assert_eq!(seen.path(), "/content");
    assert_eq!(seen.header("cache-control"), Some("no-cache"));
    assert_eq!(
        seen.json(),
        json!({"url": "https://93.184.216.34/page", "token": "bt", "waitForTimeout": 500})
    );
}
