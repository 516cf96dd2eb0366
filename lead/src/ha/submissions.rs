//! The submissions-per-minute budget every lead's gateway takes from, so a user's limit
//! holds across leads (`antler.gateway.limits.submissions_per_minute`): the same GCRA as a
//! lone lead's limiter (a burst of as many, refilled evenly), its state one row per user in
//! `gateway_submissions` (the theoretical arrival time of the user's next submission), each
//! take one statement judged on the database's clock, so concurrent takes on several leads
//! queue on the user's row and never overspend.

use std::time::Duration;

use super::{HaError, Leases};

/// Takes one submission of `$1`'s budget: `$2` ms apart on average (the emission
/// interval), at most `$3` ms ahead of now (the burst's tolerance). The first column says
/// whether it was taken; the second, how far ahead of now the user's next arrival time
/// stood (ms), from which a refusal's wait follows.
const TAKE: &str = "WITH taken AS (
        INSERT INTO gateway_submissions AS s (user_id, tat)
        VALUES ($1, now() + $2::bigint * interval '1 millisecond')
        ON CONFLICT (user_id) DO UPDATE
            SET tat = greatest(s.tat, now()) + $2::bigint * interval '1 millisecond'
            WHERE greatest(s.tat, now()) <= now() + $3::bigint * interval '1 millisecond'
        RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM taken),
        coalesce((SELECT (extract(epoch FROM g.tat - now()) * 1000)::bigint
            FROM gateway_submissions g WHERE g.user_id = $1), 0)";

impl Leases {
    /// Takes one of `user`'s `per_minute` submissions: `Ok(None)` when taken, `Ok(Some(wait))`
    /// when the budget is spent until `wait` from now.
    pub async fn take_submission(
        &self,
        user: &str,
        per_minute: u32,
    ) -> Result<Option<Duration>, HaError> {
        let per_minute = i64::from(per_minute.max(1));
        let interval = (60_000 / per_minute).max(1);
        let tolerance = interval * (per_minute - 1);
        let what = "submission budget";
        let db = self.db().await?;
        let row = db
            .within(
                what,
                db.client().query_one(TAKE, &[&user, &interval, &tolerance]),
            )
            .await?;
        let taken: bool = row
            .try_get(0)
            .map_err(|source| HaError::Query { what, source })?;
        if taken {
            return Ok(None);
        }
        let ahead: i64 = row
            .try_get(1)
            .map_err(|source| HaError::Query { what, source })?;
        let wait = u64::try_from(ahead - tolerance).unwrap_or(0).max(1);
        Ok(Some(Duration::from_millis(wait)))
    }
}
