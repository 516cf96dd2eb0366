//! [`SubagentAsks`]: the subagents' calls the lead's runs wait on for their user (issue 37),
//! from the parent's `approval_requested` event (marked with its subagent) until the call
//! is decided or its task ends. Each is also a row of the runs store (`subagent_asks`),
//! written as it is listed here and read back when the lead starts, so an answer finds
//! it across a restart. [`relay`] keeps both from the parent run's events. A worker tells
//! a lead that (re-)attaches to a task again of every call it holds: a call listed already
//! is not asked twice, and one answered already gets its kept answer again.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use antler_engine::{ApprovalChoice, ApprovalDecision, PendingApproval, RunEvent, TaskEvent};

use crate::runs::store::{CheckpointStore, SubagentAsk};

/// The subagents' held calls of every run of this lead, by (parent run, call).
#[derive(Debug, Default)]
pub struct SubagentAsks {
    waiting: Mutex<HashMap<(String, String), SubagentAsk>>,
    /// The answers kept for listed calls, until the worker's decision comes back (and
    /// while the answer that gave one is being handed down, its outcome).
    answered: Mutex<HashMap<(String, String), Kept>>,
}

/// A kept answer of a listed call.
#[derive(Debug)]
struct Kept {
    decision: ApprovalDecision,
    /// Its [`SubagentAsks::answering`] is being handed down now: the entry stays, even
    /// when the call is decided or its task ends, until [`SubagentAsks::handed`] says how
    /// it went.
    answering: bool,
    /// The worker's decision came back and was this answer's (handed down by a report of
    /// the call again while the answer's own hand-down was on its way).
    took: bool,
}

/// How the hand-down of an answer went ([`SubagentAsks::handed`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Handed {
    /// The worker took it, through this hand-down or through the call's report again.
    Took,
    /// The call still waits on a task that has not re-attached: the answer is kept for
    /// when its worker tells of the call again.
    Kept,
    /// The call was decided otherwise (it expired) or its task ended: the answer is void.
    Void,
}

/// Fault injection, for tests only: the lead lists but does not store the subagent's ask
/// whose parent's call id is this variable's value, as a lead killed between receiving the
/// ask and storing it leaves it (the row is missing after a restart).
pub const FAULT_UNSTORED_ASK_ENV: &str = "ANTLER_FAULT_UNSTORED_SUBAGENT_ASK";

/// Whether [`FAULT_UNSTORED_ASK_ENV`] names the call `tool_call_id`.
fn fault_unstored(tool_call_id: &str) -> bool {
    std::env::var(FAULT_UNSTORED_ASK_ENV).is_ok_and(|call| call == tool_call_id)
}

/// What becomes of a parent run's event after [`relay`].
#[derive(Debug, PartialEq)]
pub enum Relayed {
    /// It goes out on the parent's stream.
    Forward,
    /// A held call told again (its task re-attached) that is listed already: it was
    /// asked; the event does not go out twice.
    Known,
    /// A held call told again that was answered already: the kept answer goes to the
    /// worker again instead of asking again; the event does not go out.
    Answered(Box<SubagentAsk>, ApprovalDecision),
}

