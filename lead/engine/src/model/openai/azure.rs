//! Azure OpenAI (`langchain_openai:AzureChatOpenAI`, provider `azure_openai`): where a
//! deployment's requests go and how they authenticate, read with LangChain's key names.
//! Chat completions go to
//! `{endpoint}/openai/deployments/{deployment}/chat/completions?api-version={version}`;
//! with `use_responses_api` the Responses API goes to the v1 route
//! `{endpoint}/openai/v1/responses` (no `api_version`, or `v1`/`latest`/`preview`) or the
//! dated one `{endpoint}/openai/responses?api-version={version}`. The key travels in the
//! `api-key` header, never `Authorization`. Invariant: deployment and version are checked
//! to be URL-safe, so no setting can change the path or the query.

use antler_protocol::config::ModelConfig;
use reqwest::header::HeaderName;
use serde_json::Value;

use super::config::OpenAiConfig;
use super::OpenAiModel;
use crate::model::entry::{
    env_non_empty, extra_str, invalid, resolve_var, ApiKey, Common, Defaults,
};
use crate::model::transport::{header_value, model_client, Endpoint};
use crate::model::ModelError;

/// The header Azure reads the key from.
pub const API_KEY_HEADER: &str = "api-key";
/// The API version variable LangChain reads (`openai_api_version`'s default).
pub const API_VERSION_VAR: &str = "OPENAI_API_VERSION";
/// What a 404 from a deployment URL usually means; `{deployment}` and `{version}` are
/// filled in.
pub const NOT_FOUND_DEPLOYMENT: &str = "check azure_endpoint (the resource's https://NAME.openai.azure.com), that the deployment `{deployment}` exists, and that api_version `{version}` serves it";

/// Where Azure finds what an entry does not say (LangChain's `AzureChatOpenAI`).
pub const AZURE_DEFAULTS: Defaults = Defaults {
    base_url_keys: &["azure_endpoint", "api_base", "openai_api_base"],
    base_url_vars: &["AZURE_OPENAI_ENDPOINT"],
    public_base_url: None,
    api_key_keys: &["openai_api_key", "azure_openai_api_key"],
    api_key_vars: &["AZURE_OPENAI_API_KEY"],
};

/// One Azure deployment's address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AzureTarget {
    /// The resource root, e.g. `https://name.openai.azure.com` (no trailing `/openai`).
    pub endpoint: String,
    /// `azure_deployment`, else `deployment_name`, else `model`.
    pub deployment: String,
    /// `api_version`, else `openai_api_version`, else `$OPENAI_API_VERSION`.
    pub api_version: Option<String>,
}

impl AzureTarget {
    /// The chat completions URL of the deployment (an `api_version` is required).
    pub fn chat_url(&self, model: &str) -> Result<String, ModelError> {
        let version = self.api_version.as_deref().ok_or_else(|| {
            invalid(
                model,
                format!("Azure OpenAI needs an api_version (or openai_api_version, or ${API_VERSION_VAR})"),
            )
        })?;
        Ok(format!(
            "{}/openai/deployments/{}/chat/completions?api-version={version}",
            self.endpoint, self.deployment
        ))
    }

    /// The Responses URL: the v1 route unless a dated `api_version` is given.
    pub fn responses_url(&self) -> String {
        match self.api_version.as_deref() {
            None | Some("v1") | Some("latest") => format!("{}/openai/v1/responses", self.endpoint),
            Some("preview") => format!("{}/openai/v1/responses?api-version=preview", self.endpoint),
            Some(version) => format!("{}/openai/responses?api-version={version}", self.endpoint),
        }
    }

    /// What a 404 usually means.
    pub fn not_found_hint(&self) -> String {
        NOT_FOUND_DEPLOYMENT
            .replace("{deployment}", &self.deployment)
            .replace("{version}", self.api_version.as_deref().unwrap_or("(none)"))
    }

    /// The `api-key` header of `key`.
    pub fn headers(
        model: &str,
        key: Option<&ApiKey>,
    ) -> Result<Vec<(HeaderName, reqwest::header::HeaderValue)>, ModelError> {
        key.map(|key| {
            Ok((
                HeaderName::from_static(API_KEY_HEADER),
                header_value(model, API_KEY_HEADER, key.expose())?,
            ))
        })
        .into_iter()
        .collect()
    }

