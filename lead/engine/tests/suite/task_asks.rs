//! A subagent task's held calls (issue 37) on the real engine: a call an approval rule asks
//! about is reported (`task_approval`) and waits for the parent run's user; the answer it is
//! handed decides it (a denial is the tool message the subagent's model reads, with a
//! `task_approval_decided`), the task's own timeout still ends a wait nobody answers, and a
//! task whose parent nobody can answer is denied at once; a held call is told again, as
//! first reported, to a lead that attaches to the task again. The tasks of
//! [`task_graph`](super::task_graph) with a policy asking about `tool_search`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};

use antler_engine::{
    drive_task_asking, ApprovalChoice, ApprovalDecision, CancelFlag, Message, TaskAsks, TaskEvent,
    TaskRun, TaskSpec, TaskStatus,
};
use serde_json::json;

use super::task_graph::{search, spec, turn, UnreachableHosts};

/// A policy asking about every `tool_search` call; `parent_answers`: whether anyone can.
fn asking(spec: &mut TaskSpec, parent_answers: bool) {
    spec.approvals = Some(
        json!({
            "config": {
                "defaults": false,
                "deadline_seconds": 3600,
                "rules": [{"name": "search-ask", "tool": "tool_search", "decision": "ask",
                           "justification": "searching needs a yes"}]
            },
            "workspace": "/mnt/user-data/workspace",
            "parent_answers": parent_answers
        })
        .to_string(),
    );
}

/// Drives `spec` with held calls; `answer` answers each `task_approval` as it comes.
async fn drive(spec: &TaskSpec, answer: Option<ApprovalDecision>) -> (TaskRun, Vec<TaskEvent>) {
    let asks = Arc::new(TaskAsks::default());
    let events = Arc::new(Mutex::new(Vec::new()));
    let (sink, answering) = (Arc::clone(&events), Arc::clone(&asks));
    let run = drive_task_asking(
        spec,
        Arc::new(UnreachableHosts::default()),
        Arc::new(CancelFlag::default()),
        Arc::new(move |event: TaskEvent| {
            if let (TaskEvent::TaskApproval { call_id, .. }, Some(answer)) = (&event, &answer) {
                assert!(
                    answering.answer(call_id, answer.clone()),
                    "no held call {call_id}"
                );
            }
            sink.lock().unwrap().push(event);
        }),
        Some(asks),
    )
    .await;
    let events = events.lock().unwrap().clone();
    (run, events)
}

