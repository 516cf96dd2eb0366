//! `POST /api/runs/{id}/elicitations/{eid}` with `{"action": "accept"|"decline"|"cancel",
//! "content": {...}}`: the run's principal answers an elicitation one of its MCP calls
//! waits on (policy `ask`). The answer goes to the mcp-host replica of the run's thread,
//! as the run's user: 200 once taken, 404 for an id the run is not waiting on, 400 for
//! content that does not fit the requested schema (it stays pending).

use actix_web::{http::StatusCode, web, HttpRequest, HttpResponse};
use antler_protocol::messages::ElicitationAction;
use antler_protocol::Json;
use serde_json::{json, Value};

use super::runs_api::VisibleRun;
use super::{body, error, State, MAX_ANSWER_BODY};
use crate::runs::elicitations::AnswerError;

/// The answer's action and content, or why the body is not one.
fn parse(body: &[u8]) -> Result<(ElicitationAction, Option<Json>), String> {
    let body: Value =
        serde_json::from_slice(body).map_err(|e| format!("the body must be a JSON object: {e}"))?;
    let action = match body.get("action").and_then(Value::as_str) {
        Some("accept") => ElicitationAction::Accept,
        Some("decline") => ElicitationAction::Decline,
        Some("cancel") => ElicitationAction::Cancel,
        _ => return Err("action: expected accept, decline or cancel".into()),
    };
    let content = match (action, body.get("content")) {
        (ElicitationAction::Accept, Some(c @ Value::Object(_))) => Some(c.into()),
        (ElicitationAction::Accept, None) => Some(Json::object()),
        (ElicitationAction::Accept, Some(_)) => {
            return Err("content: expected a JSON object of the requested fields".into())
        }
        _ => None,
    };
    Ok((action, content))
}

/// `POST /api/runs/{id}/elicitations/{eid}`.
pub async fn answer(
    state: web::Data<State>,
    VisibleRun(run_id): VisibleRun,
    req: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    let id = req.match_info().get("eid").unwrap_or_default().to_owned();
    let body = match body::read_body(payload, MAX_ANSWER_BODY).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    if let Some(forwarded) = super::forward::to_owner(&state, &req, &run_id, &body).await {
        return forwarded;
    }
    let (action, content) = match parse(&body) {
        Ok(answer) => answer,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    match crate::runs::manager::answer(
        &state.runs.manager,
        &state.supervisor,
        &run_id,
        &id,
        action,
        content,
    )
    .await
    {
        Ok(()) => HttpResponse::Ok().json(json!({"run_id": run_id, "id": id, "action": action})),
        Err(e @ AnswerError::NotPending { .. }) => error(StatusCode::NOT_FOUND, e.to_string()),
        Err(AnswerError::Invalid(why)) => error(StatusCode::BAD_REQUEST, why),
        Err(AnswerError::Unavailable(why)) => error(StatusCode::SERVICE_UNAVAILABLE, why),
        Err(AnswerError::Failed(why)) => error(StatusCode::BAD_GATEWAY, why),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_an_action_with_content_for_accept() {
        assert_eq!(
            parse(br#"{"action": "accept", "content": {"name": "Ada"}}"#).unwrap(),
            (
                ElicitationAction::Accept,
                Some(Json::parse(r#"{"name":"Ada"}"#).unwrap())
            )
        );
        assert_eq!(
            parse(br#"{"action": "decline", "content": {"x": 1}}"#).unwrap(),
            (ElicitationAction::Decline, None)
        );
        assert!(parse(br#"{"action": "maybe"}"#)
            .unwrap_err()
            .contains("accept, decline or cancel"));
        assert!(parse(br#"{"action": "accept", "content": [1]}"#).is_err());
        assert!(parse(b"nope").is_err());
    }
}
