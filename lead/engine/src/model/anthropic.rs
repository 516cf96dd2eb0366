//! [`AnthropicModel`]: a [`ChatModel`] over Anthropic's Messages API (`/v1/messages`),
//! for `langchain_anthropic:ChatAnthropic` and DeerFlow's `ClaudeChatModel` entries, or
//! any server that speaks the API (a proxy, a gateway). It owns one endpoint, its headers
//! (`x-api-key`, or a Claude Code OAuth token as a bearer with its beta header, and
//! `anthropic-version`) and a handle on the process's shared HTTP client; every call
//! streams its reply. Prompt caching, extended thinking with its blocks sent back in a
//! tool-use loop, and the usage with its cache counts are this module's; the exchange,
//! retries (429, 529 and other 5xx, honouring `retry-after`) and deadlines are
//! `model::transport`'s.
//!
//! `config` reads a `models:` entry, `request` builds the request body, `reply`
//! assembles the streamed or whole reply.

pub mod config;
pub mod reply;
pub mod request;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use antler_protocol::config::ModelConfig;
use futures::future::BoxFuture;
use reqwest::header::{HeaderName, AUTHORIZATION};

pub use config::AnthropicConfig;

use crate::model::transport::{header_value, model_client, Endpoint};
use crate::model::{ChatModel, ModelError, ModelReply, ModelRequest, SubagentRequest, WireModel};
use reply::ReplyAssembler;

/// The provider tag of the thinking blocks this client keeps in `Reasoning.replay`.
pub const REPLAY_PROVIDER: &str = "anthropic";
/// The API version every request names (`anthropic-version`).
pub const API_VERSION: &str = "2023-06-01";
/// The header that carries the API key.
pub const API_KEY_HEADER: &str = "x-api-key";
/// The header that names the API version.
pub const VERSION_HEADER: &str = "anthropic-version";
/// The header that turns on beta features.
pub const BETA_HEADER: &str = "anthropic-beta";
/// The betas a Claude Code OAuth token needs (DeerFlow's `OAUTH_ANTHROPIC_BETAS`).
pub const OAUTH_BETAS: &str =
    "oauth-2025-04-20,claude-code-20250219,interleaved-thinking-2025-05-14";

/// What a 404 usually means; `{url}` is the URL posted to, `{model}` the model sent.
pub const NOT_FOUND_HINT: &str = "Antler posts to <base_url>/v1/messages (or <base_url>/messages when the base_url ends in /v1), here {url}: check that the base_url is the API's root (https://api.anthropic.com, or the proxy's root that serves the Anthropic Messages API), not an OpenAI-compatible /v1/chat/completions server, and that the server knows the model `{model}`";

/// The client of one `models:` entry (`provider::model_from_entry`'s arm).
pub fn model_of_entry(
    entry: &ModelConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Arc<dyn ChatModel>, ModelError> {
    Ok(Arc::new(AnthropicModel::from_model_config(entry, env)?))
}

/// Whether `entry` can be spoken to, without connecting (`provider::check_model_entry`'s
/// arm).
pub fn check_entry(
    entry: &ModelConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), ModelError> {
    AnthropicConfig::from_model_config(entry, env).map(drop)
}

/// A chat model behind the Anthropic Messages API.
#[derive(Clone, Debug)]
pub struct AnthropicModel {
    config: AnthropicConfig,
    endpoint: Endpoint,
    http: reqwest::Client,
}

impl AnthropicModel {
    /// A model for `config`.
    pub fn new(config: AnthropicConfig) -> Result<AnthropicModel, ModelError> {
        let http = model_client(&config.name, config.connect_timeout)?;
        let name = &config.name;
        let mut headers = vec![(
            HeaderName::from_static(VERSION_HEADER),
            header_value(name, VERSION_HEADER, API_VERSION)?,
        )];
        let mut betas: Vec<&str> = config.betas.iter().map(String::as_str).collect();
        if let Some(key) = &config.api_key {
            if config.is_oauth() {
                headers.push((
                    AUTHORIZATION,
                    header_value(name, "Authorization", &format!("Bearer {}", key.expose()))?,
                ));
                betas.insert(0, OAUTH_BETAS);
            } else {
                headers.push((
                    HeaderName::from_static(API_KEY_HEADER),
                    header_value(name, API_KEY_HEADER, key.expose())?,
                ));
            }
        }
        if !betas.is_empty() {
            headers.push((
                HeaderName::from_static(BETA_HEADER),
                header_value(name, BETA_HEADER, &betas.join(","))?,
            ));
        }
        let url = config.endpoint();
        let endpoint = Endpoint {
            model: config.name.clone(),
            not_found_hint: Some(
                NOT_FOUND_HINT
                    .replace("{url}", &url)
                    .replace("{model}", &config.model),
            ),
            url,
            headers,
            secret: config.api_key.clone(),
            retry: config.retry,
            request_timeout: config.request_timeout,
            idle_timeout: config.idle_timeout,
        };
        Ok(AnthropicModel {
            config,
            endpoint,
            http,
        })
    }

    /// A model for one `models:` entry (see [`AnthropicConfig::from_model_config`]).
    pub fn from_model_config(
        entry: &ModelConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<AnthropicModel, ModelError> {
        AnthropicModel::new(AnthropicConfig::from_model_config(entry, env)?)
    }

    async fn call(&self, request: ModelRequest<'_>) -> Result<ModelReply, ModelError> {
        let body = request::request_body(&self.config, &request);
        self.endpoint
            .send(&self.http, &body, request.observer, || {
                ReplyAssembler::new(&self.config.name, &request)
            })
            .await
    }
}

impl ChatModel for AnthropicModel {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn provider_name(&self) -> &'static str {
        super::provider::GEN_AI_ANTHROPIC
    }

    fn for_subagent(&self, _task: &dyn SubagentRequest) -> Option<WireModel> {
        Some(WireModel::Entry {
            entry: self.config.resolved.0.clone(),
        })
    }

    fn complete<'a>(
        &'a self,
        request: ModelRequest<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(self.call(request))
    }
}