    /// `entry` as it travels to a worker: endpoint, deployment, version and key written
    /// out, so the worker needs none of the lead's environment.
    pub fn resolved(&self, entry: &ModelConfig, key: Option<&ApiKey>) -> ModelConfig {
        let mut entry = entry.clone();
        entry.base_url = Some(self.endpoint.clone());
        entry.api_key = key.map(|k| k.expose().to_owned());
        for name in ["azure_endpoint", "deployment_name", "openai_api_version"] {
            entry.extra.remove(name);
        }
        entry.extra.insert(
            "azure_deployment".to_owned(),
            Value::String(self.deployment.clone()),
        );
        if let Some(version) = &self.api_version {
            entry
                .extra
                .insert("api_version".to_owned(), Value::String(version.clone()));
        }
        entry
    }
}

/// The entry with `azure_endpoint` (LangChain's first choice) in `base_url`'s place, so
/// [`Common::of`] reads it before `base_url`.
pub fn with_endpoint_first(entry: &ModelConfig) -> ModelConfig {
    let mut entry = entry.clone();
    if let Some(endpoint) = extra_str(&entry.extra, "azure_endpoint") {
        entry.base_url = Some(endpoint);
    }
    entry
}

/// The deployment an entry addresses, at the endpoint `common` resolved.
pub fn target_of(
    entry: &ModelConfig,
    common: &Common,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<AzureTarget, ModelError> {
    let name = &entry.name;
    let mut endpoint = common.base_url.trim_end_matches('/').to_owned();
    for suffix in ["/openai/v1", "/openai"] {
        if let Some(root) = endpoint.strip_suffix(suffix) {
            endpoint = root.to_owned();
            break;
        }
    }
    let deployment = match ["azure_deployment", "deployment_name"]
        .iter()
        .find_map(|k| extra_str(&entry.extra, k))
    {
        Some(value) => resolve_var(name, "azure_deployment", &value, env)?,
        None => entry.model.clone(),
    };
    let api_version = match ["api_version", "openai_api_version"]
        .iter()
        .find_map(|k| extra_str(&entry.extra, k))
    {
        Some(value) => Some(resolve_var(name, "api_version", &value, env)?),
        None => env_non_empty(env, API_VERSION_VAR),
    };
    let url_safe = |v: &str| {
        !v.is_empty()
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    };
    if !url_safe(&deployment) {
        return Err(invalid(
            name,
            format!("the Azure deployment `{deployment}` may hold only letters, digits, `-`, `_` and `.`"),
        ));
    }
    if let Some(version) = api_version.as_deref().filter(|v| !url_safe(v)) {
        return Err(invalid(
            name,
            format!("api_version `{version}` may hold only letters, digits, `-`, `_` and `.`"),
        ));
    }
    Ok(AzureTarget {
        endpoint,
        deployment,
        api_version,
    })
}

impl OpenAiModel {
    /// A chat-completions model on an Azure OpenAI deployment (see the module).
    pub fn azure(
        entry: &ModelConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<OpenAiModel, ModelError> {
        let (config, endpoint, wire) = azure_chat(entry, env)?;
        let http = model_client(&config.name, config.connect_timeout)?;
        Ok(OpenAiModel::from_parts(config, endpoint, http, wire))
    }
}

/// The chat config, endpoint and worker entry of an Azure entry, without a client
/// (`antler config check`).
pub fn azure_chat(
    entry: &ModelConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(OpenAiConfig, Endpoint, ModelConfig), ModelError> {
    let entry_first = with_endpoint_first(entry);
    let common = Common::of(&entry_first, env, &AZURE_DEFAULTS)?;
    let target = target_of(entry, &common, env)?;
    let config = OpenAiConfig::with_defaults(&entry_first, env, &AZURE_DEFAULTS)?;
    let endpoint = Endpoint {
        model: config.name.clone(),
        url: target.chat_url(&config.name)?,
        headers: AzureTarget::headers(&config.name, config.api_key.as_ref())?,
        secret: config.api_key.clone(),
        retry: config.retry,
        request_timeout: config.request_timeout,
        idle_timeout: config.idle_timeout,
        not_found_hint: Some(target.not_found_hint()),
    };
    let wire = target.resolved(entry, config.api_key.as_ref());
    Ok((config, endpoint, wire))
}
