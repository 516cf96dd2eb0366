//! Approvals in the LangGraph-compatible API (issue 37), in the shape of LangChain's
//! human-in-the-loop middleware: a thread whose run waits on approvals shows one interrupt
//! (`interrupts`, and on a `tools` task) whose value lists `action_requests` (`name`,
//! `args` redacted, `description`, `tool_call_id`) and `review_configs`; a run created with
//! `command.resume` = `{"decisions": [{"type": "approve" | "approve_for_thread" | "reject",
//! "message": "..."}]}` (one per request, in order) answers them, as does a single
//! `{"decision": "approve" | "approve_for_thread" | "deny", "reason": "..."}` for every call
//! or a bare `"approve"` / `"deny"`.

use antler_engine::{ApprovalChoice, ApprovalState, PendingApproval};
use serde_json::{json, Value};

/// The decisions a reviewer may give, as LangChain names them.
pub const ALLOWED_DECISIONS: &[&str] = &["approve", "approve_for_thread", "reject"];

/// The interrupt of run `run_id` waiting on `approvals` (`None`: it waits on none).
pub fn interrupt(run_id: &str, approvals: &ApprovalState) -> Option<Value> {
    let waiting: Vec<&PendingApproval> = approvals.unanswered().collect();
    if waiting.is_empty() {
        return None;
    }
    let requests: Vec<Value> = waiting
        .iter()
        .map(|p| {
            json!({
                "name": p.tool,
                "args": p.args,
                "tool_call_id": p.tool_call_id,
                "description": format!(
                    "{} (rule {})",
                    p.justification.as_deref().unwrap_or(antler_engine::APPROVAL_NO_JUSTIFICATION),
                    p.rule.as_deref().unwrap_or("?")
                ),
                "deadline_at": p.deadline_at,
            })
        })
        .collect();
    let configs: Vec<Value> = waiting
        .iter()
        .map(|p| json!({"action_name": p.tool, "allowed_decisions": ALLOWED_DECISIONS}))
        .collect();
    Some(json!({
        "id": format!("approval:{run_id}"),
        "value": {"action_requests": requests, "review_configs": configs},
    }))
}

/// The answers `resume` gives to the calls `pending` waits on, in their order.
pub fn decisions(
    resume: &Value,
    pending: &[PendingApproval],
) -> Result<Vec<(String, ApprovalChoice, Option<String>)>, String> {
    let one = |choice: &str| match choice {
        "approve" => Some(ApprovalChoice::Approve),
        "approve_for_thread" => Some(ApprovalChoice::ApproveForThread),
        "reject" | "deny" => Some(ApprovalChoice::Deny),
        _ => None,
    };
    let expected = "command.resume: {\"decisions\": [{\"type\": \"approve\" | \"approve_for_thread\" | \"reject\", \"message\": \"...\"}]}, one per action request";
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_owned);
    if let Some(list) = resume.get("decisions") {
        let list = list.as_array().ok_or(expected)?;
        if list.len() != pending.len() {
            return Err(format!(
                "{expected}: {} decisions for {} requests",
                list.len(),
                pending.len()
            ));
        }
        return list
            .iter()
            .zip(pending)
            .map(|(d, p)| {
                let choice = d
                    .get("type")
                    .and_then(Value::as_str)
                    .and_then(one)
                    .ok_or(expected)?;
                Ok((p.tool_call_id.clone(), choice, text(d, "message")))
            })
            .collect();
    }
    let (choice, reason) = match resume {
        Value::String(choice) => (one(choice), None),
        Value::Object(_) => (
            resume.get("decision").and_then(Value::as_str).and_then(one),
            text(resume, "reason").or_else(|| text(resume, "message")),
        ),
        _ => (None, None),
    };
    let choice = choice.ok_or(expected)?;
    Ok(pending
        .iter()
        .map(|p| (p.tool_call_id.clone(), choice, reason.clone()))
        .collect())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn pending(id: &str) -> PendingApproval {
        PendingApproval {
            tool_call_id: id.into(),
            tool: "bash".into(),
            args: json!({"command": "git push"}),
            rule: Some("push".into()),
            origin: None,
            justification: Some("Pushing publishes commits".into()),
            asked_at: 1,
            deadline_at: 2,
        }
    }

    #[test]
    fn an_interrupt_lists_the_calls_that_wait_and_decisions_answer_them_in_order() {
        let state = ApprovalState {
            pending: vec![pending("a"), pending("b")],
            ..ApprovalState::default()
        };
        let shown = interrupt("r1", &state).unwrap();
        assert_eq!(shown["id"], "approval:r1");
        assert_eq!(shown["value"]["action_requests"][1]["tool_call_id"], "b");
        assert_eq!(
            shown["value"]["review_configs"][0]["allowed_decisions"],
            json!(ALLOWED_DECISIONS)
        );
        let resume =
            json!({"decisions": [{"type": "approve"}, {"type": "reject", "message": "no"}]});
        assert_eq!(
            decisions(&resume, &state.pending).unwrap(),
            vec![
                ("a".into(), ApprovalChoice::Approve, None),
                ("b".into(), ApprovalChoice::Deny, Some("no".into()))
            ]
        );
        assert!(decisions(&json!({"decisions": [{"type": "approve"}]}), &state.pending).is_err());
        assert!(decisions(
            &json!({"decisions": [{"type": "edit"}, {"type": "approve"}]}),
            &state.pending
        )
        .is_err());
        assert_eq!(
            decisions(&json!("deny"), &state.pending).unwrap()[1].1,
            ApprovalChoice::Deny
        );
        assert_eq!(
            decisions(&json!({"decision": "approve_for_thread"}), &state.pending).unwrap()[0].1,
            ApprovalChoice::ApproveForThread
        );
        assert!(decisions(&json!(42), &state.pending).is_err());
        assert!(interrupt("r1", &ApprovalState::default()).is_none());
    }
}
