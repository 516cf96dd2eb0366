//! Threads in the runs store: a durable conversation owned by one user, keyed (user,
//! thread id), so another user's thread is simply not found. A row holds the thread's
//! metadata, title and status, its latest state (the last checkpoint of its last run, or
//! what a state write put there), its last run and the run active on it. A run claims its
//! thread before it is created (one active run per thread), and every end of the run
//! (`set_status`) writes the thread's state, title and status back in the same lock.

use serde_json::{Map, Value};

use super::db::{args, Db, Dialect, Row};
use super::{now_ms, record, CheckpointError, CheckpointStore, RunRecord, RunStatus};
use antler_engine::ThreadState;

pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS threads (
    user_id       TEXT NOT NULL,
    thread_id     TEXT NOT NULL,
    created_ms    INTEGER NOT NULL,
    updated_ms    INTEGER NOT NULL,
    metadata      TEXT NOT NULL DEFAULT '{}',
    title         TEXT,
    status        TEXT NOT NULL DEFAULT 'idle',
    state         TEXT,
    last_run_id   TEXT,
    active_run_id TEXT,
    claimed_ms    INTEGER,
    PRIMARY KEY (user_id, thread_id)
);
CREATE INDEX IF NOT EXISTS runs_by_thread ON runs(user_id, thread_id);
";

/// How long a claim whose run was never recorded (its lead died while preparing it)
/// holds the thread.
const STALE_CLAIM_MS: i64 = 5 * 60 * 1000;

/// A thread's status, in LangGraph's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ThreadStatus {
    Idle,
    Busy,
    Interrupted,
    Error,
}

impl ThreadStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ThreadStatus::Idle => "idle",
            ThreadStatus::Busy => "busy",
            ThreadStatus::Interrupted => "interrupted",
            ThreadStatus::Error => "error",
        }
    }

    fn parse(text: &str) -> ThreadStatus {
        match text {
            "busy" => ThreadStatus::Busy,
            "interrupted" => ThreadStatus::Interrupted,
            "error" => ThreadStatus::Error,
            _ => ThreadStatus::Idle,
        }
    }

    /// The thread's status once its run is in `status`.
    fn after(status: RunStatus) -> ThreadStatus {
        match status {
            RunStatus::Running => ThreadStatus::Busy,
            RunStatus::Success => ThreadStatus::Idle,
            RunStatus::Error => ThreadStatus::Error,
            RunStatus::Interrupted => ThreadStatus::Interrupted,
        }
    }
}

/// A thread's row, without its state.
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadRow {
    pub user_id: String,
    pub thread_id: String,
    pub created_ms: i64,
    pub updated_ms: i64,
    pub metadata: Map<String, Value>,
    pub title: Option<String>,
    pub status: ThreadStatus,
    pub last_run_id: Option<String>,
    /// The run active on the thread now (running, or claimed and being prepared).
    pub active_run_id: Option<String>,
}

/// Why a thread write was refused.
#[derive(Debug, thiserror::Error)]
pub enum ThreadRefusal {
    #[error("Thread {0} not found")]
    NotFound(String),
    /// A run is active on the thread (its id).
    #[error("Thread {thread} already has an active run")]
    Busy { thread: String, run_id: String },
}

/// What a thread write answers: the store failed, or the thread refused.
pub type ThreadResult<T> = Result<Result<T, ThreadRefusal>, CheckpointError>;

/// The thread columns [`thread_row`] reads; the run active on the thread is shown while
/// it runs, or while its claim is younger than the horizon, the parameter `?{horizon}`.
fn select_thread(horizon: usize) -> String {
    format!(
        "SELECT user_id, thread_id, created_ms, updated_ms, metadata, title,
    status, last_run_id,
    CASE WHEN active_run_id IS NOT NULL AND (
        EXISTS (SELECT 1 FROM runs r WHERE r.run_id = threads.active_run_id AND r.status = 'running')
        OR (NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = threads.active_run_id)
            AND claimed_ms > ?{horizon}))
    THEN active_run_id END
    FROM threads"
    )
}

fn thread_row(row: &Row) -> Result<ThreadRow, CheckpointError> {
    Ok(ThreadRow {
        user_id: row.str(0)?,
        thread_id: row.str(1)?,
        created_ms: row.i64(2)?,
        updated_ms: row.i64(3)?,
        metadata: serde_json::from_str(&row.str(4)?).unwrap_or_default(),
        title: row.opt_str(5)?,
        status: ThreadStatus::parse(&row.str(6)?),
        last_run_id: row.opt_str(7)?,
        active_run_id: row.opt_str(8)?,
    })
}

