//! [`OpenAiModel`]: a [`ChatModel`] over any OpenAI-compatible `/chat/completions`
//! endpoint (OpenAI, DeepSeek, vLLM, Ollama, llama.cpp...). It owns one endpoint and a
//! handle on the process's shared HTTP client (built once, see `http_clients`); each call streams the reply (a server that answers with plain JSON is
//! read too), retries 429, 5xx and connection errors (a stream cut mid-reply included)
//! with backoff, and runs each attempt under a deadline and an idle-stream deadline; a
//! deadline that passes is final, not retried. The API key never leaves the
//! `Authorization` header: errors, logs and `Debug` do not show it. A tool call whose
//! arguments are not a JSON object fails the whole reply with
//! [`ModelError::InvalidToolArguments`] naming the tool: no half-parsed call reaches a
//! tool, and the caller decides whether to ask the model again.
//!
//! `config` turns a `models:` entry into an [`OpenAiConfig`], `wire` holds the request
//! and reply formats, `retry` the retry schedule. The run command calls
//! [`model_from_config`].

pub mod config;
pub mod retry;
pub mod wire;

#[cfg(test)]
mod tests;

use std::error::Error as _;
use std::sync::Arc;
use std::time::Duration;

use antler_protocol::config::{AppConfig, ModelConfig};
use futures::future::BoxFuture;
use futures::StreamExt;
use reqwest::header::{CONTENT_TYPE, RETRY_AFTER};
use serde_json::Value;

pub use config::{ApiKey, OpenAiConfig, USE_CHAT_DEEPSEEK, USE_CHAT_OPENAI};

use crate::http_clients::{shared_client, ClientKind};
use crate::model::{ChatModel, ModelError, ModelReply, ModelRequest};
use wire::{ReplyAssembler, SseDecoder, SseEvent};

