//! The policy: compiled rules and their evaluation. A rule matches when every matcher it has matches
//! (for bash, on one simple command of the line); the strictest matching rule wins (deny >
//! ask > allow; the first in order among equals). A matcher that only possibly matches (a part
//! of the command is known only at run time) makes a deny or ask rule ask, and an allow rule not
//! match. Rules are indexed by tool and, for bash, by program, and a bash line is analysed once
//! per evaluation, only when a rule that reads commands applies.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use globset::{GlobSet, GlobSetBuilder};
use serde_json::Value;

use super::compile::compile_layer;
use super::matcher::{Rule, ToolMatch};
use super::paths::Match;
use super::shell::{self, Analysis};
use super::{CallFacts, Decision, PolicyEnv, PolicyError, RuleConfig, Verdict};
use crate::config::approvals::ApprovalsConfig;

/// The origin of `approvals.rules`.
pub const GLOBAL_ORIGIN: &str = "approvals.rules";
/// The rule name a verdict carries when a bash command could not be analysed.
pub const UNPARSED_RULE: &str = "unparsed";
/// The tool whose `command` argument is a bash command line.
pub(crate) const BASH_TOOL: &str = "bash";

/// A compiled set of approval rules: cheap to clone, shared by every run.
#[derive(Clone, Debug, Default)]
pub struct ApprovalPolicy {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    rules: Vec<Rule>,
    /// The decision for an unanalysable command; `None`: ask.
    unparsed: Option<Decision>,
    index: Index,
}

impl ApprovalPolicy {
    /// The config's global layer (+ the shipped defaults when `defaults`), examples checked: a
    /// failing example, a bad glob/regex/pointer, a duplicate name is a PolicyError naming rule
    /// and example.
    pub fn from_config(
        config: &ApprovalsConfig,
        env: &PolicyEnv,
    ) -> Result<ApprovalPolicy, PolicyError> {
        let mut rules = Vec::new();
        if config.defaults {
            let defaults = super::default_rules(env);
            rules.extend(compile_layer(&defaults, super::DEFAULTS_ORIGIN, env)?);
        }
        rules.extend(compile_layer(&config.rules, GLOBAL_ORIGIN, env)?);
        Ok(Self::build(rules, Some(config.unparsed)))
    }

    /// One more layer (a role's, a custom agent's, a skill's rules), `origin` names it in errors
    /// and verdicts.
    pub fn layer(
        rules: &[RuleConfig],
        origin: &str,
        env: &PolicyEnv,
    ) -> Result<ApprovalPolicy, PolicyError> {
        Ok(Self::build(compile_layer(rules, origin, env)?, None))
    }

    /// The layer of `role` in `config` (`approvals.roles.<role>`); empty when it has none.
    pub fn role(
        config: &ApprovalsConfig,
        role: &str,
        env: &PolicyEnv,
    ) -> Result<ApprovalPolicy, PolicyError> {
        match config.roles.get(role) {
            Some(rules) => Self::layer(rules, &super::role_origin(role), env),
            None => Ok(Self::default()),
        }
    }

    /// The union of both policies' rules (this one's first); the stricter `unparsed`.
    pub fn with(&self, other: &ApprovalPolicy) -> ApprovalPolicy {
        if other.is_empty() && other.inner.unparsed.is_none() {
            return self.clone();
        }
        if self.is_empty() && self.inner.unparsed.is_none() {
            return other.clone();
        }
        let rules = self
            .inner
            .rules
            .iter()
            .chain(&other.inner.rules)
            .cloned()
            .collect();
        let unparsed = self.inner.unparsed.max(other.inner.unparsed);
        Self::build(rules, unparsed)
    }

    /// Whether the policy has no rules (every call is allowed).
    pub fn is_empty(&self) -> bool {
        self.inner.rules.is_empty()
    }

    /// The strictest matching rule's verdict; no rule matches -> Allow with rule None.
    pub fn evaluate(&self, call: &CallFacts<'_>) -> Verdict {
        let inner = &*self.inner;
        if inner.rules.is_empty() {
            return Verdict::allow();
        }
        let mut best = Best::default();
        let is_bash = call.tool == BASH_TOOL;
        let mut shell_candidates: Vec<usize> = Vec::new();
        for i in inner.index.candidates(call.tool) {
            let rule = &inner.rules[i];
            if !rule.head_matches(call) {
                continue;
            }
            if !rule.reads_paths_or_commands() {
                best.consider(i, rule, Match::Yes);
            } else if is_bash {
                shell_candidates.push(i);
            } else if !rule.shell_only {
                best.consider(i, rule, rule.match_file_tool(call.tool, call.args));
            }
        }
        if shell_candidates.is_empty() {
            return best.verdict(&inner.rules);
        }
        let analysis = match call.args.get("command").and_then(Value::as_str) {
            Some(line) => shell::analyse(line),
            None => Analysis::Unanalysable {
                reason: "the call has no command string".to_owned(),
                partial: Vec::new(),
            },
        };
        shell_candidates.sort_unstable();
        for command in analysis.commands() {
            let by_program = inner.index.by_program.get(command.program.as_str());
            for &i in by_program
                .into_iter()
                .flatten()
                .chain(&inner.index.any_program)
            {
                if shell_candidates.binary_search(&i).is_ok() {
                    let rule = &inner.rules[i];
                    best.consider(i, rule, rule.match_command(command));
                }
            }
        }
        if let Some(reason) = analysis.unanalysable() {
            best.consider_unparsed(inner.unparsed.unwrap_or(Decision::Ask), reason);
        }
        best.verdict(&inner.rules)
    }

