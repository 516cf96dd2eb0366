//! The approval stage (issue 37), between Visible and Executed: the run's approval policy
//! (`antler_protocol::approvals`: the config's rules, the role's, the agent's) decides
//! each call on its parsed arguments. `allow` passes; `deny` answers the call with the
//! rule's justification; `ask` stops the call for the run's user, unless the user already
//! answered it (the resumed run's `decided`), approved its rule for the thread, or nobody
//! can answer (a non-interactive run: a denial). The texts the model sees are constants.

use std::sync::Arc;
use std::time::Duration;

use antler_protocol::approvals::{ApprovalPolicy, CallFacts, CallSource, Verdict};
use antler_protocol::config::approvals::Decision;

use super::error_message;
use crate::catalog::builtins::TASK;
use crate::catalog::{ToolSource, ToolSpec};
use crate::run::events::RunEvent;
use crate::run::execute::SANDBOX_TOOLS;
use crate::thread::approvals::{now_ms, ApprovalChoice, ApprovalState, PendingApproval};
use crate::thread::state::{Message, ToolCall};

/// The result of a call a rule denies.
pub const DENIED_BY_POLICY: &str = "denied by policy: {justification} (rule {rule})";
/// The result of a call its run's user denied.
pub const DENIED_BY_USER: &str = "denied by {user}: {reason}";
/// The reason of a denial given without one.
pub const NO_REASON: &str = "the user did not approve this call";
/// The result of an ask nobody answered by its deadline.
pub const DENIED_EXPIRED: &str =
    "denied by policy: nobody approved this call within {seconds} s (rule {rule})";
/// The result of an ask denied with no person's decision (`by` none: the client that was
/// to ask the person could not, or dismissed the question); the reason says which.
pub const DENIED_UNDECIDED: &str = "denied by policy: {reason} (rule {rule})";
/// The result of an ask in a run nobody can answer.
pub const DENIED_NOBODY: &str = "denied by policy: this call needs a person's approval ({justification}, rule {rule}) and nobody can answer in this run";
/// A rule's justification when it gives none.
pub const NO_JUSTIFICATION: &str = "this call needs approval";

/// The run's approval stage: its policy and how long an ask waits.
#[derive(Clone, Debug)]
pub struct ApprovalGate {
    policy: ApprovalPolicy,
    deadline: Duration,
}

/// What the stage does with one call.
#[derive(Debug)]
pub enum Gate {
    /// The call goes on; `Some` when a rule or a person decided it (reported).
    Pass(Option<Record>),
    /// The call is answered with this message, without running.
    Refuse { message: Message, record: Record },
    /// The call waits for the run's user.
    Ask(PendingApproval),
}

/// How a call's approval was decided, for the run's events.
#[derive(Debug)]
pub struct Record {
    /// `allow`, `deny`, `approve`, `approve_for_thread`, `thread_rule`, `expired`, `nobody`.
    pub decision: &'static str,
    pub verdict: Verdict,
    pub by: Option<String>,
    pub reason: Option<String>,
    /// For an ask answered by a person or its deadline: milliseconds from the ask to the
    /// answer.
    pub waited_ms: Option<u64>,
}

impl Record {
    fn rule(decision: &'static str, verdict: Verdict) -> Record {
        Record {
            decision,
            verdict,
            by: None,
            reason: None,
            waited_ms: None,
        }
    }

    /// The `approval_decided` event of call `call`.
    pub fn event(self, call: &ToolCall) -> RunEvent {
        RunEvent::ApprovalDecided {
            tool_call_id: call.id.clone(),
            tool: call.name.clone(),
            decision: self.decision.to_owned(),
            rule: self.verdict.rule,
            by: self.by,
            reason: self.reason,
            at: now_ms(),
            waited_ms: self.waited_ms,
            subagent: None,
        }
    }
}

impl ApprovalGate {
    pub fn new(policy: ApprovalPolicy, deadline: Duration) -> Arc<ApprovalGate> {
        Arc::new(ApprovalGate { policy, deadline })
    }

