//! Writes to a run another lead drives (issue 38, docs/ha.md): with leases on, an answer, a
//! cancel or an approval for a run this lead does not hold, whose lease another lead holds
//! live, is sent on to that lead's gateway (its `leads` row) with the same method, path,
//! query, body and `Authorization`, and its response is returned as it came. The principal
//! was checked here first and is checked again by the owner. A forwarded request carries
//! [`FORWARDED_HEADER`] and is never forwarded again, so two leads that disagree about an
//! owner cannot bounce a request between them. A run no lead holds live (never leased,
//! released, lapsed) is answered here, where the answer's resume takes the lease.

use std::sync::OnceLock;
use std::time::Duration;

use actix_web::{http::StatusCode, HttpRequest, HttpResponse};

use super::{error, State};

/// The header a forwarded request carries: its receiver answers it itself.
pub const FORWARDED_HEADER: &str = "x-antler-forwarded";

/// How long the owner may take to answer a forwarded write.
const FORWARD_DEADLINE: Duration = Duration::from_secs(30);

/// How long the connection to the owner may take.
const CONNECT_DEADLINE: Duration = Duration::from_secs(5);

/// Response headers that belong to one hop, not to the response.
const HOP_HEADERS: &[&str] = &[
    "connection",
    "content-length",
    "keep-alive",
    "transfer-encoding",
    "upgrade",
];

fn client() -> Option<&'static reqwest::Client> {
    static CLIENT: OnceLock<Option<reqwest::Client>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            reqwest::Client::builder()
                .timeout(FORWARD_DEADLINE)
                .connect_timeout(CONNECT_DEADLINE)
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .map_err(|e| tracing::error!("cannot build the forwarding HTTP client: {e}"))
                .ok()
        })
        .as_ref()
}

/// The owner's response to `req` (whose body is `body`) when another lead holds `run_id`'s
/// live lease; `None` when this lead answers it (no leases, held here, no live owner, or
/// forwarded already).
pub(super) async fn to_owner(
    state: &State,
    req: &HttpRequest,
    run_id: &str,
    body: &[u8],
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
    Some(forward(req, &url, run_id, body).await)
}

/// Sends `req` to the gateway at `base` and returns its response as it came.
async fn forward(req: &HttpRequest, base: &str, run_id: &str, body: &[u8]) -> HttpResponse {
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
    tracing::debug!(run = run_id, %target, "forwarding a write to the run's lead");
    let response = match outgoing.send().await {
        Ok(response) => response,
        Err(e) => {
            tracing::warn!(run = run_id, %target, "cannot reach the run's lead: {e}");
            return HttpResponse::BadGateway()
                .insert_header((actix_web::http::header::RETRY_AFTER, "1"))
                .json(serde_json::json!({
                    "detail": format!("cannot reach the lead that drives run {run_id}")
                }));
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
    match response.bytes().await {
        Ok(bytes) => answer.body(bytes.to_vec()),
        Err(e) => {
            tracing::warn!(run = run_id, %target, "the run's lead's answer broke off: {e}");
            error(
                StatusCode::BAD_GATEWAY,
                format!("the lead that drives run {run_id} did not finish its answer"),
            )
        }
    }
}
