//! [`PendingElicitations`]: the elicitations one run's MCP calls are waiting on (policy
//! `ask`), from the run's `elicitation` event until its answer is taken by mcp-host or
//! the call that asked ends (answered, declined at its deadline, or failed). The run view
//! lists them as `elicitations: [{id, server, message, requested_schema}]`.

use std::sync::{Mutex, MutexGuard};

use serde::Serialize;
use serde_json::Value;

/// One elicitation waiting for the run's user.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PendingElicitation {
    pub id: String,
    pub server: String,
    pub message: String,
    pub requested_schema: Value,
    /// The call that waits on it.
    #[serde(skip)]
    pub tool_call_id: String,
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
