//! Where a run is journaled: the [`Journal`] trait the run loop writes through (its
//! record, the state after every merged step, the outputs snapshot and the delivery
//! receipt), and the records it writes. The lead implements it with its SQLite checkpoint
//! store, so its runs resume after a crash; a subagent's task graph runs with
//! [`NoJournal`] (spec 7: a subagent has no checkpoint). Every method is asynchronous, so
//! an implementation that touches a disk does it off the caller's actor thread.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::settlement::{DeliveryReceipt, OutputsSnapshot};
use crate::thread::state::ThreadState;

/// A run's lifecycle status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Running,
    Success,
    Error,
    Interrupted,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Success => "success",
            RunStatus::Error => "error",
            RunStatus::Interrupted => "interrupted",
        }
    }

    /// The status written as [`RunStatus::as_str`] gives it.
    pub fn parse(text: &str) -> Option<RunStatus> {
        Some(match text {
            "running" => RunStatus::Running,
            "success" => RunStatus::Success,
            "error" => RunStatus::Error,
            "interrupted" => RunStatus::Interrupted,
            _ => return None,
        })
    }
}

/// What the journal knows about a run besides its state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunRecord {
    pub run_id: String,
    pub user_id: String,
    pub thread_id: String,
    pub task: String,
    /// The playbook or model the run was started with, to resume it with the same.
    pub model: String,
    pub status: RunStatus,
    /// The error or interrupt text of a run that ended that way.
    pub detail: Option<String>,
    /// Whether someone answers the run's clarifications (it stops at one).
    pub clarification: bool,
    /// The custom agent the run talks as (`update_agent` edits it), or the agent a
    /// bootstrap run creates.
    pub agent: Option<String>,
    /// A bootstrap run (`setup_agent` is offered).
    pub bootstrap: bool,
    /// A run no one talks to (`ask_clarification` is not offered).
    pub non_interactive: bool,
    /// A run offered `task`.
    pub subagents: bool,
    /// The role of the principal the run acts for (`None`: the operator's CLI or token).
    pub role: Option<String>,
}

/// A journal failure (operator-facing: it fails the run).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct JournalError {
    pub message: String,
    /// The store stayed locked past its busy timeout (load, not a broken store).
    pub busy: bool,
}

impl JournalError {
    pub fn new(message: impl Into<String>) -> JournalError {
        JournalError {
            message: message.into(),
            busy: false,
        }
    }
}

/// The result of a journal operation.
pub type JournalResult<T> = Result<T, JournalError>;

/// Where a run's record, steps, outputs snapshot and receipt are kept.
pub trait Journal: Send + Sync {
    /// Records a new run with its initial state as step 0.
    /// Implementations encode `state` before they return the future (it is not kept).
    fn create_run(
        &self,
        record: &RunRecord,
        state: &ThreadState,
    ) -> BoxFuture<'static, JournalResult<()>>;
    /// Writes the state after step `step` (a step that exists is left as it is).
    /// Implementations start the write before they return the future: writes land in
    /// the order they were made, whether or not the earlier ones were awaited yet.
    fn save(
        &self,
        run_id: &str,
        step: i64,
        state: &ThreadState,
    ) -> BoxFuture<'static, JournalResult<()>>;
    /// The last step and its state.
    fn latest(&self, run_id: &str)
        -> BoxFuture<'static, JournalResult<Option<(i64, ThreadState)>>>;
    fn set_status(
        &self,
        run_id: &str,
        status: RunStatus,
        detail: Option<String>,
    ) -> BoxFuture<'static, JournalResult<()>>;
    fn save_outputs_snapshot(
        &self,
        run_id: &str,
        snapshot: OutputsSnapshot,
    ) -> BoxFuture<'static, JournalResult<()>>;
    fn outputs_snapshot(
        &self,
        run_id: &str,
    ) -> BoxFuture<'static, JournalResult<Option<OutputsSnapshot>>>;
    /// Writes the receipt unless one exists; whether this one was written.
    fn put_receipt_if_absent(
        &self,
        run_id: &str,
        receipt: DeliveryReceipt,
    ) -> BoxFuture<'static, JournalResult<bool>>;
    fn receipt(&self, run_id: &str) -> BoxFuture<'static, JournalResult<Option<DeliveryReceipt>>>;
}

/// A run that keeps nothing: a subagent's task graph (no checkpoint, no receipt).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoJournal;

impl Journal for NoJournal {
    fn create_run(&self, _: &RunRecord, _: &ThreadState) -> BoxFuture<'static, JournalResult<()>> {
        Box::pin(async { Ok(()) })
    }
    fn save(&self, _: &str, _: i64, _: &ThreadState) -> BoxFuture<'static, JournalResult<()>> {
        Box::pin(async { Ok(()) })
    }
    fn latest(&self, _: &str) -> BoxFuture<'static, JournalResult<Option<(i64, ThreadState)>>> {
        Box::pin(async { Ok(None) })
    }
    fn set_status(
        &self,
        _: &str,
        _: RunStatus,
        _: Option<String>,
    ) -> BoxFuture<'static, JournalResult<()>> {
        Box::pin(async { Ok(()) })
    }
    fn save_outputs_snapshot(
        &self,
        _: &str,
        _: OutputsSnapshot,
    ) -> BoxFuture<'static, JournalResult<()>> {
        Box::pin(async { Ok(()) })
    }
    fn outputs_snapshot(
        &self,
        _: &str,
    ) -> BoxFuture<'static, JournalResult<Option<OutputsSnapshot>>> {
        Box::pin(async { Ok(None) })
    }
    fn put_receipt_if_absent(
        &self,
        _: &str,
        _: DeliveryReceipt,
    ) -> BoxFuture<'static, JournalResult<bool>> {
        Box::pin(async { Ok(false) })
    }
    fn receipt(&self, _: &str) -> BoxFuture<'static, JournalResult<Option<DeliveryReceipt>>> {
        Box::pin(async { Ok(None) })
    }
}

/// A shared journal.
pub type SharedJournal = Arc<dyn Journal>;
