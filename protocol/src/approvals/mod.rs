//! PLACEHOLDER of branch `approve` only (replaced by branch `policy` at merge): the approval
//! policy's API as /work/policy-api.md fixes it, with a tool-name-only evaluation.
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;

pub use crate::config::approvals::{ApprovalsConfig, Decision, RuleConfig};

#[derive(Clone, Debug, Default)]
pub struct ApprovalPolicy {
    rules: Arc<Vec<(RuleConfig, String)>>,
}
#[derive(Clone, Debug, Default)]
pub struct PolicyEnv {
    pub workspace: String,
    pub writable_mounts: Vec<String>,
}
pub struct CallFacts<'a> {
    pub tool: &'a str,
    pub source: CallSource<'a>,
    pub args: &'a Value,
}
pub enum CallSource<'a> {
    Builtin,
    Sandbox,
    Mcp { server: &'a str },
    Acp,
    Task,
    Config,
}
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    pub decision: Decision,
    pub rule: Option<String>,
    pub origin: Option<String>,
    pub justification: Option<String>,
}
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("{0}")]
    Invalid(String),
}
impl ApprovalPolicy {
    pub fn from_config(
        config: &ApprovalsConfig,
        _env: &PolicyEnv,
    ) -> Result<ApprovalPolicy, PolicyError> {
        Self::layer(&config.rules, "approvals.rules", _env)
    }
    pub fn layer(
        rules: &[RuleConfig],
        origin: &str,
        _env: &PolicyEnv,
    ) -> Result<ApprovalPolicy, PolicyError> {
        Ok(ApprovalPolicy {
            rules: Arc::new(
                rules
                    .iter()
                    .map(|r| (r.clone(), origin.to_owned()))
                    .collect(),
            ),
        })
    }
    pub fn with(&self, other: &ApprovalPolicy) -> ApprovalPolicy {
        let mut rules = (*self.rules).clone();
        rules.extend(other.rules.iter().cloned());
        ApprovalPolicy {
            rules: Arc::new(rules),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
    pub fn evaluate(&self, call: &CallFacts<'_>) -> Verdict {
        let mut verdict = Verdict {
            decision: Decision::Allow,
            rule: None,
            origin: None,
            justification: None,
        };
        for (rule, origin) in self.rules.iter() {
            if rule.tool.as_deref().is_none_or(|t| t == call.tool)
                && rule.decision > verdict.decision
            {
                verdict = Verdict {
                    decision: rule.decision,
                    rule: Some(rule.name.clone()),
                    origin: Some(origin.clone()),
                    justification: rule.justification.clone(),
                };
            }
        }
        verdict
    }
}
pub fn redact(args: &Value, _secrets: &[&str]) -> Value {
    args.clone()
}
