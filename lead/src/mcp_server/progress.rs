//! A `task` call's progress as its MCP client reads it: each event of the subagent the
//! lead receives (placed, waiting for a slot, a new message, a tool call back, ended)
//! becomes the message of one `notifications/progress` (the handler numbers them, so the
//! progress only increases). An elicitation of the subagent's is no progress: it is
//! answered as the parent run's.

use antler_engine::TaskEvent;

/// The longest excerpt of a subagent's message a progress message quotes, in characters.
const EXCERPT_CHARS: usize = 200;
const WAITING: &str = "the task waits for a free subagent worker slot";
const COMPLETED: &str = "the subagent completed the task";
const FAILED: &str = "the subagent's task failed";
const CANCELLED: &str = "the subagent's task was cancelled";
const TIMED_OUT: &str = "the subagent's task timed out";

/// The progress message of `event` (`None`: not a step of the task's progress).
pub fn message_of(event: &TaskEvent) -> Option<String> {
    Some(match event {
        TaskEvent::TaskStarted {
            description,
            worker,
            ..
        } => match worker {
            Some(worker) => format!("the subagent started {description:?} on {worker}"),
            None => format!("the subagent started {description:?}"),
        },
        TaskEvent::TaskWaiting { .. } => WAITING.to_owned(),
        TaskEvent::TaskRunning {
            message,
            message_index,
            ..
        } => {
            let excerpt: String = message.trim().chars().take(EXCERPT_CHARS).collect();
            if excerpt.is_empty() {
                // A turn of tool calls only: its calls follow as their own steps.
                format!("subagent message {message_index}")
            } else {
                format!("subagent message {message_index}: {excerpt}")
            }
        }
        TaskEvent::TaskTool {
            name, error: true, ..
        } => format!("the subagent's {name} call failed"),
        TaskEvent::TaskTool { name, .. } => format!("the subagent's {name} call returned"),
        TaskEvent::TaskElicitation { .. }
        | TaskEvent::TaskApproval { .. }
        | TaskEvent::TaskApprovalDecided { .. } => return None,
        TaskEvent::TaskCompleted { .. } => COMPLETED.to_owned(),
        TaskEvent::TaskFailed { .. } => FAILED.to_owned(),
        TaskEvent::TaskCancelled { .. } => CANCELLED.to_owned(),
        TaskEvent::TaskTimedOut { .. } => TIMED_OUT.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_step_of_a_task_is_a_message_and_an_elicitation_is_none() {
        let running = TaskEvent::TaskRunning {
            task_id: "t".into(),
            message: "x".repeat(500),
            message_index: 2,
            total_messages: 2,
            usage: None,
            model_name: None,
        };
        let text = message_of(&running).unwrap();
        assert!(text.starts_with("subagent message 2: xxx"), "{text}");
        assert_eq!(
            text.chars().count(),
            "subagent message 2: ".len() + EXCERPT_CHARS
        );
        let calls_only = TaskEvent::TaskRunning {
            task_id: "t".into(),
            message: String::new(),
            message_index: 1,
            total_messages: 1,
            usage: None,
            model_name: None,
        };
        assert_eq!(
            message_of(&calls_only).as_deref(),
            Some("subagent message 1")
        );
        let tool = TaskEvent::TaskTool {
            task_id: "t".into(),
            name: "bash".into(),
            call_id: "c".into(),
            error: false,
            message: None,
        };
        assert_eq!(
            message_of(&tool).as_deref(),
            Some("the subagent's bash call returned")
        );
        let asked = TaskEvent::TaskElicitation {
            task_id: "t".into(),
            run_id: "r".into(),
            id: "e".into(),
            server: "s".into(),
            message: "m".into(),
            requested_schema: serde_json::json!({}),
        };
        assert_eq!(message_of(&asked), None);
    }
}
