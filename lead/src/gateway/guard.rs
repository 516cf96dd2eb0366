//! Who may talk to the gateway, checked before any route runs. `Host` must name the gateway
//! (a DNS-rebound page sends its own name); a browser's cross-origin request is refused
//! (`Origin`, `Sec-Fetch-Site`); a request with a body must be JSON (no "simple" form or
//! text/plain request slips through), except an upload route's `multipart/form-data`
//! (still same-origin and with a bearer token, which no form can send); and every route needs what its [`Access`] says: a
//! bearer token, even on loopback, that [`Authenticator`] maps to a principal, and for
//! the operator's routes the operator. The access comes from the route the router matched
//! (see `routes`), never from the path string. Bodies are read with a size limit and a
//! deadline (`body`), so a trickled body cannot hold a connection open.

use std::net::SocketAddr;
use std::sync::Arc;

use actix_web::http::{header, Method, StatusCode};
use actix_web::{HttpRequest, HttpResponse};
use serde_json::json;

use super::principal::{Authenticator, Principal};
use super::routes::Access;

/// The variable listing the extra names (`host[:port]`, comma-separated) a gateway bound
/// beyond loopback answers to.
pub const GATEWAY_HOSTS_ENV: &str = "ANTLER_GATEWAY_HOSTS";

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

    /// The principal `req` acts for when it may go on to the route it matched, whose
    /// access is `access` (`None`: a route that needs no principal, asked without one).
    /// Nothing here reads the request's path: the route decides.
    pub fn check(&self, req: &HttpRequest, access: Access) -> Result<Option<Principal>, Refusal> {
        if access == Access::Open {
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
        if access == Access::Callback && *req.method() == Method::GET {
            return Ok(None);
        }
        if cross_origin(req, host.as_deref()) {
            return Err(Refusal::CrossOrigin);
        }
        if access == Access::Confirm {
            // A form: no JSON, no token; a browser's same-origin post names its origin.
            return match req.headers().get(header::ORIGIN) {
                Some(_) => Ok(None),
                None => Err(Refusal::CrossOrigin),
            };
        }
        if access == Access::Page && *req.method() == Method::GET {
            return Ok(None);
        }
        let writes = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
        // A body must be JSON (a multipart one on an upload route); a write without one
        // (a cancel, a delete) has nothing to declare, but one that declares a type must
        // declare one of those.
        let multipart_here = access == Access::Upload && multipart_body(req);
        let declared = req.headers().contains_key(header::CONTENT_TYPE);
        if writes && (has_body(req) || declared) && !json_body(req) && !multipart_here {
            return Err(Refusal::ContentType);
        }
        let bearer = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if access == Access::Metrics
            && self.loopback
            && bearer.is_none()
            && !self.principals.has_users()
        {
            return Ok(None);
        }
        let principal = match self.principals.authenticate(bearer) {
            Ok(principal) => principal,
            Err(reason) => {
                tracing::info!(%reason, path = req.path(), "gateway request refused");
                return Err(Refusal::Credential);
            }
        };
        if matches!(access, Access::Operator | Access::Metrics) && !principal.operator {
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

/// Whether the request has a body: a length above zero, or one sent in chunks.
fn has_body(req: &HttpRequest) -> bool {
    let length = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().parse::<u64>().map_or(true, |n| n > 0));
    length.unwrap_or(false) || req.headers().contains_key(header::TRANSFER_ENCODING)
}

/// Whether the request declares a `multipart/form-data` body (an upload route's files).
fn multipart_body(req: &HttpRequest) -> bool {
    req.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("multipart/form-data"))
}

/// Whether the request declares a JSON body.
fn json_body(req: &HttpRequest) -> bool {
    req.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
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

    /// The check of the route `req`'s path matches (`{x}` is any one segment).
    fn check(g: &Guard, req: &HttpRequest) -> Result<Option<Principal>, Refusal> {
        let segments: Vec<&str> = req.path().split('/').collect();
        let matched = crate::gateway::routes::ROUTES.iter().find(|r| {
            let pattern: Vec<&str> = r.path.split('/').collect();
            r.method == req.method().as_str()
                && pattern.len() == segments.len()
                && pattern
                    .iter()
                    .zip(&segments)
                    .all(|(p, s)| p.starts_with('{') || p == s)
        });
        g.check(req, matched.map_or(Access::Member, |r| r.access))
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
        assert_eq!(check(&g, &req).err(), Some(Refusal::Host));
        for host in ["127.0.0.1:8001", "LOCALHOST:8001"] {
            let req = TestRequest::get()
                .uri("/api/mcp/config")
                .insert_header(("Host", host))
                .insert_header(("Authorization", "Bearer tok"))
                .to_http_request();
            assert!(check(&g, &req).is_ok(), "{host}");
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
        assert_eq!(check(&g, &req).err(), Some(Refusal::CrossOrigin));
        let req = base()
            .insert_header(("Sec-Fetch-Site", "cross-site"))
            .insert_header(("Content-Type", "application/json"))
            .insert_header(("Authorization", "Bearer tok"))
            .to_http_request();
        assert_eq!(check(&g, &req).err(), Some(Refusal::CrossOrigin));
        let req = base()
            .insert_header(("Content-Type", "text/plain"))
            .insert_header(("Authorization", "Bearer tok"))
            .to_http_request();
        assert_eq!(check(&g, &req).err(), Some(Refusal::ContentType));
        let req = base()
            .insert_header(("Content-Type", "application/json"))
            .to_http_request();
        assert_eq!(check(&g, &req).err(), Some(Refusal::Credential));
        let req = base()
            .insert_header(("Origin", "http://127.0.0.1:8001"))
            .insert_header(("Content-Type", "application/json; charset=utf-8"))
            .insert_header(("Authorization", "Bearer tok"))
            .to_http_request();
        assert!(check(&g, &req).unwrap().unwrap().operator);
        // A write with no body and no declared type (the LangGraph SDK's cancel) passes;
        // one with a body of no declared type does not.
        let req = TestRequest::post()
            .uri("/api/threads/t/runs/r/cancel")
            .insert_header(("Host", "127.0.0.1:8001"))
            .insert_header(("Authorization", "Bearer tok"))
            .to_http_request();
        assert!(check(&g, &req).unwrap().unwrap().operator);
        let req = TestRequest::post()
            .uri("/api/threads/t/runs/r/cancel")
            .insert_header(("Host", "127.0.0.1:8001"))
            .insert_header(("Content-Length", "2"))
            .insert_header(("Authorization", "Bearer tok"))
            .to_http_request();
        assert_eq!(check(&g, &req).err(), Some(Refusal::ContentType));
    }

    #[test]
    fn health_is_open_and_metrics_open_on_loopback_only_without_users() {
        let req = TestRequest::get()
            .uri("/health")
            .insert_header(("Host", "anything"))
            .to_http_request();
        assert_eq!(check(&guard(), &req), Ok(None));
        let req = TestRequest::get()
            .uri("/metrics")
            .insert_header(("Host", "127.0.0.1:8001"))
            .to_http_request();
        // Users are configured: a member's process on this machine is not the operator.
        assert_eq!(check(&guard(), &req).err(), Some(Refusal::Credential));
        let config = antler_protocol::config::GatewaySection::default();
        let alone = Guard::new(
            "127.0.0.1:8001".parse().unwrap(),
            Arc::new(Authenticator::new("tok".into(), &config, std::path::Path::new(".")).unwrap()),
            &[],
        );
        assert_eq!(check(&alone, &req), Ok(None));
        let open = Guard::new("0.0.0.0:8001".parse().unwrap(), principals(), &[]);
        let req = TestRequest::get()
            .uri("/metrics")
            .insert_header(("Host", "10.0.0.5:8001"))
            .to_http_request();
        assert_eq!(check(&open, &req).err(), Some(Refusal::Credential));
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
        let alice = check(&g, &get("/api/runs/r1")).unwrap().unwrap();
        assert_eq!(alice.user.as_deref(), Some("alice"));
        assert!(!alice.operator);
        assert_eq!(
            check(&g, &get("/api/mcp/config")).err(),
            Some(Refusal::NotOperator)
        );
        let open = Guard::new("0.0.0.0:8001".parse().unwrap(), principals(), &[]);
        assert_eq!(
            check(&open, &get("/metrics")).err(),
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
        assert_eq!(check(&g, &callback), Ok(None));
        // Only the GET: a POST there is an ordinary route, token and all.
        let posted = TestRequest::post()
            .uri("/api/mcp/oauth/callback?code=c&state=s")
            .insert_header(("Host", "127.0.0.1:8001"))
            .insert_header(("Content-Type", "application/json"))
            .to_http_request();
        assert_eq!(check(&g, &posted).err(), Some(Refusal::Credential));
        let rebound = TestRequest::get()
            .uri("/api/mcp/oauth/callback?code=c&state=s")
            .insert_header(("Host", "rebind.evil.example"))
            .to_http_request();
        assert_eq!(check(&g, &rebound).err(), Some(Refusal::Host));
        let start = |token: &str| {
            TestRequest::post()
                .uri("/api/mcp/notes/oauth/start")
                .insert_header(("Host", "127.0.0.1:8001"))
                .insert_header(("Content-Type", "application/json"))
                .insert_header(("Authorization", format!("Bearer {token}")))
                .to_http_request()
        };
        let alice = check(&g, &start("alice-token-0123456789"))
            .unwrap()
            .unwrap();
        assert_eq!(alice.user.as_deref(), Some("alice"));
        let forged = TestRequest::post()
            .uri("/api/mcp/notes/oauth/start")
            .insert_header(("Host", "127.0.0.1:8001"))
            .insert_header(("Content-Type", "application/json"))
            .insert_header(("Origin", "http://evil.example"))
            .insert_header(("Authorization", "Bearer alice-token-0123456789"))
            .to_http_request();
        assert_eq!(check(&g, &forged).err(), Some(Refusal::CrossOrigin));
        let no_token = TestRequest::post()
            .uri("/api/mcp/notes/oauth/start")
            .insert_header(("Host", "127.0.0.1:8001"))
            .insert_header(("Content-Type", "application/json"))
            .to_http_request();
        assert_eq!(check(&g, &no_token).err(), Some(Refusal::Credential));
        assert_eq!(check(&g, &start("x")).err(), Some(Refusal::Credential));
    }

    #[test]
    fn multipart_passes_on_the_upload_route_only_and_never_cross_origin() {
        let g = guard();
        let post = |path: &str| {
            TestRequest::post()
                .uri(path)
                .insert_header(("Host", "127.0.0.1:8001"))
                .insert_header(("Content-Type", "multipart/form-data; boundary=x"))
                .insert_header(("Authorization", "Bearer alice-token-0123456789"))
        };
        let upload = post("/api/threads/t1/uploads").to_http_request();
        assert!(check(&g, &upload).is_ok());
        let runs = post("/api/runs").to_http_request();
        assert_eq!(check(&g, &runs).err(), Some(Refusal::ContentType));
        let forged = post("/api/threads/t1/uploads")
            .insert_header(("Origin", "http://evil.example"))
            .to_http_request();
        assert_eq!(check(&g, &forged).err(), Some(Refusal::CrossOrigin));
        let form = TestRequest::post()
            .uri("/api/threads/t1/uploads")
            .insert_header(("Host", "127.0.0.1:8001"))
            .insert_header(("Content-Type", "application/x-www-form-urlencoded"))
            .insert_header(("Authorization", "Bearer alice-token-0123456789"))
            .to_http_request();
        assert_eq!(check(&g, &form).err(), Some(Refusal::ContentType));
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
        assert!(check(&g, &ok).is_ok());
        let other = TestRequest::get()
            .uri("/api/runs/x")
            .insert_header(("Host", "other.example.com:443"))
            .insert_header(("Authorization", "Bearer tok"))
            .to_http_request();
        assert_eq!(check(&g, &other).err(), Some(Refusal::Host));
    }
}
