//! Retention of the lease tables: a sweep ([`Leases::sweep`]) removes the released leases of
//! finished runs and the `leads` rows of leads that stopped renewing, each older than a
//! retention on the database's clock, and the submission budgets that are full again, in
//! one bounded `DELETE` per table. A lease row is
//! removed only while its run is finished (`success` or `error`) in `runs` and no lead
//! holds it: a finished run is never driven again, so the epoch lost with the row is one no
//! call will carry again (docs/ha.md, "Retention").

use std::time::Duration;

use antler_engine::RunStatus;

use super::{HaError, Leases};

/// Removes up to `$3` leases released at least `$1` ms ago whose run is one of the
/// statuses `$2` in `runs`, the longest released first. A row taken again meanwhile (it has
/// an owner) is left: `FOR UPDATE` makes an acquire of it wait for the sweep, and the sweep
/// skip a row an acquire holds.
const SWEEP_RELEASED: &str = "DELETE FROM run_leases WHERE run_id IN (
        SELECT l.run_id FROM run_leases l JOIN runs r ON r.run_id = l.run_id
        WHERE l.lead_id IS NULL
            AND l.expires_at <= now() - $1::bigint * interval '1 millisecond'
            AND r.status = ANY($2::text[])
        ORDER BY l.expires_at, l.run_id LIMIT $3
        FOR UPDATE OF l SKIP LOCKED)
    AND lead_id IS NULL";

/// Removes up to `$2` rows of leads whose last renewal is at least `$1` ms old, the oldest
/// first. A lead that was only paused writes its row again at its next renewal.
const SWEEP_LEADS: &str = "DELETE FROM leads WHERE lead_id IN (
        SELECT lead_id FROM leads
        WHERE renewed_at <= now() - $1::bigint * interval '1 millisecond'
        ORDER BY renewed_at, lead_id LIMIT $2
        FOR UPDATE SKIP LOCKED)";

/// Removes up to `$1` users' submission budgets that are full again (their next arrival
/// time past): no row is the same full budget.
const SWEEP_SUBMISSIONS: &str = "DELETE FROM gateway_submissions WHERE user_id IN (
        SELECT user_id FROM gateway_submissions WHERE tat <= now()
        ORDER BY tat, user_id LIMIT $1
        FOR UPDATE SKIP LOCKED)";

/// The statuses of a run that is never driven again.
const FINISHED: [RunStatus; 2] = [RunStatus::Success, RunStatus::Error];

/// What one sweep removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    /// Released leases of finished runs.
    pub leases: u64,
    /// Rows of leads that stopped renewing.
    pub leads: u64,
    /// Users' submission budgets full again.
    pub submissions: u64,
}

impl Swept {
    /// Whether either table had more rows to remove than one sweep takes.
    pub fn full(&self, batch: u32) -> bool {
        let batch = u64::from(batch);
        self.leases >= batch || self.leads >= batch || self.submissions >= batch
    }
}

impl Leases {
    /// Removes at most `batch` released leases of finished runs and at most `batch` rows of
    /// silent leads, each older than `retention` on the database's clock, and at most
    /// `batch` users' submission budgets that are full again.
    pub async fn sweep(&self, retention: Duration, batch: u32) -> Result<Swept, HaError> {
        let keep = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
        let limit = i64::from(batch);
        let finished: Vec<&str> = FINISHED.iter().map(|s| s.as_str()).collect();
        let db = self.db().await?;
        let leases = db
            .within(
                "lease retention",
                db.client()
                    .execute(SWEEP_RELEASED, &[&keep, &finished, &limit]),
            )
            .await?;
        let leads = db
            .within(
                "lead retention",
                db.client().execute(SWEEP_LEADS, &[&keep, &limit]),
            )
            .await?;
        let submissions = db
            .within(
                "submission budget retention",
                db.client().execute(SWEEP_SUBMISSIONS, &[&limit]),
            )
            .await?;
        Ok(Swept {
            leases,
            leads,
            submissions,
        })
    }
}