/// The chat model a run uses: `models:` entry `name` (the first when `None`), or, with
/// no `models:` at all, the default model the environment describes
/// (`OPENAI_BASE_URL`/`ANTLER_MODEL_BASE_URL`, `OPENAI_MODEL`/`ANTLER_MODEL`,
/// `OPENAI_API_KEY`). See [`OpenAiConfig::from_model_config`] for the accepted `use:`
/// values and keys. `env` looks up environment variables
/// (`antler_protocol::config::env::process_env` in production).
pub fn model_from_config(
    app: &AppConfig,
    name: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Arc<dyn ChatModel>, ModelError> {
    let config = config::select_model_config(app, name, env)?;
    Ok(Arc::new(OpenAiModel::from_model_config(&config, env)?))
}

/// What a 404 from a `base_url` without `/v1` usually means; `{url}` is the base URL
/// with `/v1` added.
pub const NOT_FOUND_MISSING_V1: &str = "the base_url is probably missing `/v1` (OpenAI-compatible servers such as llama.cpp, vLLM and Ollama serve /v1/chat/completions): try base_url: {url}";
/// What else a 404 usually means; `{model}` is the model name sent.
pub const NOT_FOUND_CHECK: &str = "check the model's base_url (Antler posts to <base_url>/chat/completions) and that the server serves the model `{model}`";

/// What is usually wrong when `base_url` answers 404 for `model`.
pub fn not_found_hint(base_url: &str, model: &str) -> String {
    let base = base_url.trim_end_matches('/');
    let has_version = base.rsplit('/').next().is_some_and(|last| {
        last.len() >= 2 && last.starts_with('v') && last[1..].bytes().all(|b| b.is_ascii_digit())
    });
    if has_version {
        NOT_FOUND_CHECK.replace("{model}", model)
    } else {
        NOT_FOUND_MISSING_V1.replace("{url}", &format!("{base}/v1"))
    }
}

/// A chat model behind an OpenAI-compatible endpoint.
#[derive(Clone, Debug)]
pub struct OpenAiModel {
    config: OpenAiConfig,
    endpoint: String,
    http: reqwest::Client,
}

/// Why one attempt failed, before the retry decision.
#[derive(Debug)]
enum Failure {
    /// An HTTP error status.
    Status {
        status: u16,
        message: String,
        retry_after: Option<Duration>,
    },
    /// The connection failed or dropped before the reply was complete.
    Connection(String),
    /// Not worth another attempt.
    Final(ModelError),
}

impl OpenAiModel {
    /// A model for `config`.
    pub fn new(config: OpenAiConfig) -> Result<OpenAiModel, ModelError> {
        // One client per connect timeout in the process, shared by every run and model.
        let http = shared_client(ClientKind::Model {
            connect_timeout: config.connect_timeout,
        })
        .map_err(|e| ModelError::InvalidConfig {
            model: config.name.clone(),
            message: format!("cannot build the HTTP client: {}", error_chain(&e)),
        })?;
        Ok(OpenAiModel {
            endpoint: config.endpoint(),
            config,
            http,
        })
    }

    /// A model for one `models:` entry (see [`OpenAiConfig::from_model_config`]).
    pub fn from_model_config(
        config: &ModelConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<OpenAiModel, ModelError> {
        OpenAiModel::new(OpenAiConfig::from_model_config(config, env)?)
    }

    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }

    /// The `/chat/completions` URL requests go to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    async fn call(&self, request: ModelRequest<'_>) -> Result<ModelReply, ModelError> {
        let body = wire::request_body(&self.config, &request);
        let retry = self.config.retry;
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let outcome =
                tokio::time::timeout(self.config.request_timeout, self.attempt(&body, &request))
                    .await;
            let failure = match outcome {
                Ok(Ok(reply)) => return Ok(reply),
                Ok(Err(failure)) => failure,
                Err(_elapsed) => {
                    return Err(ModelError::Timeout {
                        model: self.config.name.clone(),
                        what: "the request",
                        secs: self.config.request_timeout.as_secs_f64(),
                    })
                }
            };
            let (retryable, retry_after, reason) = match &failure {
                Failure::Final(_) => (false, None, String::new()),
                Failure::Status {
                    status,
                    retry_after,
                    ..
                } => (
                    retry::is_retryable_status(*status),
                    *retry_after,
                    format!("HTTP {status}"),
                ),
                Failure::Connection(message) => (true, None, message.clone()),
            };
            if !retryable || attempts > retry.max_retries {
                return Err(self.final_error(failure, attempts));
            }
            let delay = retry.delay(attempts, retry_after, fastrand::f64());
            tracing::warn!(
                model = %self.config.name,
                attempt = attempts,
                delay_ms = delay.as_millis() as u64,
                %reason,
                "model request failed; retrying"
            );
            tokio::time::sleep(delay).await;
        }
    }

    fn final_error(&self, failure: Failure, attempts: u32) -> ModelError {
        let model = self.config.name.clone();
        match failure {
            Failure::Final(error) => error,
            Failure::Status {
                status: 404,
                message,
                ..
            } => ModelError::EndpointNotFound {
                hint: not_found_hint(&self.config.base_url, &self.config.model),
                url: self.endpoint.clone(),
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
                url: self.endpoint.clone(),
                attempts,
                message,
            },
        }
    }

    /// One HTTP attempt, reading the whole reply.
    async fn attempt(
        &self,
        body: &Value,
        request: &ModelRequest<'_>,
    ) -> Result<ModelReply, Failure> {
        let mut builder = self
            .http
            .post(&self.endpoint)
            .header(
                reqwest::header::ACCEPT,
                "text/event-stream, application/json",
            )
            .json(body);
        if let Some(key) = &self.config.api_key {
            builder = builder.bearer_auth(key.expose());
        }
        let response = builder.send().await.map_err(|e| {
            if e.is_builder() {
                Failure::Final(ModelError::InvalidConfig {
                    model: self.config.name.clone(),
                    message: self.redact(&error_chain(&e)),
                })
            } else {
                Failure::Connection(self.redact(&error_chain(&e)))
            }
        })?;

        let status = response.status();
        if !status.is_success() {
            let retry_after = response
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(retry::parse_retry_after);
            let text = response.text().await.unwrap_or_default();
            return Err(Failure::Status {
                status: status.as_u16(),
                message: self.redact(&wire::server_message(&text)),
                retry_after,
            });
        }

        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        let mut assembler = ReplyAssembler::new(&self.config.name, request);
        if content_type.starts_with("text/event-stream") {
            self.read_stream(response, &mut assembler).await?;
        } else {
            self.read_whole(response, &mut assembler).await?;
        }
        assembler.finish().map_err(Failure::Final)
    }

    /// Reads an SSE reply chunk by chunk, each within the idle deadline.
    async fn read_stream(
        &self,
        response: reqwest::Response,
        assembler: &mut ReplyAssembler,
    ) -> Result<(), Failure> {
        let mut stream = response.bytes_stream();
        let mut decoder = SseDecoder::default();
        loop {
            let next = tokio::time::timeout(self.config.idle_timeout, stream.next())
                .await
                .map_err(|_| {
                    Failure::Final(ModelError::Timeout {
                        model: self.config.name.clone(),
                        what: "waiting for the next stream chunk",
                        secs: self.config.idle_timeout.as_secs_f64(),
                    })
                })?;
            let (events, ended) = match next {
                Some(Ok(bytes)) => (decoder.push(&bytes), false),
                Some(Err(e)) => return Err(Failure::Connection(self.redact(&error_chain(&e)))),
                None => (decoder.finish().into_iter().collect(), true),
            };
            for event in events {
                match event {
                    SseEvent::Data(data) => assembler.push_chunk(&data).map_err(Failure::Final)?,
                    SseEvent::Done => return Ok(()),
                }
            }
            if ended {
                // The body ended without `[DONE]`: complete only if a choice finished.
                return if assembler.finished() {
                    Ok(())
                } else {
                    Err(Failure::Connection(
                        "the stream closed before the reply finished".to_owned(),
                    ))
                };
            }
        }
    }

    /// Reads a reply sent whole: a JSON completion, or SSE sent as one body.
    async fn read_whole(
        &self,
        response: reqwest::Response,
        assembler: &mut ReplyAssembler,
    ) -> Result<(), Failure> {
        let bytes = response
            .bytes()
            .await
            .map_err(|e| Failure::Connection(self.redact(&error_chain(&e))))?;
        let text = String::from_utf8_lossy(&bytes);
        if text.trim_start().starts_with("data:") {
            let mut decoder = SseDecoder::default();
            let events = decoder.push(&bytes).into_iter().chain(decoder.finish());
            for event in events {
                match event {
                    SseEvent::Data(data) => assembler.push_chunk(&data).map_err(Failure::Final)?,
                    SseEvent::Done => break,
                }
            }
            return Ok(());
        }
        let completion: Value = serde_json::from_str(&text).map_err(|e| {
            Failure::Final(ModelError::InvalidReply {
                model: self.config.name.clone(),
                message: format!("the reply is not JSON ({e}): {}", wire::quote(&text)),
            })
        })?;
        assembler
            .push_completion(&completion)
            .map_err(Failure::Final)
    }

    /// `text` with the API key, should a server echo it, replaced.
    fn redact(&self, text: &str) -> String {
        match &self.config.api_key {
            Some(key) if !key.expose().is_empty() => text.replace(key.expose(), "<redacted>"),
            _ => text.to_owned(),
        }
    }
}

impl ChatModel for OpenAiModel {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn for_subagent(
        &self,
        _task: &dyn crate::model::SubagentRequest,
    ) -> Option<crate::model::WireModel> {
        Some(crate::model::WireModel::of_openai(&self.config))
    }

    fn complete<'a>(
        &'a self,
        request: ModelRequest<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(self.call(request))
    }
}

/// A reqwest error and its causes, without the URL (the error names the endpoint
/// itself).
fn error_chain(error: &reqwest::Error) -> String {
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
