//! Chat models: what the run loop asks (the messages and the tools the model may see)
//! and what it gets back (one assistant message: text, tool calls, or both), the
//! [`ChatModel`] trait every model implements, and [`WireModel`], a model's settings as
//! they travel to a subagent worker and the model they build there. `scripted` is the
//! playbook model for tests and demos (no network); `openai` is the OpenAI-compatible
//! provider (one module per provider).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub mod openai;
mod scripted;

pub use scripted::{Playbook, ScriptedCall, ScriptedModel, ScriptedTurn, MAX_PLAYBOOK_BYTES};

use crate::catalog::ToolSpec;
use crate::thread::state::{Message, TokenUsage, ToolCall};
use openai::config::{ApiKey, OpenAiConfig};
use openai::retry::RetryPolicy;
use openai::OpenAiModel;

/// What a `task` call asks of the model its subagent runs with (the `task` tool's
/// arguments implement it): a scripted model picks its playbook by these.
pub trait SubagentRequest {
    /// The task's short description.
    fn description(&self) -> &str;
    /// The subagent type the call names.
    fn subagent_type(&self) -> &str;
}

/// One model call: the conversation so far, the tools visible this turn, and the images
/// a vision model sees with this call only (spec C).
#[derive(Clone, Copy, Debug)]
pub struct ModelRequest<'a> {
    pub messages: &'a [Message],
    pub tools: &'a [&'a ToolSpec],
    pub images: &'a [ImagePart],
}

/// One viewed image for a vision model: its virtual path, MIME type and bytes as base64
/// (`None`: the file could not be read again, and the model is told so without its path
/// on the host).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImagePart {
    pub path: String,
    pub mime_type: String,
    pub base64: Option<String>,
}

/// The assistant's reply.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelReply {
    /// A stable id for the message (deterministic for a given run and turn).
    pub id: String,
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
    /// The tokens the provider says the call used (`None`: it did not say).
    pub usage: Option<TokenUsage>,
    /// Why the provider stopped (`stop`, `tool_calls`, `length`, `content_filter`, ...).
    pub finish_reason: Option<String>,
}

impl ModelReply {
    /// The reply as the AI message stored in the state.
    pub fn into_message(self) -> Message {
        Message::Ai {
            id: self.id,
            content: self.content,
            tool_calls: self.tool_calls,
        }
    }
}

/// Why a model call failed (an operator-facing error: it fails the run).
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("the playbook has {turns} turns and the run asked for turn {asked}")]
    PlaybookExhausted { turns: usize, asked: usize },
    #[error("cannot read playbook {path}: {source}")]
    PlaybookRead {
        path: String,
        source: std::io::Error,
    },
    #[error("invalid playbook {path}: {message}")]
    PlaybookInvalid { path: String, message: String },
    /// A scripted model asked for a security scan its playbook has no reply for.
    #[error("the playbook has no security_scan reply")]
    NoScriptedScan,
    /// No `models:` entry and no `OPENAI_BASE_URL` to build a default one from.
    #[error("no chat model is configured: add a `models:` entry to the config, or set {hint}")]
    NoModelConfigured { hint: String },
    /// A model name that is not in `models:`.
    #[error("no model named `{name}`; configured models: {}", list_or_none(.configured))]
    UnknownModel {
        name: String,
        configured: Vec<String>,
    },
    /// A `use:` Antler cannot speak to without a `base_url`.
    #[error("model `{model}`: `use: {use_}` is not an OpenAI-compatible provider Antler knows; set `base_url` to its OpenAI-compatible endpoint")]
    UnsupportedProvider { model: String, use_: String },
    /// A `$VAR` in the model config names an unset variable (the value is never shown).
    #[error("model `{model}`: {field} names ${variable}, which is not set")]
    MissingEnv {
        model: String,
        field: &'static str,
        variable: String,
    },
    /// A model setting that cannot be used as written.
    #[error("model `{model}`: {message}")]
    InvalidConfig { model: String, message: String },
    /// The endpoint could not be reached (connection refused, reset, DNS, TLS), after
    /// every retry.
    #[error("model `{model}`: cannot reach {url} after {attempts} attempt(s): {message}")]
    Connection {
        model: String,
        url: String,
        attempts: u32,
        message: String,
    },
    /// The endpoint answered 404: the URL tried, the server's text, and what is usually
    /// wrong (see `openai::not_found_hint`).
    #[error("model `{model}`: HTTP 404 from {url} ({message}): {hint}")]
    EndpointNotFound {
        model: String,
        url: String,
        message: String,
        hint: String,
    },
    /// The endpoint answered an HTTP error; `message` is the server's, truncated.
    #[error("model `{model}`: HTTP {status} after {attempts} attempt(s): {message}")]
    Http {
        model: String,
        status: u16,
        attempts: u32,
        message: String,
    },
    /// A deadline passed: the whole request, or the wait between two stream chunks.
    #[error("model `{model}`: {what} exceeded its {secs} s deadline")]
    Timeout {
        model: String,
        what: &'static str,
        secs: f64,
    },
    /// The reply was not the shape of an OpenAI chat completion.
    #[error("model `{model}`: invalid reply: {message}")]
    InvalidReply { model: String, message: String },
    /// The model wrote arguments for a tool call that are not a JSON object. The reply
    /// is refused as a whole, so no half-parsed call reaches a tool.
    #[error("model `{model}` wrote invalid arguments for tool `{tool}`: {message}")]
    InvalidToolArguments {
        model: String,
        tool: String,
        message: String,
    },
}

fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "(none)".to_owned()
    } else {
        names.join(", ")
    }
}

/// A chat model: messages and visible tool schemas in, one assistant message out.
pub trait ChatModel: Send + Sync {
    /// The model's name, for events and the run record.
    fn name(&self) -> &str;

    /// Asks for the next assistant message.
    fn complete<'a>(
        &'a self,
        request: ModelRequest<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>>;

    /// Whether the model reads the system prompt and the request context (a scripted model
    /// replays its turns whatever it is sent, so its requests skip building them).
    fn reads_prompt(&self) -> bool {
        true
    }

    /// Whether the model is a script (a playbook): it answers whatever its author wrote,
    /// so it is never asked to judge the run's own writes (`skill_manage`'s scan).
    fn is_scripted(&self) -> bool {
        false
    }

    /// The model a subagent of this run's `task` call uses when its type names none, as
    /// it travels to a worker (`None`: this model cannot be delegated).
    fn for_subagent(&self, _task: &dyn SubagentRequest) -> Option<WireModel> {
        None
    }

    /// A one-off call outside the run's conversation, with no tools: a system prompt and
    /// one user message (`skill_manage`'s security scan, DeerFlow's `security_agent`).
    fn moderate<'a>(
        &'a self,
        system: &'a str,
        user: &'a str,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(async move {
            let messages = [
                Message::System {
                    content: system.to_owned(),
                },
                Message::human(user),
            ];
            self.complete(ModelRequest {
                messages: &messages,
                tools: &[],
                images: &[],
            })
            .await
        })
    }
}

/// The model a task runs with.
#[derive(Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WireModel {
    /// A playbook's turns (tests and demos).
    Scripted { playbook: Playbook },
    /// An OpenAI-compatible endpoint.
    OpenAi {
        name: String,
        model: String,
        base_url: String,
        api_key: Option<String>,
        params: Map<String, Value>,
        max_retries: u32,
        connect_timeout_ms: u64,
        request_timeout_ms: u64,
        idle_timeout_ms: u64,
    },
}

impl fmt::Debug for WireModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireModel::Scripted { playbook } => f
                .debug_struct("Scripted")
                .field("turns", &playbook.turns.len())
                .finish(),
            WireModel::OpenAi {
                name,
                base_url,
                api_key,
                ..
            } => f
                .debug_struct("OpenAi")
                .field("name", name)
                .field("base_url", base_url)
                .field("api_key", &api_key.as_ref().map(|_| "[redacted]"))
                .finish_non_exhaustive(),
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl WireModel {
    /// An OpenAI-compatible model's settings as they travel.
    pub fn of_openai(config: &OpenAiConfig) -> WireModel {
        WireModel::OpenAi {
            name: config.name.clone(),
            model: config.model.clone(),
            base_url: config.base_url.clone(),
            api_key: config.api_key.as_ref().map(|k| k.expose().to_owned()),
            params: config.params.clone(),
            max_retries: config.retry.max_retries,
            connect_timeout_ms: millis(config.connect_timeout),
            request_timeout_ms: millis(config.request_timeout),
            idle_timeout_ms: millis(config.idle_timeout),
        }
    }

    /// The model's name (`subagent_model_name`).
    pub fn name(&self) -> &str {
        match self {
            WireModel::Scripted { .. } => ScriptedModel::NAME,
            WireModel::OpenAi { name, .. } => name,
        }
    }

    /// The chat model these settings make.
    pub fn build(&self) -> Result<Arc<dyn ChatModel>, ModelError> {
        Ok(match self {
            WireModel::Scripted { playbook } => Arc::new(ScriptedModel::new(playbook.clone())),
            WireModel::OpenAi {
                name,
                model,
                base_url,
                api_key,
                params,
                max_retries,
                connect_timeout_ms,
                request_timeout_ms,
                idle_timeout_ms,
            } => {
                let mut config = OpenAiConfig::new(name, model, base_url);
                config.api_key = api_key.as_deref().map(ApiKey::new);
                config.params = params.clone();
                config.retry = RetryPolicy {
                    max_retries: *max_retries,
                    ..RetryPolicy::default()
                };
                config.connect_timeout = Duration::from_millis(*connect_timeout_ms);
                config.request_timeout = Duration::from_millis(*request_timeout_ms);
                config.idle_timeout = Duration::from_millis(*idle_timeout_ms);
                Arc::new(OpenAiModel::new(config)?)
            }
        })
    }
}
