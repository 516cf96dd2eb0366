//! The second layer of approvals (issue 37) for MCP tools: mcp-host compiles the config's
//! `approvals:` policy (the shipped defaults and `approvals.rules`) once, when it starts,
//! and decides every tool call again before a server sees it, by the name the model sees
//! (`{server}_{tool}` when prefixed) and the source `mcp:<server>`. A call the policy denies
//! is refused; a call it asks about runs only when the caller says a person approved it
//! under that rule (`McpCall::clearance`). So a caller that skipped the lead's stage
//! (`antler tool call`, `antler mcp call`, a promoted tool, a worker, a forged request)
//! cannot run what the policy holds back. A role's, an agent's or a skill's rules only add
//! strictness and are decided by the caller's stage.

use antler_protocol::approvals::{ApprovalPolicy, CallFacts, CallSource, Refusal};

/// The text of a call the policy denies here.
pub const DENIED_HERE: &str =
    "denied by policy: {justification} (rule {rule}; refused where the call runs)";
/// The text of a call the policy asks about that carries no approval of its rule.
pub const NOT_APPROVED_HERE: &str = "denied by policy: this call needs a person's approval (rule {rule}) and reached mcp-host without one";
/// A denying rule's justification when it gives none.
const NOT_ALLOWED: &str = "this call is not allowed";

/// Why the call of `tool` (the exposed name) on `server` with `args` may not run here
/// (`None`: it may), `clearance` being the rule a person approved it under.
pub fn refused(
    policy: &ApprovalPolicy,
    server: &str,
    tool: &str,
    args: &serde_json::Value,
    clearance: Option<&str>,
) -> Option<String> {
    let facts = CallFacts {
        tool,
        source: CallSource::Mcp { server },
        args,
    };
    Some(match policy.recheck(&facts, clearance)? {
        Refusal::Denied {
            rule,
            justification,
        } => DENIED_HERE
            .replace(
                "{justification}",
                justification
                    .as_deref()
                    .filter(|j| !j.trim().is_empty())
                    .unwrap_or(NOT_ALLOWED),
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

    #[test]
    fn a_denied_or_unapproved_call_is_refused_and_an_approved_one_runs() {
        let config: ApprovalsConfig = serde_json::from_value(json!({
            "rules": [
                {"name": "publish", "tool": "rec_publish", "source": "mcp:rec",
                 "decision": "ask", "justification": "publishing is public"},
                {"name": "no-delete", "tool": "rec_del*", "decision": "deny"},
            ]
        }))
        .unwrap();
        let policy = ApprovalPolicy::from_config(&config, &PolicyEnv::default()).unwrap();
        let args = json!({"text": "hi"});
        let asked = refused(&policy, "rec", "rec_publish", &args, None).unwrap();
        assert_eq!(
            asked,
            "denied by policy: this call needs a person's approval (rule publish) and reached mcp-host without one"
        );
        assert!(refused(&policy, "rec", "rec_publish", &args, Some("no-delete")).is_some());
        assert_eq!(
            refused(&policy, "rec", "rec_publish", &args, Some("publish")),
            None
        );
        // Another server's tool of the same name is not this rule's.
        assert_eq!(refused(&policy, "other", "rec_publish", &args, None), None);
        assert_eq!(
            refused(&policy, "rec", "rec_delete", &args, Some("no-delete")).unwrap(),
            "denied by policy: this call is not allowed (rule no-delete; refused where the call runs)"
        );
        assert_eq!(refused(&policy, "rec", "rec_echo", &args, None), None);
    }
}