impl SubagentAsks {
    fn lock(&self) -> MutexGuard<'_, HashMap<(String, String), SubagentAsk>> {
        // Nothing panics while holding it; the map stays usable.
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lock_answered(&self) -> MutexGuard<'_, HashMap<(String, String), Kept>> {
        self.answered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The listed call `tool_call_id` of `run_id` was answered before (an answer read back
    /// from the store): a report of it again gets this answer.
    pub fn answered(&self, run_id: &str, tool_call_id: &str, decision: ApprovalDecision) {
        self.keep(run_id, tool_call_id, decision, false);
    }

    /// The listed call `tool_call_id` of `run_id` is answered now and the answer is on its
    /// way to the worker: it is kept (a report of the call again gets it) until
    /// [`SubagentAsks::handed`].
    pub fn answering(&self, run_id: &str, tool_call_id: &str, decision: ApprovalDecision) {
        self.keep(run_id, tool_call_id, decision, true);
    }

    fn keep(&self, run_id: &str, tool_call_id: &str, decision: ApprovalDecision, answering: bool) {
        let kept = Kept {
            decision,
            answering,
            took: false,
        };
        self.lock_answered()
            .insert((run_id.to_owned(), tool_call_id.to_owned()), kept);
    }

    /// The answer [`SubagentAsks::answering`] gave was handed down (`taken`: a worker took
    /// it) or not; what became of it. Two hand-downs of one answer can race (the answer's
    /// own, and the one a report of the call again starts while it is on its way): the
    /// one that loses finds the call decided, by this same answer.
    pub fn handed(&self, run_id: &str, tool_call_id: &str, taken: bool) -> Handed {
        let key = (run_id.to_owned(), tool_call_id.to_owned());
        let waiting = self.lock();
        let mut answered = self.lock_answered();
        let took = answered.get(&key).is_some_and(|kept| kept.took);
        if taken || took {
            answered.remove(&key);
            return Handed::Took;
        }
        if waiting.contains_key(&key) {
            if let Some(kept) = answered.get_mut(&key) {
                kept.answering = false;
                return Handed::Kept;
            }
        }
        answered.remove(&key);
        Handed::Void
    }

    /// A held call reported again: `Known` or `Answered` when it is listed, else `None`.
    fn told_again(&self, run_id: &str, tool_call_id: &str) -> Option<Relayed> {
        let key = (run_id.to_owned(), tool_call_id.to_owned());
        let ask = self.lock().get(&key).cloned()?;
        Some(match self.lock_answered().get(&key) {
            Some(kept) => Relayed::Answered(Box::new(ask), kept.decision.clone()),
            None => Relayed::Known,
        })
    }

    /// A subagent's call waits.
    pub fn asked(&self, ask: SubagentAsk) {
        let key = (ask.run_id.clone(), ask.pending.tool_call_id.clone());
        self.lock().insert(key, ask);
    }

    /// The held call `tool_call_id` of `run_id`, if it waits.
    pub fn get(&self, run_id: &str, tool_call_id: &str) -> Option<SubagentAsk> {
        self.lock()
            .get(&(run_id.to_owned(), tool_call_id.to_owned()))
            .cloned()
    }

    /// The call no longer waits (`choice`: the worker's decision); `true` when it did.
    pub fn decided(&self, run_id: &str, tool_call_id: &str, choice: ApprovalChoice) -> bool {
        let key = (run_id.to_owned(), tool_call_id.to_owned());
        let waited = self.lock().remove(&key).is_some();
        let mut answered = self.lock_answered();
        match answered.get_mut(&key) {
            // Its answer's hand-down is on its way: it learns the outcome there.
            Some(kept) if kept.answering => kept.took = kept.decision.choice == choice,
            Some(_) => {
                answered.remove(&key);
            }
            None => {}
        }
        waited
    }

    /// The run's drive ended; `true` when some of its calls were still listed.
    pub fn run_ended(&self, run_id: &str) -> bool {
        self.lock_answered()
            .retain(|(run, _), kept| kept.answering || run != run_id);
        let mut waiting = self.lock();
        let before = waiting.len();
        waiting.retain(|(run, _), _| run != run_id);
        waiting.len() != before
    }

    /// The task `task_call_id` of `run_id` ended: none of its calls waits.
    pub fn task_ended(&self, run_id: &str, task_call_id: &str) {
        let mut waiting = self.lock();
        let mut answered = self.lock_answered();
        waiting.retain(|(run, call), ask| {
            let ended = run == run_id && ask.subagent.task_call_id == task_call_id;
            let key = (run.clone(), call.clone());
            if ended && answered.get(&key).is_some_and(|kept| !kept.answering) {
                answered.remove(&key);
            }
            !ended
        });
    }

    /// The calls `run_id`'s subagents wait on, in the order they were asked, as the run
    /// view lists approvals (each with its `subagent`).
    pub fn view(&self, run_id: &str) -> Vec<serde_json::Value> {
        let mut held: Vec<SubagentAsk> = self
            .lock()
            .values()
            .filter(|ask| ask.run_id == run_id)
            .cloned()
            .collect();
        held.sort_by(|a, b| {
            (a.pending.asked_at, &a.pending.tool_call_id)
                .cmp(&(b.pending.asked_at, &b.pending.tool_call_id))
        });
        held.into_iter()
            .map(|ask| {
                let mut entry = serde_json::json!(ask.pending);
                if let Some(object) = entry.as_object_mut() {
                    object.insert("subagent".into(), serde_json::json!(ask.subagent));
                }
                entry
            })
            .collect()
    }
}

/// What the parent run `run_id`'s events mean for its subagents' held calls: an ask is
/// listed and stored before the event goes out (an answer can follow it at once), a
/// decision or the task's end takes it off. An ask listed already (told again when its
/// task is re-attached) is not asked twice. The store's writes go to its thread, which
/// keeps them in order; nobody waits for them.
pub fn relay(
    run_id: &str,
    asks: &SubagentAsks,
    store: &CheckpointStore,
    event: &RunEvent,
) -> Relayed {
    match event {
        RunEvent::ApprovalRequested {
            tool_call_id,
            tool,
            args,
            rule,
            origin,
            justification,
            deadline_at,
            subagent: Some(subagent),
        } => {
            if let Some(again) = asks.told_again(run_id, tool_call_id) {
                return again;
            }
            let ask = SubagentAsk {
                run_id: run_id.to_owned(),
                pending: PendingApproval {
                    tool_call_id: tool_call_id.clone(),
                    tool: tool.clone(),
                    args: args.clone(),
                    rule: rule.clone(),
                    origin: origin.clone(),
                    justification: justification.clone(),
                    asked_at: antler_protocol::sys::unix_ms(),
                    deadline_at: *deadline_at,
                },
                subagent: subagent.clone(),
            };
            asks.asked(ask.clone());
            if fault_unstored(tool_call_id) {
                tracing::warn!(run = %run_id, call = %tool_call_id, "fault injection: the held call is not stored");
            } else {
                drop(store.call(move |store| store.record_subagent_ask(&ask)));
            }
        }
        RunEvent::ApprovalDecided {
            tool_call_id,
            tool,
            decision,
            rule,
            by,
            reason,
            at,
            subagent: Some(_),
            ..
        } => {
            let choice = match decision.as_str() {
                "expired" => ApprovalChoice::Expired,
                other => ApprovalChoice::parse(other).unwrap_or(ApprovalChoice::Deny),
            };
            if !asks.decided(run_id, tool_call_id, choice) {
                // A rule's own decision: nobody was asked.
                return Relayed::Forward;
            }
            // The person's answer was kept when it was given; an expiry is kept here.
            let pending = PendingApproval {
                tool_call_id: tool_call_id.clone(),
                tool: tool.clone(),
                args: serde_json::Value::Null,
                rule: rule.clone(),
                origin: None,
                justification: None,
                asked_at: *at,
                deadline_at: *at,
            };
            let decision = antler_engine::ApprovalDecision {
                choice,
                by: by.clone(),
                at: *at,
                reason: reason.clone(),
            };
            let (run, call) = (run_id.to_owned(), tool_call_id.clone());
            drop(store.call(move |store| {
                store.record_approval(&run, &pending, &decision)?;
                store.forget_subagent_ask(&run, &call)
            }));
        }
        RunEvent::Task {
            tool_call_id,
            task:
                TaskEvent::TaskCompleted { .. }
                | TaskEvent::TaskFailed { .. }
                | TaskEvent::TaskCancelled { .. }
                | TaskEvent::TaskTimedOut { .. },
        } => {
            asks.task_ended(run_id, tool_call_id);
            let (run, task) = (run_id.to_owned(), tool_call_id.clone());
            drop(store.call(move |store| store.forget_subagent_task(&run, &task)));
        }
        _ => {}
    }
    Relayed::Forward
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use antler_engine::SubagentCall;

    fn ask(run: &str, task: &str, call: &str, at: u64) -> SubagentAsk {
        SubagentAsk {
            run_id: run.into(),
            pending: PendingApproval {
                tool_call_id: format!("{task}.{call}"),
                tool: "bash".into(),
                args: serde_json::json!({"command": "git push"}),
                rule: Some("push".into()),
                origin: None,
                justification: None,
                asked_at: at,
                deadline_at: at + 1,
            },
            subagent: SubagentCall {
                task_call_id: task.into(),
                subagent_type: "general-purpose".into(),
                call_id: call.into(),
            },
        }
    }

    #[test]
    fn a_held_call_is_listed_for_its_run_until_decided_or_its_task_or_drive_ends() {
        let asks = SubagentAsks::default();
        asks.asked(ask("r1", "t1", "b2", 2));
        asks.asked(ask("r1", "t1", "b1", 1));
        asks.asked(ask("r1", "t2", "b1", 3));
        asks.asked(ask("r2", "t1", "b1", 1));
        let listed = asks.view("r1");
        let ids: Vec<&str> = listed
            .iter()
            .map(|a| a["tool_call_id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["t1.b1", "t1.b2", "t2.b1"]);
        assert_eq!(listed[0]["subagent"]["call_id"], "b1");
        assert!(asks.get("r2", "t1.b2").is_none(), "another run's call");
        assert!(asks.decided("r1", "t1.b1", ApprovalChoice::Approve));
        assert!(!asks.decided("r1", "t1.b1", ApprovalChoice::Approve));
        asks.task_ended("r1", "t1");
        assert!(asks.get("r1", "t1.b2").is_none());
        assert!(asks.run_ended("r1"));
        assert!(!asks.run_ended("r1"));
        assert!(asks.get("r2", "t1.b1").is_some());
    }

    fn requested(call: &str) -> RunEvent {
        RunEvent::ApprovalRequested {
            tool_call_id: format!("t1.{call}"),
            tool: "bash".into(),
            args: serde_json::json!({"command": "git push"}),
            rule: Some("push".into()),
            origin: None,
            justification: None,
            deadline_at: 9,
            subagent: Some(SubagentCall {
                task_call_id: "t1".into(),
                subagent_type: "general-purpose".into(),
                call_id: call.into(),
            }),
        }
    }

    #[test]
    fn a_held_call_told_again_is_asked_once_and_an_answered_one_gets_its_answer_again() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(&dir.path().join("runs.sqlite")).unwrap();
        let asks = SubagentAsks::default();
        assert_eq!(
            relay("r1", &asks, &store, &requested("b1")),
            Relayed::Forward
        );
        assert_eq!(relay("r1", &asks, &store, &requested("b1")), Relayed::Known);
        // Another run's call of the same name is its own.
        assert_eq!(
            relay("r2", &asks, &store, &requested("b1")),
            Relayed::Forward
        );

        let decision = ApprovalDecision {
            choice: antler_engine::ApprovalChoice::Approve,
            by: Some("alice".into()),
            at: 5,
            reason: None,
        };
        asks.answered("r1", "t1.b1", decision.clone());
        match relay("r1", &asks, &store, &requested("b1")) {
            Relayed::Answered(ask, again) => {
                assert_eq!(ask.subagent.call_id, "b1");
                assert_eq!(again, decision);
            }
            other => panic!("{other:?}"),
        }

        // Decided: no longer listed; its answer is not handed down again.
        assert!(asks.decided("r1", "t1.b1", ApprovalChoice::Approve));
        asks.asked(ask("r1", "t1", "b1", 1));
        assert_eq!(relay("r1", &asks, &store, &requested("b1")), Relayed::Known);
        asks.task_ended("r1", "t1");
        assert_eq!(
            relay("r1", &asks, &store, &requested("b1")),
            Relayed::Forward
        );
    }

    fn approve(at: u64) -> ApprovalDecision {
        ApprovalDecision {
            choice: ApprovalChoice::Approve,
            by: Some("alice".into()),
            at,
            reason: None,
        }
    }

    #[test]
    fn an_answer_taken_through_a_report_again_stands_though_its_own_hand_down_came_late() {
        let asks = SubagentAsks::default();
        // The answer goes down; meanwhile the re-attached task tells of the call again,
        // the kept answer goes down that way, and the worker's decision comes back, and
        // the task ends: all before the answer's own hand-down is refused (no such call).
        asks.asked(ask("r1", "t1", "b1", 1));
        asks.answering("r1", "t1.b1", approve(5));
        assert!(matches!(
            asks.told_again("r1", "t1.b1"),
            Some(Relayed::Answered(..))
        ));
        assert!(asks.decided("r1", "t1.b1", ApprovalChoice::Approve));
        asks.task_ended("r1", "t1");
        assert_eq!(asks.handed("r1", "t1.b1", false), Handed::Took);
        // Nothing is left of it.
        assert!(asks.lock_answered().is_empty());

        // Decided otherwise (it expired) while the answer was on its way: void.
        asks.asked(ask("r1", "t1", "b2", 1));
        asks.answering("r1", "t1.b2", approve(6));
        assert!(asks.decided("r1", "t1.b2", ApprovalChoice::Expired));
        assert!(!asks.run_ended("r1"));
        assert_eq!(asks.handed("r1", "t1.b2", false), Handed::Void);

        // No worker took it, and the call still waits: kept for the report again, which
        // then hands it down; the decision that follows leaves nothing behind.
        asks.asked(ask("r1", "t1", "b3", 1));
        asks.answering("r1", "t1.b3", approve(7));
        assert_eq!(asks.handed("r1", "t1.b3", false), Handed::Kept);
        assert!(matches!(
            asks.told_again("r1", "t1.b3"),
            Some(Relayed::Answered(_, d)) if d == approve(7)
        ));
        assert!(asks.decided("r1", "t1.b3", ApprovalChoice::Approve));
        assert!(asks.lock_answered().is_empty());

        // Taken by its own hand-down: nothing kept.
        asks.asked(ask("r1", "t1", "b4", 1));
        asks.answering("r1", "t1.b4", approve(8));
        assert_eq!(asks.handed("r1", "t1.b4", true), Handed::Took);
        assert!(asks.lock_answered().is_empty());
        assert!(asks.decided("r1", "t1.b4", ApprovalChoice::Approve));
    }
}
