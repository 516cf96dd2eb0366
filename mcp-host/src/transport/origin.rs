//! The same-origin rule for credentials: configured headers and OAuth tokens go only to
//! the origin (scheme, host, port) they were configured for. Every HTTP client of this
//! host (streamable HTTP, legacy SSE, OAuth token requests) follows redirects only within
//! the origin of its request and refuses one that leaves it; the SSE client refuses an
//! `endpoint` event naming another origin, as the Python and TypeScript SDKs do.

use std::sync::{Arc, Mutex};

use reqwest::{redirect, Url};

/// Redirects followed at most within one origin (reqwest's default limit).
const MAX_REDIRECTS: usize = 10;

/// Why a URL was refused for leaving the origin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CrossOrigin {
    #[error("refusing a redirect from {from} to another origin ({to}); credentials stay with their origin")]
    Redirect { from: String, to: String },
    #[error("refusing the SSE endpoint {to}: its origin differs from the SSE URL's ({from})")]
    Endpoint { from: String, to: String },
    #[error("too many redirects (more than {MAX_REDIRECTS})")]
    TooManyRedirects,
}

/// Whether two URLs share scheme, host and port.
pub fn same_origin(a: &Url, b: &Url) -> bool {
    a.origin() == b.origin()
}

/// The origin of a URL as text (`http://127.0.0.1:8080`), never its path or query.
pub fn shown(url: &Url) -> String {
    url.origin().ascii_serialization()
}

/// Checks the SSE `endpoint` against the SSE URL it was announced on.
pub fn check_endpoint(sse: &Url, endpoint: &Url) -> Result<(), CrossOrigin> {
    if same_origin(sse, endpoint) {
        Ok(())
    } else {
        Err(CrossOrigin::Endpoint {
            from: shown(sse),
            to: shown(endpoint),
        })
    }
}

/// The decision for a redirect from the request's first URL (`previous[0]`) to `next`.
fn decide(next: &Url, previous: &[Url]) -> Result<(), CrossOrigin> {
    let Some(first) = previous.first() else {
        return Ok(());
    };
    if !same_origin(first, next) {
        return Err(CrossOrigin::Redirect {
            from: shown(first),
            to: shown(next),
        });
    }
    // `previous` holds the first URL and each followed redirect.
    if previous.len() > MAX_REDIRECTS {
        return Err(CrossOrigin::TooManyRedirects);
    }
    Ok(())
}

/// The redirect policy of every HTTP client of this host.
pub fn redirect_policy() -> redirect::Policy {
    RedirectGuard::default().policy()
}

/// The redirect policy together with the last redirect it refused, for clients whose
/// errors reach us as text only (rmcp's streamable HTTP client drops the cause).
#[derive(Debug, Clone, Default)]
pub struct RedirectGuard {
    refused: Arc<Mutex<Option<CrossOrigin>>>,
}

impl RedirectGuard {
    /// The policy; each refusal is remembered.
    pub fn policy(&self) -> redirect::Policy {
        let refused = self.refused.clone();
        redirect::Policy::custom(
            move |attempt| match decide(attempt.url(), attempt.previous()) {
                Ok(()) => attempt.follow(),
                Err(e) => {
                    if let Ok(mut slot) = refused.lock() {
                        *slot = Some(e.clone());
                    }
                    attempt.error(e)
                }
            },
        )
    }

    /// The last redirect refused, if any.
    pub fn refusal(&self) -> Option<CrossOrigin> {
        self.refused.lock().ok().and_then(|r| r.clone())
    }
}

/// A reqwest error said with its causes (the redirect refusal is a cause), the URL it
/// names cut to its origin (a query may carry a token).
pub fn describe(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    if let Some(u) = e.url() {
        text = text.replace(u.as_str(), &shown(u));
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn redirects_stay_within_the_first_origin() {
        let first = url("http://127.0.0.1:8000/mcp");
        assert_eq!(
            decide(
                &url("http://127.0.0.1:8000/other"),
                std::slice::from_ref(&first)
            ),
            Ok(())
        );
        for other in [
            "http://127.0.0.1:8001/mcp",
            "https://127.0.0.1:8000/mcp",
            "http://localhost:8000/mcp",
        ] {
            assert!(
                matches!(
                    decide(&url(other), std::slice::from_ref(&first)),
                    Err(CrossOrigin::Redirect { .. })
                ),
                "{other}"
            );
        }
        let hops = vec![first.clone(); MAX_REDIRECTS + 1];
        assert_eq!(
            decide(&url("http://127.0.0.1:8000/x"), &hops),
            Err(CrossOrigin::TooManyRedirects)
        );
    }

    #[test]
    fn an_endpoint_of_another_origin_is_refused() {
        let sse = url("http://127.0.0.1:8000/sse");
        assert!(check_endpoint(&sse, &url("http://127.0.0.1:8000/messages?s=1")).is_ok());
        let e = check_endpoint(&sse, &url("http://127.0.0.1:9000/steal?token=x")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "refusing the SSE endpoint http://127.0.0.1:9000: its origin differs from the SSE URL's (http://127.0.0.1:8000)"
        );
    }
}
