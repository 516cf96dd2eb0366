//! Chat models: what the run loop asks (the messages and the tools the model may see)
//! and what it gets back (one assistant message: text, reasoning, tool calls, and the
//! calls whose arguments were not valid), the [`ChatModel`] trait every model
//! implements, and [`WireModel`], a model's settings as they travel to a subagent worker
//! and the model they build there.
//!
//! `provider` turns a `models:` entry into the client of its provider (DeerFlow's `use:`
//! ids, or an explicit `provider:`); `entry` reads what every provider reads the same
//! way; `transport` is the HTTP exchange (streams, retries, deadlines) and `stream` its
//! framing; one module per provider (`openai`, ...); `resilient` wraps a run's model with
//! retries, a circuit breaker and fallbacks (spec D.5); `scripted` is the playbook model
//! for tests and demos (no network).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use antler_protocol::config::ModelConfig;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

pub mod anthropic;
pub mod entry;
pub mod gemini;
pub mod ollama;
pub mod openai;
pub mod provider;
pub mod resilient;
pub mod responses;
pub mod retry;
mod scripted;
pub mod stream;
pub mod transport;

pub use provider::{check_model_entry, model_from_config, model_from_entry, Provider};
pub use scripted::{Playbook, ScriptedCall, ScriptedModel, ScriptedTurn, MAX_PLAYBOOK_BYTES};

use crate::catalog::ToolSpec;
use crate::thread::state::{Message, Reasoning, TokenUsage, ToolCall};

/// What a `task` call asks of the model its subagent runs with (the `task` tool's
/// arguments implement it): a scripted model picks its playbook by these.
pub trait SubagentRequest {
    /// The task's short description.
    fn description(&self) -> &str;
    /// The subagent type the call names.
    fn subagent_type(&self) -> &str;
}

/// One model call: the conversation so far, the tools visible this turn, the images a
/// vision model sees with this call only (spec C), whether thinking is on for this call
/// (spec D.2: off for auxiliary calls), and who hears of its retries and stream.
#[derive(Clone, Copy)]
pub struct ModelRequest<'a> {
    pub messages: &'a [Message],
    pub tools: &'a [&'a ToolSpec],
    pub images: &'a [ImagePart],
    /// `true`: the model's thinking settings apply (`when_thinking_enabled` where
    /// `supports_thinking`); `false`: thinking is off (`when_thinking_disabled`).
    pub thinking: bool,
    pub observer: Option<&'a dyn ModelObserver>,
    /// Turns summarized away before these messages (their AI messages are gone), so
    /// [`ModelRequest::turn`] keeps counting.
    pub earlier_turns: usize,
    /// The AI messages of earlier runs on the thread (a continued thread's): a scripted
    /// model numbers its playbook's turns from this run's first.
    pub turns_before: usize,
}

impl<'a> ModelRequest<'a> {
    /// A request with thinking on (as configured) and no observer.
    pub fn new(
        messages: &'a [Message],
        tools: &'a [&'a ToolSpec],
        images: &'a [ImagePart],
    ) -> ModelRequest<'a> {
        ModelRequest {
            messages,
            tools,
            images,
            thinking: true,
            observer: None,
            earlier_turns: 0,
            turns_before: 0,
        }
    }

    /// The turn this request asks for: 1 + the AI messages so far (replies are named
    /// `ai-{turn}`, as the scripted model's are).
    pub fn turn(&self) -> usize {
        1 + self.earlier_turns
            + self
                .messages
                .iter()
                .filter(|m| matches!(m, Message::Ai { .. }))
                .count()
    }
}

impl fmt::Debug for ModelRequest<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelRequest")
            .field("messages", &self.messages.len())
            .field("tools", &self.tools.len())
            .field("images", &self.images.len())
            .field("thinking", &self.thinking)
            .finish_non_exhaustive()
    }
}

/// A retry a model client is about to make (DeerFlow's `llm_retry` event, spec D.5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryNotice {
    pub model: String,
    /// The attempt that failed (1-based).
    pub attempt: u32,
    pub max_attempts: u32,
    pub wait: Duration,
    /// Why it failed (the HTTP status and the server's text, or the connection error).
    pub reason: String,
}

/// Who hears what happens inside one model call: retries, and the reply as it streams.
/// Every method has a default that ignores it.
pub trait ModelObserver: Send + Sync {
    fn retry(&self, _notice: &RetryNotice) {}
    /// A piece of the answer's text, as the provider streamed it.
    fn text_delta(&self, _text: &str) {}
    /// A piece of the reasoning, as the provider streamed it.
    fn reasoning_delta(&self, _text: &str) {}
    /// A model failed for good and the next of its fallbacks is asked ([`resilient`]).
    fn fallback(&self, _notice: &resilient::FallbackNotice) {}
    /// The reply came from `model`, a fallback, not the run's own model.
    fn answered_by(&self, _model: &str) {}
}

/// Why a one-off call outside the run's conversation is made: one user message, no
/// tools, thinking off, never streamed to clients (spec C.3, C.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Auxiliary {
    /// Summarization's summary of the oldest messages.
    Summary,
    /// A thread's title.
    Title,
}

/// A tool call the model wrote that cannot be executed: its arguments are not JSON, not
/// an object, or the stream was cut inside them. The run answers it with an error tool
/// message the model sees, never runs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidToolCall {
    pub id: String,
    /// The tool name as written (may be empty).
    pub name: String,
    /// The arguments as written, truncated.
    pub arguments: String,
    /// Why they are invalid.
    pub error: String,
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
    /// Calls whose arguments could not be read (never executed).
    pub invalid_calls: Vec<InvalidToolCall>,
    /// What the model thought before it answered.
    pub reasoning: Option<Reasoning>,
    /// The tokens the provider says the call used (`None`: it did not say).
    pub usage: Option<TokenUsage>,
    /// Why the provider stopped, in OpenAI's words whatever the provider (`stop`,
    /// `tool_calls`, `length`, `content_filter`, ...): see [`finish_reason`].
    pub finish_reason: Option<String>,
}

