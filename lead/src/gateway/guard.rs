//! Who may talk to the gateway, checked before any route runs. `Host` must name the gateway
//! (a DNS-rebound page sends its own name); a browser's cross-origin request is refused
//! (`Origin`, `Sec-Fetch-Site`); a request with a body must be JSON (no "simple" form or
//! text/plain request slips through); and every route but `/health` (and `/metrics` on
//! loopback) needs a bearer token, even on loopback, that [`Authenticator`] maps to a
//! principal; `/metrics` off loopback and the MCP config routes need the operator (a user
//! may start its own MCP login). The OAuth callback is exempt from the origin and token
//! checks: it completes only a login the gateway started (see `oauth`). Bodies
//! are read with a size limit and a deadline, so a trickled body cannot hold a connection
//! open.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use actix_web::http::{header, Method, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse};
use futures::StreamExt;
use serde_json::json;

use super::principal::{Authenticator, Principal};

/// The variable listing the extra names (`host[:port]`, comma-separated) a gateway bound
/// beyond loopback answers to.
pub const GATEWAY_HOSTS_ENV: &str = "ANTLER_GATEWAY_HOSTS";
/// How long a request body may take to arrive.
pub const BODY_DEADLINE: Duration = Duration::from_secs(10);

/// The checks of one gateway.
#[derive(Clone)]
pub struct Guard {
    principals: Arc<Authenticator>,
    /// Accepted `Host` values, lowercase `host:port`; `None`: any (a non-loopback bind with
    /// no names configured: the token alone decides).
    hosts: Option<Vec<String>>,
    loopback: bool,
    port: u16,
}

/// Why a request was refused, before any route ran.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the Host header does not name this gateway")]
    Host,
    #[error("cross-origin requests are refused")]
    CrossOrigin,
    #[error("the body must be JSON (Content-Type: application/json)")]
    ContentType,
    #[error("missing or wrong bearer token")]
    Credential,
    #[error("this route needs the operator role")]
    NotOperator,
}

impl Refusal {
    fn status(&self) -> StatusCode {
        match self {
            Refusal::Host | Refusal::CrossOrigin | Refusal::NotOperator => StatusCode::FORBIDDEN,
            Refusal::ContentType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Refusal::Credential => StatusCode::UNAUTHORIZED,
        }
    }

    /// The response the client gets.
    pub fn response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status());
        if *self == Refusal::Credential {
            response.insert_header((header::WWW_AUTHENTICATE, "Bearer"));
        }
        response.json(json!({"detail": self.to_string()}))
    }
}

impl Guard {
    /// The guard of a gateway bound to `address` whose bearer tokens `principals` knows;
    /// `extra_hosts` are the names of `ANTLER_GATEWAY_HOSTS`.
    pub fn new(
        address: SocketAddr,
        principals: Arc<Authenticator>,
        extra_hosts: &[String],
    ) -> Guard {
        let loopback = address.ip().is_loopback();
        let port = address.port();
        let mut hosts: Vec<String> = extra_hosts
            .iter()
            .map(|h| h.trim().to_ascii_lowercase())
            .filter(|h| !h.is_empty())
            .map(|h| {
                if has_port(&h) {
                    h
                } else {
                    format!("{h}:{port}")
                }
            })
            .collect();
        let hosts = if loopback || !hosts.is_empty() {
            hosts.push(match address {
                SocketAddr::V4(a) => format!("{}:{port}", a.ip()),
                SocketAddr::V6(a) => format!("[{}]:{port}", a.ip()),
            });
            if loopback {
                hosts.push(format!("localhost:{port}"));
            }
            Some(hosts)
        } else {
            None
        };
        Guard {
            principals,
            hosts,
            loopback,
            port,
        }
    }