/// The oldest claim time still live.
fn claim_horizon() -> i64 {
    now_ms() - STALE_CLAIM_MS
}

fn get_thread(db: &mut Db, user: &str, thread: &str) -> Result<Option<ThreadRow>, CheckpointError> {
    db.query_opt(
        &format!("{} WHERE user_id = ?1 AND thread_id = ?2", select_thread(3)),
        args![user, thread, claim_horizon()],
    )?
    .map(|row| thread_row(&row))
    .transpose()
}

/// Called by `set_status` in the same transaction: the run's thread (if it is the
/// thread's last run) gets the run's last checkpoint as its state, the title in it, and
/// the status the run's implies; a run that ended lets go of the thread.
pub(super) fn on_run_status(
    db: &mut Db,
    run_id: &str,
    status: RunStatus,
) -> Result<(), CheckpointError> {
    let now = now_ms();
    let thread_status = ThreadStatus::after(status).as_str();
    if status == RunStatus::Running {
        // Driven again (an answered clarification, a resume): it holds the thread again
        // unless another run took it meanwhile.
        db.execute(
            "UPDATE threads SET status = ?2, updated_ms = ?3, active_run_id = ?1,
                 claimed_ms = ?3, last_run_id = ?1
             WHERE (user_id, thread_id) = (SELECT user_id, thread_id FROM runs WHERE run_id = ?1)
               AND (active_run_id IS NULL OR active_run_id = ?1
                    OR NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = threads.active_run_id
                                   AND r.status = 'running'))",
            args![run_id, thread_status, now],
        )?;
        return Ok(());
    }
    let title = match db.dialect() {
        Dialect::Sqlite => "json_extract(state, '$.title')",
        Dialect::Postgres => "state::jsonb ->> 'title'",
    };
    db.execute(
        &format!(
            "UPDATE threads SET
             state = COALESCE((SELECT state FROM checkpoints WHERE run_id = ?1
                               ORDER BY step DESC LIMIT 1), state),
             title = COALESCE((SELECT {title} FROM checkpoints
                               WHERE run_id = ?1 ORDER BY step DESC LIMIT 1), title),
             status = ?2, updated_ms = ?3,
             active_run_id = CASE WHEN active_run_id = ?1 THEN NULL ELSE active_run_id END
         WHERE (user_id, thread_id) = (SELECT user_id, thread_id FROM runs WHERE run_id = ?1)
           AND last_run_id = ?1"
        ),
        args![run_id, thread_status, now],
    )?;
    Ok(())
}

impl CheckpointStore {
    /// Creates `user`'s thread `thread` unless it exists (with `metadata`); the thread
    /// and whether it was created now.
    pub fn create_thread(
        &self,
        user: &str,
        thread: &str,
        metadata: &Map<String, Value>,
    ) -> Result<(ThreadRow, bool), CheckpointError> {
        let mut db = self.db();
        let now = now_ms();
        let created = db.execute(
            "INSERT INTO threads (user_id, thread_id, created_ms, updated_ms, metadata)
             VALUES (?1, ?2, ?3, ?3, ?4) ON CONFLICT (user_id, thread_id) DO NOTHING",
            args![user, thread, now, serde_json::to_string(metadata)?],
        )? == 1;
        let row = get_thread(&mut db, user, thread)?
            .ok_or_else(|| CheckpointError::UnknownRun(thread.to_owned()))?;
        Ok((row, created))
    }

    /// `user`'s thread `thread`.
    pub fn thread(&self, user: &str, thread: &str) -> Result<Option<ThreadRow>, CheckpointError> {
        get_thread(&mut self.db(), user, thread)
    }

    /// The latest state of `user`'s thread (`None`: no run has ended on it and none was
    /// written).
    pub fn thread_state(
        &self,
        user: &str,
        thread: &str,
    ) -> Result<Option<ThreadState>, CheckpointError> {
        let text = self
            .db()
            .query_opt(
                "SELECT state FROM threads WHERE user_id = ?1 AND thread_id = ?2",
                args![user, thread],
            )?
            .map(|row| row.opt_str(0))
            .transpose()?;
        text.flatten()
            .map(|text| {
                serde_json::from_str(&text).map_err(|source| CheckpointError::Decode {
                    run_id: format!("thread {thread}"),
                    step: -1,
                    source,
                })
            })
            .transpose()
    }

