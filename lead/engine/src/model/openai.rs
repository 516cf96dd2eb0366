//! [`OpenAiModel`]: a [`ChatModel`] over any OpenAI-compatible `/chat/completions`
//! endpoint (OpenAI, DeepSeek, vLLM, Ollama, llama.cpp...). It owns one endpoint and a
//! handle on the process's shared HTTP client (built once, see `http_clients`); each call
//! streams the reply (a server that answers with plain JSON is read too), retries 429,
//! 5xx and connection errors (a stream cut mid-reply included) with backoff, and runs
//! each attempt under a deadline and an idle-stream deadline; a deadline that passes is
//! final, not retried. The API key never leaves its header (`Authorization`, Azure's
//! `api-key`): errors, logs and `Debug` do not show it. A tool call whose arguments are
//! not a JSON object is an [`InvalidToolCall`](crate::model::InvalidToolCall), never a
//! call.
//!
//! `config` turns a `models:` entry into an [`OpenAiConfig`], `wire` holds the request
//! and reply formats, `thinking` DeerFlow's thinking toggle (spec D.2), `azure` the
//! Azure OpenAI deployment URLs and `api-key` header; the HTTP exchange, retries and
//! deadlines are `model::transport`'s.

pub mod azure;
pub mod config;
pub mod thinking;
pub mod wire;

#[cfg(test)]
mod tests;

use antler_protocol::config::ModelConfig;
use futures::future::BoxFuture;
use reqwest::header::AUTHORIZATION;

pub use config::{ApiKey, OpenAiConfig, USE_CHAT_DEEPSEEK, USE_CHAT_OPENAI};

use crate::model::transport::{header_value, model_client, Endpoint};
use crate::model::{ChatModel, ModelError, ModelReply, ModelRequest};
use wire::ReplyAssembler;

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

/// A chat model behind an OpenAI-compatible endpoint (or an Azure deployment).
#[derive(Clone)]
pub struct OpenAiModel {
    config: OpenAiConfig,
    endpoint: Endpoint,
    http: reqwest::Client,
    /// The entry a subagent's worker builds the same model from (endpoint and key
    /// written out).
    wire: ModelConfig,
}

impl std::fmt::Debug for OpenAiModel {
    // Never the wire entry: it holds the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiModel")
            .field("config", &self.config)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl OpenAiModel {
    /// A model for `config`.
    pub fn new(config: OpenAiConfig) -> Result<OpenAiModel, ModelError> {
        let wire = config.to_entry();
        OpenAiModel::with_wire(config, wire)
    }

    fn with_wire(config: OpenAiConfig, wire: ModelConfig) -> Result<OpenAiModel, ModelError> {
        // One client per connect timeout in the process, shared by every run and model.
        let http = model_client(&config.name, config.connect_timeout)?;
        let mut headers = Vec::new();
        if let Some(key) = &config.api_key {
            headers.push((
                AUTHORIZATION,
                header_value(
                    &config.name,
                    "Authorization",
                    &format!("Bearer {}", key.expose()),
                )?,
            ));
        }
        let endpoint = Endpoint {
            model: config.name.clone(),
            url: config.endpoint(),
            headers,
            secret: config.api_key.clone(),
            retry: config.retry,
            request_timeout: config.request_timeout,
            idle_timeout: config.idle_timeout,
            not_found_hint: Some(not_found_hint(&config.base_url, &config.model)),
        };
        Ok(OpenAiModel::from_parts(config, endpoint, http, wire))
    }

    /// A model from its settings, its endpoint and the entry a worker rebuilds it from.
    pub(crate) fn from_parts(
        config: OpenAiConfig,
        endpoint: Endpoint,
        http: reqwest::Client,
        wire: ModelConfig,
    ) -> OpenAiModel {
        OpenAiModel {
            config,
            endpoint,
            http,
            wire,
        }
    }

    /// A model for one `models:` entry (see [`OpenAiConfig::from_model_config`]).
    pub fn from_model_config(
        config: &ModelConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<OpenAiModel, ModelError> {
        let built = OpenAiConfig::from_model_config(config, env)?;
        let mut wire = config.clone();
        wire.base_url = Some(built.base_url.clone());
        wire.api_key = built.api_key.as_ref().map(|k| k.expose().to_owned());
        OpenAiModel::with_wire(built, wire)
    }

    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }

    /// The URL requests go to (`/chat/completions`, or an Azure deployment's).
    pub fn endpoint(&self) -> &str {
        &self.endpoint.url
    }

    async fn call(&self, request: ModelRequest<'_>) -> Result<ModelReply, ModelError> {
        let body = wire::request_body(&self.config, &request);
        self.endpoint
            .send(&self.http, &body, request.observer, || {
                ReplyAssembler::new(&self.config.name, &request)
            })
            .await
    }
}

impl ChatModel for OpenAiModel {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn provider_name(&self) -> &'static str {
        super::provider::gen_ai_provider_name(&self.wire)
    }

    fn for_subagent(
        &self,
        _task: &dyn crate::model::SubagentRequest,
    ) -> Option<crate::model::WireModel> {
        Some(crate::model::WireModel::Entry {
            entry: self.wire.clone(),
        })
    }

    fn complete<'a>(
        &'a self,
        request: ModelRequest<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(self.call(request))
    }
}
