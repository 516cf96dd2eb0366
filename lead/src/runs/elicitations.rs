//! [`PendingElicitations`]: the elicitations one run's MCP calls are waiting on (policy
//! `ask`), from the run's `elicitation` event until its answer is taken by mcp-host or
//! the call that asked ends (answered, declined at its deadline, or failed). The run view
//! lists them as `elicitations: [{id, server, message, requested_schema}]`.

use std::sync::{Mutex, MutexGuard};

use antler_protocol::Json;
use serde::Serialize;
use serde_json::Value;

/// One elicitation waiting for the run's user.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PendingElicitation {
    pub id: String,
    pub server: String,
    pub message: String,
    pub requested_schema: Value,
    /// The call that waits on it (for a subagent's call: the parent's `task` call).
    #[serde(skip)]
    pub tool_call_id: String,
    /// The run id mcp-host knows the waiting call by, when it is not this run's (a
    /// subagent task's own run id).
    #[serde(skip)]
    pub mcp_run_id: Option<String>,
}

/// The pending elicitations of one run, in the order they were asked.
#[derive(Debug, Default)]
pub struct PendingElicitations {
    pending: Mutex<Vec<PendingElicitation>>,
}

impl PendingElicitations {
    fn lock(&self) -> MutexGuard<'_, Vec<PendingElicitation>> {
        // Nothing panics while holding it; the list stays usable.
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A call of the run asked.
    pub fn asked(&self, elicitation: PendingElicitation) {
        let mut pending = self.lock();
        pending.retain(|p| p.id != elicitation.id);
        pending.push(elicitation);
    }

    /// The call `tool_call_id` ended: nothing of it waits any more.
    pub fn call_ended(&self, tool_call_id: &str) {
        self.lock().retain(|p| p.tool_call_id != tool_call_id);
    }

    /// The elicitation was answered.
    pub fn answered(&self, id: &str) {
        self.lock().retain(|p| p.id != id);
    }

    /// The pending elicitation `id`, if it is one.
    pub fn get(&self, id: &str) -> Option<PendingElicitation> {
        self.lock().iter().find(|p| p.id == id).cloned()
    }

    /// What the run view lists.
    pub fn view(&self) -> Value {
        serde_json::to_value(&*self.lock()).unwrap_or(Value::Array(Vec::new()))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn asked(id: &str, call: &str) -> PendingElicitation {
        PendingElicitation {
            id: id.into(),
            server: "s".into(),
            message: "name?".into(),
            requested_schema: json!({"type": "object", "properties": {}}),
            tool_call_id: call.into(),
            mcp_run_id: None,
        }
    }

    #[test]
    fn an_elicitation_is_listed_until_answered_or_its_call_ends() {
        let p = PendingElicitations::default();
        p.asked(asked("e1", "c1"));
        p.asked(asked("e2", "c2"));
        assert_eq!(
            p.view(),
            json!([
                {"id": "e1", "server": "s", "message": "name?", "requested_schema": {"type": "object", "properties": {}}},
                {"id": "e2", "server": "s", "message": "name?", "requested_schema": {"type": "object", "properties": {}}}
            ])
        );
        p.answered("e1");
        assert!(p.get("e1").is_none());
        p.call_ended("c2");
        assert_eq!(p.view(), json!([]));
    }
}

/// Why an answer to an elicitation was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// The run does not wait on this id (answered, expired, never asked, or not this run).
    #[error("run {run_id} is not waiting on an elicitation '{id}'")]
    NotPending { run_id: String, id: String },
    /// The content does not fit the requested schema; the elicitation stays pending.
    #[error("{0}")]
    Invalid(String),
    /// mcp-host or the run manager could not be had now.
    #[error("{0}")]
    Unavailable(String),
    /// mcp-host answered out of protocol.
    #[error("{0}")]
    Failed(String),
}

/// An answer given as text (the CLI's `--answer`): `decline`, `cancel`, or a JSON object
/// of the requested fields (accept).
pub fn parse_answer(
    text: &str,
) -> Result<(antler_protocol::messages::ElicitationAction, Option<Json>), String> {
    use antler_protocol::messages::ElicitationAction;
    match text.trim() {
        "decline" => Ok((ElicitationAction::Decline, None)),
        "cancel" => Ok((ElicitationAction::Cancel, None)),
        other => match serde_json::from_str::<Value>(other) {
            Ok(v @ Value::Object(_)) => Ok((ElicitationAction::Accept, Some(v.into()))),
            _ => Err(
                "an elicitation's answer is decline, cancel, or a JSON object of the requested fields"
                    .to_owned(),
            ),
        },
    }
}
