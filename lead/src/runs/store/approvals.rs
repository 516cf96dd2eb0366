//! Approval decisions in the runs store (issue 37): every answer to a call an approval rule
//! asked about (the person's, or the deadline's), kept per (run, call) once; the resumed run
//! reads them back and applies them. The interrupted runs waiting on approvals are listed
//! at start, so their deadlines are kept across a restart of the lead.

use super::db::args;
use super::{CheckpointError, CheckpointStore, RunRecord};
use antler_engine::{ApprovalChoice, ApprovalDecision, PendingApproval};

pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS approval_decisions (
    run_id       TEXT NOT NULL REFERENCES runs(run_id),
    tool_call_id TEXT NOT NULL,
    tool         TEXT NOT NULL,
    rule         TEXT,
    choice       TEXT NOT NULL,
    decided_by   TEXT,
    decided_ms   INTEGER NOT NULL,
    reason       TEXT,
    PRIMARY KEY (run_id, tool_call_id)
);
";

/// How recording an answer went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// Kept: the first answer to that call.
    New,
    /// The call was answered before: the first answer stands.
    AlreadyDecided(ApprovalChoice),
}

impl CheckpointStore {
    /// Keeps `decision` for the call `pending` of `run_id`, unless it has one already.
    pub fn record_approval(
        &self,
        run_id: &str,
        pending: &PendingApproval,
        decision: &ApprovalDecision,
    ) -> Result<Recorded, CheckpointError> {
        let mut db = self.db();
        let inserted = db.execute(
            "INSERT INTO approval_decisions
             (run_id, tool_call_id, tool, rule, choice, decided_by, decided_ms, reason)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT (run_id, tool_call_id) DO NOTHING",
            args![
                run_id,
                &pending.tool_call_id,
                &pending.tool,
                &pending.rule,
                decision.choice.as_str(),
                &decision.by,
                decision.at as i64,
                &decision.reason,
            ],
        )?;
        if inserted == 1 {
            return Ok(Recorded::New);
        }
        let choice = db
            .query_opt(
                "SELECT choice FROM approval_decisions WHERE run_id = ?1 AND tool_call_id = ?2",
                args![run_id, &pending.tool_call_id],
            )?
            .map(|row| row.str(0))
            .transpose()?;
        Ok(Recorded::AlreadyDecided(
            choice
                .as_deref()
                .and_then(parse_choice)
                .unwrap_or(ApprovalChoice::Deny),
        ))
    }

    /// The answers kept for `run_id`'s calls, by call id.
    pub fn approval_decisions(
        &self,
        run_id: &str,
    ) -> Result<Vec<(String, ApprovalDecision)>, CheckpointError> {
        let rows = self.db().query(
            "SELECT tool_call_id, choice, decided_by, decided_ms, reason
             FROM approval_decisions WHERE run_id = ?1 ORDER BY decided_ms",
            args![run_id],
        )?;
        let mut decisions = Vec::new();
        for row in rows {
            // A choice this version does not know is a denial (fail closed).
            let choice = parse_choice(&row.str(1)?).unwrap_or(ApprovalChoice::Deny);
            decisions.push((
                row.str(0)?,
                ApprovalDecision {
                    choice,
                    by: row.opt_str(2)?,
                    at: row.i64(3)?.max(0) as u64,
                    reason: row.opt_str(4)?,
                },
            ));
        }
        Ok(decisions)
    }

    /// The interrupted runs (some may wait on approvals: their state says).
    pub fn interrupted(&self) -> Result<Vec<RunRecord>, CheckpointError> {
        self.db()
            .query(
                &format!(
                    "{} WHERE status = 'interrupted' ORDER BY run_id",
                    super::SELECT_RUN
                ),
                args![],
            )?
            .iter()
            .map(super::record)
            .collect()
    }
}

pub(super) fn parse_choice(text: &str) -> Option<ApprovalChoice> {
    match text {
        "expired" => Some(ApprovalChoice::Expired),
        other => ApprovalChoice::parse(other),
    }
}