    /// `user`'s threads, most recently updated first: those whose metadata holds every
    /// pair of `metadata` (exact match) and, when given, in `status`.
    pub fn search_threads(
        &self,
        user: &str,
        metadata: &Map<String, Value>,
        status: Option<&str>,
        limit: usize,
        offset: usize,
    ) -> Result<Vec<ThreadRow>, CheckpointError> {
        let rows = self.db().query(
            &format!(
                "{} WHERE user_id = ?1 ORDER BY updated_ms DESC, rowid DESC",
                select_thread(2)
            ),
            args![user, claim_horizon()],
        )?;
        let mut found = Vec::new();
        let mut skipped = 0;
        for row in rows {
            let row = thread_row(&row)?;
            let matches = metadata.iter().all(|(k, v)| row.metadata.get(k) == Some(v))
                && status.is_none_or(|s| row.status.as_str() == s);
            if !matches {
                continue;
            }
            if skipped < offset {
                skipped += 1;
                continue;
            }
            if found.len() >= limit {
                break;
            }
            found.push(row);
        }
        Ok(found)
    }

    /// Merges `metadata` into the thread's; `bump`: its `updated_ms` moves to now.
    pub fn patch_thread(
        &self,
        user: &str,
        thread: &str,
        metadata: &Map<String, Value>,
        bump: bool,
    ) -> ThreadResult<ThreadRow> {
        let mut db = self.db();
        let Some(row) = get_thread(&mut db, user, thread)? else {
            return Ok(Err(ThreadRefusal::NotFound(thread.to_owned())));
        };
        let mut merged = row.metadata;
        merged.extend(metadata.clone());
        db.execute(
            "UPDATE threads SET metadata = ?3,
                 updated_ms = CASE WHEN ?4 THEN ?5 ELSE updated_ms END
             WHERE user_id = ?1 AND thread_id = ?2",
            args![
                user,
                thread,
                serde_json::to_string(&merged)?,
                bump,
                now_ms()
            ],
        )?;
        Ok(
            get_thread(&mut db, user, thread)?
                .ok_or_else(|| ThreadRefusal::NotFound(thread.into())),
        )
    }

    /// Deletes the thread's row (its runs stay, as records); refused while a run is
    /// active on it.
    pub fn delete_thread(&self, user: &str, thread: &str) -> ThreadResult<()> {
        let mut db = self.db();
        let Some(row) = get_thread(&mut db, user, thread)? else {
            return Ok(Err(ThreadRefusal::NotFound(thread.to_owned())));
        };
        if let Some(run_id) = row.active_run_id {
            return Ok(Err(ThreadRefusal::Busy {
                thread: thread.to_owned(),
                run_id,
            }));
        }
        db.execute(
            "DELETE FROM threads WHERE user_id = ?1 AND thread_id = ?2",
            args![user, thread],
        )?;
        Ok(Ok(()))
    }

    /// Writes the thread's state (`POST /state`, a compaction), its title with it;
    /// refused while a run is active on it.
    pub fn put_thread_state(
        &self,
        user: &str,
        thread: &str,
        state: &ThreadState,
        title: Option<&str>,
    ) -> ThreadResult<ThreadRow> {
        let mut db = self.db();
        let Some(row) = get_thread(&mut db, user, thread)? else {
            return Ok(Err(ThreadRefusal::NotFound(thread.to_owned())));
        };
        if let Some(run_id) = row.active_run_id {
            return Ok(Err(ThreadRefusal::Busy {
                thread: thread.to_owned(),
                run_id,
            }));
        }
        db.execute(
            "UPDATE threads SET state = ?3, title = COALESCE(?4, title), updated_ms = ?5
             WHERE user_id = ?1 AND thread_id = ?2",
            args![user, thread, serde_json::to_string(state)?, title, now_ms()],
        )?;
        Ok(
            get_thread(&mut db, user, thread)?
                .ok_or_else(|| ThreadRefusal::NotFound(thread.into())),
        )
    }

