//! [`SubagentAsks`]: the subagents' calls the lead's runs wait on for their user (issue 37),
//! from the parent's `approval_requested` event (marked with its subagent) until the call
//! is decided or its task ends. Each is also a row of the runs store (`subagent_asks`),
//! written as it is listed here and read back when the lead starts, so an answer finds
//! it across a restart. [`relay`] keeps both from the parent run's events.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use antler_engine::{PendingApproval, RunEvent, TaskEvent};

use crate::runs::store::{CheckpointStore, SubagentAsk};

/// The subagents' held calls of every run of this lead, by (parent run, call).
#[derive(Debug, Default)]
pub struct SubagentAsks {
    waiting: Mutex<HashMap<(String, String), SubagentAsk>>,
}

impl SubagentAsks {
    fn lock(&self) -> MutexGuard<'_, HashMap<(String, String), SubagentAsk>> {
        // Nothing panics while holding it; the map stays usable.
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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

    /// The call no longer waits; `true` when it did.
    pub fn decided(&self, run_id: &str, tool_call_id: &str) -> bool {
        self.lock()
            .remove(&(run_id.to_owned(), tool_call_id.to_owned()))
            .is_some()
    }

    /// The run's drive ended; `true` when some of its calls were still listed.
    pub fn run_ended(&self, run_id: &str) -> bool {
        let mut waiting = self.lock();
        let before = waiting.len();
        waiting.retain(|(run, _), _| run != run_id);
        waiting.len() != before
    }

    /// The task `task_call_id` of `run_id` ended: none of its calls waits.
    pub fn task_ended(&self, run_id: &str, task_call_id: &str) {
        self.lock()
            .retain(|(run, _), ask| !(run == run_id && ask.subagent.task_call_id == task_call_id));
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
/// decision or the task's end takes it off. The store's writes go to its thread, which
/// keeps them in order; nobody waits for them.
pub fn relay(run_id: &str, asks: &SubagentAsks, store: &CheckpointStore, event: &RunEvent) {
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
            drop(store.call(move |store| store.record_subagent_ask(&ask)));
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
        } => {
            if !asks.decided(run_id, tool_call_id) {
                // A rule's own decision: nobody was asked.
                return;
            }
            // The person's answer was kept when it was given; an expiry is kept here.
            let choice = match decision.as_str() {
                "expired" => antler_engine::ApprovalChoice::Expired,
                other => antler_engine::ApprovalChoice::parse(other)
                    .unwrap_or(antler_engine::ApprovalChoice::Deny),
            };
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
}
