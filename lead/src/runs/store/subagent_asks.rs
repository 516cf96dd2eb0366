//! A subagent's calls waiting for the parent run's user, in the runs store (issue 37):
//! one row per held call (the parent run, the parent's name of the call, the `task` call
//! and subagent it belongs to, the asking user's run and what was asked), from its
//! `approval_requested` until it is decided or its task ends. The answer itself is an
//! `approval_decisions` row of the parent run, as the parent's own calls' are. A lead that
//! starts again reads the rows back, so the call can still be answered, with the answers
//! already kept for them (the worker gets those again when it reports the call again).

use super::db::args;
use super::{CheckpointError, CheckpointStore};
use antler_engine::{ApprovalChoice, ApprovalDecision, PendingApproval, SubagentCall};

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

    /// The answers kept for held calls still listed (answered, but the worker's decision
    /// never came back), as (run, parent's call id, answer).
    pub fn answered_subagent_asks(
        &self,
    ) -> Result<Vec<(String, String, ApprovalDecision)>, CheckpointError> {
        let rows = self.db().query(
            "SELECT a.run_id, a.tool_call_id, d.choice, d.decided_by, d.decided_ms, d.reason
             FROM subagent_asks a JOIN approval_decisions d
               ON d.run_id = a.run_id AND d.tool_call_id = a.tool_call_id
             ORDER BY a.run_id, a.rowid",
            args![],
        )?;
        let mut answered = Vec::new();
        for row in rows {
            let (run_id, call, choice) = (row.str(0)?, row.str(1)?, row.str(2)?);
            let (by, at, reason) = (row.opt_str(3)?, row.i64(4)?, row.opt_str(5)?);
            // A choice this version does not know is a denial (fail closed).
            let choice = super::approvals::parse_choice(&choice).unwrap_or(ApprovalChoice::Deny);
            let decision = ApprovalDecision {
                choice,
                by,
                at: u64::try_from(at).unwrap_or(0),
                reason,
            };
            answered.push((run_id, call, decision));
        }
        Ok(answered)
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ask(call: &str) -> SubagentAsk {
        SubagentAsk {
            run_id: "r1".into(),
            pending: PendingApproval {
                tool_call_id: format!("t1.{call}"),
                tool: "bash".into(),
                args: serde_json::json!({"command": "git push"}),
                rule: Some("push".into()),
                origin: None,
                justification: None,
                asked_at: 1,
                deadline_at: 2,
            },
            subagent: SubagentCall {
                task_call_id: "t1".into(),
                subagent_type: "general-purpose".into(),
                call_id: call.into(),
            },
        }
    }

    #[test]
    fn a_held_calls_kept_answer_is_read_back_while_it_is_held() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(&dir.path().join("runs.sqlite")).unwrap();
        let state = antler_engine::ThreadState::new("ship");
        store
            .create_run(&super::super::tests::record("r1"), &state)
            .unwrap();
        store.record_subagent_ask(&ask("b1")).unwrap();
        store.record_subagent_ask(&ask("b2")).unwrap();
        let decision = ApprovalDecision {
            choice: ApprovalChoice::ApproveForThread,
            by: Some("alice".into()),
            at: 7,
            reason: Some("fine".into()),
        };
        store
            .record_approval("r1", &ask("b2").pending, &decision)
            .unwrap();
        assert_eq!(
            store.answered_subagent_asks().unwrap(),
            vec![("r1".to_owned(), "t1.b2".to_owned(), decision)]
        );
        // Decided on the worker: no longer held, nothing to hand down again.
        store.forget_subagent_ask("r1", "t1.b2").unwrap();
        assert!(store.answered_subagent_asks().unwrap().is_empty());
    }
}
