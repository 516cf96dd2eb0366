//! A subagent task's approval policy (issue 37): the lead's `approvals:` section, its run's
//! role and agent rules and the sandbox's writable mounts travel with the task (as JSON
//! text: rules hold arbitrary JSON values) and the worker compiles the same policy, so a
//! subagent's calls are decided as its parent's are. A subagent's `ask` waits for the
//! parent run's user where the worker relays it (`task::asks`), else it is a denial.

use std::sync::Arc;
use std::time::Duration;

use antler_protocol::approvals::{ApprovalPolicy, PolicyEnv};
use antler_protocol::config::approvals::{ApprovalsConfig, RuleConfig};
use serde::{Deserialize, Serialize};

use crate::middleware::approvals::ApprovalGate;

/// The policy of a task, as the lead sends it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TaskApprovals {
    pub config: ApprovalsConfig,
    /// Extra layers (origin, rules): the run's role's and agent's.
    #[serde(default)]
    pub layers: Vec<(String, Vec<RuleConfig>)>,
    /// The sandbox's workspace and writable mounts, for path rules.
    pub workspace: String,
    #[serde(default)]
    pub writable_mounts: Vec<String>,
    /// The rules the parent's thread approved for the thread: the task passes their asks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub thread_rules: Vec<String>,
    /// Whether the parent run's user can answer an ask (else it is a denial at once).
    #[serde(default)]
    pub parent_answers: bool,
}

impl TaskApprovals {
    /// The JSON text the task carries.
    pub fn to_wire(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(self)
    }

    /// The JSON text `wire` for one task: with the parent thread's approved rules and
    /// whether the parent's user can answer (`wire` itself when it does not decode: the
    /// worker says so).
    pub fn for_task(wire: &str, thread_rules: &[String], parent_answers: bool) -> String {
        match serde_json::from_str::<TaskApprovals>(wire) {
            Ok(mut approvals) => {
                approvals.thread_rules = thread_rules.to_vec();
                approvals.parent_answers = parent_answers;
                approvals.to_wire().unwrap_or_else(|_| wire.to_owned())
            }
            Err(_) => wire.to_owned(),
        }
    }

    /// The parent thread's approved rules the JSON text carries, when the parent's user
    /// can answer the task's asks (`None`: nobody can).
    pub fn parent_answers(wire: &str) -> Option<Vec<String>> {
        serde_json::from_str::<TaskApprovals>(wire)
            .ok()
            .filter(|approvals| approvals.parent_answers)
            .map(|approvals| approvals.thread_rules)
    }

    /// The task's approval stage from the JSON text it carried (`None`: no rule at all);
    /// a policy that does not compile fails the task.
    pub fn gate(wire: &str) -> Result<Option<Arc<ApprovalGate>>, String> {
        let approvals: TaskApprovals = serde_json::from_str(wire)
            .map_err(|e| format!("the task's approval policy does not decode: {e}"))?;
        let env = PolicyEnv {
            workspace: approvals.workspace.clone(),
            writable_mounts: approvals.writable_mounts.clone(),
        };
        let mut policy = ApprovalPolicy::from_config(&approvals.config, &env)
            .map_err(|e| format!("approvals: {e}"))?;
        for (origin, rules) in &approvals.layers {
            let layer =
                ApprovalPolicy::layer(rules, origin, &env).map_err(|e| format!("{origin}: {e}"))?;
            policy = policy.with(&layer);
        }
        if policy.is_empty() {
            return Ok(None);
        }
        let deadline = Duration::from_secs(approvals.config.deadline_seconds);
        Ok(Some(ApprovalGate::new(policy, deadline)))
    }
}
