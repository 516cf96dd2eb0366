//! HTTP for the web tools, on reqwest (rustls): calls to a backend's API (its configured
//! base URL, trusted like the rest of config.yaml) and the guarded fetch of a page a model
//! named. Every request has a deadline and every body a size cap; the guarded fetch
//! checks each hop with the address guard, pins the connection to the addresses checked,
//! follows at most [`MAX_REDIRECTS`] redirects itself and never uses a proxy.

use std::time::Duration;

use reqwest::header::{HeaderMap, CONTENT_TYPE, LOCATION};
use reqwest::{Client, RequestBuilder, StatusCode, Url};

use super::guard::{parse_http_url, validate_public_http_url, GuardPolicy, Refusal, Target};
use crate::http_clients::{shared_client, ClientKind};

/// The `User-Agent` Antler's own fetcher sends unless the entry sets `user_agent` (the
/// crawler hand-off's look uses it too).
pub const USER_AGENT: &str = "Mozilla/5.0 (compatible; Antler/1.0; +web_fetch)";

/// Redirects the guarded fetch (and a backend's API client) follows.
pub const MAX_REDIRECTS: usize = crate::http_clients::API_MAX_REDIRECTS;
/// The largest body read from a backend's API.
pub const MAX_API_BODY: usize = 8 * 1024 * 1024;
/// The largest page body the guarded fetch reads (more is cut off).
pub const MAX_PAGE_BODY: usize = 5 * 1024 * 1024;
/// The guarded fetch's answer to a sixth redirect.
pub const TOO_MANY_REDIRECTS: &str = "Error: Too many redirects (more than {max})";
/// A redirect without a usable `Location`.
pub const BAD_REDIRECT: &str = "Error: Redirect without a valid Location header";

/// What went wrong on the way; `Display` is what the model reads after the backend's prefix.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("request timed out after {0}s")]
    Timeout(String),
    #[error("response body exceeds {0} bytes")]
    TooLarge(usize),
    #[error("{0}")]
    Request(String),
}

impl HttpError {
    fn from_reqwest(e: reqwest::Error, deadline: Duration) -> HttpError {
        if e.is_timeout() {
            return HttpError::Timeout(secs(deadline));
        }
        // reqwest's own text is "error sending request"; the cause says what happened.
        HttpError::Request(chain(&e))
    }
}

/// An error and its causes, joined by `: `.
fn chain(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text = format!("{text}: {cause}");
        source = cause.source();
    }
    text
}

/// Seconds as Python prints a float or an int (`30` for 30 s, `2.5` for 2.5 s).
pub fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{}", s as u64)
    } else {
        format!("{s}")
    }
}

/// One reply of a backend's API.
#[derive(Debug)]
pub struct ApiResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl ApiResponse {
    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_str(&self.body).ok()
    }

    pub fn content_type(&self) -> String {
        self.headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    }
}

/// One reply of a backend's API, its body as bytes (an image, say).
#[derive(Debug)]
pub struct RawResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

/// The client backends' API calls share: a handle on the process's one web API client
/// (built on first use, see `http_clients`).
#[derive(Clone, Debug)]
pub struct ApiClient {
    client: Client,
}

impl ApiClient {
    /// The process's web API client (built the first time a web tool needs it).
    pub fn new() -> Result<ApiClient, HttpError> {
        let client = shared_client(ClientKind::WebApi).map_err(|e| {
            HttpError::Request(format!("cannot build the HTTP client: {}", chain(&e)))
        })?;
        Ok(ApiClient { client })
    }

    pub fn get(&self, url: &str) -> RequestBuilder {
        self.client.get(url)
    }

    pub fn post(&self, url: &str) -> RequestBuilder {
        self.client.post(url)
    }

    /// Sends `request` with `deadline` and reads at most [`MAX_API_BODY`] bytes of the reply.
    pub async fn send(
        &self,
        request: RequestBuilder,
        deadline: Duration,
    ) -> Result<ApiResponse, HttpError> {
        let raw = self.send_raw(request, deadline).await?;
        Ok(ApiResponse {
            status: raw.status,
            headers: raw.headers,
            body: String::from_utf8_lossy(&raw.body).into_owned(),
        })
    }

    /// [`ApiClient::send`], the body kept as bytes.
    pub async fn send_raw(
        &self,
        request: RequestBuilder,
        deadline: Duration,
    ) -> Result<RawResponse, HttpError> {
        let work = async {
            let response = request
                .timeout(deadline)
                .send()
                .await
                .map_err(|e| HttpError::from_reqwest(e, deadline))?;
            let status = response.status();
            let headers = response.headers().clone();
            let (bytes, cut) = read_capped(response, MAX_API_BODY, deadline).await?;
            if cut {
                return Err(HttpError::TooLarge(MAX_API_BODY));
            }
            Ok(RawResponse {
                status,
                headers,
                body: bytes,
            })
        };
        tokio::time::timeout(deadline, work)
            .await
            .unwrap_or_else(|_| Err(HttpError::Timeout(secs(deadline))))
    }
}

/// Reads at most `cap` bytes of the body; `true` when there was more.
async fn read_capped(
    mut response: reqwest::Response,
    cap: usize,
    deadline: Duration,
) -> Result<(Vec<u8>, bool), HttpError> {
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| HttpError::from_reqwest(e, deadline))?
    {
        let room = cap.saturating_sub(body.len());
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, true));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, false))
}