    pub fn policy(&self) -> &ApprovalPolicy {
        &self.policy
    }

    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// Decides `call` of the tool `spec` (`None`: not in the catalog, decided by name).
    pub fn check(
        &self,
        call: &ToolCall,
        spec: Option<&ToolSpec>,
        approvals: &ApprovalState,
        interactive: bool,
    ) -> Gate {
        let verdict = self.policy.evaluate(&CallFacts {
            tool: &call.name,
            source: source_of(&call.name, spec),
            args: &call.args,
        });
        match verdict.decision {
            Decision::Allow if verdict.rule.is_none() => Gate::Pass(None),
            Decision::Allow => Gate::Pass(Some(Record::rule("allow", verdict))),
            Decision::Deny => Gate::Refuse {
                message: error_message(&call.id, &call.name, policy_denial(&verdict)),
                record: Record::rule("deny", verdict),
            },
            Decision::Ask => {
                if let Some(decision) = approvals.decided.get(&call.id) {
                    let record = Record {
                        decision: decision.choice.as_str(),
                        verdict: verdict.clone(),
                        by: decision.by.clone(),
                        reason: decision.reason.clone(),
                        waited_ms: approvals
                            .pending_call(&call.id)
                            .map(|p| decision.at.saturating_sub(p.asked_at)),
                    };
                    if decision.choice.approves() {
                        return Gate::Pass(Some(record));
                    }
                    let text = match decision.choice {
                        ApprovalChoice::Expired => DENIED_EXPIRED
                            .replace("{seconds}", &self.deadline.as_secs().to_string())
                            .replace("{rule}", verdict.rule.as_deref().unwrap_or("?")),
                        _ if decision.by.is_none() => DENIED_UNDECIDED
                            .replace(
                                "{reason}",
                                decision
                                    .reason
                                    .as_deref()
                                    .filter(|r| !r.trim().is_empty())
                                    .unwrap_or(NO_REASON),
                            )
                            .replace("{rule}", verdict.rule.as_deref().unwrap_or("?")),
                        _ => DENIED_BY_USER
                            .replace("{user}", decision.by.as_deref().unwrap_or("the user"))
                            .replace(
                                "{reason}",
                                decision
                                    .reason
                                    .as_deref()
                                    .filter(|r| !r.trim().is_empty())
                                    .unwrap_or(NO_REASON),
                            ),
                    };
                    return Gate::Refuse {
                        message: error_message(&call.id, &call.name, text),
                        record,
                    };
                }
                if verdict
                    .rule
                    .as_ref()
                    .is_some_and(|rule| approvals.thread_rules.contains(rule))
                {
                    return Gate::Pass(Some(Record::rule("thread_rule", verdict)));
                }
                if !interactive {
                    let text = DENIED_NOBODY
                        .replace("{justification}", justification(&verdict))
                        .replace("{rule}", verdict.rule.as_deref().unwrap_or("?"));
                    return Gate::Refuse {
                        message: error_message(&call.id, &call.name, text),
                        record: Record::rule("nobody", verdict),
                    };
                }
                let asked_at = now_ms();
                Gate::Ask(PendingApproval {
                    tool_call_id: call.id.clone(),
                    tool: call.name.clone(),
                    args: antler_protocol::approvals::redact(&call.args, &[]),
                    rule: verdict.rule,
                    origin: verdict.origin,
                    justification: verdict.justification,
                    asked_at,
                    deadline_at: asked_at + self.deadline.as_millis() as u64,
                })
            }
        }
    }
}

/// Where a call runs, as the policy's `source` matchers name it.
pub fn source_of<'a>(name: &str, spec: Option<&'a ToolSpec>) -> CallSource<'a> {
    if name == TASK {
        return CallSource::Task;
    }
    match spec.map(|s| &s.source) {
        Some(ToolSource::Mcp {
            server: Some(server),
            ..
        }) => CallSource::Mcp { server },
        Some(ToolSource::Mcp { server: None, .. }) => CallSource::Mcp { server: "" },
        Some(ToolSource::Acp) => CallSource::Acp,
        Some(ToolSource::Builtin) => CallSource::Builtin,
        _ if SANDBOX_TOOLS.contains(&name) => CallSource::Sandbox,
        _ => CallSource::Config,
    }
}

fn justification(verdict: &Verdict) -> &str {
    verdict
        .justification
        .as_deref()
        .filter(|j| !j.trim().is_empty())
        .unwrap_or(NO_JUSTIFICATION)
}

/// The text of a call a rule denies.
pub fn policy_denial(verdict: &Verdict) -> String {
    DENIED_BY_POLICY
        .replace("{justification}", justification(verdict))
        .replace("{rule}", verdict.rule.as_deref().unwrap_or("?"))
}

/// The question an interrupted run shows for its pending calls.
pub fn question(pending: &[PendingApproval]) -> String {
    let mut lines = vec![format!(
        "{} tool call{} need{} your approval:",
        pending.len(),
        if pending.len() == 1 { "" } else { "s" },
        if pending.len() == 1 { "s" } else { "" }
    )];
    for p in pending {
        lines.push(format!(
            "- {} {} (call {}; rule {}: {})",
            p.tool,
            summary(&p.args),
            p.tool_call_id,
            p.rule.as_deref().unwrap_or("?"),
            p.justification.as_deref().unwrap_or(NO_JUSTIFICATION)
        ));
    }
    lines.join("\n")
}

/// A call's arguments on one line: `bash`'s command as written, else compact JSON (at most
/// 200 characters).
pub fn summary(args: &serde_json::Value) -> String {
    let text = match args.get("command").and_then(serde_json::Value::as_str) {
        Some(command) => format!("`{command}`"),
        None => args.to_string(),
    };
    crate::run::events::first_line(&text)
}