    fn build(rules: Vec<Rule>, unparsed: Option<Decision>) -> Self {
        let index = Index::new(&rules);
        Self {
            inner: Arc::new(Inner {
                rules,
                unparsed,
                index,
            }),
        }
    }
}

/// The best verdict so far: the strictest decision; among equals a sure match before one that
/// only may apply, then the lowest rule index.
#[derive(Default)]
struct Best {
    /// Decision, whether the match is sure, rule index.
    found: Option<(Decision, bool, usize)>,
    unparsed: Option<(Decision, String)>,
}

/// What a verdict's justification adds when its rule only may apply.
const MAY_APPLY: &str = "may apply: part of the command is known only at run time";

impl Best {
    fn consider(&mut self, index: usize, rule: &Rule, matched: Match) {
        let (decision, sure) = match matched {
            Match::Yes => (rule.decision, true),
            Match::Maybe if rule.decision >= Decision::Ask => (Decision::Ask, false),
            Match::Maybe | Match::No => return,
        };
        let better = match self.found {
            None => true,
            Some((d, s, i)) => {
                (decision, sure, std::cmp::Reverse(index)) > (d, s, std::cmp::Reverse(i))
            }
        };
        if better {
            self.found = Some((decision, sure, index));
        }
    }

    fn consider_unparsed(&mut self, decision: Decision, reason: &str) {
        self.unparsed = Some((decision, reason.to_owned()));
    }

    fn verdict(self, rules: &[Rule]) -> Verdict {
        let from_rule = self.found.map(|(decision, sure, i)| {
            let rule = &rules[i];
            let justification = match (sure, &rule.justification) {
                (true, j) => j.clone(),
                (false, Some(j)) => Some(format!("{j} ({MAY_APPLY})")),
                (false, None) => Some(MAY_APPLY.to_owned()),
            };
            Verdict {
                decision,
                rule: Some(rule.name.clone()),
                origin: Some(rule.origin.clone()),
                justification,
            }
        });
        let from_unparsed = self.unparsed.map(|(decision, reason)| Verdict {
            decision,
            rule: Some(UNPARSED_RULE.to_owned()),
            origin: Some("approvals.unparsed".to_owned()),
            justification: Some(format!("the command cannot be analysed: {reason}")),
        });
        match (from_rule, from_unparsed) {
            (Some(r), Some(u)) if u.decision > r.decision => u,
            (Some(r), _) => r,
            (None, Some(u)) => u,
            (None, None) => Verdict::allow(),
        }
    }
}

/// Which rules can apply to a tool, and to a bash program.
#[derive(Debug, Default)]
struct Index {
    by_tool: HashMap<String, Vec<usize>>,
    tool_globs: Option<(GlobSet, Vec<usize>)>,
    any_tool: Vec<usize>,
    by_program: HashMap<String, Vec<usize>>,
    any_program: Vec<usize>,
}

impl Index {
    fn new(rules: &[Rule]) -> Self {
        let mut index = Index::default();
        let mut globs = GlobSetBuilder::new();
        let mut glob_rules = Vec::new();
        for (i, rule) in rules.iter().enumerate() {
            match &rule.tool {
                ToolMatch::Any => index.any_tool.push(i),
                ToolMatch::Exact(name) => index.by_tool.entry(name.clone()).or_default().push(i),
                ToolMatch::Glob(matcher) => {
                    globs.add(matcher.glob().clone());
                    glob_rules.push(i);
                }
            }
            if rule.reads_paths_or_commands() {
                match rule.commands.is_empty() {
                    true => index.any_program.push(i),
                    false => {
                        let programs: HashSet<&str> = rule
                            .commands
                            .iter()
                            .filter_map(|c| c.first())
                            .map(String::as_str)
                            .collect();
                        for program in programs {
                            index
                                .by_program
                                .entry(program.to_owned())
                                .or_default()
                                .push(i);
                        }
                    }
                }
            }
        }
        if !glob_rules.is_empty() {
            // Each glob compiled alone already, so the set builds.
            if let Ok(set) = globs.build() {
                index.tool_globs = Some((set, glob_rules));
            }
        }
        index
    }

    /// The rules whose tool matcher matches `tool`, in order.
    fn candidates(&self, tool: &str) -> Vec<usize> {
        let mut out: Vec<usize> = self.any_tool.clone();
        if let Some(exact) = self.by_tool.get(tool) {
            out.extend(exact);
        }
        if let Some((set, rules)) = &self.tool_globs {
            out.extend(set.matches(tool).into_iter().map(|g| rules[g]));
        }
        out.sort_unstable();
        out
    }
}
