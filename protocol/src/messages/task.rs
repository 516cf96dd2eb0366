//! A subagent task as it crosses the wire: the [`TaskSpec`] the lead sends a worker (the
//! subagent's catalog with its hash, its [`WireModel`], its limits and web tools), the
//! [`TaskEvent`]s the worker streams back and the [`TaskResult`] it ends with. These are
//! the wire forms of the engine's task types, which convert to and from them; the model's
//! and the web tools' keys travel inside and never show in a `Debug` form.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::config::ModelConfig;
use crate::json::Json;

/// One task for a worker.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskSpec {
    pub run_id: String,
    pub tool_call_id: String,
    pub user_id: String,
    pub thread_id: String,
    /// The data root the thread's directories are under.
    pub data_root: PathBuf,
    /// Where the thread's files are reached.
    pub thread_files: ThreadFilesMode,
    pub subagent_type: String,
    pub description: String,
    /// The task text, exactly as the lead's model wrote it.
    pub prompt: String,
    /// The subagent's system message, `None` when it has no parts.
    pub system_prompt: Option<String>,
    pub catalog: WireCatalog,
    /// The model the task runs with, key included.
    pub model: WireModel,
    /// The recursion limit (`max_turns`).
    pub max_turns: u64,
    /// The task's timeout.
    pub timeout_s: u64,
    /// Deadline of one tool call on a host.
    pub tool_timeout_s: u64,
    pub token_budget: Option<TokenBudget>,
    /// The config's web tool entries, so the subagent's web tools run on the worker.
    pub web_tools: Vec<WebToolEntry>,
    /// The sandbox-host replica holding the thread's sandbox (`None`: the worker's own).
    pub sandbox_host: Option<String>,
    /// The mcp-host replica holding the thread's pooled sessions (`None`: the worker's own).
    pub mcp_host: Option<String>,
    /// `summarization:` when it is on (the worker reads the window from the model).
    pub summarization: Option<WireSummarization>,
    /// The lead's `loop_detection:` (spec C.7): the task's loop is stopped at the same
    /// thresholds as the lead's.
    pub loop_detection: WireLoopDetection,
    /// The lead's `tool_output:` (spec C.8): the task's large results are budgeted alike.
    pub tool_output: WireToolOutput,
    /// The parent run's approval policy as JSON text (`None`: no policy).
    pub approvals: Option<String>,
}

/// A task's `loop_detection:` (spec C.7; `max_tracked_threads` stays behind: a task keeps
/// no tracker to evict).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireLoopDetection {
    pub enabled: bool,
    pub warn_threshold: u64,
    pub hard_limit: u64,
    pub window_size: u64,
    pub tool_freq_warn: u64,
    pub tool_freq_hard_limit: u64,
    /// Tool name -> (warn, hard_limit).
    pub tool_freq_overrides: Vec<(String, u64, u64)>,
}

/// A task's `tool_output:` (spec C.8).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireToolOutput {
    pub enabled: bool,
    pub externalize_min_chars: u64,
    pub preview_head_chars: u64,
    pub preview_tail_chars: u64,
    pub fallback_max_chars: u64,
    pub fallback_head_chars: u64,
    pub fallback_tail_chars: u64,
    pub exempt_tools: Vec<String>,
    /// Tool name -> its `externalize_min_chars`.
    pub tool_overrides: Vec<(String, u64)>,
}

/// A task's `summarization:` (spec C.1), its summary model left out: a subagent
/// summarizes with its own model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WireSummarization {
    pub trigger: Vec<WireContextSize>,
    pub keep: WireContextSize,
    pub trim_tokens_to_summarize: Option<u64>,
    pub summary_prompt: Option<String>,
}

/// `{type, value}` of a trigger or keep.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum WireContextSize {
    Tokens(u64),
    Messages(u64),
    Fraction(f64),
}

impl fmt::Debug for TaskSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskSpec")
            .field("run_id", &self.run_id)
            .field("tool_call_id", &self.tool_call_id)
            .field("subagent_type", &self.subagent_type)
            .field("description", &self.description)
            .field("tools", &self.catalog.tools.len())
            .field("model", &self.model)
            .field("web_tools", &self.web_tools)
            .finish_non_exhaustive()
    }
}