    /// The principal `req` acts for when it may go on to its route (`None`: an open
    /// route, `/health` or `/metrics` on loopback, asked without a token).
    pub fn check(&self, req: &HttpRequest) -> Result<Option<Principal>, Refusal> {
        let path = req.path();
        if path == "/health" {
            return Ok(None);
        }
        let host = req
            .headers()
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .map(str::to_ascii_lowercase);
        if let Some(hosts) = &self.hosts {
            let named = host.as_deref().is_some_and(|h| {
                let h = if has_port(h) || self.port != 80 {
                    h.to_owned()
                } else {
                    format!("{h}:80")
                };
                hosts.contains(&h)
            });
            if !named {
                return Err(Refusal::Host);
            }
        }
        // The OAuth callback is the browser's top-level navigation back from an
        // authorization server: cross-site and without a token by nature. It completes
        // only a login the gateway started for a principal (its single-use `state`).
        if *req.method() == Method::GET && path == super::oauth::CALLBACK_PATH {
            return Ok(None);
        }
        if cross_origin(req, host.as_deref()) {
            return Err(Refusal::CrossOrigin);
        }
        // The run inspector's page and assets hold no data: they load without a token.
        if *req.method() == Method::GET && super::ui::is_page(path) {
            return Ok(None);
        }
        let writes = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
        if writes && !json_body(req) {
            return Err(Refusal::ContentType);
        }
        let bearer = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if path == "/metrics" && self.loopback {
            return Ok(None);
        }
        let principal = match self.principals.authenticate(bearer) {
            Ok(principal) => principal,
            Err(reason) => {
                tracing::info!(%reason, path, "gateway request refused");
                return Err(Refusal::Credential);
            }
        };
        // A user may start its own logins; the rest of `/api/mcp/` is the operator's.
        let own_login = path.starts_with("/api/mcp/") && path.ends_with(super::oauth::START_SUFFIX);
        if !principal.operator
            && (path == "/metrics"
                || path == "/api/cluster"
                || (path.starts_with("/api/mcp/") && !own_login))
        {
            return Err(Refusal::NotOperator);
        }
        Ok(Some(principal))
    }
}

/// Whether `host` ends in `:port` (an IPv6 literal is bracketed).
fn has_port(host: &str) -> bool {
    match host.rsplit_once(':') {
        Some((name, port)) => {
            !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && (!name.contains(':') || name.ends_with(']'))
        }
        None => false,
    }
}

/// A browser's request from another origin: `Sec-Fetch-Site` says so, or `Origin` is not
/// this gateway's (`null` included).
fn cross_origin(req: &HttpRequest, host: Option<&str>) -> bool {
    let site = req
        .headers()
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok());
    if site
        .is_some_and(|s| !s.eq_ignore_ascii_case("same-origin") && !s.eq_ignore_ascii_case("none"))
    {
        return true;
    }
    let Some(origin) = req.headers().get(header::ORIGIN) else {
        return false;
    };
    let origin = origin.to_str().unwrap_or("").to_ascii_lowercase();
    let authority = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    match (authority, host) {
        (Some(authority), Some(host)) => authority != host,
        _ => true,
    }
}

