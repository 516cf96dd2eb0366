//! Approvals in an MCP-served session (issue 37): a client's call that an approval rule
//! asks about is put to the session's client as an MCP elicitation (`elicitation/create`,
//! form mode: the tool, its arguments redacted as `approval_requested` shows them, the
//! rule and its justification; a required `decision` of [`CHOICES`] and an optional
//! `reason`). The answer decides the call as the gateway's answer route would: it is kept
//! in the runs store's `approval_decisions` (by the session's user) before anything else,
//! then the run's approval stage decides the call again with it (`approval_decided` in the
//! run's events): approved, the call runs; approved for the thread, the rule is remembered
//! for the session's thread; denied, the denial with the person's reason is the call's
//! error result. A client that did not declare form elicitation, one that declines or
//! cancels, an answer with no decision, and no answer by the ask's deadline
//! (`approvals.deadline_seconds`) are denials whose text says which, as is a call the
//! client cancels while it is asked; a denied call is never sent to the host that would
//! run it.
//!
//! The session's actor asks through the notice channel the handler reads while a call
//! waits ([`Notice::Approval`]); the handler puts it to the client ([`put_to_client`]) and
//! hands the answer back, or drops the question when the session stopped waiting for it.

use antler_engine::{
    approval_summary, ApprovalChoice, ApprovalDecision, Message, PendingApproval, RunLoop,
    APPROVAL_NO_JUSTIFICATION,
};
use rmcp::service::RequestContext;
use rmcp::RoleServer;
use serde_json::{json, Value};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::elicit::{elicit, Elicited};
use super::session::{Notice, Notices};
use crate::runs::prepare::RunEnv;
use crate::runs::store::Recorded;

/// The answer's field naming the decision, and the choices it takes.
pub const DECISION_FIELD: &str = "decision";
pub const CHOICES: [&str; 3] = ["approve", "approve_for_thread", "deny"];
/// The answer's optional field giving the reason (shown to the model with a denial).
pub const REASON_FIELD: &str = "reason";
/// The longest reason kept (as the gateway's route keeps).
const MAX_REASON_CHARS: usize = 2_000;

/// Why an ask was denied without a person's decision, or how the person's client said no.
const UNSUPPORTED: &str =
    "the MCP client cannot be asked: it did not declare the elicitation capability (form mode)";
const DECLINED: &str = "the approval request was declined in the MCP client";
const CANCELLED: &str = "the MCP client cancelled the approval request";
const NOT_ANSWERED: &str = "the MCP client did not answer the approval request";
const NO_DECISION: &str =
    "the MCP client's answer named no decision (approve, approve_for_thread or deny)";
const CALL_CANCELLED: &str = "the MCP client cancelled the call while it waited for approval";
const NOT_RECORDED: &str = "the decision could not be recorded";
/// How the decision was given, in the lead's log.
const VIA: &str = "mcp";

/// A call's approval ask, for the session's client; its answer goes back on `answer`.
#[derive(Debug)]
pub struct ApprovalAsk {
    pub message: String,
    pub requested_schema: Value,
    pub answer: oneshot::Sender<Elicited>,
}

/// Runs the client's `call` in `run` ([`RunLoop::call_from_client`]); when an approval
/// rule asks about it, asks the session's client through `notices` and runs the call as
/// the answer decides ([`RunLoop::call_decided_by_client`]). `user` is who answers.
/// Returns the messages the call added.
pub async fn call(
    run: &mut RunLoop,
    call: antler_engine::ToolCall,
    cancelled: CancellationToken,
    notices: &Notices,
    env: &RunEnv,
    user: &str,
) -> Result<Vec<Message>, antler_engine::RunError> {
    let asked_call = call.clone();
    let mut messages = run
        .call_from_client(call, cancelled.clone().cancelled_owned())
        .await?;
    let Some(pending) = run
        .state()
        .approvals
        .unanswered()
        .find(|p| p.tool_call_id == asked_call.id)
        .cloned()
    else {
        return Ok(messages);
    };
    let (decision, call_cancelled) = ask(&pending, notices, &cancelled, user).await;
    let decision = record(env, &run.context.run_id, &pending, decision).await;
    tracing::info!(
        run = %run.context.run_id,
        call = %pending.tool_call_id,
        rule = pending.rule.as_deref().unwrap_or("?"),
        decision = decision.choice.as_str(),
        by = decision.by.as_deref().unwrap_or("-"),
        via = VIA,
        "approval decided"
    );
    run.decide([(pending.tool_call_id.clone(), decision)])
        .await?;
    let decided = if call_cancelled {
        // Denied for it, never sent: its denial lands whole, and the state with it.
        run.call_decided_by_client(&asked_call, std::future::pending())
            .await?
    } else {
        run.call_decided_by_client(&asked_call, cancelled.cancelled_owned())
            .await?
    };
    messages.extend(decided);
    Ok(messages)
}

