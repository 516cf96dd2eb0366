//! Approval policies on tool calls: rules from `approvals:` (and per role, custom agent, skill)
//! that decide `allow`, `ask` or `deny` on a call's tool, source and arguments, before it
//! runs. The lead decides; the hosts decide again where the call runs. bash commands are
//! parsed ([`shell`]), never matched as raw text; the strictest matching rule wins, and a
//! rule's examples are checked when it is compiled. See docs/approvals.md.

mod compile;
mod defaults;
mod examples;
mod matcher;
mod paths;
mod programs;
mod recheck;
mod redact;
mod rules;
pub mod shell;
mod words;

#[cfg(test)]
mod shell_tests;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

pub use crate::config::approvals::{ApprovalsConfig, ArgMatcher, Decision, Examples, RuleConfig};
use crate::config::FieldPath;
pub use defaults::{default_rules, DEFAULTS_ORIGIN};
pub use recheck::Refusal;
pub use redact::{redact, REDACTED};
pub use rules::{ApprovalPolicy, GLOBAL_ORIGIN, UNPARSED_RULE};

/// The sandbox's working directory, against which relative paths resolve.
pub const SANDBOX_WORKSPACE: &str = "/mnt/user-data/workspace";

/// What the policy knows of the place calls run in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyEnv {
    /// The sandbox's working directory (`/mnt/user-data/workspace`).
    pub workspace: String,
    /// Container paths of the `sandbox.mounts` that are not read-only.
    pub writable_mounts: Vec<String>,
}

impl Default for PolicyEnv {
    fn default() -> Self {
        Self {
            workspace: SANDBOX_WORKSPACE.to_owned(),
            writable_mounts: Vec::new(),
        }
    }
}

impl PolicyEnv {
    /// The environment of a sandbox with `sandbox:`'s mounts (none when absent).
    pub fn from_sandbox(sandbox: Option<&crate::config::SandboxConfig>) -> Self {
        let writable_mounts = sandbox
            .map(|s| {
                s.mounts
                    .iter()
                    .filter(|m| !m.read_only)
                    .map(|m| m.container_path.clone())
                    .collect()
            })
            .unwrap_or_default();
        Self {
            writable_mounts,
            ..Self::default()
        }
    }
}

/// One tool call, as the policy sees it.
#[derive(Clone, Copy, Debug)]
pub struct CallFacts<'a> {
    /// The tool's name as the model called it (`bash`, `write_file`, `mcp_github_create_issue`).
    pub tool: &'a str,
    /// Where the tool comes from.
    pub source: CallSource<'a>,
    /// The call's arguments.
    pub args: &'a serde_json::Value,
}

/// Where a tool comes from; a rule's `source` names one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallSource<'a> {
    /// A built-in tool of the lead.
    Builtin,
    /// A sandbox tool (bash, the file tools).
    Sandbox,
    /// A tool of the MCP server `server`.
    Mcp {
        /// The server's name in `extensions_config.json`.
        server: &'a str,
    },
    /// `invoke_acp_agent`.
    Acp,
    /// `task` (a subagent).
    Task,
    /// A tool configured in `config.yaml`'s `tools:`.
    Config,
}

/// What the policy decided for a call, and which rule decided it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// The decision.
    pub decision: Decision,
    /// The deciding rule's name; `None` when no rule matched (the call is allowed).
    pub rule: Option<String>,
    /// The layer the rule came from (`defaults`, `approvals.rules`, `approvals.roles.admin`, ...).
    pub origin: Option<String>,
    /// The rule's justification.
    pub justification: Option<String>,
}

impl Verdict {
    /// The verdict when no rule matches.
    pub fn allow() -> Self {
        Self {
            decision: Decision::Allow,
            rule: None,
            origin: None,
            justification: None,
        }
    }
}

/// A rule that cannot be compiled: a bad matcher, a failing example, a repeated name.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PolicyError {
    /// The rule at `index` of layer `origin` is not acceptable.
    #[error("{origin}[{index}] ({name}): {message}")]
    Rule {
        /// The layer (`approvals.rules`, `approvals.roles.admin`, a custom agent's name, ...).
        origin: String,
        /// The rule's position in its layer.
        index: usize,
        /// The rule's name.
        name: String,
        /// The offending field, relative to the rule (`examples.not_match[0]`, `paths[1]`).
        field: FieldPath,
        /// What is wrong.
        message: String,
    },
}

impl PolicyError {
    pub(crate) fn rule(
        origin: &str,
        index: usize,
        name: &str,
        field: FieldPath,
        message: impl Into<String>,
    ) -> Self {
        Self::Rule {
            origin: origin.to_owned(),
            index,
            name: name.to_owned(),
            field,
            message: message.into(),
        }
    }

    /// The layer the rule belongs to.
    pub fn origin(&self) -> &str {
        match self {
            Self::Rule { origin, .. } => origin,
        }
    }

    /// The rule's position in its layer.
    pub fn index(&self) -> usize {
        match self {
            Self::Rule { index, .. } => *index,
        }
    }

    /// The offending field, relative to the rule.
    pub fn field(&self) -> &FieldPath {
        match self {
            Self::Rule { field, .. } => field,
        }
    }

    /// The rule's name and what is wrong, without the place: "rule `git-push`: ...".
    pub fn detail(&self) -> String {
        match self {
            Self::Rule { name, message, .. } => format!("rule `{name}`: {message}"),
        }
    }
}

/// Every rule of `config` that does not compile, at its field path in `config.yaml`, with its
/// message (for the config loader; the global layer with the defaults, then each role's).
pub(crate) fn config_problems(
    config: &ApprovalsConfig,
    env: &PolicyEnv,
) -> Vec<(FieldPath, String)> {
    let base = FieldPath::root().key("approvals");
    let at = |error: &PolicyError, layer: FieldPath| {
        let path = layer.index(error.index()).join(error.field());
        (path, error.detail())
    };
    let mut problems = Vec::new();
    if let Err(error) = ApprovalPolicy::from_config(config, env) {
        match error.origin() {
            GLOBAL_ORIGIN => problems.push(at(&error, base.key("rules"))),
            // A shipped rule that does not compile for this sandbox's mounts.
            _ => problems.push((base.key("defaults"), error.to_string())),
        }
    }
    for (role, rules) in &config.roles {
        if let Err(error) = ApprovalPolicy::layer(rules, &role_origin(role), env) {
            problems.push(at(&error, base.key("roles").key(role)));
        }
    }
    problems
}

/// The origin of a role's layer: `approvals.roles.<role>`.
pub fn role_origin(role: &str) -> String {
    format!("approvals.roles.{role}")
}

/// The origin of a skill's layer: `skill <name>`.
pub fn skill_origin(skill: &str) -> String {
    format!("skill {skill}")
}
