//! The `subagents:` section of `config.yaml` (spec §7.1): global timeout and turn limits,
//! the per-run delegation cap, token budgets, per-agent overrides and custom agents.
//! Defaults are DeerFlow's; how overrides combine (`get_subagent_config`) belongs to the
//! subagent runtime, which reads these values as written.

use serde::Deserialize;

use super::shapes::{null_as_default, NamedMap};

/// `subagents:`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, expecting = "a mapping of subagent settings")]
pub struct SubagentsConfig {
    /// Whether runs are offered `task` unless they say otherwise (Antler's; a run asks
    /// with `"subagents": true` or `antler run --subagents`).
    pub enabled: bool,
    /// `task` calls one response may make (DeerFlow's `max_concurrent_subagents`,
    /// clamped to 1..=4).
    pub max_concurrent: u32,
    /// Seconds a task waits for a free worker slot before it gets a capacity result.
    pub slot_wait_s: u64,
    /// Timeout in seconds for built-in subagents (custom agents use their own).
    pub timeout_seconds: u64,
    /// Global max-turn override; `None` keeps each agent's own.
    pub max_turns: Option<u32>,
    /// Total delegations allowed in one lead run (valid 1..=50).
    pub max_total_per_run: u32,
    /// Per-run token ceiling for subagents.
    pub token_budget: Option<TokenBudgetConfig>,
    /// Per-agent overrides, built-in or custom, by agent name.
    #[serde(deserialize_with = "null_as_default")]
    pub agents: NamedMap<SubagentOverride>,
    /// Custom subagent types, by name.
    #[serde(deserialize_with = "null_as_default")]
    pub custom_agents: NamedMap<CustomAgentConfig>,
}

impl Default for SubagentsConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            max_concurrent: 3,
            slot_wait_s: 30,
            timeout_seconds: 1800,
            max_turns: None,
            max_total_per_run: 6,
            token_budget: None,
            agents: NamedMap::new(),
            custom_agents: NamedMap::new(),
        }
    }
}

/// `token_budget:`, globally or per agent. Unset fields take DeerFlow's defaults: enabled,
/// `max_tokens` 1,000,000 with summarization on and 2,000,000 otherwise, `warn_threshold` 0.7.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(
    default,
    expecting = "a mapping with enabled, max_tokens, warn_threshold"
)]
pub struct TokenBudgetConfig {
    /// Whether the budget is enforced.
    pub enabled: Option<bool>,
    /// The token ceiling.
    pub max_tokens: Option<u64>,
    /// The spent fraction at which a warning is logged.
    pub warn_threshold: Option<f64>,
}

/// `subagents.agents.<name>:` overrides.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, expecting = "a mapping of per-agent overrides")]
pub struct SubagentOverride {
    /// Timeout override in seconds.
    pub timeout_seconds: Option<u64>,
    /// Max-turn override.
    pub max_turns: Option<u32>,
    /// Model override (a name from `models`).
    pub model: Option<String>,
    /// Skill allowlist override (`[]` means none).
    pub skills: Option<Vec<String>>,
    /// Token budget override.
    pub token_budget: Option<TokenBudgetConfig>,
}

/// `subagents.custom_agents.<name>:`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(expecting = "a custom agent with at least a description")]
pub struct CustomAgentConfig {
    /// What the agent is for; the lead reads it.
    pub description: String,
    /// The agent's system prompt.
    #[serde(default)]
    pub system_prompt: Option<String>,
    /// Tool allowlist; `None` means every tool.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// Tool denylist.
    #[serde(default = "default_custom_disallowed")]
    pub disallowed_tools: Vec<String>,
    /// Skill allowlist; `None` means all, `[]` none.
    #[serde(default)]
    pub skills: Option<Vec<String>>,
    /// A model name, or `inherit` for the parent's.
    #[serde(default = "default_model")]
    pub model: String,
    /// Turn limit.
    #[serde(default = "default_custom_max_turns")]
    pub max_turns: u32,
    /// Timeout in seconds.
    #[serde(default = "default_custom_timeout")]
    pub timeout_seconds: u64,
    /// Token budget override.
    #[serde(default)]
    pub token_budget: Option<TokenBudgetConfig>,
}

fn default_custom_disallowed() -> Vec<String> {
    ["task", "ask_clarification", "present_files"]
        .map(String::from)
        .to_vec()
}

fn default_model() -> String {
    "inherit".to_owned()
}

fn default_custom_max_turns() -> u32 {
    50
}

fn default_custom_timeout() -> u64 {
    900
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn example_block_from_deerflow_parses_with_defaults() {
        let yaml = "timeout_seconds: 1800\nmax_total_per_run: 6\nagents:\n  general-purpose:\n    timeout_seconds: 2700\n    max_turns: 250\n  bash:\n    timeout_seconds: 300\ncustom_agents:\n  analysis:\n    description: Data analysis\n    tools: [bash, read_file]\n    skills: []\n";
        let s: SubagentsConfig = serde_yaml::from_str(yaml).unwrap();
        assert_eq!(
            s.agents.get("general-purpose").unwrap().max_turns,
            Some(250)
        );
        let analysis = s.custom_agents.get("analysis").unwrap();
        assert_eq!(
            analysis.disallowed_tools,
            ["task", "ask_clarification", "present_files"]
        );
        assert_eq!(
            (
                analysis.model.as_str(),
                analysis.max_turns,
                analysis.timeout_seconds
            ),
            ("inherit", 50, 900)
        );
        assert_eq!(analysis.skills, Some(vec![]));
        assert_eq!(analysis.system_prompt, None);
    }
}