/// The question the client is asked about `pending`.
pub fn message_of(pending: &PendingApproval) -> String {
    let justification = pending
        .justification
        .as_deref()
        .filter(|j| !j.trim().is_empty())
        .unwrap_or(APPROVAL_NO_JUSTIFICATION);
    let rule = pending.rule.as_deref().unwrap_or("?");
    let origin = pending
        .origin
        .as_deref()
        .map(|o| format!(" ({o})"))
        .unwrap_or_default();
    format!(
        "Antler asks your approval for a tool call.\nTool: {tool} {summary}\nArguments: {args}\nRule {rule}{origin}: {justification}\nDecide: approve (this call), approve_for_thread (this rule, for the rest of the thread) or deny (with an optional reason).",
        tool = pending.tool,
        summary = approval_summary(&pending.args),
        args = pending.args,
    )
}

/// The form the client fills in: a required decision, an optional reason.
pub fn requested_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            DECISION_FIELD: {
                "type": "string",
                "title": "Decision",
                "description": "approve this call, approve its rule for the rest of the thread, or deny it",
                "enum": CHOICES,
            },
            REASON_FIELD: {
                "type": "string",
                "title": "Reason",
                "description": "why (shown to the model with a denial)",
                "maxLength": MAX_REASON_CHARS,
            },
        },
        "required": [DECISION_FIELD],
    })
}

/// Asks the client about `pending` and waits for its answer until the ask's deadline (or
/// the client cancels its call): the decision it comes to, and whether the client
/// cancelled the call meanwhile (a denial).
async fn ask(
    pending: &PendingApproval,
    notices: &Notices,
    cancelled: &CancellationToken,
    user: &str,
) -> (ApprovalDecision, bool) {
    let (answer, answered) = oneshot::channel();
    let asked = notices.send(Notice::Approval(ApprovalAsk {
        message: message_of(pending),
        requested_schema: requested_schema(),
        answer,
    }));
    if asked.is_err() {
        return (undecided(NOT_ANSWERED.to_owned()), false);
    }
    let wait = pending
        .deadline_at
        .saturating_sub(antler_protocol::sys::unix_ms());
    tokio::select! {
        elicited = answered => (decision_of(
            elicited.unwrap_or_else(|_| Elicited::Failed("the MCP session ended".to_owned())),
            user,
        ), false),
        () = tokio::time::sleep(std::time::Duration::from_millis(wait)) => (ApprovalDecision {
            choice: ApprovalChoice::Expired,
            by: None,
            at: antler_protocol::sys::unix_ms(),
            reason: None,
        }, false),
        () = cancelled.cancelled() => (undecided(CALL_CANCELLED.to_owned()), true),
    }
}

/// The decision of what the client answered, given for `user`.
pub fn decision_of(elicited: Elicited, user: &str) -> ApprovalDecision {
    let by_user = |choice, reason: Option<String>| ApprovalDecision {
        choice,
        by: Some(user.to_owned()),
        at: antler_protocol::sys::unix_ms(),
        reason,
    };
    match elicited {
        Elicited::Accepted(content) => {
            let choice = content
                .get(DECISION_FIELD)
                .and_then(Value::as_str)
                .and_then(ApprovalChoice::parse);
            let reason = content
                .get(REASON_FIELD)
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|r| !r.is_empty())
                .map(|r| r.chars().take(MAX_REASON_CHARS).collect());
            match choice {
                Some(choice) => by_user(choice, reason),
                None => undecided(NO_DECISION.to_owned()),
            }
        }
        Elicited::Declined => by_user(ApprovalChoice::Deny, Some(DECLINED.to_owned())),
        Elicited::Cancelled => undecided(CANCELLED.to_owned()),
        Elicited::Unsupported => undecided(UNSUPPORTED.to_owned()),
        Elicited::Failed(e) | Elicited::BadSchema(e) => undecided(format!("{NOT_ANSWERED}: {e}")),
    }
}

/// A denial no person decided, for `reason`.
fn undecided(reason: String) -> ApprovalDecision {
    ApprovalDecision {
        choice: ApprovalChoice::Deny,
        by: None,
        at: antler_protocol::sys::unix_ms(),
        reason: Some(reason),
    }
}

