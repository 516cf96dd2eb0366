//! Approval decisions in the runs store (issue 37): every answer to a call an approval rule
//! asked about (the person's, or the deadline's), kept per (run, call) once; the resumed run
//! reads them back and applies them. The interrupted runs waiting on approvals are listed
//! at start, so their deadlines are kept across a restart of the lead.

use rusqlite::{params, OptionalExtension};

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
        let db = self.db();
        let inserted = db.execute(
            "INSERT OR IGNORE INTO approval_decisions
             (run_id, tool_call_id, tool, rule, choice, decided_by, decided_ms, reason)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                run_id,
                pending.tool_call_id,
                pending.tool,
                pending.rule,
                decision.choice.as_str(),
                decision.by,
                decision.at as i64,
                decision.reason,
            ],
        )?;
        if inserted == 1 {
            return Ok(Recorded::New);
        }
        let choice: Option<String> = db
            .query_row(
                "SELECT choice FROM approval_decisions WHERE run_id = ?1 AND tool_call_id = ?2",
                params![run_id, pending.tool_call_id],
                |row| row.get(0),
            )
            .optional()?;
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
        let db = self.db();
        let mut q = db.prepare(
            "SELECT tool_call_id, choice, decided_by, decided_ms, reason
             FROM approval_decisions WHERE run_id = ?1 ORDER BY decided_ms",
        )?;
        let rows = q.query_map(params![run_id], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, Option<String>>(2)?,
                row.get::<_, i64>(3)?,
                row.get::<_, Option<String>>(4)?,
            ))
        })?;
        let mut decisions = Vec::new();
        for row in rows {
            let (call, choice, by, at, reason) = row?;
            // A choice this version does not know is a denial (fail closed).
            let choice = parse_choice(&choice).unwrap_or(ApprovalChoice::Deny);
            decisions.push((
                call,
                ApprovalDecision {
                    choice,
                    by,
                    at: at.max(0) as u64,
                    reason,
                },
            ));
        }
        Ok(decisions)
    }

    /// The interrupted runs (some may wait on approvals: their state says).
    pub fn interrupted(&self) -> Result<Vec<RunRecord>, CheckpointError> {
        let db = self.db();
        let mut statement = db.prepare(&format!(
            "{} WHERE status = 'interrupted' ORDER BY run_id",
            super::SELECT_RUN
        ))?;
        let rows = statement.query_map([], super::raw_record)?;
        rows.map(|row| super::record(row?)).collect()
    }
}

pub(super) fn parse_choice(text: &str) -> Option<ApprovalChoice> {
    match text {
        "expired" => Some(ApprovalChoice::Expired),
        other => ApprovalChoice::parse(other),
    }
}
