//! A thread's checkpoints read back for a fork (a branch, spec A.2): every stored step of
//! the thread's runs, newest run first and within a run its newest step first, as far
//! back as a bound. Keyed (user, thread) like every thread read.

use super::db::args;
use super::{CheckpointError, CheckpointStore};
use antler_engine::ThreadState;

/// One stored state of a thread: the run, the step, the state after it.
pub struct ThreadCheckpoint {
    pub run_id: String,
    pub step: i64,
    pub state: ThreadState,
}

impl CheckpointStore {
    /// The checkpoints of `user`'s thread `thread`, newest first, at most `limit`.
    pub fn thread_checkpoints(
        &self,
        user: &str,
        thread: &str,
        limit: usize,
    ) -> Result<Vec<ThreadCheckpoint>, CheckpointError> {
        let rows = self.db().query(
            "SELECT c.run_id, c.step, c.state FROM checkpoints c
             JOIN runs r ON r.run_id = c.run_id
             WHERE r.user_id = ?1 AND r.thread_id = ?2
             ORDER BY r.rowid DESC, c.step DESC LIMIT ?3",
            args![user, thread, i64::try_from(limit).unwrap_or(i64::MAX)],
        )?;
        rows.iter()
            .map(|row| {
                let (run_id, step, text) = (row.str(0)?, row.i64(1)?, row.str(2)?);
                let state =
                    serde_json::from_str(&text).map_err(|source| CheckpointError::Decode {
                        run_id: run_id.clone(),
                        step,
                        source,
                    })?;
                Ok(ThreadCheckpoint {
                    run_id,
                    step,
                    state,
                })
            })
            .collect()
    }
}
