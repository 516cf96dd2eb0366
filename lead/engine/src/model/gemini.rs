//! [`GeminiModel`]: a [`ChatModel`] over Google's Gemini API
//! (`{base_url}/v1beta/models/{model}:streamGenerateContent?alt=sse`, or
//! `:generateContent` when streaming is off), DeerFlow's
//! `langchain_google_genai:ChatGoogleGenerativeAI`. It owns one model's settings, its two
//! endpoints and a handle on the process's shared HTTP client; retries, deadlines and
//! key redaction are `model::transport`'s. The key travels in the `x-goog-api-key`
//! header only, never in a URL, so no error can show it.
//!
//! `config` reads the `models:` entry, `request` builds the request, `schema` turns tool
//! schemas into Gemini's subset (and lists what is lost), `reply` assembles the reply.

pub mod config;
pub mod reply;
pub mod request;
pub mod schema;

#[cfg(test)]
mod tests;

use antler_protocol::config::ModelConfig;
use futures::future::BoxFuture;
use reqwest::header::HeaderName;

pub use config::{GeminiConfig, Streaming, USE_CHAT_GEMINI};

use crate::model::transport::{header_value, model_client, Endpoint};
use crate::model::{ChatModel, ModelError, ModelReply, ModelRequest, SubagentRequest, WireModel};
use reply::ReplyAssembler;

/// What a 404 from Gemini usually means.
pub const NOT_FOUND_HINT: &str = "check the model id (e.g. gemini-2.5-flash) and the base_url (Antler posts to <base_url>/v1beta/models/<model>:streamGenerateContent)";

/// A chat model behind the Gemini API.
#[derive(Clone, Debug)]
pub struct GeminiModel {
    config: GeminiConfig,
    streamed: Endpoint,
    whole: Endpoint,
    http: reqwest::Client,
}

impl GeminiModel {
    pub fn new(config: GeminiConfig) -> Result<GeminiModel, ModelError> {
        let common = &config.common;
        let http = model_client(&common.name, common.connect_timeout)?;
        let mut headers = Vec::new();
        if let Some(key) = &common.api_key {
            headers.push((
                HeaderName::from_static(config::API_KEY_HEADER),
                header_value(&common.name, config::API_KEY_HEADER, key.expose())?,
            ));
        }
        let streamed = Endpoint {
            model: common.name.clone(),
            url: config.url(true),
            headers,
            secret: common.api_key.clone(),
            retry: common.retry,
            request_timeout: common.request_timeout,
            idle_timeout: common.idle_timeout,
            not_found_hint: Some(NOT_FOUND_HINT.to_owned()),
        };
        let whole = Endpoint {
            url: config.url(false),
            ..streamed.clone()
        };
        Ok(GeminiModel {
            config,
            streamed,
            whole,
            http,
        })
    }

    /// The model of one `models:` entry.
    pub fn from_model_config(
        entry: &ModelConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<GeminiModel, ModelError> {
        GeminiModel::new(GeminiConfig::from_model_config(entry, env)?)
    }

    async fn call(&self, request: ModelRequest<'_>) -> Result<ModelReply, ModelError> {
        let body = request::request_body(&self.config, &request);
        let stream = match self.config.streaming {
            Streaming::Always => true,
            Streaming::Never => false,
            Streaming::NotWithTools => request.tools.is_empty(),
        };
        let endpoint = if stream { &self.streamed } else { &self.whole };
        endpoint
            .send(&self.http, &body, request.observer, || {
                ReplyAssembler::new(&self.config.common.name, &request)
            })
            .await
    }
}

impl ChatModel for GeminiModel {
    fn name(&self) -> &str {
        &self.config.common.name
    }

    fn provider_name(&self) -> &'static str {
        super::provider::GEN_AI_GEMINI
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