/// The model a task runs with.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub enum WireModel {
    /// A scripted model's playbook (tests and demos), in the playbook's own JSON form:
    /// its shape is the scripted model's, checked where the worker reads it.
    Scripted { playbook: Json },
    /// A `models:` entry with its endpoint and key written out: the worker builds the
    /// same client from it, resolving nothing from its own environment.
    Entry { entry: ModelEntry },
    /// A run's model with its retries, circuit breakers and `fallback:` list (the lead's
    /// `ResilientModel`): the entry, then its fallbacks in order, each written out as
    /// [`WireModel::Entry`]'s is, with the `llm_call:` and `circuit_breaker:` settings
    /// the worker builds the same chain with (its breakers are its own process's).
    Resilient {
        entry: ModelEntry,
        fallbacks: Vec<ModelEntry>,
        /// `llm_call.retry_max_attempts`: attempts per call, the first included.
        retry_max_attempts: u32,
        retry_base_delay_ms: u64,
        retry_cap_delay_ms: u64,
        burst_retry_base_delay_ms: u64,
        /// `llm_call.max_concurrent_calls` (0: no cap).
        max_concurrent_calls: u64,
        /// `circuit_breaker.failure_threshold`.
        failure_threshold: u32,
        /// `circuit_breaker.recovery_timeout_sec`, in milliseconds.
        recovery_timeout_ms: u64,
    },
}

impl fmt::Debug for WireModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireModel::Scripted { .. } => f.write_str("Scripted"),
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

/// A resolved `models:` entry ([`ModelConfig`]) as it travels: its provider settings
/// beyond the named fields in `extra`, in order.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelEntry {
    pub name: String,
    pub display_name: Option<String>,
    pub use_: String,
    pub model: String,
    pub supports_vision: bool,
    pub supports_thinking: bool,
    pub api_key: Option<String>,
    pub base_url: Option<String>,
    pub extra: Vec<(String, Json)>,
}

impl From<&ModelConfig> for ModelEntry {
    fn from(config: &ModelConfig) -> Self {
        ModelEntry {
            name: config.name.clone(),
            display_name: config.display_name.clone(),
            use_: config.use_.clone(),
            model: config.model.clone(),
            supports_vision: config.supports_vision,
            supports_thinking: config.supports_thinking,
            api_key: config.api_key.clone(),
            base_url: config.base_url.clone(),
            extra: config
                .extra
                .iter()
                .map(|(key, value)| (key.clone(), Json::from(value)))
                .collect(),
        }
    }
}

impl From<ModelEntry> for ModelConfig {
    fn from(entry: ModelEntry) -> Self {
        ModelConfig {
            name: entry.name,
            display_name: entry.display_name,
            use_: entry.use_,
            model: entry.model,
            supports_vision: entry.supports_vision,
            supports_thinking: entry.supports_thinking,
            api_key: entry.api_key,
            base_url: entry.base_url,
            extra: entry
                .extra
                .into_iter()
                .map(|(key, value)| (key, value.into()))
                .collect(),
        }
    }
}

/// Whether the thread's files are on the worker's disk or reached through the
/// sandbox-host replica that owns the thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ThreadFilesMode {
    #[default]
    Local,
    SandboxHost,
}

/// A catalog's tools and deferral setting, and the hash it must have.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireCatalog {
    pub tools: Vec<WireTool>,
    pub tool_search_enabled: bool,
    pub hash: Option<String>,
}

/// One tool of a [`WireCatalog`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireTool {
    pub name: String,
    pub description: String,
    /// The JSON Schema of its arguments.
    pub parameters: Json,
    pub source: WireSource,
    pub group: Option<String>,
    pub routing: Option<ToolRouting>,
}

/// Where a [`WireTool`] comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WireSource {
    Config {
        use_id: String,
    },
    Builtin,
    Mcp {
        server: Option<String>,
        original_name: String,
    },
    Acp,
}