/// A page the guarded fetch got.
#[derive(Debug)]
pub struct Page {
    /// Where it was in the end (after redirects).
    pub url: Url,
    pub status: StatusCode,
    pub content_type: String,
    pub body: String,
}

/// Why the guarded fetch got no page.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{0}")]
    Refused(#[from] Refusal),
    #[error("{}", TOO_MANY_REDIRECTS.replace("{max}", &MAX_REDIRECTS.to_string()))]
    TooManyRedirects,
    #[error("{BAD_REDIRECT}")]
    BadRedirect,
    #[error("Error: Request failed: {0}")]
    Http(#[from] HttpError),
}

/// Follows `raw_url` to the first answer that is not a redirect: every hop checked by
/// `guard`, connected only to the addresses checked, at most [`MAX_REDIRECTS`] redirects.
/// The URL it ended at and the response, body unread.
async fn follow_guarded(
    raw_url: &str,
    guard: &GuardPolicy,
    deadline: Duration,
    user_agent: &str,
) -> Result<(Url, reqwest::Response), FetchError> {
    let mut url = parse_http_url(raw_url)?;
    for _hop in 0..=MAX_REDIRECTS {
        let target = guard.check(&url, "fetch").await?;
        let mut builder = Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(deadline)
            .user_agent(user_agent.to_owned());
        if let Target::Pinned { host, addrs } = &target {
            builder = builder.resolve_to_addrs(host, addrs);
        }
        let client = builder
            .build()
            .map_err(|e| HttpError::from_reqwest(e, deadline))?;
        let response = client
            .get(url.clone())
            .header(
                reqwest::header::ACCEPT,
                "text/html,application/xhtml+xml,*/*;q=0.8",
            )
            .timeout(deadline)
            .send()
            .await
            .map_err(|e| HttpError::from_reqwest(e, deadline))?;
        if response.status().is_redirection() {
            let next = response
                .headers()
                .get(LOCATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|loc| url.join(loc).ok())
                .ok_or(FetchError::BadRedirect)?;
            url = parse_http_url(next.as_str())?;
            continue;
        }
        return Ok((url, response));
    }
    Err(FetchError::TooManyRedirects)
}

/// Fetches `raw_url` for the model: every hop checked by `guard`, connected only to the
/// addresses checked, at most [`MAX_REDIRECTS`] redirects, at most [`MAX_PAGE_BODY`]
/// bytes, all within `deadline`.
pub async fn fetch_page(
    raw_url: &str,
    guard: &GuardPolicy,
    deadline: Duration,
    user_agent: &str,
) -> Result<Page, FetchError> {
    let work = async {
        let (url, response) = follow_guarded(raw_url, guard, deadline, user_agent).await?;
        let status = response.status();
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let (bytes, _cut) = read_capped(response, MAX_PAGE_BODY, deadline).await?;
        Ok(Page {
            url,
            status,
            content_type,
            body: String::from_utf8_lossy(&bytes).into_owned(),
        })
    };
    tokio::time::timeout(deadline, work)
        .await
        .unwrap_or_else(|_| Err(HttpError::Timeout(secs(deadline)).into()))
}

/// How long the hand-off's own look at a page may take before the URL goes to the crawler
/// as it was checked (an Antler without egress cannot follow it).
pub const HANDOFF_LOOK: Duration = Duration::from_secs(5);

/// The URL a remote crawler is handed for `raw_url`: Antler follows its redirects itself,
/// every hop through `guard`, and hands over where they end, so a public page that
/// redirects to a private address is refused here, not fetched by the crawler. A page
/// Antler cannot reach (no egress, a timeout within [`HANDOFF_LOOK`]) goes over as it was
/// checked; the crawler's own final URL is checked again where it reports one.
pub async fn crawler_url(
    raw_url: &str,
    guard: &GuardPolicy,
    action: &'static str,
) -> Result<String, String> {
    if let Some(refusal) = validate_public_http_url(raw_url, guard, action).await {
        return Err(refusal);
    }
    if guard.allow_private {
        return Ok(raw_url.to_owned());
    }
    let look = follow_guarded(raw_url, guard, HANDOFF_LOOK, USER_AGENT);
    match tokio::time::timeout(HANDOFF_LOOK, look).await {
        Ok(Ok((end, _response))) => Ok(end.to_string()),
        Ok(Err(
            e @ (FetchError::Refused(_) | FetchError::TooManyRedirects | FetchError::BadRedirect),
        )) => Err(e.to_string()),
        Ok(Err(FetchError::Http(e))) => {
            tracing::debug!(
                url = raw_url,
                "the hand-off could not look at the page ({e}); handing it over as checked"
            );
            Ok(raw_url.to_owned())
        }
        Err(_) => Ok(raw_url.to_owned()),
    }
}

/// Checks the final URL a crawler reports having fetched: `Some(refusal)` when the guard
/// refuses it (the crawler followed a redirect Antler would not have).
pub async fn check_reported(reported: Option<&str>, guard: &GuardPolicy) -> Option<String> {
    let reported = reported.filter(|r| !r.trim().is_empty())?;
    validate_public_http_url(reported, guard, "fetch").await
}