/// Keeps `decision` in the runs store before it is applied; a decision that cannot be kept
/// is a denial (fail closed), and an answer kept already stands.
async fn record(
    env: &RunEnv,
    run_id: &str,
    pending: &PendingApproval,
    decision: ApprovalDecision,
) -> ApprovalDecision {
    let (id, call, kept) = (run_id.to_owned(), pending.clone(), decision.clone());
    match env
        .store
        .call(move |store| store.record_approval(&id, &call, &kept))
        .await
    {
        Ok(Recorded::New) => decision,
        Ok(Recorded::AlreadyDecided(choice)) => ApprovalDecision {
            choice,
            by: None,
            ..decision
        },
        Err(e) => {
            tracing::error!(run = %run_id, call = %pending.tool_call_id, "cannot record an approval decision: {e}");
            undecided(format!("{NOT_RECORDED}: {e}"))
        }
    }
}

/// Puts `ask` to the client of `context` and hands back its answer; gives up the question
/// when the session stopped waiting for it (the deadline passed, the call was cancelled).
pub async fn put_to_client(ask: ApprovalAsk, context: &RequestContext<RoleServer>) {
    let ApprovalAsk {
        message,
        requested_schema,
        mut answer,
    } = ask;
    let elicited = tokio::select! {
        elicited = elicit(context, &message, &requested_schema) => elicited,
        () = answer.closed() => return,
    };
    // The session may have stopped waiting meanwhile: then nobody reads it.
    let _ = answer.send(elicited);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn pending() -> PendingApproval {
        PendingApproval {
            tool_call_id: "c1".into(),
            tool: "bash".into(),
            args: json!({"command": "git push", "token": "[REDACTED]"}),
            rule: Some("push".into()),
            origin: Some("approvals.rules".into()),
            justification: Some("Pushing publishes commits".into()),
            asked_at: 0,
            deadline_at: 1,
        }
    }

    #[test]
    fn the_question_names_the_tool_its_arguments_and_the_rule() {
        let text = message_of(&pending());
        assert!(text.contains("Tool: bash `git push`"), "{text}");
        assert!(text.contains("\"token\":\"[REDACTED]\""), "{text}");
        assert!(
            text.contains("Rule push (approvals.rules): Pushing publishes commits"),
            "{text}"
        );
        let schema: rmcp::model::ElicitRequestParams = serde_json::from_value(json!({
            "mode": "form", "message": text, "requestedSchema": requested_schema(),
        }))
        .unwrap();
        let schema = serde_json::to_value(schema).unwrap();
        assert_eq!(
            schema["requestedSchema"]["properties"]["decision"]["enum"],
            json!(CHOICES)
        );
        assert_eq!(schema["requestedSchema"]["required"], json!(["decision"]));
    }

    #[test]
    fn answers_become_decisions_and_what_is_no_answer_a_denial_saying_why() {
        let approve = decision_of(Elicited::Accepted(json!({"decision": "approve"})), "alice");
        assert_eq!(approve.choice, ApprovalChoice::Approve);
        assert_eq!(approve.by.as_deref(), Some("alice"));
        let deny = decision_of(
            Elicited::Accepted(json!({"decision": "deny", "reason": " not on main "})),
            "alice",
        );
        assert_eq!(
            (deny.choice, deny.reason.as_deref()),
            (ApprovalChoice::Deny, Some("not on main"))
        );
        let thread = decision_of(
            Elicited::Accepted(json!({"decision": "approve_for_thread"})),
            "alice",
        );
        assert_eq!(thread.choice, ApprovalChoice::ApproveForThread);
        for (elicited, why) in [
            (
                Elicited::Accepted(json!({"decision": "maybe"})),
                NO_DECISION,
            ),
            (Elicited::Accepted(json!({})), NO_DECISION),
            (Elicited::Cancelled, CANCELLED),
            (Elicited::Unsupported, UNSUPPORTED),
        ] {
            let d = decision_of(elicited, "alice");
            assert_eq!(d.choice, ApprovalChoice::Deny);
            assert_eq!(d.by, None);
            assert_eq!(d.reason.as_deref(), Some(why));
        }
        let declined = decision_of(Elicited::Declined, "alice");
        assert_eq!(
            (declined.by.as_deref(), declined.reason.as_deref()),
            (Some("alice"), Some(DECLINED))
        );
    }
}
