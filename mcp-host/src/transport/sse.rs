//! The legacy HTTP+SSE transport (MCP 2024-11-05), which rmcp 3 no longer ships: `GET` the
//! SSE URL, wait for the `endpoint` event, then `POST` each message to that endpoint while
//! replies arrive as `message` events. A reader task owns the event stream; it stops when
//! the stream ends or the transport is dropped or closed. An endpoint of another origin
//! than the SSE URL's is refused: the configured headers never go there.

use std::{collections::HashMap, sync::Arc, time::Duration};

use futures::StreamExt;
use reqwest::{
    header::{HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE},
    Url,
};
use rmcp::{
    service::{RxJsonRpcMessage, TxJsonRpcMessage},
    transport::Transport,
    RoleClient,
};
use tokio::sync::{mpsc, oneshot};

use super::{origin, OpenError};

/// How long the server may take to announce its message endpoint.
const ENDPOINT_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a message could not be posted.
#[derive(Debug, thiserror::Error)]
pub enum SseError {
    #[error("POST {endpoint} failed: {reason}")]
    Post { endpoint: String, reason: String },
    #[error("POST {endpoint} answered HTTP {status}")]
    Status { endpoint: String, status: u16 },
    #[error("cannot encode the message: {0}")]
    Encode(String),
}

/// A client session over HTTP+SSE.
pub struct SseTransport {
    http: reqwest::Client,
    endpoint: Url,
    headers: Arc<HashMap<HeaderName, HeaderValue>>,
    incoming: mpsc::Receiver<RxJsonRpcMessage<RoleClient>>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for SseTransport {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl SseTransport {
    /// Opens the event stream at `url` and waits for the endpoint event.
    pub async fn connect(
        url: &str,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<Self, OpenError> {
        let base =
            Url::parse(url).map_err(|e| OpenError::Http(format!("invalid url {url}: {e}")))?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .redirect(origin::redirect_policy())
            .build()
            .map_err(|e| OpenError::Http(e.to_string()))?;
        let mut req = http.get(base.clone()).header(ACCEPT, "text/event-stream");
        for (k, v) in &headers {
            req = req.header(k, v);
        }
        // The URL as errors show it: no query, which may carry a token.
        let shown = format!("{}{}", origin::shown(&base), base.path());
        let resp = req
            .send()
            .await
            .map_err(|e| OpenError::Http(format!("GET {shown}: {}", origin::describe(&e))))?;
        if !resp.status().is_success() {
            return Err(OpenError::Http(format!(
                "GET {shown} answered HTTP {}",
                resp.status().as_u16()
            )));
        }
        let (endpoint_tx, endpoint_rx) = oneshot::channel();
        let (tx, incoming) = mpsc::channel(256);
        let reader = tokio::spawn(read_events(resp, base, endpoint_tx, tx));
        let endpoint = match tokio::time::timeout(ENDPOINT_TIMEOUT, endpoint_rx).await {
            Ok(Ok(Ok(e))) => e,
            Ok(Ok(Err(refused))) => {
                reader.abort();
                return Err(OpenError::Http(refused.to_string()));
            }
            Ok(Err(_)) => {
                reader.abort();
                return Err(OpenError::Http(
                    "the SSE stream ended before the endpoint event".into(),
                ));
            }
            Err(_) => {
                reader.abort();
                return Err(OpenError::Http(
                    "no endpoint event on the SSE stream".into(),
                ));
            }
        };
        Ok(Self {
            http,
            endpoint,
            headers: Arc::new(headers),
            incoming,
            reader,
        })
    }
}

async fn read_events(
    resp: reqwest::Response,
    base: Url,
    endpoint_tx: oneshot::Sender<Result<Url, origin::CrossOrigin>>,
    tx: mpsc::Sender<RxJsonRpcMessage<RoleClient>>,
) {
    let mut endpoint_tx = Some(endpoint_tx);
    let mut stream = resp.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    let mut event = String::new();
    let mut data = String::new();
    while let Some(chunk) = stream.next().await {
        let Ok(chunk) = chunk else { break };
        buf.extend_from_slice(&chunk);
        while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
            let raw: Vec<u8> = buf.drain(..=pos).collect();
            let line = String::from_utf8_lossy(&raw);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                // Dispatch the event.
                let kind = if event.is_empty() {
                    "message"
                } else {
                    event.as_str()
                };
                if kind == "endpoint" {
                    match base.join(data.trim()) {
                        Ok(url) => {
                            // Only the first endpoint counts; later ones are ignored.
                            if let Some(t) = endpoint_tx.take() {
                                let checked = origin::check_endpoint(&base, &url).map(|()| url);
                                let refused = checked.is_err();
                                let _ = t.send(checked);
                                if refused {
                                    return;
                                }
                            }
                        }
                        Err(e) => tracing::warn!("invalid SSE endpoint {:?}: {e}", data.trim()),
                    }
                } else if kind == "message" && !data.is_empty() {
                    match serde_json::from_str::<RxJsonRpcMessage<RoleClient>>(&data) {
                        Ok(msg) => {
                            if tx.send(msg).await.is_err() {
                                return;
                            }
                        }
                        Err(e) => {
                            tracing::warn!("malformed JSON-RPC message on the SSE stream: {e}")
                        }
                    }
                }
                event.clear();
                data.clear();
            } else if let Some(v) = line.strip_prefix("event:") {
                event = v.trim().to_owned();
            } else if let Some(v) = line.strip_prefix("data:") {
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(v.strip_prefix(' ').unwrap_or(v));
            }
            // `id:`, `retry:` and comments are not needed by this transport.
        }
    }
}

impl Transport<RoleClient> for SseTransport {
    type Error = SseError;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        let http = self.http.clone();
        let endpoint = self.endpoint.clone();
        let headers = self.headers.clone();
        async move {
            let body = serde_json::to_vec(&item).map_err(|e| SseError::Encode(e.to_string()))?;
            let mut req = http
                .post(endpoint.clone())
                .header(CONTENT_TYPE, "application/json")
                .body(body);
            for (k, v) in headers.iter() {
                req = req.header(k, v);
            }
            let shown = format!("{}{}", origin::shown(&endpoint), endpoint.path());
            let resp = req.send().await.map_err(|e| SseError::Post {
                endpoint: shown.clone(),
                reason: origin::describe(&e),
            })?;
            if !resp.status().is_success() {
                return Err(SseError::Status {
                    endpoint: shown,
                    status: resp.status().as_u16(),
                });
            }
            Ok(())
        }
    }

    fn receive(
        &mut self,
    ) -> impl std::future::Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.incoming.recv()
    }

    fn close(&mut self) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send {
        self.reader.abort();
        std::future::ready(Ok(()))
    }
}
