//! The second layer's decision (issue 37): where a call runs (sandbox-host, mcp-host), the
//! config's policy decides it again. A call it denies is refused; a call it asks about runs
//! only when the caller says a person approved it under the deciding rule (the call's
//! clearance). Each host words its refusal with texts of its own.

use super::{ApprovalPolicy, CallFacts, Decision};

/// Why the host where a call runs refuses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A rule denies the call.
    Denied {
        rule: String,
        /// The rule's justification, if it gives one.
        justification: Option<String>,
    },
    /// A rule asks about the call and it carries no approval of that rule.
    NotApproved { rule: String },
}

impl ApprovalPolicy {
    /// Decides `call` again where it runs, `clearance` being the rule a person approved it
    /// under (`None`: nobody did). `None`: it may run.
    pub fn recheck(&self, call: &CallFacts<'_>, clearance: Option<&str>) -> Option<Refusal> {
        if self.is_empty() {
            return None;
        }
        let verdict = self.evaluate(call);
        let rule = || verdict.rule.clone().unwrap_or_else(|| "?".to_owned());
        match verdict.decision {
            Decision::Allow => None,
            Decision::Deny => Some(Refusal::Denied {
                rule: rule(),
                justification: verdict.justification.clone(),
            }),
            Decision::Ask if clearance.is_some() && clearance == verdict.rule.as_deref() => None,
            Decision::Ask => Some(Refusal::NotApproved { rule: rule() }),
        }
    }
}
