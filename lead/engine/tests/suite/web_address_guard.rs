//! The address guard of the fetching web tools: private, loopback, link-local (metadata),
//! CGNAT and unspecified addresses, names that resolve to them, non-http(s) schemes and
//! redirects to any of them are refused with the text the model reads, before any
//! connection is made; `allow_private_addresses` and `allowed_private_hosts` are the only
//! ways through. No traffic leaves loopback: refused addresses are never connected to.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::web_support;

use crate::web_support::{call, entry, Reply, StandIn};
use serde_json::json;

const PRIVATE: &str = "Error: Refusing to fetch a private, loopback, or metadata address";
const PRIVATE_NAME: &str = "Error: Refusing to fetch a private or loopback address";
const SCHEME: &str = "Error: Only http:// and https:// URLs are supported";

async fn own_fetch(extra: serde_json::Value, url: &str) -> web_support::Outcome {
    let entries = [entry("web_fetch", "antler.web:web_fetch", extra)];
    call(&entries, "web_fetch", json!({ "url": url })).await
}

/// A name other than `localhost` that /etc/hosts maps to a loopback address.
fn loopback_name() -> String {
    let hosts = std::fs::read_to_string("/etc/hosts").expect("/etc/hosts");
    hosts
        .lines()
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            let ip = parts.next()?;
            ip.starts_with("127.").then(|| parts.collect::<Vec<_>>())
        })
        .flatten()
        .find(|n| !n.starts_with('#') && !n.contains("localhost"))
        .expect("/etc/hosts maps a name other than localhost to 127.x (this machine's has `vm`)")
        .to_owned()
}

#[tokio::test]
async fn private_literals_and_names_are_refused_before_connecting() {
    // A site on loopback that must never be reached.
    let site = StandIn::start(|_| Reply::html("<p>secret</p>")).await;
    let port = site.port;
    for url in [
        format!("http://127.0.0.1:{port}/"),
        "http://10.0.0.1/".to_owned(),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        "http://100.64.0.1/".to_owned(),
        "http://192.168.1.1/".to_owned(),
        "http://0.0.0.0/".to_owned(),
        format!("http://[::1]:{port}/"),
        "http://[::ffff:127.0.0.1]/".to_owned(),
        "http://[fd00:ec2::254]/".to_owned(),
        format!("http://2130706433:{port}/"),
        format!("http://{}:{port}/", loopback_name()),
    ] {
        let out = own_fetch(json!({}), &url).await;
        assert_eq!(out.text, PRIVATE, "{url}");
        assert!(out.error);
    }
    for url in [
        format!("http://localhost:{port}/"),
        "http://metadata.google.internal/computeMetadata/v1/".to_owned(),
        format!("http://app.localhost:{port}/"),
    ] {
        assert_eq!(own_fetch(json!({}), &url).await.text, PRIVATE_NAME, "{url}");
    }
    assert!(site.seen().is_empty(), "a refused address was connected to");
}

#[tokio::test]
async fn other_schemes_are_refused_even_when_private_addresses_are_allowed() {
    for url in [
        "file:///etc/passwd",
        "ftp://example.com/x",
        "gopher://127.0.0.1:70/",
        "example.com",
    ] {
        assert_eq!(
            own_fetch(json!({"allow_private_addresses": true}), url)
                .await
                .text,
            SCHEME,
            "{url}"
        );
    }
}

#[tokio::test]
async fn a_redirect_to_a_private_address_is_refused_at_that_hop() {
    // The inner site is private and not allowed: it must never see a request.
    let inner = StandIn::start(|_| Reply::html("<p>internal admin</p>")).await;
    let inner_url = format!("http://127.0.0.1:{}/admin", inner.port);
    let outer = StandIn::start(move |seen: &web_support::Seen| match seen.path() {
        "/to-loopback" => Reply::redirect(&inner_url),
        "/to-metadata" => Reply::redirect("http://169.254.169.254/latest/meta-data/iam/"),
        "/to-file" => Reply::redirect("file:///etc/passwd"),
        _ => Reply::redirect("/loop"),
    })
    .await;
    let allowed = json!({"allowed_private_hosts": [format!("127.0.0.1:{}", outer.port)]});
    let url = |p: &str| format!("{}{p}", outer.base());
    assert_eq!(
        own_fetch(allowed.clone(), &url("/to-loopback")).await.text,
        PRIVATE
    );
    assert_eq!(
        own_fetch(allowed.clone(), &url("/to-metadata")).await.text,
        PRIVATE
    );
    assert_eq!(
        own_fetch(allowed.clone(), &url("/to-file")).await.text,
        SCHEME
    );
    assert_eq!(
        own_fetch(allowed, &url("/loop")).await.text,
        "Error: Too many redirects (more than 5)"
    );
    assert!(
        inner.seen().is_empty(),
        "the redirect reached the private site"
    );
}

#[tokio::test]
async fn allow_private_addresses_lets_a_loopback_site_through() {
    let site = StandIn::start(|_| Reply::html("<html><head><title>Local</title></head><body><article><p>A page served on loopback for this test, long enough to count as the article of the page that readability keeps.</p></article></body></html>")).await;
    let out = own_fetch(
        json!({"allow_private_addresses": true}),
        &format!("{}/", site.base()),
    )
    .await;
    assert!(out.text.starts_with("# Local"), "{}", out.text);
}

#[tokio::test]
async fn a_remote_reader_is_not_asked_to_read_a_private_address() {
    let reader = StandIn::start(|_| Reply::html("<p>read</p>")).await;
    let entries = [entry(
        "web_fetch",
        "deerflow.community.jina_ai.tools:web_fetch_tool",
        json!({"base_url": reader.base()}),
    )];
    let out = call(
        &entries,
        "web_fetch",
        json!({"url": "http://169.254.169.254/latest/meta-data/"}),
    )
    .await;
    assert_eq!(out.text, PRIVATE);
    assert!(reader.seen().is_empty());
}