impl ModelReply {
    /// The reply as the AI message stored in the state.
    pub fn into_message(self) -> Message {
        Message::Ai {
            id: self.id,
            content: self.content,
            tool_calls: self.tool_calls,
            reasoning: self.reasoning,
        }
    }
}

/// The finish reasons every provider's are mapped to (OpenAI's words, which the run
/// loop's caps read: spec D.3).
pub mod finish_reason {
    /// A natural end of the answer.
    pub const STOP: &str = "stop";
    /// The reply asks for tool calls.
    pub const TOOL_CALLS: &str = "tool_calls";
    /// The output token limit cut the reply.
    pub const LENGTH: &str = "length";
    /// A safety filter cut or refused the reply.
    pub const CONTENT_FILTER: &str = "content_filter";
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
    /// A `use:` Antler has no client for and cannot treat as OpenAI-compatible (no
    /// `base_url`).
    #[error("model `{model}`: Antler has no client for `use: {use_}`; set `provider:` to one of {} (or give a `base_url` to speak to it as OpenAI-compatible)", provider::PROVIDER_NAMES.join(", "))]
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
    /// The reply was not the shape the provider's API documents.
    #[error("model `{model}`: invalid reply: {message}")]
    InvalidReply { model: String, message: String },
    /// The model's circuit breaker is open (spec D.5): it was not called.
    #[error("model `{model}`: {}", resilient::CIRCUIT_OPEN)]
    CircuitOpen { model: String },
    /// The model and every fallback failed, each for the reason listed, in order.
    #[error("the model and its fallbacks all failed: {}", failures.join("; then "))]
    AllModelsFailed { failures: Vec<String> },
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

    /// The vendor this model's calls go to, as the OpenTelemetry GenAI conventions name
    /// it (`gen_ai.provider.name`: `openai`, `anthropic`, `gcp.gemini`, ...;
    /// [`provider::gen_ai_provider_name`]). A model that calls no vendor (a playbook) is
    /// answered by Antler itself.
    fn provider_name(&self) -> &'static str {
        provider::ANTLER_PROVIDER_NAME
    }

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

    /// An auxiliary call (a summary, a title): `prompt` as the one user message, no
    /// tools, thinking off, no observer (so nothing streams to clients).
    fn auxiliary<'a>(
        &'a self,
        _purpose: Auxiliary,
        prompt: &'a str,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(async move {
            let messages = [Message::human(prompt)];
            let mut request = ModelRequest::new(&messages, &[], &[]);
            request.thinking = false;
            self.complete(request).await
        })
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
            let mut request = ModelRequest::new(&messages, &[], &[]);
            // Auxiliary calls run with thinking off (spec D.2).
            request.thinking = false;
            self.complete(request).await
        })
    }
}

/// The model a task runs with.
#[derive(Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WireModel {
    /// A playbook's turns (tests and demos).
    Scripted { playbook: Playbook },
    /// A `models:` entry with its endpoint and key written out
    /// ([`entry::Common::resolved`]): the worker builds the same client from it.
    Entry { entry: ModelConfig },
    /// A run's model with its retries, circuit breakers and `fallback:` list
    /// ([`resilient::ResilientModel::for_subagent`]): the entry and its fallbacks, each
    /// written out as [`WireModel::Entry`]'s is, and the `llm_call:` and
    /// `circuit_breaker:` settings. The worker builds the same chain, with its own
    /// process's breaker per configuration.
    Resilient {
        entry: ModelConfig,
        fallbacks: Vec<ModelConfig>,
        llm_call: resilient::LlmCall,
        circuit_breaker: resilient::BreakerSettings,
    },
}

impl fmt::Debug for WireModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireModel::Scripted { playbook } => f
                .debug_struct("Scripted")
                .field("turns", &playbook.turns.len())
                .finish(),
            // Never the entry itself: it holds the key.
            WireModel::Entry { entry } => f
                .debug_struct("Entry")
                .field("name", &entry.name)
                .field("use", &entry.use_)
                .field("model", &entry.model)
                .finish_non_exhaustive(),
            WireModel::Resilient {
                entry, fallbacks, ..
            } => f
                .debug_struct("Resilient")
                .field("name", &entry.name)
                .field("model", &entry.model)
                .field(
                    "fallbacks",
                    &fallbacks.iter().map(|e| &e.name).collect::<Vec<_>>(),
                )
                .finish_non_exhaustive(),
        }
    }
}

impl WireModel {
    /// The model's name (`subagent_model_name`).
    pub fn name(&self) -> &str {
        match self {
            WireModel::Scripted { .. } => ScriptedModel::NAME,
            WireModel::Entry { entry } | WireModel::Resilient { entry, .. } => &entry.name,
        }
    }

    /// The chat model these settings make. A worker resolves nothing from its own
    /// environment: the entry carries its endpoint and key.
    pub fn build(&self) -> Result<Arc<dyn ChatModel>, ModelError> {
        match self {
            WireModel::Scripted { playbook } => Ok(Arc::new(ScriptedModel::new(playbook.clone()))),
            WireModel::Entry { entry } => provider::shared_model_from_entry(entry, &|_| None),
            WireModel::Resilient {
                entry,
                fallbacks,
                llm_call,
                circuit_breaker,
            } => resilient::resilient_model_from_entries(
                &std::iter::once(entry).chain(fallbacks).collect::<Vec<_>>(),
                *llm_call,
                *circuit_breaker,
            ),
        }
    }
}
