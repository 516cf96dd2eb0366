//! [`RunSettings`]: a run's knobs (turn cap, budgets, limits, skills, web tools,
//! settlement), with DeerFlow's defaults. The lead builds them from config.yaml, a
//! subagent's task from its spec; a [`RunBuilder`](super::builder::RunBuilder) hands them
//! to the loop, which reads them and never changes them.

use std::sync::Arc;
use std::time::Duration;

use crate::middleware::guardrail::Guardrail;
use crate::middleware::invalid_calls::InvalidCallLimit;
use crate::middleware::loop_detection::LoopDetection;
use crate::middleware::output_budget::OutputBudget;
use crate::middleware::skill_policy::SkillPolicy;
use crate::middleware::subagent_limit::SubagentLimit;
use crate::middleware::token_budget::TokenBudget;
use crate::tools::skills::SkillStore;

/// A run's knobs.
pub struct RunSettings {
    /// Model turns before the run fails (LangGraph's recursion limit).
    pub max_turns: usize,
    /// Deadline of one tool call on a host.
    pub tool_timeout: Duration,
    pub loop_detection: LoopDetection,
    /// Replies of only invalid tool calls in a row that end the run
    /// (`llm_call.max_invalid_tool_calls`).
    pub invalid_calls: InvalidCallLimit,
    pub subagent_limit: SubagentLimit,
    pub output_budget: OutputBudget,
    /// `read_before_write.enabled`.
    pub read_before_write: crate::middleware::read_before_write::ReadBeforeWrite,
    /// `safety_finish_reason.enabled`.
    pub safety_finish_reason: crate::middleware::finish_reason::SafetyFinishReason,
    /// `guardrails.enabled` with a provider.
    pub guardrail: Option<Guardrail>,
    /// `tool_search.auto_promote_top_k`, clamped.
    pub auto_promote_top_k: usize,
    /// Where the run's skills are installed (activation and policy, `tools::skills`).
    pub skills: SkillStore,
    /// A fixed tool policy instead of the active skills' one (tests); `None` resolves
    /// the policy from the active skills at every model turn.
    pub skill_policy: Option<SkillPolicy>,
    /// The lead's static system prompt (`prompt`); `None` sends none.
    pub system_prompt: Option<Arc<str>>,
    /// `token_budget:` when enabled.
    pub token_budget: Option<TokenBudget>,
    /// The agent's skills whitelist (`None`: every skill), for `describe_skill`.
    pub allowed_skills: Option<std::collections::HashSet<String>>,
    /// Whether the run ends with settlement (the lead's runs; a subagent's task does not).
    pub settle: bool,
    /// Whether each AI message is reported as [`RunEvent::AssistantMessage`](crate::run::events::RunEvent::AssistantMessage) (a
    /// subagent's task streams them to its parent as `task_running`).
    pub report_messages: bool,
    /// Whether this run is a subagent's (the guardrail is told so).
    pub is_subagent: bool,
    /// The configured web tools (`tools::web`), from config.yaml's `tools:`.
    pub web: Option<Arc<crate::tools::web::WebTools>>,
    /// What `invoke_acp_agent` calls carry (`None`: no agent is configured).
    pub acp: Option<Arc<crate::tools::acp::AcpCalls>>,
    /// `skill_manage` (`tools::skill_manage`) when `skill_evolution.enabled`; it writes
    /// under `skills` for the run's user.
    pub skill_manage: Option<crate::tools::skill_manage::SkillManageSettings>,
    /// `summarization:` with the run model's window (`None`: off).
    pub summarization: Option<Arc<crate::middleware::summarization::Summarization>>,
    /// `title:` with its model (`None`: no titles, as for a subagent's task).
    pub title: Option<Arc<crate::middleware::title::Titling>>,
    /// Hears the messages each summary removes, before they go (memory's flush).
    pub before_summarization: Option<crate::middleware::summarization::BeforeSummarization>,
    /// The approval stage (`approvals:`; `None`: no policy, every visible call runs).
    pub approvals: Option<Arc<crate::middleware::approvals::ApprovalGate>>,
    /// A subagent task's held calls: an `ask` waits here for the parent run's user
    /// (`None`: an ask stops the run, or is a denial where nobody can answer).
    pub parent_asks: Option<Arc<crate::task::asks::TaskAsks>>,
}

impl Default for RunSettings {
    fn default() -> Self {
        RunSettings {
            max_turns: 50,
            tool_timeout: Duration::from_secs(900),
            loop_detection: LoopDetection::default(),
            invalid_calls: InvalidCallLimit::default(),
            subagent_limit: SubagentLimit::default(),
            output_budget: OutputBudget::default(),
            safety_finish_reason: Default::default(),
            read_before_write: Default::default(),
            guardrail: None,
            auto_promote_top_k: crate::catalog::routing::DEFAULT_AUTO_PROMOTE_TOP_K,
            skills: SkillStore::default(),
            skill_policy: None,
            system_prompt: None,
            token_budget: None,
            allowed_skills: None,
            settle: true,
            report_messages: false,
            is_subagent: false,
            web: None,
            acp: None,
            skill_manage: None,
            summarization: None,
            title: None,
            before_summarization: None,
            approvals: None,
            parent_asks: None,
        }
    }
}