/// An MCP tool's effective routing (`mode`, `priority` 0..=100, `keywords`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolRouting {
    pub mode: RoutingMode,
    pub priority: i64,
    pub keywords: Vec<String>,
}

/// Whether routing hints and auto-promotion apply to a tool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum RoutingMode {
    #[default]
    Off,
    Prefer,
}

/// The task's token budget (`token_budget:`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenBudget {
    pub enabled: bool,
    pub max_tokens: u64,
    pub max_input_tokens: Option<u64>,
    pub max_output_tokens: Option<u64>,
    pub warn_threshold: f64,
    pub hard_stop_threshold: f64,
}

/// One web entry of config.yaml's `tools:` (its keys are in `extra`).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebToolEntry {
    pub name: String,
    pub group: String,
    pub use_id: String,
    /// The entry's other keys, in order.
    pub extra: Vec<(String, Json)>,
}

impl fmt::Debug for WebToolEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name, self.use_id)
    }
}

/// How one task ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskResult {
    pub status: TaskStatus,
    /// The subagent's final text (completed tasks).
    pub result: Option<String>,
    pub error: Option<String>,
    pub stop_reason: Option<TaskStopReason>,
    pub model_name: Option<String>,
    pub token_usage: TokenUsage,
    /// The worker that ran it.
    pub worker: Option<String>,
}

/// A task's terminal status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskStatus {
    Completed,
    Failed,
    Cancelled,
    TimedOut,
    PollingTimedOut,
}

/// Why a task stopped early.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskStopReason {
    TokenCapped,
    TurnCapped,
    LoopCapped,
}

/// Tokens a provider reported, or their sum over a task.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub total_tokens: u64,
    /// Input tokens written to the provider's prompt cache.
    pub cache_creation_input_tokens: u64,
    /// Input tokens read from the provider's prompt cache.
    pub cache_read_input_tokens: u64,
    /// Output tokens spent on reasoning.
    pub reasoning_tokens: u64,
}

/// What a task reports as it goes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskEvent {
    /// The task was placed on a worker.
    TaskStarted {
        task_id: String,
        description: String,
        model_name: Option<String>,
        worker: Option<String>,
    },
    /// No worker had a free slot: the task waits for one, at most `deadline_ms`.
    TaskWaiting {
        task_id: String,
        deadline_ms: u64,
    },
    /// A new AI message of the subagent.
    TaskRunning {
        task_id: String,
        message: String,
        /// 1-based.
        message_index: u64,
        total_messages: u64,
        usage: Option<TokenUsage>,
        model_name: Option<String>,
    },
    /// A tool call of the subagent came back.
    TaskTool {
        task_id: String,
        name: String,
        call_id: String,
        error: bool,
        message: Option<String>,
    },
    /// An MCP server the subagent called asks the parent run's user (policy `ask`).
    TaskElicitation {
        task_id: String,
        run_id: String,
        id: String,
        server: String,
        message: String,
        requested_schema: Json,
    },
    /// A call of the subagent waits for the parent run's user: an approval rule asks
    /// (issue 37). `args` are redacted; the call is held on the worker until the answer
    /// ([`crate::messages::WorkerRequest::AnswerApproval`]) or `deadline_at` (Unix ms).
    TaskApproval {
        task_id: String,
        call_id: String,
        tool: String,
        args: Json,
        rule: Option<String>,
        origin: Option<String>,
        justification: Option<String>,
        asked_at: u64,
        deadline_at: u64,
    },
    /// How the subagent's held call `call_id` was decided, as the worker applied it.
    TaskApprovalDecided {
        task_id: String,
        call_id: String,
        tool: String,
        decision: String,
        rule: Option<String>,
        by: Option<String>,
        reason: Option<String>,
        at: u64,
        waited_ms: Option<u64>,
    },
    TaskCompleted {
        task_id: String,
        result: TaskResult,
    },
    TaskFailed {
        task_id: String,
        result: TaskResult,
    },
    TaskCancelled {
        task_id: String,
        result: TaskResult,
    },
    TaskTimedOut {
        task_id: String,
        result: TaskResult,
    },
}
