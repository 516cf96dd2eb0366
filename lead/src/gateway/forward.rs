//! Writes to a run another lead drives (issue 38, docs/ha.md): with leases on, an answer, a
//! cancel, an approval or a LangGraph resume for a run this lead does not hold, whose lease
//! another lead holds live, is sent on to that lead's gateway (its `leads` row) with the
//! same method, path, query, body and `Authorization`, and its response is returned as it
//! came: whole ([`Relay::Whole`]), or streamed through as the owner writes it
//! ([`Relay::Stream`], [`Relay::Wait`]). The principal was checked here first and is
//! checked again by the owner. A forwarded request carries [`FORWARDED_HEADER`] and is
//! never forwarded again, so two leads that disagree about an owner cannot bounce a request
//! between them. A run no lead holds live (never leased, released, lapsed) is answered here,
//! where the answer's resume takes the lease.

use std::sync::OnceLock;
use std::time::Duration;

use actix_web::{http::StatusCode, HttpRequest, HttpResponse};
use futures::StreamExt;

use super::{error, State};

/// The header a forwarded request carries: its receiver answers it itself.
pub const FORWARDED_HEADER: &str = "x-antler-forwarded";

/// How long the owner may take to answer a forwarded write.
const FORWARD_DEADLINE: Duration = Duration::from_secs(30);

/// How long the connection to the owner may take.
const CONNECT_DEADLINE: Duration = Duration::from_secs(5);

/// How long a streamed answer may go without a byte: the owner's run streams write a
/// heartbeat every 15 s.
const STREAM_IDLE: Duration = Duration::from_secs(60);

/// How long the owner may take to answer a forwarded `/wait`: as long as the wait itself
/// may last here.
const WAIT_DEADLINE: Duration = Duration::from_secs(7 * 24 * 3600);

/// How the owner's response comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Relay {
    /// Read whole within [`FORWARD_DEADLINE`], then returned.
    Whole,
    /// A stream (server-sent events): its head within [`FORWARD_DEADLINE`], then its body
    /// passed on as it comes, for as long as it lasts, each piece within [`STREAM_IDLE`].
    Stream,
    /// An answer given when the run ends (`/wait`): its head within [`WAIT_DEADLINE`], then
    /// its body read whole within [`FORWARD_DEADLINE`].
    Wait,
}

impl Relay {
    /// How long the owner may take to send its response's head.
    fn head_deadline(self) -> Duration {
        match self {
            Relay::Whole | Relay::Stream => FORWARD_DEADLINE,
            Relay::Wait => WAIT_DEADLINE,
        }
    }
}

/// Response headers that belong to one hop, not to the response.
const HOP_HEADERS: &[&str] = &[
    "connection",
    "content-length",
    "keep-alive",
    "transfer-encoding",
    "upgrade",
];

/// The forwarding client: deadlines are set per request (a stream's is its idle time).
fn client() -> Option<&'static reqwest::Client> {
    static CLIENT: OnceLock<Option<reqwest::Client>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            reqwest::Client::builder()
                .connect_timeout(CONNECT_DEADLINE)
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .map_err(|e| tracing::error!("cannot build the forwarding HTTP client: {e}"))
                .ok()
        })
        .as_ref()
}

/// The owner's response to `req` (whose body is `body`), read whole, when another lead holds
/// `run_id`'s live lease; `None` when this lead answers it (no leases, held here, no live
/// owner, or forwarded already).
pub(super) async fn to_owner(
    state: &State,
    req: &HttpRequest,
    run_id: &str,
    body: &[u8],
) -> Option<HttpResponse> {
    to_owner_as(state, req, run_id, body, Relay::Whole).await
}

/// [`to_owner`], with the owner's response relayed as `relay` says.
pub(super) async fn to_owner_as(
    state: &State,
    req: &HttpRequest,
    run_id: &str,
    body: &[u8],
    relay: Relay,
) -> Option<HttpResponse> {
    if req.headers().contains_key(FORWARDED_HEADER) {
        return None;
    }
    let ownership = state.runs.ownership.as_ref()?;
    let url = match ownership.owner_elsewhere(run_id).await {
        Ok(url) => url?,
        Err(e) => {
            return Some(
                HttpResponse::ServiceUnavailable()
                    .insert_header((actix_web::http::header::RETRY_AFTER, "1"))
                    .json(serde_json::json!({
                        "detail": format!("cannot read the run's owner: {e}")
                    })),
            )
        }
    };
    Some(forward(req, &url, run_id, body, relay).await)
}

