//! Credentials stay with their origin (issue 10, item 7): a legacy SSE server whose
//! `endpoint` event names another origin is refused (the server is reported failed, and
//! the other origin receives nothing, the configured `Authorization` least of all); a
//! streamable HTTP server or an OAuth token endpoint that redirects to another origin
//! sends nothing there. The hostile servers and the other origin are stand-ins.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::mcp_support::{standin::StandIn, McpCluster};
use antler_tests::wait_for;
use serde_json::{json, Value};

const TOKEN: &str = "Bearer configured-secret-token";
const API_KEY: &str = "configured-api-key";

/// Waits until `name` is `failed` with an error mentioning `why`; the status entry.
fn failed_with(c: &McpCluster, name: &str, why: &str) -> Value {
    let failed = wait_for(Duration::from_secs(30), || {
        let s = c.server(name);
        (s["state"] == "failed" && s["last_error"].as_str().is_some_and(|e| e.contains(why)))
            .then_some(s)
    });
    failed.unwrap_or_else(|| panic!("{name} did not fail with {why:?}: {}", c.server(name)))
}

/// Gives the host time to try (and retry), then checks that `other` received nothing.
fn assert_nothing_sent(other: &StandIn) {
    std::thread::sleep(Duration::from_secs(2));
    let got = other.received();
    assert!(
        got.is_empty(),
        "the other origin received {} request(s): {got:?}",
        got.len()
    );
}

#[test]
fn an_sse_endpoint_on_another_origin_is_refused_and_gets_nothing() {
    let other = StandIn::recorder();
    let sse = StandIn::sse_announcing(other.url("/steal"));
    let c = McpCluster::start(json!({
        "legacy": {"type": "sse", "url": sse.url("/sse"), "headers": {"Authorization": TOKEN}},
    }));
    assert_nothing_sent(&other);
    let status = failed_with(&c, "legacy", "refusing the SSE endpoint");
    let error = status["last_error"].as_str().unwrap_or("");
    assert!(
        error.contains(&format!("http://127.0.0.1:{}", other.port))
            && error.contains(&format!("http://127.0.0.1:{}", sse.port)),
        "{error}"
    );
    assert!(!error.contains("configured-secret-token"), "{error}");
    // The SSE URL itself, the configured origin, got the header.
    assert!(
        sse.received().iter().any(|r| r.mentions(TOKEN)),
        "{:?}",
        sse.received()
    );
}

#[test]
fn redirects_to_another_origin_carry_no_credentials_on_http_and_oauth() {
    let other = StandIn::recorder();
    let web = StandIn::redirecting_to(other.url("/mcp"));
    let token_endpoint = StandIn::redirecting_to(other.url("/token"));
    let resource = StandIn::recorder();
    let c = McpCluster::start(json!({
        "web": {
            "type": "http",
            "url": web.url("/mcp"),
            "headers": {"Authorization": TOKEN, "X-Api-Key": API_KEY},
        },
        "oauthed": {
            "type": "http",
            "url": resource.url("/mcp"),
            "oauth": {
                "enabled": true,
                "token_url": token_endpoint.url("/token"),
                "client_id": "antler-client",
                "client_secret": "client-secret-value",
            },
        },
    }));
    assert_nothing_sent(&other);
    failed_with(&c, "web", "another origin");
    failed_with(&c, "oauthed", "refused a redirect to another origin");
    assert!(
        web.received().iter().any(|r| r.mentions(API_KEY)),
        "{:?}",
        web.received()
    );
    assert!(
        token_endpoint
            .received()
            .iter()
            .any(|r| r.mentions("client-secret-value")),
        "{:?}",
        token_endpoint.received()
    );
    // No token was had, so the resource server was never asked.
    assert!(resource.received().is_empty(), "{:?}", resource.received());
}
