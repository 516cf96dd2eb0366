//! Antler's own `web_fetch` (`use: antler.web:web_fetch`) fetching a real page from a
//! local site stand-in: the article only, as Markdown under its title, cut at 4,096
//! characters; E.0's texts for a page without content. The stand-in is on loopback, so
//! the entry names it in `allowed_private_hosts`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::web_support;

use crate::web_support::{call, entry, Reply, StandIn};
use serde_json::json;

fn article_page(paragraphs: usize) -> String {
    let body: String = (0..paragraphs)
        .map(|i| format!("<p>Paragraph {i}: actors own their state and talk only through messages, so a mailbox is the one place where ordering is decided and no lock is ever held across an await point.</p>\n"))
        .collect();
    format!(
        r#"<!doctype html><html><head><title>Actors in Rust - The Site</title></head><body>
<nav class="site-nav"><a href="/">Home</a> <a href="/about">About us</a> <a href="/shop">Shop now</a></nav>
<div class="ad banner sponsored">BUY CHEAP WIDGETS TODAY - sponsored advertisement</div>
<main><article>
<h1>Actors in Rust</h1>
<p>An <strong>actor</strong> is a unit of state with a mailbox. This article explains how the actix crate runs them on a single thread and why that keeps the state consistent.</p>
<h2>Mailboxes</h2>
{body}
<ul><li>first point about supervision</li><li>second point about restarts</li></ul>
</article></main>
<aside class="sidebar ad"><p>Advertisement: subscribe to our newsletter for deals</p></aside>
<footer class="footer">Copyright The Site. Privacy policy. Cookie settings.</footer>
</body></html>"#
    )
}

async fn fetch(site: &StandIn, path: &str) -> web_support::Outcome {
    let entries = [entry(
        "web_fetch",
        "antler.web:web_fetch",
        json!({"allowed_private_hosts": [format!("127.0.0.1:{}", site.port)]}),
    )];
    call(
        &entries,
        "web_fetch",
        json!({"url": format!("{}{path}", site.base())}),
    )
    .await
}

#[tokio::test]
async fn the_article_becomes_markdown_without_nav_ads_or_footer() {
    let site = StandIn::start(|_| Reply::html(&article_page(3))).await;
    let out = fetch(&site, "/posts/actors").await;
    assert!(!out.error, "{}", out.text);
    assert!(out.text.starts_with("# Actors in Rust"), "{}", out.text);
    assert!(
        out.text
            .contains("An **actor** is a unit of state with a mailbox."),
        "{}",
        out.text
    );
    assert!(out.text.contains("Mailboxes"), "{}", out.text);
    assert!(
        out.text.contains("Paragraph 2: actors own their state"),
        "{}",
        out.text
    );
    assert!(
        out.text.contains("first point about supervision"),
        "{}",
        out.text
    );
    for chrome in [
        "About us",
        "Shop now",
        "BUY CHEAP WIDGETS",
        "newsletter",
        "Cookie settings",
    ] {
        assert!(
            !out.text.contains(chrome),
            "{chrome:?} leaked into {}",
            out.text
        );
    }
    let seen = site.one();
    assert_eq!(seen.method, "GET");
    assert_eq!(seen.target, "/posts/actors");
    assert!(seen.header("user-agent").unwrap().contains("Antler"));
}

#[tokio::test]
async fn a_long_article_is_cut_at_4096_characters() {
    let site = StandIn::start(|_| Reply::html(&article_page(80))).await;
    let out = fetch(&site, "/long").await;
    assert_eq!(out.text.chars().count(), 4096, "{}", out.text);
    assert!(out.text.starts_with("# Actors in Rust"));
}

#[tokio::test]
async fn a_page_without_content_gets_the_placeholder_texts() {
    let site = StandIn::start(|seen: &web_support::Seen| match seen.path() {
        "/blank" => Reply::html(""),
        _ => Reply::html("<html><head></head><body><div></div></body></html>"),
    })
    .await;
    let empty = "# Untitled\n\nNo content could be extracted from this page";
    assert_eq!(fetch(&site, "/empty").await.text, empty);
    assert_eq!(fetch(&site, "/blank").await.text, empty);
}

#[tokio::test]
async fn an_http_error_and_a_binary_body_are_error_results() {
    let site = StandIn::start(|seen: &web_support::Seen| match seen.path() {
        "/missing" => Reply::with(404, "text/html", "<h1>Not Found</h1>".into()),
        _ => Reply::with(200, "image/png", "\u{89}PNG".into()),
    })
    .await;
    let missing = fetch(&site, "/missing").await;
    assert_eq!(missing.text, "Error: The page responded HTTP 404");
    assert!(missing.error);
    let png = fetch(&site, "/logo.png").await;
    assert_eq!(
        png.text,
        "Error: The page is not text (content-type: image/png)"
    );
}

#[tokio::test]
async fn a_redirect_within_the_allowed_site_is_followed() {
    let site = StandIn::start(|seen: &web_support::Seen| match seen.path() {
        "/old" => Reply::redirect("/posts/actors"),
        _ => Reply::html(&article_page(1)),
    })
    .await;
    let out = fetch(&site, "/old").await;
    assert!(out.text.starts_with("# Actors in Rust"), "{}", out.text);
    assert_eq!(site.seen().len(), 2);
}
