//! Remote crawlers (Crawl4AI, Firecrawl, Jina, Browserless) are handed only what Antler's
//! own guard lets through: Antler follows a page's redirects itself, every hop guarded, and
//! hands over where they end, so a public page that redirects to a private address is
//! refused before the crawler is asked; and the final URL a crawler reports is checked
//! again, so a redirect the crawler followed on its own never reaches the model. The
//! "public" page is a stand-in on loopback let through by `allowed_private_hosts`; the
//! internal site is another one that is not, and must never be reached.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::web_support::{call, entry, Reply, Seen, StandIn};
use serde_json::json;

const PRIVATE: &str = "Error: Refusing to fetch a private, loopback, or metadata address";

#[tokio::test]
async fn a_redirect_to_a_private_address_is_never_handed_to_a_crawler() {
    let internal = StandIn::start(|_| Reply::html("<p>internal admin</p>")).await;
    let internal_url = format!("http://127.0.0.1:{}/admin", internal.port);
    let to_internal = internal_url.clone();
    let public = StandIn::start(move |seen: &Seen| match seen.path() {
        "/moved" => Reply::redirect(&to_internal),
        "/hop" => Reply::redirect("/final"),
        _ => Reply::html("<p>public</p>"),
    })
    .await;
    let crawl4ai =
        StandIn::start(|_| Reply::json(json!({"success": true, "markdown": "crawled text"}))).await;
    let reported = internal_url.clone();
    let firecrawl = StandIn::start(move |_| {
        // The crawler says it followed the page to the internal address.
        Reply::json(json!({"success": true, "data": {"markdown": "internal admin", "metadata": {"title": "Admin", "url": reported}}}))
    })
    .await;
    let allowed = format!("127.0.0.1:{}", public.port);
    let crawl4ai_entries = [entry(
        "web_fetch",
        "deerflow.community.crawl4ai.tools:web_fetch_tool",
        json!({"base_url": crawl4ai.base(), "allowed_private_hosts": [allowed]}),
    )];
    let fetch = |url: String| {
        let entries = crawl4ai_entries.clone();
        async move {
            call(&entries, "web_fetch", json!({ "url": url }))
                .await
                .text
        }
    };

    // The public page moved to the internal site: refused, the crawler never asked.
    assert_eq!(fetch(format!("{}/moved", public.base())).await, PRIVATE);
    assert!(
        crawl4ai.seen().is_empty(),
        "the crawler was handed a redirect to a private address"
    );
    // A redirect that stays public: the crawler gets where it ends.
    assert_eq!(
        fetch(format!("{}/hop", public.base())).await,
        "crawled text"
    );
    assert_eq!(
        crawl4ai.one().json()["url"],
        format!("{}/final", public.base())
    );

    // A crawler that reports having ended at the internal address: its content is dropped.
    let firecrawl_entries = [entry(
        "web_fetch",
        "deerflow.community.firecrawl.tools:web_fetch_tool",
        json!({"api_key": "fc", "base_url": firecrawl.base(), "allowed_private_hosts": [allowed]}),
    )];
    let out = call(
        &firecrawl_entries,
        "web_fetch",
        json!({"url": format!("{}/plain", public.base())}),
    )
    .await;
    assert_eq!(out.text, PRIVATE);
    assert!(!out.text.contains("internal admin"));
    assert!(
        internal.seen().is_empty(),
        "Antler reached the internal site"
    );
}
