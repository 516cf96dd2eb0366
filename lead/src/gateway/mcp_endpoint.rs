//! `/mcp`: Antler's MCP server over streamable HTTP (`mcp_server`; rmcp's service, a tower
//! service over `http` 1 requests, bridged here from actix-web), and Antler as an OAuth
//! protected resource (RFC 9728, as the MCP authorization spec asks):
//! `GET /.well-known/oauth-protected-resource` (and its `/mcp` suffixed form) names the
//! resource and the configured JWT issuer, and a request to `/mcp` without a valid bearer
//! token gets 401 with `WWW-Authenticate: Bearer resource_metadata="…"`. The gateway's
//! principals apply as on every route (a JWT's audience is checked by the authenticator);
//! a session belongs to the user that opened it, and a request naming another user's
//! session id is answered as an unknown session (404). The operator may act for a user
//! ([`ACT_AS_HEADER`], what `antler mcp serve --user` sends). A session's requests carry
//! its [`Released`] latch, and `DELETE /mcp` answers only once the session's run is
//! released (so the thread takes a new run at once); a session idle for
//! `antler.gateway.mcp_server.session_idle_s` ends by itself.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use actix_web::http::header::{HeaderName, HeaderValue, WWW_AUTHENTICATE};
use actix_web::http::{Method, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse};
use antler_protocol::config::{self, GatewaySection};
use futures::StreamExt as _;
use http_body_util::BodyExt as _;
use serde_json::json;

use super::body::read_body;
use super::mcp_reply;
use super::mcp_sessions::{self, SessionOwners};
use super::State;
use super::{principal_of, Principal};
use crate::mcp_server::{self, HttpService, Owner};

/// The MCP endpoint's path.
pub const MCP_PATH: &str = "/mcp";
/// The protected resource metadata (RFC 9728).
pub const RESOURCE_METADATA_PATH: &str = "/.well-known/oauth-protected-resource";
/// Its form suffixed with the resource's path, which MCP clients ask first.
pub const RESOURCE_METADATA_MCP_PATH: &str = "/.well-known/oauth-protected-resource/mcp";
/// The header naming a streamable-HTTP session.
const SESSION_HEADER: &str = "mcp-session-id";
/// The largest JSON-RPC message a client may post.
const MAX_MCP_BODY: usize = 4 << 20;
/// The header with which an operator's request names the user its session acts for
/// (`antler mcp serve --user`).
pub const ACT_AS_HEADER: &str = "x-antler-user";
/// What a request naming an unknown session gets (rmcp's own answer).
const UNKNOWN_SESSION: &str = "Not Found: Session not found";

/// The gateway's MCP service and whose each session is.
pub struct McpEndpoint {
    service: HttpService,
    /// Each session's handler, for the calls answered without rmcp's session worker.
    direct: Arc<mcp_server::direct::DirectCalls>,
    /// The user of each session, by its id.
    owners: Arc<Mutex<SessionOwners>>,
    stop: tokio_util::sync::CancellationToken,
}

impl McpEndpoint {
    /// The endpoint whose sessions' runs `runs` prepares and keeps (each session's actor
    /// on the gateway's worker that serves it), each session living as `settings` say.
    /// Call on the lead's arbiter.
    pub fn new(runs: &crate::cluster::Runs, settings: &GatewaySection) -> McpEndpoint {
        let stop = tokio_util::sync::CancellationToken::new();
        let sessions = mcp_server::session_manager();
        let owners = Arc::new(Mutex::new(SessionOwners::default()));
        let idle = Duration::from_secs(settings.mcp_server.session_idle_s.max(1));
        actix::spawn(mcp_sessions::reap(
            owners.clone(),
            sessions.clone(),
            idle,
            stop.clone(),
        ));
        let direct = Arc::new(mcp_server::direct::DirectCalls::default());
        McpEndpoint {
            service: mcp_server::http_service(
                runs.env.clone(),
                runs.manager.clone(),
                actix::Arbiter::current(),
                sessions,
                direct.clone(),
                stop.clone(),
            ),
            direct,
            owners,
            stop,
        }
    }

    /// Ends every session (the gateway stops) and waits until their runs are released
    /// (at most [`STOP_RELEASE_WITHIN`]): a session's actor runs on the gateway's worker,
    /// which stops with the HTTP server.
    pub async fn stop(&self) {
        let releasing = self.owners().released();
        self.stop.cancel();
        let all = futures::future::join_all(releasing.iter().map(mcp_server::Released::wait));
        if tokio::time::timeout(STOP_RELEASE_WITHIN, all)
            .await
            .is_err()
        {
            tracing::warn!(
                "the MCP sessions' runs were not all released within {STOP_RELEASE_WITHIN:?} of the gateway's stop"
            );
        }
    }

