//! One model request over HTTP, whatever the provider: post a JSON body, read the reply
//! as a stream (SSE or NDJSON, each item within the idle deadline) or as one JSON body,
//! and hand every item to the provider's [`ReplyReader`]. Retries 429, 5xx and
//! connection errors (a stream cut mid-reply included) with backoff and jitter, or after
//! the server's `retry-after-ms`/`Retry-After`; each retry is told to the request's
//! observer. Each attempt runs under the request deadline; a deadline that passes is
//! final. Invariant: the secret of an endpoint (its API key) is never in an error, a log
//! or an event: every server text passes [`Endpoint::redact`].

use std::error::Error as _;
use std::time::Duration;

use futures::StreamExt;
use reqwest::header::{HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use serde_json::Value;

use super::entry::ApiKey;
use super::retry::{self, RetryPolicy};
use super::stream::{Framing, StreamDecoder, StreamItem};
use super::{ModelError, ModelObserver, ModelReply, RetryNotice};

/// What a provider's reader does after one streamed item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// The reply is complete (`[DONE]`, `message_stop`, `response.completed`, `done`).
    Done,
}

/// A provider's parser of one reply: items of a stream, or a whole JSON body.
pub trait ReplyReader: Send {
    /// One streamed item.
    fn item(&mut self, item: &StreamItem) -> Result<Flow, ModelError>;
    /// A reply sent whole.
    fn whole(&mut self, body: &Value) -> Result<(), ModelError>;
    /// Whether the reply said it was complete: a stream whose body ends without the
    /// provider's end marker is a complete reply only then, and a cut one otherwise.
    fn finished(&self) -> bool;
    /// The reply.
    fn finish(self) -> Result<ModelReply, ModelError>;
}

/// Where and how one model's requests go.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// The model's config name, for errors.
    pub model: String,
    pub url: String,
    /// Headers of every request (authentication, API version...).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Redacted from every text the server sends back.
    pub secret: Option<ApiKey>,
    pub retry: RetryPolicy,
    pub request_timeout: Duration,
    pub idle_timeout: Duration,
    /// What a 404 usually means for this provider (`None`: the server's text only).
    pub not_found_hint: Option<String>,
}

/// Why one attempt failed, before the retry decision.
#[derive(Debug)]
enum Failure {
    Status {
        status: u16,
        message: String,
        retry_after: Option<Duration>,
    },
    Connection(String),
    Final(ModelError),
}