    /// Claims the thread for the run `run_id` about to be created on it: refused while
    /// another run is active on it. The thread's state is answered with the claim, so the
    /// run starts from what the claim saw.
    pub fn claim_thread(
        &self,
        user: &str,
        thread: &str,
        run_id: &str,
    ) -> ThreadResult<Option<ThreadState>> {
        let mut db = self.db();
        let Some(row) = get_thread(&mut db, user, thread)? else {
            return Ok(Err(ThreadRefusal::NotFound(thread.to_owned())));
        };
        if let Some(active) = row.active_run_id.filter(|a| a != run_id) {
            return Ok(Err(ThreadRefusal::Busy {
                thread: thread.to_owned(),
                run_id: active,
            }));
        }
        // The claim checks again as it writes: another lead on the same database may have
        // claimed the thread since it was read.
        let claimed = db.execute(
            "UPDATE threads SET active_run_id = ?3, last_run_id = ?3, claimed_ms = ?4,
                 status = 'busy', updated_ms = ?4
             WHERE user_id = ?1 AND thread_id = ?2
               AND (active_run_id IS NULL OR active_run_id = ?3 OR NOT (
                   EXISTS (SELECT 1 FROM runs r WHERE r.run_id = threads.active_run_id
                           AND r.status = 'running')
                   OR (NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = threads.active_run_id)
                       AND COALESCE(claimed_ms, 0) > ?5)))",
            args![user, thread, run_id, now_ms(), claim_horizon()],
        )?;
        if claimed == 0 {
            let active = get_thread(&mut db, user, thread)?.and_then(|row| row.active_run_id);
            return Ok(Err(ThreadRefusal::Busy {
                thread: thread.to_owned(),
                run_id: active.unwrap_or_default(),
            }));
        }
        drop(db);
        Ok(Ok(self.thread_state(user, thread)?))
    }

    /// Lets go of a claim whose run was never created (its preparation failed): the
    /// thread goes back to its last run and the status it left.
    pub fn release_thread(
        &self,
        user: &str,
        thread: &str,
        run_id: &str,
        previous: &ThreadRow,
    ) -> Result<(), CheckpointError> {
        self.db().execute(
            "UPDATE threads SET active_run_id = NULL, last_run_id = ?4, status = ?5
             WHERE user_id = ?1 AND thread_id = ?2 AND active_run_id = ?3
               AND NOT EXISTS (SELECT 1 FROM runs WHERE run_id = ?3)",
            args![
                user,
                thread,
                run_id,
                &previous.last_run_id,
                previous.status.as_str()
            ],
        )?;
        Ok(())
    }

    /// The runs of `user`'s thread, newest first.
    pub fn thread_runs(
        &self,
        user: &str,
        thread: &str,
        limit: usize,
        offset: usize,
    ) -> Result<Vec<RunRecord>, CheckpointError> {
        self.db()
            .query(
                &format!(
                    "{} WHERE user_id = ?1 AND thread_id = ?2 ORDER BY rowid DESC LIMIT ?3 OFFSET ?4",
                    super::SELECT_RUN
                ),
                args![
                    user,
                    thread,
                    i64::try_from(limit).unwrap_or(i64::MAX),
                    i64::try_from(offset).unwrap_or(i64::MAX)
                ],
            )?
            .iter()
            .map(record)
            .collect()
    }

    /// The state of a run after `step` (step 0: as it started).
    pub fn checkpoint_at(
        &self,
        run_id: &str,
        step: i64,
    ) -> Result<Option<ThreadState>, CheckpointError> {
        let text = self
            .db()
            .query_opt(
                "SELECT state FROM checkpoints WHERE run_id = ?1 AND step = ?2",
                args![run_id, step],
            )?
            .map(|row| row.str(0))
            .transpose()?;
        text.map(|text| {
            serde_json::from_str(&text).map_err(|source| CheckpointError::Decode {
                run_id: run_id.to_owned(),
                step,
                source,
            })
        })
        .transpose()
    }

    /// A cancelled run rolled back (spec A.4's `rollback`): it ends `error` with
    /// `detail`, and its thread, if the run is the thread's last, gets back the state it
    /// had before the run (the run's first checkpoint without the message it added).
    pub fn roll_back_run(&self, run_id: &str, detail: &str) -> Result<(), CheckpointError> {
        let before = self.checkpoint_at(run_id, 0)?.map(|mut state| {
            state.messages.pop();
            state
        });
        let before = before.map(|b| serde_json::to_string(&b)).transpose()?;
        self.db().transaction(|tx| {
        tx.execute(
            "UPDATE runs SET status = 'error', detail = ?2 WHERE run_id = ?1",
            args![run_id, detail],
        )?;
        if let Some(before) = before {
            tx.execute(
                "UPDATE threads SET state = ?2, status = 'idle', updated_ms = ?3,
                     active_run_id = CASE WHEN active_run_id = ?1 THEN NULL ELSE active_run_id END
                 WHERE (user_id, thread_id) = (SELECT user_id, thread_id FROM runs WHERE run_id = ?1)
                   AND last_run_id = ?1",
                args![run_id, before, now_ms()],
            )?;
        }
        Ok(())
        })
    }

    /// When a run was created and last ended (Unix ms).
    pub fn run_times(&self, run_id: &str) -> Result<(Option<i64>, Option<i64>), CheckpointError> {
        let row = self.db().query_opt(
            "SELECT started_ms, ended_ms FROM runs WHERE run_id = ?1",
            args![run_id],
        )?;
        match row {
            Some(row) => Ok((row.opt_i64(0)?, row.opt_i64(1)?)),
            None => Ok((None, None)),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
#[path = "threads_tests.rs"]
mod tests;