/// The tool message of the subagent's `tool_search` call.
fn search_result(run: &TaskRun) -> String {
    let messages = &run.state.as_ref().expect("the task ran").messages;
    messages
        .iter()
        .find_map(|m| match m {
            Message::Tool { name, content, .. } if name == "tool_search" => Some(content.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no tool_search result: {messages:?}"))
}

#[tokio::test]
async fn a_held_call_denied_by_the_parents_user_is_the_tool_message_its_model_reads() {
    let dir = tempfile::tempdir().unwrap();
    let mut task = spec(
        &dir,
        vec![
            turn("Looking.", vec![search("echo")]),
            turn("Done.", Vec::new()),
        ],
    );
    asking(&mut task, true);
    let deny = ApprovalDecision {
        choice: ApprovalChoice::Deny,
        by: Some("alice".into()),
        at: 1,
        reason: Some("not now".into()),
    };
    let (run, events) = drive(&task, Some(deny)).await;
    assert_eq!(run.result.status, TaskStatus::Completed, "{:?}", run.result);
    assert_eq!(search_result(&run), "denied by alice: not now");
    let asked = events
        .iter()
        .find_map(|e| match e {
            TaskEvent::TaskApproval {
                tool,
                rule,
                justification,
                ..
            } => Some((tool.clone(), rule.clone(), justification.clone())),
            _ => None,
        })
        .expect("the held call was reported");
    assert_eq!(
        asked,
        (
            "tool_search".to_owned(),
            Some("search-ask".to_owned()),
            Some("searching needs a yes".to_owned())
        )
    );
    let decided = events
        .iter()
        .find_map(|e| match e {
            TaskEvent::TaskApprovalDecided {
                decision,
                by,
                reason,
                ..
            } => Some((decision.clone(), by.clone(), reason.clone())),
            _ => None,
        })
        .expect("the decision was reported");
    assert_eq!(
        decided,
        (
            "deny".to_owned(),
            Some("alice".to_owned()),
            Some("not now".to_owned())
        )
    );
}

#[tokio::test]
async fn a_held_call_nobody_answers_still_ends_at_the_tasks_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let mut task = spec(
        &dir,
        vec![
            turn("Looking.", vec![search("echo")]),
            turn("Done.", Vec::new()),
        ],
    );
    asking(&mut task, true);
    task.timeout_s = 1;
    let (run, events) = drive(&task, None).await;
    assert_eq!(run.result.status, TaskStatus::TimedOut, "{:?}", run.result);
    assert!(events
        .iter()
        .any(|e| matches!(e, TaskEvent::TaskApproval { .. })));
    assert!(!events
        .iter()
        .any(|e| matches!(e, TaskEvent::TaskApprovalDecided { .. })));
}

#[tokio::test]
async fn a_task_whose_parent_nobody_answers_is_denied_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut task = spec(
        &dir,
        vec![
            turn("Looking.", vec![search("echo")]),
            turn("Done.", Vec::new()),
        ],
    );
    asking(&mut task, false);
    let (run, events) = drive(&task, None).await;
    assert_eq!(run.result.status, TaskStatus::Completed, "{:?}", run.result);
    assert!(
        search_result(&run).contains("nobody can answer in this run"),
        "{}",
        search_result(&run)
    );
    assert!(!events
        .iter()
        .any(|e| matches!(e, TaskEvent::TaskApproval { .. })));
}

#[tokio::test]
async fn a_held_call_is_told_again_as_first_reported_until_it_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let mut task = spec(
        &dir,
        vec![
            turn("Looking.", vec![search("echo")]),
            turn("Done.", Vec::new()),
        ],
    );
    asking(&mut task, true);
    let asks = Arc::new(TaskAsks::default());
    let events = Arc::new(Mutex::new(Vec::new()));
    let told_again = Arc::new(Mutex::new(Vec::new()));
    let (sink, answering, again) = (
        Arc::clone(&events),
        Arc::clone(&asks),
        Arc::clone(&told_again),
    );
    let task_id = task.tool_call_id.clone();
    let run = drive_task_asking(
        &task,
        Arc::new(UnreachableHosts::default()),
        Arc::new(CancelFlag::default()),
        Arc::new(move |event: TaskEvent| {
            if let TaskEvent::TaskApproval { call_id, .. } = &event {
                // A lead attaching now is told of the held call again; once answered,
                // it is told of nothing.
                again.lock().unwrap().extend(answering.still_held(&task_id));
                let approve = ApprovalDecision {
                    choice: ApprovalChoice::Approve,
                    by: Some("alice".into()),
                    at: 1,
                    reason: None,
                };
                assert!(answering.answer(call_id, approve), "no held call {call_id}");
                assert!(answering.still_held(&task_id).is_empty());
            }
            sink.lock().unwrap().push(event);
        }),
        Some(Arc::clone(&asks)),
    )
    .await;
    assert_eq!(run.result.status, TaskStatus::Completed, "{:?}", run.result);
    let first = events
        .lock()
        .unwrap()
        .iter()
        .find(|e| matches!(e, TaskEvent::TaskApproval { .. }))
        .cloned()
        .expect("the held call was reported");
    let again = told_again.lock().unwrap().clone();
    assert_eq!(again.len(), 1, "{again:?}");
    // The same call, tool, arguments, rule, justification and deadline.
    let strip = |event: &TaskEvent| match event.clone() {
        TaskEvent::TaskApproval {
            task_id,
            call_id,
            tool,
            args,
            rule,
            origin,
            justification,
            deadline_at,
            ..
        } => (
            task_id,
            call_id,
            tool,
            args,
            rule,
            origin,
            justification,
            deadline_at,
        ),
        other => panic!("{other:?}"),
    };
    assert_eq!(strip(&again[0]), strip(&first));
    assert!(asks.still_held(&task.tool_call_id).is_empty());
}