    fn owners(&self) -> std::sync::MutexGuard<'_, SessionOwners> {
        self.owners.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Whether a route's refusal of a request without a valid token is the MCP resource's
/// 401 (with the resource metadata's address).
pub fn is_protected(path: &str) -> bool {
    path == MCP_PATH
}

/// The 401 of `/mcp`: `WWW-Authenticate` names the resource metadata.
pub fn unauthorized(req: &HttpRequest) -> HttpResponse {
    let metadata = format!("{}{RESOURCE_METADATA_MCP_PATH}", origin(req));
    HttpResponse::Unauthorized()
        .insert_header((
            WWW_AUTHENTICATE,
            format!("Bearer resource_metadata=\"{metadata}\""),
        ))
        .json(json!({"detail": super::Refusal::Credential.to_string()}))
}

/// `GET /.well-known/oauth-protected-resource[/mcp]`: the resource and who issues its
/// tokens (the configured JWT issuer; none when only static tokens are configured).
pub async fn resource_metadata(req: HttpRequest, state: web::Data<State>) -> HttpResponse {
    HttpResponse::Ok().json(metadata_document(&origin(&req), &state.settings))
}

fn metadata_document(origin: &str, settings: &GatewaySection) -> serde_json::Value {
    let issuers: Vec<&str> = settings.jwt.iter().map(|jwt| jwt.issuer.as_str()).collect();
    json!({
        "resource": format!("{origin}{MCP_PATH}"),
        "authorization_servers": issuers,
        "bearer_methods_supported": ["header"],
        "resource_name": "Antler",
    })
}

/// `scheme://host` of the gateway as the request reached it (its `Host` was checked).
fn origin(req: &HttpRequest) -> String {
    let info = req.connection_info();
    format!("{}://{}", info.scheme(), info.host())
}

/// `POST`, `GET` and `DELETE /mcp`: the request handed to rmcp's service with its
/// principal, the answer (JSON or an event stream) streamed back.
pub async fn serve(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<State>,
) -> HttpResponse {
    let Some(principal) = principal_of(&req) else {
        return unauthorized(&req);
    };
    let owner = match owner_of(&principal, req.headers().get(ACT_AS_HEADER)) {
        Ok(owner) => owner,
        Err(refused) => return refused.response(),
    };
    let endpoint = &state.mcp;
    let session = req
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    // Fail closed: a session id this gateway did not open for this user (another user's,
    // one forgotten after its idle time, a made-up one) is unknown.
    let using = match &session {
        Some(id) => match endpoint.owners().touch(id, &owner.user) {
            Some(using) => Some(using),
            None => {
                return HttpResponse::NotFound()
                    .content_type(super::openapi_mcp::TEXT)
                    .body(UNKNOWN_SESSION)
            }
        },
        None => None,
    };
    let body = if *req.method() == Method::POST {
        match read_body(payload, MAX_MCP_BODY).await {
            Ok(body) => body,
            Err(response) => return response,
        }
    } else {
        web::Bytes::new()
    };
    let mut parts = match request_parts(&req) {
        Ok(parts) => parts,
        Err(e) => return super::error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    parts.extensions.insert(owner.clone());
    if let Some(using) = &using {
        parts.extensions.insert(using.released.clone());
    }
    // A plain call on a known session is answered without rmcp's session worker.
    if let (Some(id), true) = (&session, *req.method() == Method::POST) {
        if let Some(direct) = direct_call(&req, endpoint, id, &body) {
            state.runs.metrics.mcp_direct_call();
            return direct_answer(direct.call(parts).await);
        }
    }
    let request = http::Request::from_parts(parts, http_body_util::Full::new(body));
    let response = endpoint.service.handle(request).await;
    if let Some(id) = response
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
    {
        endpoint.owners().open(id, &owner.user);
    }
    if *req.method() == Method::DELETE && response.status().is_success() {
        if let (Some(id), Some(using)) = (&session, &using) {
            // The session is closing: answer once its run is released, so the client's
            // next session (or run) on the thread finds it free.
            if tokio::time::timeout(RELEASE_WITHIN, using.released.wait())
                .await
                .is_err()
            {
                tracing::warn!(session = %id, "an MCP session's run was not released within {RELEASE_WITHIN:?} of its DELETE");
            }
            endpoint.owners().remove(id);
        }
    }
    // A posted request keeps its session busy until its answer is streamed out (a
    // client's listening `GET` stream does not).
    let busy = using
        .filter(|_| *req.method() == Method::POST)
        .map(|u| u.busy);
    let is_stream = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"text/event-stream"));
    if *req.method() == Method::POST && response.status() == http::StatusCode::OK && is_stream {
        // A request's answer alone goes as JSON (`mcp_reply`).
        let (parts, body) = response.into_parts();
        return match mcp_reply::read(body.into_data_stream()).await {
            mcp_reply::Read::Answer(json) => {
                let mut out = HttpResponse::build(StatusCode::OK);
                copy_headers(&parts.headers, &mut out, true);
                out.insert_header((
                    actix_web::http::header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                ));
                out.body(json)
            }
            mcp_reply::Read::Events(events) => {
                let mut out = HttpResponse::build(StatusCode::OK);
                copy_headers(&parts.headers, &mut out, false);
                streamed(out, events, busy)
            }
        };
    }
    into_actix(response, busy)
}

