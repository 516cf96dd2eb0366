//! [`OllamaModel`]: a [`ChatModel`] over Ollama's native chat API
//! (`POST {base_url}/api/chat`, NDJSON streaming), DeerFlow's
//! `langchain_ollama:ChatOllama`, with the base URL its users write
//! (`http://localhost:11434`; a `/v1` they add is dropped, so the native API is spoken
//! either way). It owns one model's settings, its endpoint and a handle on the
//! process's shared HTTP client; retries, deadlines and key redaction are
//! `model::transport`'s.
//!
//! `config` reads the `models:` entry, `wire` builds requests and assembles replies.

pub mod config;
pub mod wire;

#[cfg(test)]
mod tests;

use antler_protocol::config::ModelConfig;
use futures::future::BoxFuture;
use reqwest::header::AUTHORIZATION;

pub use config::{OllamaConfig, USE_CHAT_OLLAMA};

use crate::model::transport::{header_value, model_client, Endpoint};
use crate::model::{ChatModel, ModelError, ModelReply, ModelRequest, SubagentRequest, WireModel};
use wire::ReplyAssembler;

/// What a 404 from Ollama usually means; `{model}` is the model sent.
pub const NOT_FOUND_HINT: &str = "check that Ollama has the model `{model}` (`ollama pull {model}`) and the base_url (Antler posts to <base_url>/api/chat, e.g. http://localhost:11434)";

/// A chat model behind Ollama's native API.
#[derive(Clone, Debug)]
pub struct OllamaModel {
    config: OllamaConfig,
    endpoint: Endpoint,
    http: reqwest::Client,
}

impl OllamaModel {
    pub fn new(config: OllamaConfig) -> Result<OllamaModel, ModelError> {
        let common = &config.common;
        let http = model_client(&common.name, common.connect_timeout)?;
        let mut headers = Vec::new();
        if let Some(key) = &common.api_key {
            headers.push((
                AUTHORIZATION,
                header_value(
                    &common.name,
                    "Authorization",
                    &format!("Bearer {}", key.expose()),
                )?,
            ));
        }
        let endpoint = Endpoint {
            model: common.name.clone(),
            url: config.url(),
            headers,
            secret: common.api_key.clone(),
            retry: common.retry,
            request_timeout: common.request_timeout,
            idle_timeout: common.idle_timeout,
            not_found_hint: Some(NOT_FOUND_HINT.replace("{model}", &common.model)),
        };
        Ok(OllamaModel {
            config,
            endpoint,
            http,
        })
    }

    /// The model of one `models:` entry.
    pub fn from_model_config(
        entry: &ModelConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<OllamaModel, ModelError> {
        OllamaModel::new(OllamaConfig::from_model_config(entry, env)?)
    }

    async fn call(&self, request: ModelRequest<'_>) -> Result<ModelReply, ModelError> {
        let body = wire::request_body(&self.config, &request);
        self.endpoint
            .send(&self.http, &body, request.observer, || {
                ReplyAssembler::new(&self.config.common.name, &request)
            })
            .await
    }
}

impl ChatModel for OllamaModel {
    fn name(&self) -> &str {
        &self.config.common.name
    }

    fn provider_name(&self) -> &'static str {
        super::provider::GEN_AI_OLLAMA
    }

    fn for_subagent(&self, _task: &dyn SubagentRequest) -> Option<WireModel> {
        Some(WireModel::Entry {
            entry: self.config.entry.clone(),
        })
    }

    fn complete<'a>(
        &'a self,
        request: ModelRequest<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(self.call(request))
    }
}