/// Sends `req` to the gateway at `base` and returns its response as it came.
async fn forward(
    req: &HttpRequest,
    base: &str,
    run_id: &str,
    body: &[u8],
    relay: Relay,
) -> HttpResponse {
    let Some(client) = client() else {
        return error(
            StatusCode::BAD_GATEWAY,
            "cannot reach the run's lead: no HTTP client",
        );
    };
    let target = match req.uri().path_and_query() {
        Some(pq) => format!("{}{}", base.trim_end_matches('/'), pq.as_str()),
        None => format!("{}{}", base.trim_end_matches('/'), req.path()),
    };
    let method = match reqwest::Method::from_bytes(req.method().as_str().as_bytes()) {
        Ok(method) => method,
        Err(_) => return error(StatusCode::METHOD_NOT_ALLOWED, "method not forwarded"),
    };
    let mut outgoing = client
        .request(method, &target)
        .header(FORWARDED_HEADER, "1")
        .body(body.to_vec());
    for name in ["authorization", "content-type", "accept"] {
        if let Some(value) = req.headers().get(name) {
            outgoing = outgoing.header(name, value.as_bytes());
        }
    }
    if relay == Relay::Whole {
        outgoing = outgoing.timeout(FORWARD_DEADLINE);
    }
    tracing::debug!(run = run_id, %target, "forwarding a write to the run's lead");
    let sent = tokio::time::timeout(relay.head_deadline(), outgoing.send()).await;
    let response = match sent {
        Ok(Ok(response)) => response,
        Ok(Err(e)) => {
            tracing::warn!(run = run_id, %target, "cannot reach the run's lead: {e}");
            return unreachable(run_id);
        }
        Err(_) => {
            tracing::warn!(run = run_id, %target, "the run's lead did not answer in time");
            return unreachable(run_id);
        }
    };
    let status =
        StatusCode::from_u16(response.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut answer = HttpResponse::build(status);
    for (name, value) in response.headers() {
        if HOP_HEADERS.contains(&name.as_str()) {
            continue;
        }
        answer.append_header((name.as_str(), value.as_bytes()));
    }
    if relay == Relay::Stream {
        return answer.streaming(relayed(response, run_id.to_owned()));
    }
    match tokio::time::timeout(FORWARD_DEADLINE, response.bytes()).await {
        Ok(Ok(bytes)) => answer.body(bytes.to_vec()),
        Ok(Err(e)) => {
            tracing::warn!(run = run_id, %target, "the run's lead's answer broke off: {e}");
            unfinished(run_id)
        }
        Err(_) => {
            tracing::warn!(run = run_id, %target, "the run's lead's answer did not end in time");
            unfinished(run_id)
        }
    }
}

/// `502`: the owner's answer broke off.
fn unfinished(run_id: &str) -> HttpResponse {
    error(
        StatusCode::BAD_GATEWAY,
        format!("the lead that drives run {run_id} did not finish its answer"),
    )
}

/// `502` with `Retry-After: 1`: the owner could not be reached (or did not answer in time).
fn unreachable(run_id: &str) -> HttpResponse {
    HttpResponse::BadGateway()
        .insert_header((actix_web::http::header::RETRY_AFTER, "1"))
        .json(serde_json::json!({
            "detail": format!("cannot reach the lead that drives run {run_id}")
        }))
}

/// The owner's response body as it comes, each piece within [`STREAM_IDLE`]; it ends with
/// the owner's, or with an error when the owner goes quiet or breaks off (the client sees
/// the stream cut, as it would if the owner had died under it). Dropped (the client went
/// away), it drops the connection to the owner, which sees its client gone.
fn relayed(
    response: reqwest::Response,
    run_id: String,
) -> impl futures::Stream<Item = Result<actix_web::web::Bytes, std::io::Error>> {
    let pieces = response.bytes_stream().boxed();
    futures::stream::unfold(Some(pieces), move |pieces| {
        let run_id = run_id.clone();
        async move {
            let mut pieces = pieces?;
            match tokio::time::timeout(STREAM_IDLE, pieces.next()).await {
                Ok(Some(Ok(bytes))) => Some((Ok(bytes), Some(pieces))),
                Ok(None) => None,
                Ok(Some(Err(e))) => {
                    tracing::warn!(run = %run_id, "the run's lead's stream broke off: {e}");
                    Some((Err(std::io::Error::other(e)), None))
                }
                Err(_) => {
                    tracing::warn!(run = %run_id, "the run's lead's stream went quiet");
                    Some((
                        Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "the run's lead's stream went quiet",
                        )),
                        None,
                    ))
                }
            }
        }
    })
}