/// rmcp's headers on actix-web's response, but the ones of its framing (actix-web writes
/// them itself) and, for a `json` answer, an event stream's.
fn copy_headers(headers: &http::HeaderMap, out: &mut actix_web::HttpResponseBuilder, json: bool) {
    for (name, value) in headers {
        let skipped = match name.as_str() {
            "content-length" | "transfer-encoding" => true,
            "content-type" | "cache-control" | "x-accel-buffering" => json,
            _ => false,
        };
        if skipped {
            continue;
        }
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_str().as_bytes()),
            HeaderValue::from_bytes(value.as_bytes()),
        ) {
            out.append_header((name, value));
        }
    }
}

/// `events` as the response's streamed body, holding `busy` until it ends.
fn streamed(
    mut out: actix_web::HttpResponseBuilder,
    events: mcp_reply::Events,
    busy: Option<mcp_sessions::Busy>,
) -> HttpResponse {
    out.streaming(events.map(move |chunk| {
        let _busy = &busy;
        chunk
    }))
}

/// The request's method, target and headers as rmcp reads them.
fn request_parts(req: &HttpRequest) -> Result<http::request::Parts, http::Error> {
    let mut parts = http::Request::builder()
        .method(req.method().as_str())
        .uri(req.uri().to_string());
    for (name, value) in req.headers() {
        parts = parts.header(name.as_str(), value.as_bytes());
    }
    Ok(parts.body(())?.into_parts().0)
}

/// A `tools/call` of session `id` that may be answered directly (`mcp_server::direct`).
fn direct_call(
    req: &HttpRequest,
    endpoint: &McpEndpoint,
    id: &str,
    body: &[u8],
) -> Option<mcp_server::direct::Direct> {
    let handler = endpoint.direct.handler(id)?;
    let headers = req.headers();
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let accept = header("accept").unwrap_or_default();
    let accepts = accept.contains("application/json")
        && accept.contains("text/event-stream")
        && header("content-type").is_some_and(|t| t.starts_with("application/json"));
    let other_mcp = headers.keys().any(|name| {
        let name = name.as_str();
        name.starts_with("mcp-") && name != SESSION_HEADER && name != "mcp-protocol-version"
    });
    let direct = mcp_server::direct::Headers {
        protocol: header("mcp-protocol-version"),
        accepts,
        other_mcp,
    };
    mcp_server::direct::direct(handler, body, direct)
}

/// A direct call's answer as the response rmcp would have sent.
fn direct_answer(answer: mcp_server::direct::Answer) -> HttpResponse {
    match answer {
        mcp_server::direct::Answer::Json(answer) => HttpResponse::Ok()
            .content_type("application/json")
            .body(answer),
        // An event stream with no message: the cancelled request is not answered.
        mcp_server::direct::Answer::Cancelled => HttpResponse::Ok()
            .content_type("text/event-stream")
            .finish(),
        mcp_server::direct::Answer::Unwritable(e) => {
            super::error(StatusCode::INTERNAL_SERVER_ERROR, e)
        }
    }
}

/// How long the gateway's stop waits for its sessions' runs to be released.
const STOP_RELEASE_WITHIN: Duration = Duration::from_secs(5);

/// How long a `DELETE` waits for its session's run to be released (its sandbox returned,
/// its end recorded) before it answers anyway.
const RELEASE_WITHIN: Duration = Duration::from_secs(30);

