//! `POST /api/runs/{id}/approvals/{call}` with `{"decision": "approve" | "approve_for_thread"
//! | "deny", "reason": "..."}` (issue 37): a principal who may see the run answers a call
//! it waits on for approval; the answer is kept (who, when, why) and, once every call the
//! run waits on is answered, the run goes on. 200 with the calls still waiting, 404 for a
//! run or call that does not wait (another user's run is the same 404), 409 for a call
//! answered already, 400 for a body that is not an answer.

use actix_web::{http::StatusCode, web, HttpResponse};
use antler_engine::ApprovalChoice;
use serde_json::json;

use super::caller::Caller;
use super::runs_api::{manager_error, VisibleRun};
use super::{body, error, State, MAX_ANSWER_BODY};
use crate::runs::manager::{AnswerApproval, ApprovalError};

/// The longest reason kept.
pub const MAX_REASON_CHARS: usize = 2_000;

/// The route's body.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ApprovalBody {
    decision: BodyDecision,
    /// Why (shown to the model with a denial).
    #[serde(default)]
    #[schema(max_length = 2000)]
    reason: Option<String>,
}

/// A person's answer.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
enum BodyDecision {
    Approve,
    ApproveForThread,
    Deny,
}

/// The answer's choice and reason, or why the body is not one.
fn parse(body: &[u8]) -> Result<(ApprovalChoice, Option<String>), String> {
    let body: ApprovalBody = serde_json::from_slice(body).map_err(|e| {
        format!("the body must be {{\"decision\": \"approve\" | \"approve_for_thread\" | \"deny\", \"reason\": \"...\"}}: {e}")
    })?;
    if body
        .reason
        .as_ref()
        .is_some_and(|r| r.chars().count() > MAX_REASON_CHARS)
    {
        return Err(format!("reason: at most {MAX_REASON_CHARS} characters"));
    }
    let choice = match body.decision {
        BodyDecision::Approve => ApprovalChoice::Approve,
        BodyDecision::ApproveForThread => ApprovalChoice::ApproveForThread,
        BodyDecision::Deny => ApprovalChoice::Deny,
    };
    Ok((choice, body.reason))
}

/// `POST /api/runs/{id}/approvals/{call}`.
pub async fn answer(
    state: web::Data<State>,
    VisibleRun(run_id): VisibleRun,
    Caller(user): Caller,
    req: actix_web::HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    let call = req.match_info().get("call").unwrap_or_default().to_owned();
    let body = match body::read_body(payload, MAX_ANSWER_BODY).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    if let Some(forwarded) = super::forward::to_owner(&state, &req, &run_id, &body).await {
        return forwarded;
    }
    let (choice, reason) = match parse(&body) {
        Ok(answer) => answer,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    let asked = AnswerApproval {
        run_id: run_id.clone(),
        tool_call_id: call.clone(),
        choice,
        reason,
        by: Some(user),
    };
    match state.runs.manager.send(asked).await {
        Ok(Ok(answered)) => HttpResponse::Ok().json(json!({
            "run_id": run_id,
            "tool_call_id": call,
            "decision": choice.as_str(),
            "waiting": answered.waiting,
        })),
        Ok(Err(e @ (ApprovalError::NotPending { .. } | ApprovalError::UnknownRun(_)))) => {
            error(StatusCode::NOT_FOUND, e.to_string())
        }
        Ok(Err(e @ ApprovalError::AlreadyDecided { .. })) => {
            error(StatusCode::CONFLICT, e.to_string())
        }
        Ok(Err(ApprovalError::Resume(e))) => manager_error(e),
        Ok(Err(e @ ApprovalError::Store(_))) => {
            error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
        }
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_a_decision_with_an_optional_reason() {
        assert_eq!(
            parse(br#"{"decision": "deny", "reason": "not on main"}"#).unwrap(),
            (ApprovalChoice::Deny, Some("not on main".into()))
        );
        assert_eq!(
            parse(br#"{"decision": "approve_for_thread"}"#).unwrap(),
            (ApprovalChoice::ApproveForThread, None)
        );
        // The deadline's answer is not a person's.
        assert!(parse(br#"{"decision": "expired"}"#).is_err());
        assert!(parse(br#"{"decision": "approve", "reason": 3}"#).is_err());
        assert!(parse(b"[]").is_err());
        let long = format!(
            r#"{{"decision": "deny", "reason": "{}"}}"#,
            "x".repeat(2_001)
        );
        assert!(parse(long.as_bytes()).unwrap_err().contains("2000"));
    }
}
