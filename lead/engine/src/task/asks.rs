//! A subagent task's held calls (issue 37): a call an approval rule asks about is held in
//! place while the parent run's user answers. [`TaskAsks`] keeps, per held call, where its
//! answer goes (the worker hands it in through [`TaskAsks::answer`]); an ask unanswered by
//! its deadline is `expired` (a denial). The rules approved for the thread are remembered
//! for the task's later calls. The task's other work, timeout and cancellation go on: a
//! cancelled or timed-out task drops the wait with its step. What each held call asked is
//! kept with it, so a lead that (re-)attaches to the task is told again of every call
//! still held ([`TaskAsks::still_held`]): a lead that lost the first report still asks.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::thread::approvals::{now_ms, ApprovalChoice, ApprovalDecision, PendingApproval};
use crate::tools::task::TaskEvent;

/// One held call: what was asked, and where its answer goes.
#[derive(Debug)]
struct Waiting {
    pending: PendingApproval,
    answer: oneshot::Sender<ApprovalDecision>,
}

/// The held calls of one task and the rules approved for its thread.
#[derive(Debug, Default)]
pub struct TaskAsks {
    waiting: Mutex<HashMap<String, Waiting>>,
    thread_rules: Mutex<BTreeSet<String>>,
}

/// A held call's place in line: its answer arrives here ([`TaskAsks::wait`]).
#[derive(Debug)]
pub struct Held {
    call_id: String,
    deadline_at: u64,
    answer: oneshot::Receiver<ApprovalDecision>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while holding it; the map stays usable.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl TaskAsks {
    /// The asks of a task whose thread already approved `thread_rules`.
    pub fn new(thread_rules: impl IntoIterator<Item = String>) -> TaskAsks {
        TaskAsks {
            waiting: Mutex::default(),
            thread_rules: Mutex::new(thread_rules.into_iter().collect()),
        }
    }

    /// Rules the thread approved (the parent's, carried with the task).
    pub fn remember(&self, rules: impl IntoIterator<Item = String>) {
        lock(&self.thread_rules).extend(rules);
    }

    /// Holds the call of `pending`: from now on an answer to it is taken. Call before
    /// the ask is reported, so no answer can come before its place.
    pub fn hold(&self, pending: &PendingApproval) -> Held {
        let (tx, rx) = oneshot::channel();
        let waiting = Waiting {
            pending: pending.clone(),
            answer: tx,
        };
        lock(&self.waiting).insert(pending.tool_call_id.clone(), waiting);
        Held {
            call_id: pending.tool_call_id.clone(),
            deadline_at: pending.deadline_at,
            answer: rx,
        }
    }

    /// The answer to the held call, or `expired` at its deadline. A rule approved for the
    /// thread is remembered for the task's later calls.
    pub async fn wait(&self, held: Held, rule: Option<&str>) -> ApprovalDecision {
        let left = Duration::from_millis(held.deadline_at.saturating_sub(now_ms()));
        let decision = match tokio::time::timeout(left, held.answer).await {
            Ok(Ok(decision)) => decision,
            _ => ApprovalDecision {
                choice: ApprovalChoice::Expired,
                by: None,
                at: now_ms(),
                reason: None,
            },
        };
        lock(&self.waiting).remove(&held.call_id);
        if let (ApprovalChoice::ApproveForThread, Some(rule)) = (decision.choice, rule) {
            lock(&self.thread_rules).insert(rule.to_owned());
        }
        decision
    }

    /// Hands `decision` to the held call `call_id`; `false`: no such call waits.
    pub fn answer(&self, call_id: &str, decision: ApprovalDecision) -> bool {
        lock(&self.waiting)
            .remove(call_id)
            .is_some_and(|waiting| waiting.answer.send(decision).is_ok())
    }

    /// The `task_approval` event of every call of the task `task_id` still held, in the
    /// order they were asked, with what was first reported (a lead that attaches again
    /// learns of them; it knows a call it was told of already by its id).
    pub fn still_held(&self, task_id: &str) -> Vec<TaskEvent> {
        let mut held: Vec<PendingApproval> = lock(&self.waiting)
            .values()
            .map(|waiting| waiting.pending.clone())
            .collect();
        held.sort_by(|a, b| (a.asked_at, &a.tool_call_id).cmp(&(b.asked_at, &b.tool_call_id)));
        held.into_iter()
            .map(|pending| TaskEvent::TaskApproval {
                task_id: task_id.to_owned(),
                call_id: pending.tool_call_id,
                tool: pending.tool,
                args: pending.args,
                rule: pending.rule,
                origin: pending.origin,
                justification: pending.justification,
                asked_at: pending.asked_at,
                deadline_at: pending.deadline_at,
            })
            .collect()
    }

    /// The rules approved for the thread so far.
    pub fn thread_rules(&self) -> BTreeSet<String> {
        lock(&self.thread_rules).clone()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn pending(call: &str, deadline_in_ms: u64) -> PendingApproval {
        PendingApproval {
            tool_call_id: call.into(),
            tool: "bash".into(),
            args: serde_json::json!({"command": "git push"}),
            rule: Some("git-push".into()),
            origin: None,
            justification: None,
            asked_at: now_ms(),
            deadline_at: now_ms() + deadline_in_ms,
        }
    }

    #[tokio::test]
    async fn a_held_call_takes_its_answer_once_and_remembers_a_thread_rule() {
        let asks = TaskAsks::new([]);
        assert!(!asks.answer("c1", decision(ApprovalChoice::Approve)));
        let held = asks.hold(&pending("c1", 60_000));
        assert!(asks.answer("c1", decision(ApprovalChoice::ApproveForThread)));
        assert!(!asks.answer("c1", decision(ApprovalChoice::Deny)));
        let got = asks.wait(held, Some("git-push")).await;
        assert_eq!(got.choice, ApprovalChoice::ApproveForThread);
        assert!(asks.thread_rules().contains("git-push"));
    }

    #[tokio::test]
    async fn the_calls_still_held_are_told_again_in_the_order_they_were_asked() {
        let asks = TaskAsks::new([]);
        let mut first = pending("c2", 60_000);
        first.asked_at -= 10;
        let held_first = asks.hold(&first);
        let _held_second = asks.hold(&pending("c1", 60_000));
        let told = asks.still_held("task-1");
        let calls: Vec<&str> = told
            .iter()
            .map(|event| match event {
                TaskEvent::TaskApproval {
                    task_id, call_id, ..
                } => {
                    assert_eq!(task_id, "task-1");
                    call_id.as_str()
                }
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(calls, ["c2", "c1"]);
        assert!(asks.answer("c2", decision(ApprovalChoice::Approve)));
        asks.wait(held_first, None).await;
        assert_eq!(asks.still_held("task-1").len(), 1);
    }

    #[tokio::test]
    async fn an_unanswered_call_expires_at_its_deadline() {
        let asks = TaskAsks::new(["other".to_owned()]);
        let held = asks.hold(&pending("c1", 20));
        let got = asks.wait(held, Some("git-push")).await;
        assert_eq!(got.choice, ApprovalChoice::Expired);
        assert!(!asks.answer("c1", decision(ApprovalChoice::Approve)));
        assert_eq!(asks.thread_rules(), BTreeSet::from(["other".to_owned()]));
    }

    fn decision(choice: ApprovalChoice) -> ApprovalDecision {
        ApprovalDecision {
            choice,
            by: Some("alice".into()),
            at: now_ms(),
            reason: None,
        }
    }
}
