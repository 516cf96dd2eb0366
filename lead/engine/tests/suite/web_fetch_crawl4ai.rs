//! Crawl4AI (`deerflow.community.crawl4ai.tools:web_fetch_tool`) against a stand-in for a
//! Crawl4AI server: `POST /md` with the filter and token, the Markdown cut without a title,
//! E.11's error texts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::web_support::{call, entry, Reply, Seen, StandIn};
use serde_json::json;

fn crawl4ai(seen: &Seen) -> Reply {
    let url = seen.json()["url"].as_str().unwrap_or("").to_owned();
    match url.rsplit('/').next().unwrap_or("") {
        "fail" => Reply::json(json!({"success": false})),
        "empty" => Reply::json(json!({"success": true, "markdown": "  "})),
        "html" => Reply::with(200, "text/html", "<html>oops</html>".into()),
        "500" => Reply::with(500, "text/plain", "crash".into()),
        _ => Reply::json(json!({"success": true, "markdown": "y".repeat(5000)})),
    }
}

#[tokio::test]
async fn the_markdown_and_every_error_text() {
    let api = StandIn::start(crawl4ai).await;
    let entries = [entry(
        "web_fetch",
        "deerflow.community.crawl4ai.tools:web_fetch_tool",
        json!({"base_url": api.base(), "token": "c4", "filter": "nonsense"}),
    )];
    let fetch = |p: &'static str| {
        let entries = entries.clone();
        async move {
            call(
                &entries,
                "web_fetch",
                json!({"url": format!("https://93.184.216.34/{p}")}),
            )
            .await
            .text
        }
    };
    assert_eq!(fetch("ok").await, "y".repeat(4096));
    assert_eq!(
        fetch("fail").await,
        "Error: Crawl4AI reported failure for https://93.184.216.34/fail"
    );
    assert_eq!(
        fetch("empty").await,
        "Error: Crawl4AI returned empty markdown"
    );
    assert_eq!(fetch("html").await, "Error: Crawl4AI returned a non-JSON 200 response (content-type: text/html): <html>oops</html>");
    assert_eq!(fetch("500").await, "Error: Crawl4AI HTTP 500: crash");
    let first = &api.seen()[0];
    assert_eq!(first.path(), "/md");
    assert_eq!(
        first.json(),
        json!({"url": "https://93.184.216.34/ok", "f": "fit"})
    );
    assert_eq!(first.header("authorization"), Some("Bearer c4"));
}
