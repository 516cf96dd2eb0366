//! antler-engine: the agent engine the lead and the subagent workers both run, in rooms
//! named for ARCHITECTURE's nouns, from the bottom up: `catalog` assembles, hashes, defers
//! and searches tools; `thread` is a thread's state and the ports a run reaches the world
//! through (its files, the hosts, its sandbox lease); `model` the chat-model trait, the
//! scripted model, a model's wire form and one module per provider; `middleware`
//! DeerFlow's tool-call middlewares; `tools` the tools the engine runs itself (builtins,
//! images, MCP results, ACP, skills, web, the `task` tool); `prompt` the system prompts;
//! `settlement` the delivery receipt; `run` the model -> tools loop, its events and its
//! actor; `task` a subagent task, which drives a run. A room depends only on the rooms
//! before it. What only the lead has (the checkpoint journal, the custom-agent tools,
//! delegation to subagent workers) plugs in through [`Journal`], [`LeadTools`] and
//! [`Delegator`]; this crate never depends on the lead.
//!
//! The rooms are private: what other crates use is re-exported here; `catalog` is public,
//! and what other crates use of it is re-exported by `catalog` itself.

pub mod catalog;
mod http_clients;
mod middleware;
mod model;
mod prompt;
mod run;
mod settlement;
mod task;
mod thread;
mod tools;

pub use http_clients::clients_built;
pub use middleware::approvals::{
    summary as approval_summary, ApprovalGate, NO_JUSTIFICATION as APPROVAL_NO_JUSTIFICATION,
};
pub use middleware::dangling::INTERRUPTED_CALL;
pub use middleware::finish_reason::SafetyFinishReason;
pub use middleware::guardrail::{AllowlistProvider, Guardrail};
/// A run's model with retries, a circuit breaker per model configuration and fallbacks
/// (spec D.5), and the texts of a model's mistakes (spec D.4).
pub use middleware::invalid_calls::{
    InvalidCallLimit, EMPTY_NAME, INVALID_ARGUMENTS, INVALID_CALLS_HARD_STOP,
};
pub use middleware::loop_detection::LoopDetection;
pub use middleware::output_budget::OutputBudget;
pub use middleware::read_before_write::ReadBeforeWrite;
pub use middleware::skill_policy::{Skill, SkillPolicy};
pub use middleware::subagent_limit::SubagentLimit;
/// Summarization and manual compaction (spec C.1–C.4), and titles (C.5).
pub use middleware::summarization::{
    compact, count_request_tokens, durable_context, window_of, BeforeSummarization, CompactError,
    CompactOutcome, Summarization, SummarizationConfigError, TokenCounter, AUTHORITY_CONTRACT,
    DEFAULT_SUMMARY_PROMPT, NOT_ENOUGH_MESSAGES, SUMMARY_HEADING,
};
pub use middleware::terminal_response::{EMPTY_REPLY_FALLBACK, RECOVERY_PROMPT};
pub use middleware::title::{Titling, NEW_CONVERSATION};
pub use middleware::token_budget::TokenBudget;
pub use middleware::tool_error::{FailureClass, ToolFailure};
pub use middleware::uploads::{UPLOADS_MANIFEST_FILE, VIRTUAL_UPLOADS};
pub use model::openai::{ApiKey, OpenAiConfig, OpenAiModel, USE_CHAT_DEEPSEEK, USE_CHAT_OPENAI};
/// What every provider reads from a `models:` entry, and the finish reasons replies use.
pub use model::provider::{PROVIDER_NAMES, USE_IDS as MODEL_USE_IDS};
pub use model::resilient::{
    resilient_model_from_config, BreakerSettings, CircuitBreaker, FailureReason, FallbackNotice,
    Link as ResilientLink, LlmCall, ResilientModel,
};
pub use model::{
    check_model_entry, model_from_config, model_from_entry, Auxiliary, ChatModel, InvalidToolCall,
    ModelError, ModelObserver, ModelReply, ModelRequest, Playbook, Provider, RetryNotice,
    ScriptedCall, ScriptedModel, ScriptedTurn, WireModel, MAX_PLAYBOOK_BYTES,
};
pub use model::{entry as model_entry, finish_reason};
pub use prompt::subagent::builtin_system_prompt;
pub use prompt::{
    prepare_request, subagent_system_prompt, system_prompt, PromptCache, PromptInputs, PromptMount,
    SubagentPromptInputs, SubagentPromptParts,
};
pub use run::actor::{Crash, Drive, RunActor};
pub use run::builder::RunBuilder;
pub use run::client::CALL_CANCELLED;
pub use run::events::{subagent_call_id, RunEvent, SubagentCall, ToolState};
pub use run::execute::LeadTools;
pub use run::journal::{
    Journal, JournalError, JournalResult, NoJournal, RunRecord, RunStatus, SharedJournal,
};
pub use run::run_loop::{CancelFlag, RunError, RunLoop, RunOutcome};
pub use run::settings::RunSettings;
pub use settlement::{DeliveryReceipt, OutputsSnapshot};
pub use task::approvals::TaskApprovals;
pub use task::asks::TaskAsks;
pub use task::graph::{drive_task, drive_task_asking, run_task, run_task_asking, TaskRun};
pub use task::spec::{TaskSpec, WireCatalog};
pub use task::wire::TaskWireError;
pub use thread::approvals::{ApprovalChoice, ApprovalDecision, ApprovalState, PendingApproval};
pub use thread::context::{AgentContext, RunContext};
pub use thread::files::{ThreadFiles, ThreadFilesMode, ThreadPaths};
pub use thread::goal::{GoalState, MAX_GOAL_CONTINUATIONS, MAX_GOAL_OBJECTIVE_CHARS};
pub use thread::hosts::{
    call_link, stream_link, HostError, HostOf, HostReadiness, LeadConnectionHosts, LinkTo,
    ToolHosts,
};
pub use thread::state::{
    next_ai_id, ActiveSkill, Message, SkillSource, StateUpdate, StopReason, ThreadState,
    TokenUsage, ToolCall, ToolStatus,
};
pub use tools::acp::AcpCalls;
pub use tools::builtins::present_files;
pub use tools::skill_manage::{SkillManageSettings, UnavailableModel};
pub use tools::skills::{InstalledSkill, SkillStore, SlashActivation};
pub use tools::task::delegation::{Delegator, TaskCall, TaskEventSink};
pub use tools::task::{
    TaskEvent, TaskResult, TaskStatus, TaskStopReason, BASH_SUBAGENT, BASH_SUBAGENT_DISABLED,
    GENERAL_PURPOSE, UNKNOWN_SUBAGENT,
};
pub use tools::view_image::{images_for_next_call, view_image};
pub use tools::web::{WebTools, WireWebTools};