/// Why a request may not act for the user it names.
#[derive(Debug, thiserror::Error)]
enum ActAsRefusal {
    #[error("only the operator may act for another user ({ACT_AS_HEADER})")]
    NotOperator,
    #[error("{ACT_AS_HEADER}: expected a user id (letters, digits, - and _)")]
    BadUser,
}

impl ActAsRefusal {
    fn response(&self) -> HttpResponse {
        let status = match self {
            ActAsRefusal::NotOperator => StatusCode::FORBIDDEN,
            ActAsRefusal::BadUser => StatusCode::BAD_REQUEST,
        };
        super::error(status, self.to_string())
    }
}

/// Who a request's session acts for: its principal's user, or the user an operator
/// names in [`ACT_AS_HEADER`] (a member may not).
fn owner_of(principal: &Principal, acting: Option<&HeaderValue>) -> Result<Owner, ActAsRefusal> {
    let Some(acting) = acting else {
        return Ok(Owner {
            user: principal
                .user
                .clone()
                .unwrap_or_else(|| config::OPERATOR_USER.to_owned()),
            role: principal.role.clone(),
        });
    };
    if !principal.operator {
        return Err(ActAsRefusal::NotOperator);
    }
    match acting.to_str().ok().filter(|u| config::valid_user(u)) {
        Some(user) => Ok(Owner {
            user: user.to_owned(),
            role: None,
        }),
        None => Err(ActAsRefusal::BadUser),
    }
}

/// rmcp's response as actix-web's, its body streamed as it comes (an SSE stream stays
/// open while the session sends on it), holding `busy` until it ends. A refusal rmcp
/// writes as bare text (no `Content-Type`) is given `text/plain`, as the OpenAPI document
/// says (`openapi_mcp`).
fn into_actix(
    response: http::Response<
        http_body_util::combinators::BoxBody<bytes::Bytes, std::convert::Infallible>,
    >,
    busy: Option<mcp_sessions::Busy>,
) -> HttpResponse {
    let (parts, body) = response.into_parts();
    let status =
        StatusCode::from_u16(parts.status.as_u16()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut out = HttpResponse::build(status);
    for (name, value) in &parts.headers {
        // actix-web frames the streamed body itself.
        if matches!(name.as_str(), "content-length" | "transfer-encoding") {
            continue;
        }
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_str().as_bytes()),
            HeaderValue::from_bytes(value.as_bytes()),
        ) {
            out.append_header((name, value));
        }
    }
    let refused = status.is_client_error() || status.is_server_error();
    if refused && !parts.headers.contains_key(http::header::CONTENT_TYPE) {
        out.content_type(super::openapi_mcp::TEXT);
    }
    out.streaming(body.into_data_stream().map(move |chunk| {
        let _busy = &busy;
        chunk
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_metadata_names_the_resource_and_the_configured_issuer() {
        let mut settings = GatewaySection::default();
        let doc = metadata_document("http://127.0.0.1:8001", &settings);
        assert_eq!(doc["resource"], "http://127.0.0.1:8001/mcp");
        assert_eq!(doc["authorization_servers"], json!([]));
        settings.jwt = Some(config::JwtSection {
            issuer: "https://idp.example".into(),
            ..Default::default()
        });
        let doc = metadata_document("http://127.0.0.1:8001", &settings);
        assert_eq!(doc["authorization_servers"], json!(["https://idp.example"]));
    }

    #[test]
    fn only_the_operator_acts_for_another_user() {
        let member = Principal {
            user: Some("alice".into()),
            role: Some("member".into()),
            operator: false,
        };
        let operator = Principal {
            user: None,
            role: Some("operator".into()),
            operator: true,
        };
        let bob = HeaderValue::from_static("bob");
        let owner = owner_of(&member, None).unwrap();
        assert_eq!(
            (owner.user.as_str(), owner.role.as_deref()),
            ("alice", Some("member"))
        );
        assert!(matches!(
            owner_of(&member, Some(&bob)),
            Err(ActAsRefusal::NotOperator)
        ));
        assert_eq!(
            owner_of(&operator, None).unwrap().user,
            config::OPERATOR_USER
        );
        assert_eq!(owner_of(&operator, Some(&bob)).unwrap().user, "bob");
        let bad = HeaderValue::from_static("../etc");
        assert!(matches!(
            owner_of(&operator, Some(&bad)),
            Err(ActAsRefusal::BadUser)
        ));
    }
}
