//! A run as the CLI and the HTTP API show it: `run_id`, `status` (`running`, `success`,
//! `error`, `interrupted`), `user`, `thread`, `task`, `final_answer`, `question`,
//! `error`, `artifacts`, `delivery`, `stop_reason`, `approvals` (the calls an interrupted
//! run waits on for its user's approval) and `token_usage` (`input_tokens`,
//! `output_tokens`, `total_tokens`, as the model provider reported them; `null` when it
//! reported none). Built from the outcome of a drive,
//! or from the checkpoint store for a run this lead is not driving.

use serde_json::{json, Value};

use crate::runs::store::{CheckpointError, CheckpointStore, RunRecord, RunStatus};
use antler_engine::{Message, RunOutcome};

/// The view of a run whose drive just stopped.
pub fn from_outcome(record: &RunRecord, outcome: &RunOutcome) -> Value {
    json!({
        "run_id": outcome.run_id,
        "status": outcome.status,
        "user": record.user_id,
        "thread": record.thread_id,
        "task": record.task,
        "final_answer": outcome.final_answer,
        "question": outcome.question,
        "error": outcome.error,
        "artifacts": outcome.artifacts,
        "promoted": outcome.promoted.as_ref().map(|p| json!({
            "catalog_hash": p.catalog_hash,
            "names": p.names,
        })),
        "delivery": outcome.delivery,
        "stop_reason": outcome.stop_reason,
        "token_usage": outcome.token_usage.reported(),
        "approvals": outcome.approvals,
    })
}

/// The view of a run from the store: its status, its last checkpoint and its receipt.
pub fn from_store(store: &CheckpointStore, record: &RunRecord) -> Result<Value, CheckpointError> {
    let state = store.latest(&record.run_id)?.map(|(_, state)| state);
    let final_answer = match (
        record.status,
        state.as_ref().and_then(|s| s.messages.last()),
    ) {
        (RunStatus::Success, Some(Message::Ai { content, .. })) => Some(content.clone()),
        _ => None,
    };
    let detail = record.detail.clone();
    let (question, error) = match record.status {
        RunStatus::Interrupted => (detail, None),
        RunStatus::Error => (None, detail),
        RunStatus::Running | RunStatus::Success => (None, None),
    };
    Ok(json!({
        "run_id": record.run_id,
        "status": record.status,
        "user": record.user_id,
        "thread": record.thread_id,
        "task": record.task,
        "final_answer": final_answer,
        "question": question,
        "error": error,
        "artifacts": state.as_ref().map(|s| s.artifacts.clone()).unwrap_or_default(),
        // The deferred tools `tool_search` promoted for the run (under the catalog's hash).
        "promoted": state.as_ref().and_then(|s| s.promoted.as_ref()).map(|p| json!({
            "catalog_hash": p.catalog_hash,
            "names": p.names,
        })),
        "delivery": store.receipt(&record.run_id)?,
        "stop_reason": state.as_ref().and_then(|s| s.stop_reason),
        "token_usage": state.as_ref().and_then(|s| s.token_usage.reported()),
        "approvals": match (record.status, state.as_ref()) {
            (RunStatus::Interrupted, Some(state)) => json!(state.approvals.pending),
            _ => json!([]),
        },
    }))
}
