//! Asking the session's MCP client a question while one of its calls waits: an
//! `elicitation/create` request in form mode (a message and a requested schema), and what
//! came back. Both the elicitations of downstream MCP servers (`handler`'s forwarding) and
//! the session's own approval asks (`approvals`) go to the client through here.

use rmcp::model::{ElicitRequestParams, ElicitationAction};
use rmcp::service::{ElicitationMode, RequestContext};
use rmcp::RoleServer;
use serde_json::{json, Value};

/// What the client answered.
#[derive(Debug, Clone, PartialEq)]
pub enum Elicited {
    /// The client did not declare form elicitation: it was not asked.
    Unsupported,
    /// The client's user accepted, with this content (`{}` when it sent none).
    Accepted(Value),
    Declined,
    Cancelled,
    /// The request failed (the client answered with an error, or the session closed).
    Failed(String),
    /// The schema is not one MCP can carry: the client was not asked.
    BadSchema(String),
}

/// Asks the client of `context` `message` with `requested_schema` (form mode).
pub async fn elicit(
    context: &RequestContext<RoleServer>,
    message: &str,
    requested_schema: &Value,
) -> Elicited {
    if !context
        .peer
        .supported_elicitation_modes()
        .contains(&ElicitationMode::Form)
    {
        return Elicited::Unsupported;
    }
    let params = json!({
        "mode": "form",
        "message": message,
        "requestedSchema": requested_schema,
    });
    let params = match serde_json::from_value::<ElicitRequestParams>(params) {
        Ok(params) => params,
        Err(e) => return Elicited::BadSchema(e.to_string()),
    };
    match context.peer.create_elicitation(params).await {
        Ok(answer) => match answer.action {
            ElicitationAction::Accept => {
                Elicited::Accepted(answer.content.unwrap_or_else(|| json!({})))
            }
            ElicitationAction::Decline => Elicited::Declined,
            _ => Elicited::Cancelled,
        },
        Err(e) => Elicited::Failed(e.to_string()),
    }
}
