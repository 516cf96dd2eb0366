//! What a thread keeps of its approvals (issue 37): the calls of its last reply waiting for
//! a person (`pending`), the calls an ask stopped before they were sent (`held`, run in
//! order once the asks are answered), the answers given and not yet applied (`decided`),
//! and the rules approved for the whole thread (`thread_rules`, "approve for this
//! thread": remembered for this thread only, carried to its next runs).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The approvals part of a thread's state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ApprovalState {
    /// Calls waiting for a person, in the reply's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<PendingApproval>,
    /// Ids of calls of the same reply that were never sent: they wait behind the asks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<String>,
    /// Answers to pending calls, by call id, until the resumed run applies them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub decided: BTreeMap<String, ApprovalDecision>,
    /// Rules a person approved for the whole thread.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub thread_rules: BTreeSet<String>,
}

impl ApprovalState {
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
            && self.held.is_empty()
            && self.decided.is_empty()
            && self.thread_rules.is_empty()
    }

    /// Whether the run waits for a person (a pending call has no answer yet).
    pub fn waiting(&self) -> bool {
        self.unanswered().next().is_some()
    }

    /// The pending calls with no answer yet, in the reply's order.
    pub fn unanswered(&self) -> impl Iterator<Item = &PendingApproval> {
        self.pending
            .iter()
            .filter(|p| !self.decided.contains_key(&p.tool_call_id))
    }

    /// The pending approval of call `tool_call_id`.
    pub fn pending_call(&self, tool_call_id: &str) -> Option<&PendingApproval> {
        self.pending.iter().find(|p| p.tool_call_id == tool_call_id)
    }

    /// The state a new run of the thread starts with: what was asked of an earlier run is
    /// over (its calls get the interrupted result), the thread's approvals stay.
    pub fn carried_over(self) -> ApprovalState {
        ApprovalState {
            thread_rules: self.thread_rules,
            ..ApprovalState::default()
        }
    }
}

/// One call waiting for a person.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PendingApproval {
    pub tool_call_id: String,
    pub tool: String,
    /// The call's arguments with secrets redacted (what the person sees).
    pub args: Value,
    /// The rule that asks, and where it comes from (`approvals.rules`, a role, an agent).
    pub rule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub justification: Option<String>,
    /// Unix milliseconds: when it was asked, and when an unanswered ask becomes a denial.
    pub asked_at: u64,
    pub deadline_at: u64,
}

/// A person's answer (or the deadline's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalChoice {
    Approve,
    ApproveForThread,
    Deny,
    /// Nobody answered by the deadline: a denial.
    Expired,
}

impl ApprovalChoice {
    pub fn approves(self) -> bool {
        matches!(
            self,
            ApprovalChoice::Approve | ApprovalChoice::ApproveForThread
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalChoice::Approve => "approve",
            ApprovalChoice::ApproveForThread => "approve_for_thread",
            ApprovalChoice::Deny => "deny",
            ApprovalChoice::Expired => "expired",
        }
    }

    /// The choices a person may give, by name (`approve`, `approve_for_thread`, `deny`).
    pub fn parse(text: &str) -> Option<ApprovalChoice> {
        match text {
            "approve" => Some(ApprovalChoice::Approve),
            "approve_for_thread" => Some(ApprovalChoice::ApproveForThread),
            "deny" => Some(ApprovalChoice::Deny),
            _ => None,
        }
    }
}

/// An answer to one pending call: what, by whom, when, why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalDecision {
    pub choice: ApprovalChoice,
    /// The user who answered (`None`: the deadline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// Unix milliseconds.
    pub at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Unix milliseconds now.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}