impl Endpoint {
    /// Posts `body` and reads the reply with a fresh reader per attempt, retrying as the
    /// module says.
    pub async fn send<R: ReplyReader>(
        &self,
        http: &reqwest::Client,
        body: &Value,
        observer: Option<&dyn ModelObserver>,
        new_reader: impl Fn() -> R,
    ) -> Result<ModelReply, ModelError> {
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let outcome =
                tokio::time::timeout(self.request_timeout, self.attempt(http, body, new_reader()))
                    .await;
            let failure = match outcome {
                Ok(Ok(reply)) => return Ok(reply),
                Ok(Err(failure)) => failure,
                Err(_elapsed) => {
                    return Err(ModelError::Timeout {
                        model: self.model.clone(),
                        what: "the request",
                        secs: self.request_timeout.as_secs_f64(),
                    })
                }
            };
            let (retryable, retry_after, reason) = match &failure {
                Failure::Final(_) => (false, None, String::new()),
                Failure::Status {
                    status,
                    retry_after,
                    message,
                } => (
                    retry::is_retryable_status(*status),
                    *retry_after,
                    format!("HTTP {status}: {message}"),
                ),
                Failure::Connection(message) => (true, None, message.clone()),
            };
            if !retryable || attempts > self.retry.max_retries {
                return Err(self.final_error(failure, attempts));
            }
            let delay = self.retry.delay(attempts, retry_after, fastrand::f64());
            tracing::warn!(
                model = %self.model,
                attempt = attempts,
                delay_ms = delay.as_millis() as u64,
                %reason,
                "model request failed; retrying"
            );
            if let Some(observer) = observer {
                observer.retry(&RetryNotice {
                    model: self.model.clone(),
                    attempt: attempts,
                    max_attempts: self.retry.max_retries + 1,
                    wait: delay,
                    reason,
                });
            }
            tokio::time::sleep(delay).await;
        }
    }

    fn final_error(&self, failure: Failure, attempts: u32) -> ModelError {
        let model = self.model.clone();
        match failure {
            Failure::Final(error) => error,
            Failure::Status {
                status: 404,
                message,
                ..
            } if self.not_found_hint.is_some() => ModelError::EndpointNotFound {
                hint: self.not_found_hint.clone().unwrap_or_default(),
                url: self.url.clone(),
                message,
                model,
            },
            Failure::Status {
                status, message, ..
            } => ModelError::Http {
                model,
                status,
                attempts,
                message,
            },
            Failure::Connection(message) => ModelError::Connection {
                model,
                url: self.url.clone(),
                attempts,
                message,
            },
        }
    }

    async fn attempt<R: ReplyReader>(
        &self,
        http: &reqwest::Client,
        body: &Value,
        mut reader: R,
    ) -> Result<ModelReply, Failure> {
        let mut builder = http
            .post(&self.url)
            .header(
                reqwest::header::ACCEPT,
                "text/event-stream, application/x-ndjson, application/json",
            )
            .json(body);
        for (name, value) in &self.headers {
            builder = builder.header(name, value);
        }
        let response = builder.send().await.map_err(|e| {
            if e.is_builder() {
                Failure::Final(ModelError::InvalidConfig {
                    model: self.model.clone(),
                    message: self.redact(&error_chain(&e)),
                })
            } else {
                Failure::Connection(self.redact(&error_chain(&e)))
            }
        })?;

        let status = response.status();
        if !status.is_success() {
            let retry_after = retry_after(response.headers());
            let text = response.text().await.unwrap_or_default();
            return Err(Failure::Status {
                status: status.as_u16(),
                message: self.redact(&server_message(&text)),
                retry_after,
            });
        }

        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        let framing = if content_type.starts_with("text/event-stream") {
            Some(Framing::Sse)
        } else if content_type.starts_with("application/x-ndjson") {
            Some(Framing::Ndjson)
        } else {
            None
        };
        match framing {
            Some(framing) => self.read_stream(response, framing, &mut reader).await?,
            None => self.read_whole(response, &mut reader).await?,
        }
        reader.finish().map_err(Failure::Final)
    }

    /// Reads a streamed reply chunk by chunk, each within the idle deadline.
    async fn read_stream<R: ReplyReader>(
        &self,
        response: reqwest::Response,
        framing: Framing,
        reader: &mut R,
    ) -> Result<(), Failure> {
        let mut stream = response.bytes_stream();
        let mut decoder = StreamDecoder::new(framing);
        loop {
            let next = tokio::time::timeout(self.idle_timeout, stream.next())
                .await
                .map_err(|_| {
                    Failure::Final(ModelError::Timeout {
                        model: self.model.clone(),
                        what: "waiting for the next stream chunk",
                        secs: self.idle_timeout.as_secs_f64(),
                    })
                })?;
            let (items, ended) = match next {
                Some(Ok(bytes)) => (decoder.push(&bytes), false),
                Some(Err(e)) => return Err(Failure::Connection(self.redact(&error_chain(&e)))),
                None => (decoder.finish(), true),
            };
            for item in &items {
                if reader.item(item).map_err(Failure::Final)? == Flow::Done {
                    return Ok(());
                }
            }
            if ended {
                // The body ended without the end marker: whole only if the reply said so.
                return if reader.finished() {
                    Ok(())
                } else {
                    Err(Failure::Connection(
                        "the stream closed before the reply finished".to_owned(),
                    ))
                };
            }
        }
    }

    /// Reads a reply sent whole: one JSON body, or a stream sent with the wrong type.
    async fn read_whole<R: ReplyReader>(
        &self,
        response: reqwest::Response,
        reader: &mut R,
    ) -> Result<(), Failure> {
        let bytes = response
            .bytes()
            .await
            .map_err(|e| Failure::Connection(self.redact(&error_chain(&e))))?;
        let text = String::from_utf8_lossy(&bytes);
        let trimmed = text.trim_start();
        if trimmed.starts_with("data:") || trimmed.starts_with("event:") {
            let mut decoder = StreamDecoder::new(Framing::Sse);
            let items = decoder.push(&bytes).into_iter().chain(decoder.finish());
            for item in items {
                if reader.item(&item).map_err(Failure::Final)? == Flow::Done {
                    break;
                }
            }
            return Ok(());
        }
        let body: Value = match serde_json::from_str(&text) {
            Ok(body) => body,
            Err(e) => {
                // Several JSON lines without an NDJSON type.
                if trimmed.starts_with('{') && text.trim().contains('\n') {
                    let mut decoder = StreamDecoder::new(Framing::Ndjson);
                    let items = decoder.push(&bytes).into_iter().chain(decoder.finish());
                    for item in items {
                        if reader.item(&item).map_err(Failure::Final)? == Flow::Done {
                            break;
                        }
                    }
                    return Ok(());
                }
                return Err(Failure::Final(ModelError::InvalidReply {
                    model: self.model.clone(),
                    message: format!("the reply is not JSON ({e}): {}", quote(&text)),
                }));
            }
        };
        reader.whole(&body).map_err(Failure::Final)
    }

    /// `text` with the endpoint's secret, should a server echo it, replaced.
    pub fn redact(&self, text: &str) -> String {
        match &self.secret {
            Some(secret) if !secret.expose().is_empty() => {
                text.replace(secret.expose(), "<redacted>")
            }
            _ => text.to_owned(),
        }
    }
}

