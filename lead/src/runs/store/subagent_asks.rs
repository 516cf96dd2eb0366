//! A subagent's calls waiting for the parent run's user, in the runs store (issue 37):
//! one row per held call (the parent run, the parent's name of the call, the `task` call
//! and subagent it belongs to, the asking user's run and what was asked), from its
//! `approval_requested` until it is decided or its task ends. The answer itself is an
//! `approval_decisions` row of the parent run, as the parent's own calls' are. A lead that
//! starts again reads the rows back, so the call can still be answered.

use super::db::args;
use super::{CheckpointError, CheckpointStore};
use antler_engine::{PendingApproval, SubagentCall};

pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS subagent_asks (
    run_id        TEXT NOT NULL REFERENCES runs(run_id),
    tool_call_id  TEXT NOT NULL,
    task_call_id  TEXT NOT NULL,
    subagent_type TEXT NOT NULL,
    call_id       TEXT NOT NULL,
    pending       TEXT NOT NULL,
    PRIMARY KEY (run_id, tool_call_id)
);
";

/// One held call of a subagent, as the store keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct SubagentAsk {
    pub run_id: String,
    /// What was asked, under the parent's name of the call.
    pub pending: PendingApproval,
    pub subagent: SubagentCall,
}

impl CheckpointStore {
    /// Keeps the held call `ask` (again: the later ask replaces it).
    pub fn record_subagent_ask(&self, ask: &SubagentAsk) -> Result<(), CheckpointError> {
        let pending = serde_json::to_string(&ask.pending)
            .map_err(|e| CheckpointError::HeldCall(format!("encode: {e}")))?;
        // The later ask replaces the row, and comes last in the order asked.
        self.db().transaction(|tx| {
            tx.execute(
                "DELETE FROM subagent_asks WHERE run_id = ?1 AND tool_call_id = ?2",
                args![&ask.run_id, &ask.pending.tool_call_id],
            )?;
            tx.execute(
                "INSERT INTO subagent_asks
                 (run_id, tool_call_id, task_call_id, subagent_type, call_id, pending)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                args![
                    &ask.run_id,
                    &ask.pending.tool_call_id,
                    &ask.subagent.task_call_id,
                    &ask.subagent.subagent_type,
                    &ask.subagent.call_id,
                    pending,
                ],
            )?;
            Ok(())
        })
    }

    /// The held call `tool_call_id` of `run_id` no longer waits.
    pub fn forget_subagent_ask(
        &self,
        run_id: &str,
        tool_call_id: &str,
    ) -> Result<(), CheckpointError> {
        self.db().execute(
            "DELETE FROM subagent_asks WHERE run_id = ?1 AND tool_call_id = ?2",
            args![run_id, tool_call_id],
        )?;
        Ok(())
    }

    /// The task `task_call_id` of `run_id` ended: none of its calls waits.
    pub fn forget_subagent_task(
        &self,
        run_id: &str,
        task_call_id: &str,
    ) -> Result<(), CheckpointError> {
        self.db().execute(
            "DELETE FROM subagent_asks WHERE run_id = ?1 AND task_call_id = ?2",
            args![run_id, task_call_id],
        )?;
        Ok(())
    }

    /// The run `run_id`'s drive ended: none of its subagents' calls waits.
    pub fn forget_subagent_asks(&self, run_id: &str) -> Result<(), CheckpointError> {
        self.db()
            .execute("DELETE FROM subagent_asks WHERE run_id = ?1", args![run_id])?;
        Ok(())
    }

    /// Every held call still waiting, by run and the order they were asked.
    pub fn subagent_asks(&self) -> Result<Vec<SubagentAsk>, CheckpointError> {
        let rows = self.db().query(
            "SELECT run_id, task_call_id, subagent_type, call_id, pending
             FROM subagent_asks ORDER BY run_id, rowid",
            args![],
        )?;
        let mut asks = Vec::new();
        for row in rows {
            let pending: PendingApproval = serde_json::from_str(&row.str(4)?)
                .map_err(|e| CheckpointError::HeldCall(format!("decode: {e}")))?;
            asks.push(SubagentAsk {
                run_id: row.str(0)?,
                pending,
                subagent: SubagentCall {
                    task_call_id: row.str(1)?,
                    subagent_type: row.str(2)?,
                    call_id: row.str(3)?,
                },
            });
        }
        Ok(asks)
    }

    /// Drops the answer kept for the call `tool_call_id` of `run_id` (an answer no held
    /// call took: the call was decided otherwise meanwhile).
    pub fn unrecord_approval(
        &self,
        run_id: &str,
        tool_call_id: &str,
    ) -> Result<(), CheckpointError> {
        self.db().execute(
            "DELETE FROM approval_decisions WHERE run_id = ?1 AND tool_call_id = ?2",
            args![run_id, tool_call_id],
        )?;
        Ok(())
    }
}
