//! A subagent's approvals as its parent run reports them (issue 37): a task's held call
//! (`task_approval`) becomes the parent's `approval_requested` and its decision
//! (`task_approval_decided`) the parent's `approval_decided`, each named by
//! [`subagent_call_id`] and marked with the [`SubagentCall`]; a rule the parent's user
//! approved for the thread is remembered for the parent's thread at the end of the step.

use std::collections::BTreeSet;
use std::sync::Mutex;

use super::events::{subagent_call_id, RunEvent, SubagentCall};
use crate::tools::task::TaskEvent;

/// The rules approved for the thread through a subagent's asks, not yet in the state.
pub type SubagentThreadRules = std::sync::Arc<Mutex<BTreeSet<String>>>;

/// The parent run's event for `task`, an event of its `task` call `task_call_id`.
pub fn parent_event(task_call_id: &str, subagent_type: &str, task: TaskEvent) -> RunEvent {
    let subagent = |call_id: &str| SubagentCall {
        task_call_id: task_call_id.to_owned(),
        subagent_type: subagent_type.to_owned(),
        call_id: call_id.to_owned(),
    };
    match task {
        TaskEvent::TaskApproval {
            call_id,
            tool,
            args,
            rule,
            origin,
            justification,
            deadline_at,
            ..
        } => RunEvent::ApprovalRequested {
            tool_call_id: subagent_call_id(task_call_id, &call_id),
            subagent: Some(subagent(&call_id)),
            tool,
            args,
            rule,
            origin,
            justification,
            deadline_at,
        },
        TaskEvent::TaskApprovalDecided {
            call_id,
            tool,
            decision,
            rule,
            by,
            reason,
            at,
            waited_ms,
            ..
        } => RunEvent::ApprovalDecided {
            tool_call_id: subagent_call_id(task_call_id, &call_id),
            subagent: Some(subagent(&call_id)),
            tool,
            decision,
            rule,
            by,
            reason,
            at,
            waited_ms,
        },
        task => RunEvent::Task {
            tool_call_id: task_call_id.to_owned(),
            task,
        },
    }
}

/// Remembers `rule`, approved for the thread through a subagent's ask.
pub fn remember(rules: &Mutex<BTreeSet<String>>, rule: &str) {
    rules
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(rule.to_owned());
}

/// The rules remembered since the last call, taken.
pub fn take(rules: &Mutex<BTreeSet<String>>) -> BTreeSet<String> {
    std::mem::take(
        &mut *rules
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_held_call_is_the_parents_approval_request_marked_with_its_subagent() {
        let event = parent_event(
            "t1",
            "general-purpose",
            TaskEvent::TaskApproval {
                task_id: "t1".into(),
                call_id: "b1".into(),
                tool: "bash".into(),
                args: serde_json::json!({"command": "git push"}),
                rule: Some("git-push".into()),
                origin: Some("defaults".into()),
                justification: None,
                asked_at: 1,
                deadline_at: 2,
            },
        );
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(json["event"], "approval_requested");
        assert_eq!(json["tool_call_id"], "t1.b1");
        assert_eq!(
            json["subagent"],
            serde_json::json!({"task_call_id": "t1", "subagent_type": "general-purpose", "call_id": "b1"})
        );
        let other = parent_event(
            "t1",
            "general-purpose",
            TaskEvent::TaskWaiting {
                task_id: "t1".into(),
                deadline_ms: 5,
            },
        );
        assert!(matches!(other, RunEvent::Task { .. }));
    }
}