/// The wait a failed reply asks for: `retry-after-ms` (OpenAI, Anthropic) before
/// `Retry-After` (seconds or an HTTP date).
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let millis = headers
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|ms| ms.is_finite() && *ms >= 0.0)
        .map(|ms| Duration::from_secs_f64(ms / 1000.0));
    millis.or_else(|| {
        headers
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(retry::parse_retry_after)
    })
}

/// The most a server's text is quoted in an error.
pub const QUOTE_LIMIT: usize = 500;

/// A failure a server reported inside a 200 stream: with `status`, the HTTP status the
/// provider's error code stands for (an overload, a rate limit, a server error), it fails
/// the call as that status, so the run's model retries it as it would before the stream;
/// without one it is an invalid reply. Each provider maps its own codes to `status`.
pub fn in_stream_failure(model: &str, status: Option<u16>, message: String) -> ModelError {
    match status {
        Some(status) => ModelError::Http {
            model: model.to_owned(),
            status,
            attempts: 1,
            message,
        },
        None => ModelError::InvalidReply {
            model: model.to_owned(),
            message,
        },
    }
}

/// `text` cut to [`QUOTE_LIMIT`] characters, with `…` when cut.
pub fn quote(text: &str) -> String {
    match text.char_indices().nth(QUOTE_LIMIT) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// The message of an error body (`{"error": {"message"}}`, `{"error": "…"}`, Anthropic's
/// `{"type":"error","error":{…}}`, Gemini's `{"error":{"message"}}`, FastAPI's
/// `{"detail": …}`), else the body itself; truncated.
pub fn server_message(body: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let text = match parsed {
        Some(value) => match (value.get("error"), value.get("detail")) {
            (Some(error), _) => error_text(error),
            (None, Some(Value::String(detail))) => detail.clone(),
            (None, Some(detail)) => detail.to_string(),
            (None, None) => body.trim().to_owned(),
        },
        None => body.trim().to_owned(),
    };
    if text.is_empty() {
        "(empty body)".to_owned()
    } else {
        quote(&text)
    }
}

/// The text of an `error` value: a string, or its `message`.
pub fn error_text(error: &Value) -> String {
    match error {
        Value::String(s) => s.clone(),
        other => match other.get("message").and_then(Value::as_str) {
            Some(message) => message.to_owned(),
            None => other.to_string(),
        },
    }
}

/// A reqwest error and its causes, without the URL (the error names the endpoint
/// itself).
pub fn error_chain(error: &reqwest::Error) -> String {
    let mut text = if error.is_timeout() {
        "timed out".to_owned()
    } else if error.is_connect() {
        "connection failed".to_owned()
    } else {
        "request failed".to_owned()
    };
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// The process's shared HTTP client for model endpoints with this connect timeout.
pub fn model_client(model: &str, connect_timeout: Duration) -> Result<reqwest::Client, ModelError> {
    crate::http_clients::shared_client(crate::http_clients::ClientKind::Model { connect_timeout })
        .map_err(|e| ModelError::InvalidConfig {
            model: model.to_owned(),
            message: format!("cannot build the HTTP client: {}", error_chain(&e)),
        })
}

/// A header value from a setting, or a config error naming the header (the value itself
/// is never shown: it is usually a key).
pub fn header_value(model: &str, header: &str, value: &str) -> Result<HeaderValue, ModelError> {
    let mut value = HeaderValue::from_str(value).map_err(|_| ModelError::InvalidConfig {
        model: model.to_owned(),
        message: format!("the value for the {header} header is not a valid header value"),
    })?;
    // `Debug` of a sensitive value prints `Sensitive`, never the key.
    value.set_sensitive(true);
    Ok(value)
}
