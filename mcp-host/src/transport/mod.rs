//! Opening one MCP session over the configured transport: stdio (a child process in its own
//! process group), streamable HTTP (rmcp), or legacy HTTP+SSE (our client on rmcp's
//! transport trait). A session ends when its `Opened` is dropped: the child group is killed.
//! Credentials never leave their origin (see `origin`).

pub mod origin;
pub mod sse;
pub mod stdio;

use std::{collections::HashMap, sync::Arc, time::Duration};

use antler_protocol::config::{McpServerConfig, Transport};
use reqwest::header::{HeaderName, HeaderValue, AUTHORIZATION};
use rmcp::{
    service::RunningService,
    transport::{
        streamable_http_client::StreamableHttpClientTransportConfig, StreamableHttpClientTransport,
    },
    RoleClient, ServiceExt,
};

use crate::{client::Client, lifecycle::Lifecycle};

/// A live rmcp client session.
pub type Session = RunningService<RoleClient, Client>;

/// An open session and what must be cleaned up with it.
pub struct Opened {
    pub session: Session,
    /// The stdio child's process group, killed on drop.
    pub child: Option<stdio::ChildGroup>,
}

/// Why a session could not be opened. Never carries a token or secret.
#[derive(Debug, Clone, thiserror::Error)]
pub enum OpenError {
    #[error("cannot start `{command}`: {reason}")]
    Spawn { command: String, reason: String },
    #[error("initialize failed: {reason}{}", stderr_suffix(.stderr))]
    Initialize { reason: String, stderr: String },
    #[error("invalid header {name}: {reason}")]
    Header { name: String, reason: String },
    #[error("{0}")]
    Http(String),
}

fn stderr_suffix(stderr: &str) -> String {
    if stderr.trim().is_empty() {
        String::new()
    } else {
        format!("; stderr: {}", stderr.trim())
    }
}

/// What `open` needs beyond the server's config.
#[derive(Clone, Default)]
pub struct OpenOptions {
    /// The full `Authorization` value (`Bearer …`) for sse/http, from OAuth.
    pub authorization: Option<String>,
    /// A working directory overriding the config's (the pooled thread workspace).
    pub cwd: Option<String>,
    /// Extra environment for stdio (the pooled `TMPDIR`), under the server's configured `env`.
    pub default_env: Vec<(String, String)>,
    /// The session's first roots (the pooled thread workspace): directories on this host.
    pub roots: Vec<String>,
    /// The host's OAuth authorizers (sse/http); `None`: no OAuth at all.
    pub oauth: Option<Arc<crate::oauth::OAuthBroker>>,
    /// The user whose tokens the session uses (`None`: the default user).
    pub user: Option<String>,
}

/// The `WWW-Authenticate` challenge `url` answers an `initialize` with (sent with the
/// configured headers and `options.authorization`), if it answers 401 or 403 with one.
pub async fn challenge(
    url: &str,
    config: &McpServerConfig,
    options: &OpenOptions,
) -> Option<String> {
    let headers = headers(config, options).ok()?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .redirect(origin::redirect_policy())
        .build()
        .ok()?;
    let mut req = http
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"antler-mcp-host","version":"0"}}}"#,
        );
    for (k, v) in headers {
        req = req.header(k, v);
    }
    let resp = req.send().await.ok()?;
    if !matches!(resp.status().as_u16(), 401 | 403) {
        return None;
    }
    resp.headers()
        .get(reqwest::header::WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

impl std::fmt::Debug for OpenOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The authorization value is a token: never printed.
        f.debug_struct("OpenOptions")
            .field("cwd", &self.cwd)
            .field("roots", &self.roots)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// Opens a session to `name` over `transport`, starting it with `lifecycle` (legacy
/// HTTP+SSE has only `initialize`).
pub async fn open(
    name: &str,
    config: &McpServerConfig,
    transport: Transport,
    lifecycle: Lifecycle,
    client: Client,
    options: &OpenOptions,
) -> Result<Opened, OpenError> {
    match transport {
        Transport::Stdio => stdio::open(name, config, lifecycle, client, options).await,
        Transport::Http => {
            let url = config.url.clone().unwrap_or_default();
            let headers = headers(config, options)?;
            let redirects = origin::RedirectGuard::default();
            let http = reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .redirect(redirects.policy())
                .build()
                .map_err(|e| OpenError::Http(e.to_string()))?;
            let cfg = StreamableHttpClientTransportConfig::with_uri(Arc::<str>::from(url.as_str()))
                .custom_headers(headers)
                .max_concurrent_requests(64);
            let t = StreamableHttpClientTransport::with_client(http, cfg);
            let session = lifecycle
                .serve(client, t)
                .await
                .map_err(|e| OpenError::Initialize {
                    reason: match redirects.refusal() {
                        Some(refused) => refused.to_string(),
                        None => http_reason(&e.to_string()),
                    },
                    stderr: String::new(),
                })?;
            Ok(Opened {
                session,
                child: None,
            })
        }
        Transport::Sse => {
            let url = config.url.clone().unwrap_or_default();
            let headers = headers(config, options)?;
            let t = sse::SseTransport::connect(&url, headers).await?;
            let session = client.serve(t).await.map_err(|e| OpenError::Initialize {
                reason: e.to_string(),
                stderr: String::new(),
            })?;
            Ok(Opened {
                session,
                child: None,
            })
        }
    }
}

/// rmcp's initialize error for HTTP, said the way an operator reads it: the HTTP status
/// first, without the transport's type names.
fn http_reason(raw: &str) -> String {
    let mut text = raw.to_owned();
    if let (Some(a), Some(b)) = (text.find("Transport ["), text.find("] error: ")) {
        if a < b {
            text.replace_range(a..b + "] error: ".len(), "");
        }
    }
    if text.contains("Auth required") {
        format!("HTTP 401 Unauthorized ({text})")
    } else {
        text
    }
}

/// The configured headers plus the OAuth `Authorization`, as HTTP header values.
pub fn headers(
    config: &McpServerConfig,
    options: &OpenOptions,
) -> Result<HashMap<HeaderName, HeaderValue>, OpenError> {
    let mut out = HashMap::new();
    for (k, v) in config.headers.iter() {
        let name = HeaderName::from_bytes(k.as_bytes()).map_err(|e| OpenError::Header {
            name: k.to_owned(),
            reason: e.to_string(),
        })?;
        let value = HeaderValue::from_str(v).map_err(|_| OpenError::Header {
            name: k.to_owned(),
            reason: "the value is not a valid header value".into(),
        })?;
        out.insert(name, value);
    }
    if let Some(auth) = &options.authorization {
        let mut value = HeaderValue::from_str(auth).map_err(|_| OpenError::Header {
            name: "Authorization".into(),
            reason: "the token is not a valid header value".into(),
        })?;
        value.set_sensitive(true);
        out.insert(AUTHORIZATION, value);
    }
    Ok(out)
}
