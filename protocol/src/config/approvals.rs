//! The `approvals:` section of `config.yaml`: approval rules on tool calls (allow, ask or deny,
//! decided on the call's tool, source and arguments), the shipped defaults switch, the ask
//! deadline and the decision for bash commands that cannot be analysed. Strict: an unknown key
//! is an error naming it. The rules are compiled (and their examples checked) by
//! `crate::approvals::ApprovalPolicy`; [`check`] reports a rule that does not compile as an
//! error at its field path.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::diagnostics::FieldPath;
use super::shapes::null_as_default;

/// What a rule decides, in strictness order: the strictest matching rule wins.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// The call runs.
    #[default]
    Allow,
    /// The run stops until a person approves or denies the call.
    Ask,
    /// The call does not run; the model reads why.
    Deny,
}

impl Decision {
    /// The word used in config and events: `allow`, `ask`, `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Ask => "ask",
            Decision::Deny => "deny",
        }
    }
}

impl std::fmt::Display for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `approvals:` (serialized too: subagent tasks carry it).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(
    default,
    deny_unknown_fields,
    expecting = "a mapping with defaults, deadline_seconds, unparsed, rules, roles"
)]
pub struct ApprovalsConfig {
    /// Whether the shipped default rules apply (docs/approvals.md).
    pub defaults: bool,
    /// Seconds an ask waits for an answer; an unanswered ask becomes a denial.
    pub deadline_seconds: u64,
    /// The decision for a bash command whose commands cannot be known statically.
    pub unparsed: Decision,
    /// The global rules, in file order.
    #[serde(deserialize_with = "null_as_default")]
    pub rules: Vec<RuleConfig>,
    /// Extra rules per principal role.
    #[serde(deserialize_with = "null_as_default")]
    pub roles: BTreeMap<String, Vec<RuleConfig>>,
}

impl Default for ApprovalsConfig {
    fn default() -> Self {
        Self {
            defaults: true,
            deadline_seconds: 600,
            unparsed: Decision::Ask,
            rules: Vec::new(),
            roles: BTreeMap::new(),
        }
    }
}

/// One approval rule. Every matcher given must match (for bash, the same simple command);
/// a rule with none matches every call of its tool and source.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, expecting = "a rule with a name and a decision")]
pub struct RuleConfig {
    /// The rule's name, unique within its layer; verdicts and errors name it.
    pub name: String,
    /// A tool name or glob (`mcp_github_*`); absent: any tool.
    #[serde(default)]
    pub tool: Option<String>,
    /// `builtin`, `sandbox`, `mcp`, `mcp:<server>` (a glob), `acp`, `task` or `config`.
    #[serde(default)]
    pub source: Option<String>,
    /// bash: a program and an argument prefix (`[git, push]`).
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// bash: several alternatives of `command`.
    #[serde(default)]
    pub commands: Option<Vec<Vec<String>>>,
    /// bash: any of these flags present (`-r` matches inside `-rf`; `--recursive`, and its
    /// unambiguous abbreviations).
    #[serde(default)]
    pub flags: Option<Vec<String>>,
    /// Path arguments (file tools' path, bash's path-like arguments) matching any of these
    /// globs, on the path resolved lexically against the workspace.
    #[serde(default)]
    pub paths: Option<Vec<String>>,
    /// A path argument resolving (lexically, relative to the workspace) outside all these roots.
    #[serde(default)]
    pub paths_outside: Option<Vec<String>>,
    /// A path written (write_file/str_replace's path; bash: `>`/`>>` targets, `tee`, `cp`/`mv`
    /// destinations, ...) matching any of these globs.
    #[serde(default)]
    pub writes: Option<Vec<String>>,
    /// JSON-pointer matchers on the arguments; all must match.
    #[serde(default)]
    pub args: Option<Vec<ArgMatcher>>,
    /// What the rule decides.
    pub decision: Decision,
    /// Why, shown to the person asked and to the model on a denial.
    #[serde(default)]
    pub justification: Option<String>,
    /// Calls the rule must and must not match, checked when the config loads.
    #[serde(default)]
    pub examples: Option<Examples>,
}

impl RuleConfig {
    /// A rule named `name` deciding `decision`, with no matchers yet.
    pub fn new(name: impl Into<String>, decision: Decision) -> Self {
        Self {
            name: name.into(),
            tool: None,
            source: None,
            command: None,
            commands: None,
            flags: None,
            paths: None,
            paths_outside: None,
            writes: None,
            args: None,
            decision,
            justification: None,
            examples: None,
        }
    }
}

/// A matcher on the value at a JSON pointer of the arguments; the conditions given must all hold.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, expecting = "a matcher with a pointer")]
pub struct ArgMatcher {
    /// An RFC 6901 pointer (`/to/0`, `/path`).
    pub pointer: String,
    /// The value equals this one.
    #[serde(default)]
    pub equals: Option<Value>,
    /// The value is a string matching this glob.
    #[serde(default)]
    pub glob: Option<String>,
    /// The value is a string matching this regex (unanchored).
    #[serde(default)]
    pub regex: Option<String>,
    /// Whether a value is present at the pointer.
    #[serde(default)]
    pub present: Option<bool>,
}

/// A rule's examples: bash command lines (strings) for a bash rule, argument objects otherwise.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(
    default,
    deny_unknown_fields,
    expecting = "a mapping with match and not_match"
)]
pub struct Examples {
    /// Calls the rule must match.
    #[serde(rename = "match", deserialize_with = "null_as_default")]
    pub matching: Vec<Value>,
    /// Calls the rule must not match.
    #[serde(deserialize_with = "null_as_default")]
    pub not_match: Vec<Value>,
}

/// Values that type-check but cannot work, as (path, message, expectation).
pub(crate) fn check(config: &ApprovalsConfig) -> Vec<(FieldPath, String, Option<String>)> {
    let mut problems = Vec::new();
    if config.deadline_seconds == 0 {
        problems.push((
            FieldPath::root().key("approvals").key("deadline_seconds"),
            "value out of range".to_owned(),
            Some("expected a number of seconds greater than 0".to_owned()),
        ));
    }
    problems
}
