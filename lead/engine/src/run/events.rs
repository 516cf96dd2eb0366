//! What a run reports as it goes: [`RunEvent`]s (the CLI prints them, the gateway streams
//! them) with the six [`ToolState`]s of a tool's life, and the [`EventSink`] they go to.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::thread::state::TokenUsage;
use crate::tools::task::TaskEvent;

/// A subagent's call as its parent run names it (issue 37): the parent's `task` call,
/// the subagent's type and the call's own id. The parent's `tool_call_id` of it is
/// [`subagent_call_id`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubagentCall {
    pub task_call_id: String,
    pub subagent_type: String,
    pub call_id: String,
}

/// The id by which the parent run names its subagent's call `call_id` of the `task` call
/// `task_call_id` (unique beside the parent's own calls).
pub fn subagent_call_id(task_call_id: &str, call_id: &str) -> String {
    format!("{task_call_id}.{call_id}")
}

/// What a run reports as it goes (the CLI prints them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum RunEvent {
    ModelStarted {
        turn: usize,
    },
    /// A piece of the reply the model of `turn` is writing, as it streams (coalesced: a
    /// few per 100 ms at most, `run::delta`); the concatenation of a turn's `text` is the
    /// streamed answer. `message_id` is the id the AI message will have in the state. A
    /// retry or fallback starts the turn's text over (after its `llm_retry` or
    /// `model_fallback`). Not kept in the runs store: a late watcher reads the messages.
    ModelDelta {
        turn: usize,
        message_id: String,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        text: String,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        reasoning: String,
    },
    ToolStarted {
        name: String,
        tool_call_id: String,
    },
    ToolFinished {
        name: String,
        tool_call_id: String,
        error: bool,
        /// The first line of an error result (at most 200 characters).
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// A model call returned: what the provider said it used and why it stopped.
    ModelFinished {
        turn: usize,
        /// The id of the turn's AI message in the state (the `model_delta` events' id).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message_id: Option<String>,
        /// The model that answered, when it is not the run's own (a fallback).
        #[serde(skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        usage: Option<TokenUsage>,
        #[serde(skip_serializing_if = "Option::is_none")]
        finish_reason: Option<String>,
        /// The run's totals after this call (`null` while no call reported any).
        total_usage: Option<TokenUsage>,
        /// What the model thought before it answered (its readable reasoning, never the
        /// provider's signatures or encrypted items); never part of the answer.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning: Option<String>,
    },
    /// A model call failed and is tried again (DeerFlow's `llm_retry`, spec D.5): by the
    /// model's client (HTTP 429/5xx, a cut connection) or by the run's resilience layer.
    LlmRetry {
        model: String,
        /// The attempt that failed (1-based).
        attempt: u32,
        max_attempts: u32,
        wait_ms: u64,
        /// `transient`, `busy`, `burst_rate`, ... (`model::resilient::FailureReason`).
        reason: String,
        /// DeerFlow's text: `LLM request retry {a}/{max}: {why}. Retrying in {s}s.`
        message: String,
        /// What failed, as the client said it.
        detail: String,
    },
    /// A model failed for good and the next model of its `fallback:` list is asked.
    ModelFallback {
        from: String,
        to: String,
        reason: String,
        detail: String,
    },
    /// The model's reply was empty: it is asked once more, with a hidden reminder.
    EmptyReplyRetried {
        turn: usize,
    },
    /// A tool reached one of its six states in this run (`antler run --trace`).
    Lifecycle {
        state: ToolState,
        tool: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        tool_call_id: Option<String>,
    },
    /// Something the run's set-up worked around (MCP servers not ready, an extensions
    /// file that did not load): the run goes on, the submitter should know.
    Warning {
        message: String,
    },
    /// An AI message of the run (only when `report_messages`).
    AssistantMessage {
        /// 1-based.
        index: usize,
        content: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        usage: Option<TokenUsage>,
    },
    /// The MCP server of the call `tool_call_id` asks the run's user for input (policy
    /// `ask`): answered through `POST /api/runs/{id}/elicitations/{id}`, the call goes on.
    Elicitation {
        tool_call_id: String,
        id: String,
        server: String,
        message: String,
        requested_schema: serde_json::Value,
    },
    /// An approval rule asks the run's user about the call `tool_call_id` (issue 37): the
    /// run stops (`interrupted`) until it is answered through `POST
    /// /api/runs/{id}/approvals/{call}` or `antler run --resume RUN --approve CALL`, or until
    /// `deadline_at` (Unix ms), when it is a denial. `args` are redacted.
    ApprovalRequested {
        tool_call_id: String,
        tool: String,
        args: serde_json::Value,
        #[serde(skip_serializing_if = "Option::is_none")]
        rule: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        origin: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        justification: Option<String>,
        deadline_at: u64,
        /// The subagent whose call it is (`None`: the run's own call).
        #[serde(skip_serializing_if = "Option::is_none")]
        subagent: Option<SubagentCall>,
    },
    /// How the approval of the call `tool_call_id` was decided: `allow` or `deny` by a rule,
    /// `approve`, `approve_for_thread` or `deny` by the person `by`, `thread_rule` (its
    /// rule was approved for the thread earlier), `expired` (nobody answered in time),
    /// `nobody` (an ask in a run nobody can answer: a denial).
    ApprovalDecided {
        tool_call_id: String,
        tool: String,
        decision: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        rule: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        by: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// Unix milliseconds.
        at: u64,
        /// For an ask answered by a person or its deadline: milliseconds from the ask to
        /// the answer (the time to decision).
        #[serde(skip_serializing_if = "Option::is_none")]
        waited_ms: Option<u64>,
        /// The subagent whose call it is (`None`: the run's own call).
        #[serde(skip_serializing_if = "Option::is_none")]
        subagent: Option<SubagentCall>,
    },
    /// What the ACP agent of the `invoke_acp_agent` call `tool_call_id` does meanwhile: a
    /// tool call, its update or its plan (ACP's `session/update`, as the agent sent it).
    AcpActivity {
        tool_call_id: String,
        agent: String,
        update: serde_json::Value,
    },
    /// What a subagent task of the `task` call `tool_call_id` reports (spec 7.4's
    /// `task_*` events), as it happens.
    Task {
        tool_call_id: String,
        #[serde(flatten)]
        task: TaskEvent,
    },
    /// Summarization folded the `removed` oldest messages into the thread's summary and
    /// kept `kept` (spec C.1–C.3).
    ContextSummarized {
        removed: usize,
        kept: usize,
    },
    /// The oldest whole turns were dropped so the request fits the model's window (a
    /// summary failed or could not make room).
    ContextTrimmed {
        removed: usize,
        kept: usize,
    },
    /// The thread got its title (spec C.5).
    TitleSet {
        title: String,
    },
}

impl RunEvent {
    /// A streamed piece of a reply: shown to watchers as it happens, never kept in the
    /// runs store one by one (the finished message is).
    pub fn is_transient(&self) -> bool {
        matches!(self, RunEvent::ModelDelta { .. })
    }
}

/// The first line of `text`, at most 200 characters.
pub(crate) fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    match line.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_owned(),
    }
}

/// The six states of a tool's life in a run (ARCHITECTURE.md). Available and
/// Authorized are reported once per drive for the catalog's tools, Visible per model
/// turn, Executed when a call passes the middlewares, Returned when its result is
/// back, Delivered for each produced output settlement finds presented.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolState {
    Available,
    Authorized,
    Visible,
    Executed,
    Returned,
    Delivered,
}

/// Where a run's events go.
pub type EventSink = Arc<dyn Fn(&RunEvent) + Send + Sync>;
