//! What the gateway's uploads ask the runs store: which users ran a thread, so another
//! user's thread is 404 to a member (until threads have owners of their own, a thread is
//! keyed by (user, thread) and the runs say whose it is).

use rusqlite::params;

use super::{CheckpointError, CheckpointStore};

impl CheckpointStore {
    /// The users who have runs on `thread`, by name.
    pub fn thread_users(&self, thread: &str) -> Result<Vec<String>, CheckpointError> {
        let db = self.db();
        let mut q =
            db.prepare("SELECT DISTINCT user_id FROM runs WHERE thread_id = ?1 ORDER BY user_id")?;
        let rows = q.query_map(params![thread], |r| r.get(0))?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }
}
