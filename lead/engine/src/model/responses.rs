//! [`ResponsesModel`]: a [`ChatModel`] over OpenAI's Responses API (`POST
//! {base_url}/responses`), selected by `use_responses_api: true`, `wire_api: responses`,
//! `provider: openai_responses` or DeerFlow's Codex class; on Azure, over a resource's
//! Responses route (see `openai::azure`). Each call streams `response.*` events; a
//! server that answers with the whole `response` is read too. Reasoning items (with
//! `encrypted_content` when `store` is false) are kept on the AI message and sent back on
//! later requests. The key travels only in its header (`Authorization: Bearer`, or
//! Azure's `api-key`); retries and deadlines are `model::transport`'s.
//!
//! `config` reads a `models:` entry, `wire` holds the request and reply formats.

pub mod config;
pub mod wire;

#[cfg(test)]
mod tests;

use antler_protocol::config::ModelConfig;
use futures::future::BoxFuture;
use reqwest::header::AUTHORIZATION;

pub use config::ResponsesConfig;

use crate::model::entry::Common;
use crate::model::openai::azure::{self, AzureTarget, AZURE_DEFAULTS};
use crate::model::openai::config::OPENAI_DEFAULTS;
use crate::model::transport::{header_value, model_client, Endpoint};
use crate::model::{ChatModel, ModelError, ModelReply, ModelRequest, SubagentRequest, WireModel};
use wire::ResponsesAssembler;

/// What a 404 from a Responses endpoint usually means; `{model}` is the model sent.
pub const NOT_FOUND_RESPONSES: &str = "check the model's base_url (Antler posts to <base_url>/responses, e.g. https://api.openai.com/v1/responses) and that the server serves the model `{model}` through the Responses API";

/// A model behind a Responses API endpoint.
#[derive(Clone)]
pub struct ResponsesModel {
    config: ResponsesConfig,
    endpoint: Endpoint,
    http: reqwest::Client,
    /// The entry a subagent's worker builds the same model from (endpoint and key
    /// written out).
    wire: ModelConfig,
}

impl std::fmt::Debug for ResponsesModel {
    // Never the wire entry: it holds the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponsesModel")
            .field("config", &self.config)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// A model's settings, endpoint and worker entry, before the HTTP client.
type Parts = (ResponsesConfig, Endpoint, ModelConfig);

impl ResponsesModel {
    /// The model of an OpenAI-family entry: endpoint and key as OpenAI's entries find
    /// them (`base_url`, `$OPENAI_BASE_URL`, `https://api.openai.com/v1`;
    /// `api_key`, `$OPENAI_API_KEY`), sent as `Authorization: Bearer`.
    pub fn from_model_config(
        entry: &ModelConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ResponsesModel, ModelError> {
        ResponsesModel::build(openai_parts(entry, env)?)
    }

    /// The model of an Azure OpenAI entry with `use_responses_api` (see
    /// [`AzureTarget::responses_url`]); the deployment is sent as `model`.
    pub fn azure(
        entry: &ModelConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ResponsesModel, ModelError> {
        ResponsesModel::build(azure_parts(entry, env)?)
    }

    fn build((config, endpoint, wire): Parts) -> Result<ResponsesModel, ModelError> {
        let http = model_client(&config.name, config.connect_timeout)?;
        Ok(ResponsesModel {
            config,
            endpoint,
            http,
            wire,
        })
    }

    async fn call(&self, request: ModelRequest<'_>) -> Result<ModelReply, ModelError> {
        let body = wire::request_body(&self.config, &request);
        self.endpoint
            .send(&self.http, &body, request.observer, || {
                ResponsesAssembler::new(&self.config.name, &request)
            })
            .await
    }
}

/// Whether an entry can be spoken to through the Responses API, without a client
/// (`antler config check`); `azure` for an Azure OpenAI entry.
pub fn check_entry(
    entry: &ModelConfig,
    env: &dyn Fn(&str) -> Option<String>,
    azure: bool,
) -> Result<(), ModelError> {
    if azure {
        azure_parts(entry, env)?;
    } else {
        openai_parts(entry, env)?;
    }
    Ok(())
}

fn openai_parts(
    entry: &ModelConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Parts, ModelError> {
    let common = Common::of(entry, env, &OPENAI_DEFAULTS)?;
    let wire = common.resolved(entry);
    let config = ResponsesConfig::of_entry(entry, common)?;
    let endpoint = bearer_endpoint(&config, config.endpoint())?;
    Ok((config, endpoint, wire))
}

fn azure_parts(
    entry: &ModelConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Parts, ModelError> {
    let first = azure::with_endpoint_first(entry);
    let common = Common::of(&first, env, &AZURE_DEFAULTS)?;
    let target = azure::target_of(entry, &common, env)?;
    let wire = target.resolved(entry, common.api_key.as_ref());
    let mut config = ResponsesConfig::of_entry(entry, common)?;
    config.model = target.deployment.clone();
    config.base_url = target.endpoint.clone();
    let endpoint = Endpoint {
        model: config.name.clone(),
        url: target.responses_url(),
        headers: AzureTarget::headers(&config.name, config.api_key.as_ref())?,
        secret: config.api_key.clone(),
        retry: config.retry,
        request_timeout: config.request_timeout,
        idle_timeout: config.idle_timeout,
        not_found_hint: Some(target.not_found_hint()),
    };
    Ok((config, endpoint, wire))
}

fn bearer_endpoint(config: &ResponsesConfig, url: String) -> Result<Endpoint, ModelError> {
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
    Ok(Endpoint {
        model: config.name.clone(),
        url,
        headers,
        secret: config.api_key.clone(),
        retry: config.retry,
        request_timeout: config.request_timeout,
        idle_timeout: config.idle_timeout,
        not_found_hint: Some(NOT_FOUND_RESPONSES.replace("{model}", &config.model)),
    })
}

impl ChatModel for ResponsesModel {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn provider_name(&self) -> &'static str {
        super::provider::gen_ai_provider_name(&self.wire)
    }

    fn for_subagent(&self, _task: &dyn SubagentRequest) -> Option<WireModel> {
        Some(WireModel::Entry {
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