/// Whether the request declares a JSON body.
fn json_body(req: &HttpRequest) -> bool {
    req.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

/// Reads a request body of at most `limit` bytes within [`BODY_DEADLINE`]: 413 past the
/// limit, 408 past the deadline (the connection is closed).
pub async fn read_body(
    mut payload: web::Payload,
    limit: usize,
) -> Result<web::Bytes, HttpResponse> {
    let read = async {
        let mut body = web::BytesMut::new();
        while let Some(chunk) = payload.next().await {
            let chunk = chunk.map_err(|e| {
                super::error(
                    StatusCode::BAD_REQUEST,
                    format!("cannot read the body: {e}"),
                )
            })?;
            if body.len() + chunk.len() > limit {
                return Err(super::error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("the body is larger than {limit} bytes"),
                ));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body.freeze())
    };
    match tokio::time::timeout(BODY_DEADLINE, read).await {
        Ok(body) => body,
        Err(_) => {
            let mut response = super::error(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the body did not arrive within {} s",
                    BODY_DEADLINE.as_secs()
                ),
            );
            response
                .head_mut()
                .set_connection_type(actix_web::http::ConnectionType::Close);
            Err(response)
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use actix_web::test::TestRequest;

    fn principals() -> Arc<Authenticator> {
        let config: antler_protocol::config::GatewaySection =
            serde_yaml::from_str("tokens:\n  - {token: alice-token-0123456789, user: alice}\n")
                .unwrap();
        Arc::new(Authenticator::new("tok".into(), &config, std::path::Path::new(".")).unwrap())
    }

    fn guard() -> Guard {
        Guard::new("127.0.0.1:8001".parse().unwrap(), principals(), &[])
    }

    #[test]
    fn a_rebound_host_is_refused_and_the_gateway_names_pass() {
        let g = guard();
        let req = TestRequest::get()
            .uri("/api/mcp/config")
            .insert_header(("Host", "rebind.evil.example"))
            .insert_header(("Authorization", "Bearer tok"))
            .to_http_request();
        assert_eq!(g.check(&req).err(), Some(Refusal::Host));
        for host in ["127.0.0.1:8001", "LOCALHOST:8001"] {
            let req = TestRequest::get()
                .uri("/api/mcp/config")
                .insert_header(("Host", host))
                .insert_header(("Authorization", "Bearer tok"))
                .to_http_request();
            assert!(g.check(&req).is_ok(), "{host}");
        }
    }

    #[test]
    fn cross_origin_text_plain_and_tokenless_requests_are_refused() {
        let g = guard();
        let base = || {
            TestRequest::put()
                .uri("/api/mcp/config")
                .insert_header(("Host", "127.0.0.1:8001"))
        };
        let req = base()
            .insert_header(("Origin", "http://evil.example"))
            .insert_header(("Content-Type", "application/json"))
            .insert_header(("Authorization", "Bearer tok"))
            .to_http_request();
        assert_eq!(g.check(&req).err(), Some(Refusal::CrossOrigin));
        let req = base()
            .insert_header(("Sec-Fetch-Site", "cross-site"))
            .insert_header(("Content-Type", "application/json"))
            .insert_header(("Authorization", "Bearer tok"))
            .to_http_request();
        assert_eq!(g.check(&req).err(), Some(Refusal::CrossOrigin));
        let req = base()
            .insert_header(("Content-Type", "text/plain"))
            .insert_header(("Authorization", "Bearer tok"))
            .to_http_request();
        assert_eq!(g.check(&req).err(), Some(Refusal::ContentType));
        let req = base()
            .insert_header(("Content-Type", "application/json"))
            .to_http_request();
        assert_eq!(g.check(&req).err(), Some(Refusal::Credential));
        let req = base()
            .insert_header(("Origin", "http://127.0.0.1:8001"))
            .insert_header(("Content-Type", "application/json; charset=utf-8"))
            .insert_header(("Authorization", "Bearer tok"))
            .to_http_request();
        assert!(g.check(&req).unwrap().unwrap().operator);
    }

    #[test]
    fn health_is_open_and_metrics_open_on_loopback_only() {
        let req = TestRequest::get()
            .uri("/health")
            .insert_header(("Host", "anything"))
            .to_http_request();
        assert_eq!(guard().check(&req), Ok(None));
        let req = TestRequest::get()
            .uri("/metrics")
            .insert_header(("Host", "127.0.0.1:8001"))
            .to_http_request();
        assert_eq!(guard().check(&req), Ok(None));
        let open = Guard::new("0.0.0.0:8001".parse().unwrap(), principals(), &[]);
        let req = TestRequest::get()
            .uri("/metrics")
            .insert_header(("Host", "10.0.0.5:8001"))
            .to_http_request();
        assert_eq!(open.check(&req).err(), Some(Refusal::Credential));
    }

    #[test]
    fn a_users_token_passes_to_its_routes_but_not_to_the_operators() {
        let g = guard();
        let get = |path: &str| {
            TestRequest::get()
                .uri(path)
                .insert_header(("Host", "127.0.0.1:8001"))
                .insert_header(("Authorization", "Bearer alice-token-0123456789"))
                .to_http_request()
        };
        let alice = g.check(&get("/api/runs/r1")).unwrap().unwrap();
        assert_eq!(alice.user.as_deref(), Some("alice"));
        assert!(!alice.operator);
        assert_eq!(
            g.check(&get("/api/mcp/config")).err(),
            Some(Refusal::NotOperator)
        );
        let open = Guard::new("0.0.0.0:8001".parse().unwrap(), principals(), &[]);
        assert_eq!(
            open.check(&get("/metrics")).err(),
            Some(Refusal::NotOperator)
        );
    }

    #[test]
    fn the_oauth_callback_is_open_cross_site_and_a_user_may_start_its_own_login() {
        let g = guard();
        let callback = TestRequest::get()
            .uri("/api/mcp/oauth/callback?code=c&state=s")
            .insert_header(("Host", "127.0.0.1:8001"))
            .insert_header(("Sec-Fetch-Site", "cross-site"))
            .to_http_request();
        assert_eq!(g.check(&callback), Ok(None));
        // Only the GET: a POST there is an ordinary route, token and all.
        let posted = TestRequest::post()
            .uri("/api/mcp/oauth/callback?code=c&state=s")
            .insert_header(("Host", "127.0.0.1:8001"))
            .insert_header(("Content-Type", "application/json"))
            .to_http_request();
        assert_eq!(g.check(&posted).err(), Some(Refusal::Credential));
        let rebound = TestRequest::get()
            .uri("/api/mcp/oauth/callback?code=c&state=s")
            .insert_header(("Host", "rebind.evil.example"))
            .to_http_request();
        assert_eq!(g.check(&rebound).err(), Some(Refusal::Host));
        let start = |token: &str| {
            TestRequest::post()
                .uri("/api/mcp/notes/oauth/start")
                .insert_header(("Host", "127.0.0.1:8001"))
                .insert_header(("Content-Type", "application/json"))
                .insert_header(("Authorization", format!("Bearer {token}")))
                .to_http_request()
        };
        let alice = g.check(&start("alice-token-0123456789")).unwrap().unwrap();
        assert_eq!(alice.user.as_deref(), Some("alice"));
        let forged = TestRequest::post()
            .uri("/api/mcp/notes/oauth/start")
            .insert_header(("Host", "127.0.0.1:8001"))
            .insert_header(("Content-Type", "application/json"))
            .insert_header(("Origin", "http://evil.example"))
            .insert_header(("Authorization", "Bearer alice-token-0123456789"))
            .to_http_request();
        assert_eq!(g.check(&forged).err(), Some(Refusal::CrossOrigin));
        let no_token = TestRequest::post()
            .uri("/api/mcp/notes/oauth/start")
            .insert_header(("Host", "127.0.0.1:8001"))
            .insert_header(("Content-Type", "application/json"))
            .to_http_request();
        assert_eq!(g.check(&no_token).err(), Some(Refusal::Credential));
        assert_eq!(g.check(&start("x")).err(), Some(Refusal::Credential));
    }

    #[test]
    fn configured_names_bind_a_non_loopback_gateway() {
        let g = Guard::new(
            "0.0.0.0:443".parse().unwrap(),
            principals(),
            &["antler.example.com".into()],
        );
        let ok = TestRequest::get()
            .uri("/api/runs/x")
            .insert_header(("Host", "antler.example.com:443"))
            .insert_header(("Authorization", "Bearer tok"))
            .to_http_request();
        assert!(g.check(&ok).is_ok());
        let other = TestRequest::get()
            .uri("/api/runs/x")
            .insert_header(("Host", "other.example.com:443"))
            .insert_header(("Authorization", "Bearer tok"))
            .to_http_request();
        assert_eq!(g.check(&other).err(), Some(Refusal::Host));
    }
}
