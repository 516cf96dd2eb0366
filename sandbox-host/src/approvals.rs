//! The second layer of approvals (issue 37): sandbox-host compiles the config's
//! `approvals:` policy (the shipped defaults and `approvals.rules`) and decides every call
//! again where it runs. A call the policy denies is refused; a call it asks about runs only
//! when the caller says a person approved it under that rule (`ToolCall::clearance`). So a
//! caller that skipped the lead's stage (`antler tool call`, a promoted tool, a worker, a
//! bug) cannot run what the policy holds back. A role's or an agent's rules only add
//! strictness and are decided by the caller's stage.

use antler_protocol::approvals::{ApprovalPolicy, CallFacts, CallSource, Refusal};
use antler_protocol::messages::ToolCall;

/// The text of a call the policy denies here.
pub const DENIED_HERE: &str =
    "Error: denied by policy: {justification} (rule {rule}; refused where the call runs)";
/// The text of a call the policy asks about that carries no approval of its rule.
pub const NOT_APPROVED_HERE: &str = "Error: denied by policy: this call needs a person's approval (rule {rule}) and reached sandbox-host without one";

/// Why `call` may not run here (`None`: it may).
pub fn refused(policy: &ApprovalPolicy, call: &ToolCall) -> Option<String> {
    if policy.is_empty() {
        return None;
    }
    let args = call.args.to_value();
    let facts = CallFacts {
        tool: &call.tool,
        source: CallSource::Sandbox,
        args: &args,
    };
    Some(match policy.recheck(&facts, call.clearance.as_deref())? {
        Refusal::Denied {
            rule,
            justification,
        } => DENIED_HERE
            .replace(
                "{justification}",
                justification
                    .as_deref()
                    .unwrap_or("this call is not allowed"),
            )
            .replace("{rule}", &rule),
        Refusal::NotApproved { rule } => NOT_APPROVED_HERE.replace("{rule}", &rule),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use antler_protocol::approvals::PolicyEnv;
    use antler_protocol::config::approvals::ApprovalsConfig;
    use serde_json::json;

    fn bash(command: &str, clearance: Option<&str>) -> ToolCall {
        ToolCall {
            tool: "bash".into(),
            args: json!({"description": "d", "command": command}).into(),
            secrets: Vec::new(),
            clearance: clearance.map(str::to_owned),
        }
    }

    #[test]
    fn the_defaults_hold_back_a_push_without_its_approval_and_deny_deleting_the_root() {
        let policy =
            ApprovalPolicy::from_config(&ApprovalsConfig::default(), &PolicyEnv::default())
                .unwrap();
        assert_eq!(refused(&policy, &bash("ls -la", None)), None);
        let push = refused(&policy, &bash("echo x && git push origin main", None)).unwrap();
        assert!(push.contains("reached sandbox-host without one"), "{push}");
        let rule = policy
            .evaluate(&CallFacts {
                tool: "bash",
                source: CallSource::Sandbox,
                args: &json!({"command": "git push"}),
            })
            .rule
            .unwrap();
        assert_eq!(refused(&policy, &bash("git push", Some(&rule))), None);
        // An approval of another rule is not this one's.
        assert!(refused(&policy, &bash("git push", Some("other"))).is_some());
        let root = refused(&policy, &bash("rm -rf /", Some(&rule))).unwrap();
        assert!(root.contains("refused where the call runs"), "{root}");
        assert_eq!(
            refused(&ApprovalPolicy::default(), &bash("git push", None)),
            None
        );
    }
}
