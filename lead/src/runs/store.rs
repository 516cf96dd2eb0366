//! Run checkpoints: a row per run (task, ids, status) and the run's `ThreadState` after
//! each merged step, so a run resumes from its last step after the lead dies. Steps are
//! numbered from 0 (the initial state) and written once: writing a step that exists is a
//! no-op, so a replayed step is never applied twice.
//! The store also keeps ended runs' events, receipts, approval decisions and the shared MCP
//! credentials. It is one SQLite file (the default) or a PostgreSQL database (cluster mode,
//! [`StoreLocation`]); every statement is written once for both (`db`).
//! [`CheckpointStore`] is the engine's `Journal` for the lead's runs (`journal`). Its
//! synchronous methods are for code that may block (the CLI, tests). Everything
//! asynchronous (the run loop's journal writes, the `RunManager`, the write probe in
//! `probe`, the credentials relay) goes through [`CheckpointStore::call`] to the store's
//! own thread (`thread`), in the order it was sent, never onto an actor's thread.

mod approvals;
mod db;
mod forks;
mod journal;
mod location;
pub mod memory;
pub mod notices;
mod probe;
mod subagent_asks;
mod thread;
mod threads;

pub use approvals::Recorded;
pub use location::{Dsn, StoreLocation, STORE_DSN_ENV};
pub use probe::{probe_writes, unwritable};
pub use subagent_asks::SubagentAsk;
pub use threads::{ThreadRefusal, ThreadRow};

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt as _;
use rusqlite::Connection;
use serde::{Deserialize, Serialize};

pub use crate::runs::events::EventId;
use db::{args, Db, Dialect, Row};
use thread::StoreThread;

use antler_engine::{DeliveryReceipt, OutputsSnapshot, ThreadState};

/// How long a write waits for another connection's lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

pub use antler_engine::{RunRecord, RunStatus};

/// The run options stored as JSON beside the record.
#[derive(Default, Serialize, Deserialize)]
struct RunOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    agent: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    bootstrap: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    non_interactive: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    subagents: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    role: Option<String>,
}

/// A checkpoint store failure (operator-facing: it fails the run).
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("cannot create the checkpoint directory {path}: {source}")]
    CreateDir {
        path: String,
        source: std::io::Error,
    },
    #[error("checkpoint store {path}: {source}")]
    Open {
        path: String,
        source: rusqlite::Error,
    },
    #[error("checkpoint store: {0}")]
    Sql(#[from] rusqlite::Error),
    /// The PostgreSQL store failed (a lost connection, a deadline, a statement). Its text
    /// already holds its causes', so it is not given as a source (a chain would repeat them).
    #[error("checkpoint store: {0}")]
    Postgres(crate::ha::HaError),
    /// A row did not hold what the store wrote there.
    #[error("checkpoint store: {0}")]
    Column(String),
    #[error("checkpoint of run {run_id} step {step} does not decode: {source}")]
    Decode {
        run_id: String,
        step: i64,
        source: serde_json::Error,
    },
    #[error("checkpoint store: run {0} has an unknown status {1:?}")]
    Status(String, String),
    #[error("checkpoint store: a subagent's held call does not {0}")]
    HeldCall(String),
    #[error("checkpoint store: no run {0}")]
    UnknownRun(String),
    #[error("checkpoint store: state does not encode: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("checkpoint store: its thread is gone")]
    ThreadGone,
    /// A newer lead holds the run (a higher lease epoch): this lead's write is refused.
    #[error("run {0} is held by a newer lead: this lead no longer writes for it")]
    Fenced(String),
}

impl From<crate::ha::HaError> for CheckpointError {
    fn from(error: crate::ha::HaError) -> CheckpointError {
        CheckpointError::Postgres(error)
    }
}

impl CheckpointError {
    /// The store stayed locked past the busy timeout (load, not a broken store); on
    /// PostgreSQL, a serialization failure or a deadlock.
    pub fn is_busy(&self) -> bool {
        match self {
            CheckpointError::Sql(rusqlite::Error::SqliteFailure(e, _)) => matches!(
                e.code,
                rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
            ),
            CheckpointError::Postgres(crate::ha::HaError::Query { source, .. }) => source
                .code()
                .is_some_and(|c| c.code() == "40001" || c.code() == "40P01"),
            _ => false,
        }
    }

    /// Whether SQLite refused a write to a database it holds read-only.
    pub fn is_read_only(&self) -> bool {
        matches!(
            self,
            CheckpointError::Sql(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::ReadOnly
        )
    }

    /// Whether the storage under the store failed, for a while perhaps: an I/O error, a
    /// read-only or full volume, a file that cannot be opened; on PostgreSQL, a lost or
    /// refused connection, a deadline passed, a server short of resources or shutting
    /// down. A write is worth trying again; a malformed state or an unknown run is not.
    pub fn is_storage(&self) -> bool {
        use crate::ha::HaError;
        match self {
            CheckpointError::Sql(rusqlite::Error::SqliteFailure(e, _)) => matches!(
                e.code,
                rusqlite::ErrorCode::SystemIoFailure
                    | rusqlite::ErrorCode::ReadOnly
                    | rusqlite::ErrorCode::DiskFull
                    | rusqlite::ErrorCode::CannotOpen
            ),
            CheckpointError::Postgres(
                HaError::Connect { .. } | HaError::Timeout { .. } | HaError::Closed,
            ) => true,
            CheckpointError::Postgres(HaError::Query { source, .. }) => {
                source.is_closed()
                    || source.code().is_none_or(|c| {
                        let class = c.code().get(..2).unwrap_or("");
                        // Connection exception, insufficient resources, operator
                        // intervention (a shutdown), system error.
                        matches!(class, "08" | "53" | "57" | "58")
                    })
            }
            _ => false,
        }
    }
}

/// How long a write waits out a failing storage (a volume read-only or full for a while)
/// before its error reaches the run: retried with backoff from 50 ms to 2 s.
pub const STORAGE_RETRY_WINDOW: Duration = Duration::from_secs(30);

/// The runs and their checkpoints, in one SQLite file or one PostgreSQL database. Clones
/// share one connection, so every run of a lead writes through it (one page cache,
/// however many runs), and one thread for the asynchronous requests (started by the
/// first).
#[derive(Clone)]
pub struct CheckpointStore {
    connection: Arc<Mutex<Db>>,
    /// The SQLite file, to open again a connection SQLite opened read-only (`None`:
    /// PostgreSQL).
    path: Option<Arc<std::path::PathBuf>>,
    /// The thread [`CheckpointStore::call`] sends to (empty in the thread's own store).
    thread: Arc<OnceLock<StoreThread>>,
    /// The runs this lead writes under a lease (PostgreSQL, `antler.ha`): a run's writes
    /// are refused once a newer epoch holds it ([`CheckpointStore::fence_run`]).
    fences: Arc<dashmap::DashMap<String, Fence>>,
    /// The database's DSN (PostgreSQL), for [`CheckpointStore::notices`].
    dsn: Option<Arc<str>>,
    /// The listener of run notices, started with the gateway (PostgreSQL).
    notices: Arc<OnceLock<notices::RunNotices>>,
}

/// Rows of run events written by one statement.
const EVENT_ROWS_PER_STATEMENT: usize = 16;

/// One statement inserting `events` of `run_id` (at most [`EVENT_ROWS_PER_STATEMENT`]),
/// fenced by the lease epoch `fence` (PostgreSQL), and its parameters.
fn insert_events(
    dialect: Dialect,
    run_id: &str,
    events: &[(EventId, std::sync::Arc<str>)],
    fence: Option<u64>,
) -> (String, Vec<db::Param>) {
    let mut args = vec![db::Param::from(run_id)];
    let mut rows = Vec::with_capacity(events.len());
    let fenced = fence.filter(|_| dialect == Dialect::Postgres);
    for (id, event) in events {
        let n = args.len();
        rows.push(match fenced {
            // A row of the fenced statement's VALUES list, typed (no target column to
            // infer the types from).
            Some(_) => format!("(?{}::bigint, ?{}::bigint, ?{}::text)", n + 1, n + 2, n + 3),
            None => format!("(?1, ?{}, ?{}, ?{})", n + 1, n + 2, n + 3),
        });
        args.push(db::Param::Int(id.seq as i64));
        args.push(db::Param::Int(id.gen as i64));
        args.push(db::Param::from(event.as_ref()));
    }
    let sql = match fenced {
        Some(epoch) => {
            args.push(db::Param::Int(epoch as i64));
            format!(
                "INSERT INTO run_events (run_id, seq, gen, event)
                 SELECT ?1, v.seq, v.gen, v.event FROM (VALUES {}) AS v(seq, gen, event)
                 {}
                 ON CONFLICT (run_id, seq) DO NOTHING",
                rows.join(", "),
                unless_newer_epoch(args.len())
            )
        }
        None => format!(
            "INSERT INTO run_events (run_id, seq, gen, event) VALUES {}
             ON CONFLICT (run_id, seq) DO NOTHING",
            rows.join(", ")
        ),
    };
    (sql, args)
}

/// The `WHERE` of a fenced insert of run `?1` (PostgreSQL): nothing is written once an
/// epoch newer than parameter `epoch` holds the run's lease. It reads the lease row `FOR
/// SHARE`, so the insert is ordered with a takeover's acquire, which waits for it.
fn unless_newer_epoch(epoch: usize) -> String {
    format!(
        "WHERE NOT EXISTS (SELECT 1 FROM run_leases WHERE run_id = ?1 AND epoch > ?{epoch} FOR SHARE)"
    )
}

/// A row of a run written at most once ([`CheckpointStore::insert_once`]).
struct OnceRow {
    table: &'static str,
    /// The columns after `run_id`, with their PostgreSQL types (a fenced insert selects
    /// its values, which have no target column to take their types from).
    columns: &'static [(&'static str, &'static str)],
    /// The conflict target: the row's key.
    key: &'static str,
    /// The columns' values, in order.
    values: Vec<db::Param>,
}

impl OnceRow {
    /// The insert: plain, or (`fenced`, PostgreSQL) writing nothing once a newer epoch
    /// than the last parameter holds the run's lease.
    fn sql(&self, fenced: bool) -> String {
        let names: Vec<&str> = self.columns.iter().map(|(name, _)| *name).collect();
        let (table, key, names) = (self.table, self.key, names.join(", "));
        let places = self.columns.iter().enumerate().map(|(i, (_, ty))| {
            if fenced {
                format!("?{}::{ty}", i + 2)
            } else {
                format!("?{}", i + 2)
            }
        });
        let places = places.collect::<Vec<_>>().join(", ");
        if !fenced {
            return format!(
                "INSERT INTO {table} (run_id, {names}) VALUES (?1, {places})
                 ON CONFLICT ({key}) DO NOTHING"
            );
        }
        let unless = unless_newer_epoch(self.columns.len() + 2);
        format!(
            "INSERT INTO {table} (run_id, {names}) SELECT ?1, {places} {unless}
             ON CONFLICT ({key}) DO NOTHING"
        )
    }

    /// The statement: its text and parameters (the run, the values, and the epoch when
    /// fenced). The values move into it: a checkpoint's state is not copied again.
    fn statement(self, run_id: &str, epoch: Option<u64>) -> (String, Vec<db::Param>) {
        let sql = self.sql(epoch.is_some());
        let mut all = Vec::with_capacity(self.values.len() + 2);
        all.push(db::Param::from(run_id));
        all.extend(self.values);
        all.extend(epoch.map(|e| db::Param::Int(e as i64)));
        (sql, all)
    }
}

/// Whether an epoch newer than `epoch` holds `run_id`'s lease (asked after a fenced insert
/// wrote nothing, to tell a row already there from a lead that lost the run).
fn newer_epoch_holds(db: &mut Db, run_id: &str, epoch: u64) -> Result<bool, CheckpointError> {
    let newer = db.query(
        "SELECT 1 FROM run_leases WHERE run_id = ?1 AND epoch > ?2",
        args![run_id, epoch as i64],
    )?;
    Ok(!newer.is_empty())
}

/// How this lead stands with a run it writes under a lease.
#[derive(Clone, Copy, Debug)]
enum Fence {
    /// Held at this epoch: each write first checks no newer epoch holds the run.
    Held(u64),
    /// A newer epoch holds it: every write is refused, without asking the database.
    Lost,
}

/// SQLite's page cache per connection: negative is KiB (1 MiB).
const CACHE_KIB: i64 = -1024;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS runs (
    run_id    TEXT PRIMARY KEY,
    user_id   TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    task      TEXT NOT NULL,
    model     TEXT NOT NULL,
    status    TEXT NOT NULL,
    detail    TEXT,
    clarification INTEGER NOT NULL DEFAULT 0,
    options   TEXT NOT NULL DEFAULT '{}'
);
-- The gateway's per-user count of running runs, at every member's submission.
CREATE INDEX IF NOT EXISTS runs_by_user_status ON runs(user_id, status);
CREATE TABLE IF NOT EXISTS checkpoints (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    step   INTEGER NOT NULL,
    state  TEXT NOT NULL,
    PRIMARY KEY (run_id, step)
);
CREATE TABLE IF NOT EXISTS outputs_snapshots (
    run_id   TEXT PRIMARY KEY REFERENCES runs(run_id),
    snapshot TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS write_probe (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS receipts (
    run_id  TEXT PRIMARY KEY REFERENCES runs(run_id),
    receipt TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS run_events (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    seq    INTEGER NOT NULL,
    event  TEXT NOT NULL,
    gen    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE IF NOT EXISTS mcp_credentials (
    server     TEXT NOT NULL,
    user_id    TEXT NOT NULL,
    updated_ms INTEGER NOT NULL,
    sealed     BLOB,
    PRIMARY KEY (server, user_id)
);
";

impl CheckpointStore {
    /// Opens the store `location` names: [`CheckpointStore::open`] for a SQLite file,
    /// [`CheckpointStore::open_postgres`] for a DSN.
    pub fn open_at(location: &StoreLocation) -> Result<CheckpointStore, CheckpointError> {
        match location {
            StoreLocation::Sqlite(path) => CheckpointStore::open(path),
            StoreLocation::Postgres(dsn) => CheckpointStore::open_postgres(dsn.expose()),
        }
    }

    /// Connects to the PostgreSQL database `dsn` names and brings its schema to the
    /// lead's version (`ha::migrations`).
    pub fn open_postgres(dsn: &str) -> Result<CheckpointStore, CheckpointError> {
        let link = db::PgLink::open(dsn)?;
        Ok(CheckpointStore {
            connection: Arc::new(Mutex::new(Db::Postgres(link))),
            path: None,
            thread: Arc::default(),
            fences: Arc::default(),
            dsn: Some(Arc::from(dsn)),
            notices: Arc::default(),
        })
    }

    /// The lead's listener of run notices, started on first use (PostgreSQL; `None` for
    /// SQLite, where one lead writes and reads).
    pub fn notices(&self) -> Option<&notices::RunNotices> {
        let dsn = self.dsn.as_deref()?;
        Some(self.notices.get_or_init(|| notices::RunNotices::start(dsn)))
    }

    /// Whether the store is PostgreSQL.
    pub fn is_postgres(&self) -> bool {
        self.path.is_none()
    }

    /// Opens (creating if needed) the SQLite store at `path`, in WAL mode.
    pub fn open(path: &Path) -> Result<CheckpointStore, CheckpointError> {
        let open_error = |source| CheckpointError::Open {
            path: path.display().to_string(),
            source,
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .map_err(|e| open_error(rusqlite::Error::ToSqlConversionFailure(Box::new(e))))?;
        }
        let connection = Connection::open(path).map_err(open_error)?;
        connection.busy_timeout(BUSY_TIMEOUT).map_err(open_error)?;
        connection
            .pragma_update(None, "journal_mode", "WAL")
            .map_err(open_error)?;
        connection
            .pragma_update(None, "synchronous", "NORMAL")
            .map_err(open_error)?;
        // The page cache SQLite keeps in the lead's heap (its default is 2 MiB): recent
        // checkpoints are read back rarely, and the system's file cache holds the rest.
        connection
            .pragma_update(None, "cache_size", CACHE_KIB)
            .map_err(open_error)?;
        connection.execute_batch(SCHEMA).map_err(open_error)?;
        connection
            .execute_batch(threads::SCHEMA)
            .map_err(open_error)?;
        connection
            .execute_batch(memory::SCHEMA)
            .map_err(open_error)?;
        connection
            .execute_batch(approvals::SCHEMA)
            .map_err(open_error)?;
        connection
            .execute_batch(subagent_asks::SCHEMA)
            .map_err(open_error)?;
        // A store written before runs recorded these gains the columns.
        for (column, definition) in [
            ("clarification", "INTEGER NOT NULL DEFAULT 0"),
            ("options", "TEXT NOT NULL DEFAULT '{}'"),
            // Unix milliseconds: when the run was created, and when it last ended.
            ("started_ms", "INTEGER"),
            ("ended_ms", "INTEGER"),
        ] {
            let has_column = connection
                .prepare(&format!("SELECT {column} FROM runs LIMIT 0"))
                .is_ok();
            if !has_column {
                connection
                    .execute_batch(&format!(
                        "ALTER TABLE runs ADD COLUMN {column} {definition}"
                    ))
                    .map_err(open_error)?;
            }
        }
        // A store written before events were journaled gains their generation.
        if connection
            .prepare("SELECT gen FROM run_events LIMIT 0")
            .is_err()
        {
            connection
                .execute_batch("ALTER TABLE run_events ADD COLUMN gen INTEGER NOT NULL DEFAULT 0")
                .map_err(open_error)?;
        }
        Ok(CheckpointStore {
            connection: Arc::new(Mutex::new(Db::Sqlite(connection))),
            path: Some(Arc::new(path.to_path_buf())),
            thread: Arc::default(),
            fences: Arc::default(),
            dsn: None,
            notices: Arc::default(),
        })
    }

    /// Runs `request` on the store's own thread, after every request sent before it; the
    /// request is sent now, the future is its answer. How an actor (or any async code)
    /// reads or writes the store without blocking its thread.
    pub fn call<T: Send + 'static>(
        &self,
        request: impl FnOnce(&CheckpointStore) -> Result<T, CheckpointError> + Send + 'static,
    ) -> BoxFuture<'static, Result<T, CheckpointError>> {
        let thread = self.thread.get_or_init(|| {
            // The thread's own store has no thread: it holds no sender to itself, so
            // the thread ends once the last store handle outside it is gone.
            StoreThread::spawn(CheckpointStore {
                connection: Arc::clone(&self.connection),
                path: self.path.clone(),
                thread: Arc::default(),
                fences: Arc::clone(&self.fences),
                dsn: self.dsn.clone(),
                notices: Arc::clone(&self.notices),
            })
        });
        thread
            .call(request)
            .map(|answer| answer.unwrap_or(Err(CheckpointError::ThreadGone)))
            .boxed()
    }

    /// SQLite opens a file it cannot write (a volume read-only at that moment) read-only,
    /// and such a connection never writes again, even once the volume can be written:
    /// after a read-only error, a new connection replaces it when the file can be opened
    /// for writing now. Returns whether it did (never, on PostgreSQL).
    pub fn reopen_if_read_only(&self) -> bool {
        let Some(path) = &self.path else {
            return false;
        };
        let mut db = self.db();
        let Db::Sqlite(connection) = &mut *db else {
            return false;
        };
        if !connection.is_readonly(rusqlite::MAIN_DB).unwrap_or(false) {
            return false;
        }
        let Ok(fresh) = Connection::open(path.as_path()) else {
            return false;
        };
        if fresh.is_readonly(rusqlite::MAIN_DB).unwrap_or(true)
            || fresh.busy_timeout(BUSY_TIMEOUT).is_err()
            || fresh.pragma_update(None, "journal_mode", "WAL").is_err()
            || fresh.pragma_update(None, "synchronous", "NORMAL").is_err()
            || fresh.pragma_update(None, "cache_size", CACHE_KIB).is_err()
        {
            return false;
        }
        *connection = fresh;
        tracing::info!(path = %path.display(), "runs database opened again for writing");
        true
    }

    /// The connection; a panic elsewhere while holding it leaves the database consistent
    /// (each write is one statement or transaction), so a poisoned lock is taken over.
    fn db(&self) -> MutexGuard<'_, Db> {
        self.connection
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// From now on the run's journal writes (checkpoints, status, outputs snapshot,
    /// receipt) are fenced by `epoch`, the lease this lead holds it at: on PostgreSQL each
    /// first reads the run's lease row `FOR SHARE` (so it is ordered with a takeover's
    /// acquire, which waits for it) and is refused with [`CheckpointError::Fenced`] when a
    /// newer epoch holds the run; after one refusal every write of the run is refused.
    pub fn fence_run(&self, run_id: &str, epoch: u64) {
        self.fences.insert(run_id.to_owned(), Fence::Held(epoch));
    }

    /// The run is no longer written under a lease by this lead (it ended, or was released).
    pub fn unfence_run(&self, run_id: &str) {
        self.fences.remove(run_id);
    }

    /// The run is lost to a newer lead: its writes are refused from now on.
    pub fn lose_run(&self, run_id: &str) {
        self.fences.insert(run_id.to_owned(), Fence::Lost);
    }

    /// Whether a write of the run was refused (or the run declared lost) since it was fenced.
    pub fn is_lost(&self, run_id: &str) -> bool {
        self.fences
            .get(run_id)
            .is_some_and(|f| matches!(*f, Fence::Lost))
    }

    /// Runs `write` (several statements) for `run_id` in one transaction, fenced by its
    /// lease's epoch when it has one (see [`CheckpointStore::fence_run`]): after the check,
    /// in that transaction, on PostgreSQL.
    fn fenced_write<T>(
        &self,
        run_id: &str,
        write: impl FnOnce(&mut Db) -> Result<T, CheckpointError>,
    ) -> Result<T, CheckpointError> {
        let fence = self.fences.get(run_id).map(|f| *f);
        let mut db = self.db();
        match fence {
            Some(Fence::Lost) => Err(CheckpointError::Fenced(run_id.to_owned())),
            Some(Fence::Held(epoch)) if db.dialect() == Dialect::Postgres => {
                let refused = db.transaction(|tx| {
                    let newer = tx.query(
                        "SELECT 1 FROM run_leases WHERE run_id = ?1 AND epoch > ?2 FOR SHARE",
                        args![run_id, epoch as i64],
                    )?;
                    if !newer.is_empty() {
                        return Err(CheckpointError::Fenced(run_id.to_owned()));
                    }
                    write(tx)
                });
                if matches!(refused, Err(CheckpointError::Fenced(_))) {
                    self.fences.insert(run_id.to_owned(), Fence::Lost);
                }
                refused
            }
            _ => db.transaction(write),
        }
    }

    /// Writes one row of `run_id` unless its key is there (`ON CONFLICT (key) DO NOTHING`),
    /// fenced like [`CheckpointStore::fenced_write`]; on PostgreSQL the check is part of the
    /// insert (it reads the lease row `FOR SHARE`, as [`CheckpointStore::append_events`]
    /// does): one statement, where a transaction around the check and the insert took four
    /// round trips. Whether the row was written (`false`: it was there).
    fn insert_once(&self, run_id: &str, row: OnceRow) -> Result<bool, CheckpointError> {
        let fence = self.fences.get(run_id).map(|f| *f);
        let mut db = self.db();
        let epoch = match fence {
            Some(Fence::Lost) => return Err(CheckpointError::Fenced(run_id.to_owned())),
            Some(Fence::Held(epoch)) if db.dialect() == Dialect::Postgres => epoch,
            _ => {
                let (sql, args) = row.statement(run_id, None);
                return Ok(db.execute(&sql, &args)? == 1);
            }
        };
        let (sql, args) = row.statement(run_id, Some(epoch));
        if db.execute(&sql, &args)? == 1 {
            return Ok(true);
        }
        // Nothing written: the row was there, or a newer epoch holds the run.
        if !newer_epoch_holds(&mut db, run_id, epoch)? {
            return Ok(false);
        }
        self.fences.insert(run_id.to_owned(), Fence::Lost);
        Err(CheckpointError::Fenced(run_id.to_owned()))
    }

    /// Writes a run's journaled events, several rows a statement; an event already written
    /// (a write tried again) is left as it is. With `fence` (the lease epoch the writer holds
    /// the run at, PostgreSQL), a statement writes nothing once a newer epoch holds the run's
    /// lease: it reads the lease row `FOR SHARE`, so it is ordered with a takeover's acquire
    /// (which waits for it) and a lead that lost the run writes no event after its new
    /// owner's. Whether the events were written (`false`: fenced).
    pub fn append_events(
        &self,
        run_id: &str,
        events: &[(EventId, std::sync::Arc<str>)],
        fence: Option<u64>,
    ) -> Result<bool, CheckpointError> {
        let mut db = self.db();
        let dialect = db.dialect();
        let fence = fence.filter(|_| dialect == Dialect::Postgres);
        for chunk in events.chunks(EVENT_ROWS_PER_STATEMENT) {
            let (sql, args) = insert_events(dialect, run_id, chunk, fence);
            let written = match dialect {
                Dialect::Sqlite => db.execute(&sql, &args)?,
                // Streams of the run on other leads read it when this commits.
                Dialect::Postgres => db
                    .query_one(&notices::notifying(&sql), &args)?
                    .i64(0)?
                    .max(0) as u64,
            };
            if let Some(epoch) = fence.filter(|_| written == 0) {
                // Nothing written: the rows were there already, or a newer epoch holds it.
                if newer_epoch_holds(&mut db, run_id, epoch)? {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// The events kept for `run_id`, in order.
    pub fn events(&self, run_id: &str) -> Result<Vec<(EventId, String)>, CheckpointError> {
        self.events_after(run_id, None, i64::MAX as u64)
    }

    /// Up to `limit` of the events kept for `run_id` after `after` (`None`: from the
    /// first), in order.
    pub fn events_after(
        &self,
        run_id: &str,
        after: Option<EventId>,
        limit: u64,
    ) -> Result<Vec<(EventId, String)>, CheckpointError> {
        let (gen, seq) = after.map_or((-1, -1), |a| (a.gen as i64, a.seq as i64));
        self.db()
            .query(
                "SELECT gen, seq, event FROM run_events
                 WHERE run_id = ?1 AND (gen > ?2 OR (gen = ?2 AND seq > ?3))
                 ORDER BY gen, seq LIMIT ?4",
                args![run_id, gen, seq, limit.min(i64::MAX as u64) as i64],
            )?
            .iter()
            .map(|r| {
                Ok((
                    EventId {
                        gen: r.i64(0)?.max(0) as u64,
                        seq: r.i64(1)?.max(0) as u64,
                    },
                    r.str(2)?,
                ))
            })
            .collect()
    }

    /// The id of the last event kept for `run_id` (`None`: none is).
    pub fn last_event(&self, run_id: &str) -> Result<Option<EventId>, CheckpointError> {
        let rows = self.db().query(
            "SELECT gen, seq FROM run_events WHERE run_id = ?1 ORDER BY gen DESC, seq DESC LIMIT 1",
            args![run_id],
        )?;
        rows.first()
            .map(|r| {
                Ok(EventId {
                    gen: r.i64(0)?.max(0) as u64,
                    seq: r.i64(1)?.max(0) as u64,
                })
            })
            .transpose()
    }

    /// Keeps an mcp-host replica's sealed OAuth credential when it is newer than the one
    /// kept (the lead cannot open it); whether it was.
    pub fn keep_credential(
        &self,
        c: &antler_protocol::messages::SealedCredential,
    ) -> Result<bool, CheckpointError> {
        let changed = self.db().execute(
            "INSERT INTO mcp_credentials (server, user_id, updated_ms, sealed) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT(server, user_id) DO UPDATE SET updated_ms = excluded.updated_ms, sealed = excluded.sealed
             WHERE excluded.updated_ms > mcp_credentials.updated_ms",
            args![&c.server, &c.user, c.updated_ms as i64, c.sealed.clone()],
        )?;
        Ok(changed > 0)
    }

    /// Every sealed credential kept, for a replica that connects.
    pub fn credentials(
        &self,
    ) -> Result<Vec<antler_protocol::messages::SealedCredential>, CheckpointError> {
        self.db()
            .query(
                "SELECT server, user_id, updated_ms, sealed FROM mcp_credentials",
                args![],
            )?
            .iter()
            .map(|r| {
                Ok(antler_protocol::messages::SealedCredential {
                    server: r.str(0)?,
                    user: r.str(1)?,
                    updated_ms: r.i64(2)?.max(0) as u64,
                    sealed: r.opt_bytes(3)?,
                })
            })
            .collect()
    }

    /// The write [`probe_writes`] makes.
    pub fn probe_write(&self) -> Result<(), CheckpointError> {
        let now = now_ms() / 1000;
        self.db().execute(
            "INSERT INTO write_probe (id, at) VALUES (1, ?1)
             ON CONFLICT(id) DO UPDATE SET at = excluded.at",
            args![now],
        )?;
        Ok(())
    }

    /// Records a new run with its initial state as step 0.
    pub fn create_run(
        &self,
        record: &RunRecord,
        initial: &ThreadState,
    ) -> Result<(), CheckpointError> {
        self.create_run_encoded(record, &serde_json::to_string(initial)?)
    }

    /// [`CheckpointStore::create_run`] with the state already encoded.
    fn create_run_encoded(&self, record: &RunRecord, state: &str) -> Result<(), CheckpointError> {
        let options = serde_json::to_string(&RunOptions {
            agent: record.agent.clone(),
            bootstrap: record.bootstrap,
            non_interactive: record.non_interactive,
            subagents: record.subagents,
            role: record.role.clone(),
        })?;
        self.db().transaction(|tx| {
            tx.execute(
                "INSERT INTO runs (run_id, user_id, thread_id, task, model, status, detail,
                                   clarification, options, started_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                args![
                    &record.run_id,
                    &record.user_id,
                    &record.thread_id,
                    &record.task,
                    &record.model,
                    record.status.as_str(),
                    &record.detail,
                    record.clarification,
                    options,
                    now_ms(),
                ],
            )?;
            tx.execute(
                "INSERT INTO checkpoints (run_id, step, state) VALUES (?1, 0, ?2)",
                args![&record.run_id, state],
            )?;
            Ok(())
        })
    }

    /// Stores the state after `step`. Returns `false` when that step was already stored
    /// (the earlier row is kept).
    pub fn save(
        &self,
        run_id: &str,
        step: i64,
        state: &ThreadState,
    ) -> Result<bool, CheckpointError> {
        self.save_encoded(run_id, step, &serde_json::to_string(state)?)
    }

    /// [`CheckpointStore::save`] with the state already encoded.
    fn save_encoded(&self, run_id: &str, step: i64, state: &str) -> Result<bool, CheckpointError> {
        self.insert_once(
            run_id,
            OnceRow {
                table: "checkpoints",
                columns: &[("step", "bigint"), ("state", "text")],
                key: "run_id, step",
                values: vec![step.into(), state.into()],
            },
        )
    }

    /// The last stored step of a run and its state.
    pub fn latest(&self, run_id: &str) -> Result<Option<(i64, ThreadState)>, CheckpointError> {
        let row = self.db().query_opt(
            "SELECT step, state FROM checkpoints WHERE run_id = ?1
             ORDER BY step DESC LIMIT 1",
            args![run_id],
        )?;
        let Some(row) = row else {
            return Ok(None);
        };
        let (step, text) = (row.i64(0)?, row.str(1)?);
        serde_json::from_str(&text)
            .map(|state| Some((step, state)))
            .map_err(|source| CheckpointError::Decode {
                run_id: run_id.to_owned(),
                step,
                source,
            })
    }

    /// Sets a run's status (and its error or interrupt text).
    pub fn set_status(
        &self,
        run_id: &str,
        status: RunStatus,
        detail: Option<&str>,
    ) -> Result<(), CheckpointError> {
        // A run that ends records when; one driven again has not ended.
        let ended = matches!(status, RunStatus::Success | RunStatus::Error).then(now_ms);
        let body = |tx: &mut Db| {
            let changed = tx.execute(
                "UPDATE runs SET status = ?2, detail = ?3, ended_ms = ?4 WHERE run_id = ?1",
                args![run_id, status.as_str(), detail, ended],
            )?;
            if changed == 0 {
                return Err(CheckpointError::UnknownRun(run_id.to_owned()));
            }
            // The run's thread follows it (its state, title and status at every end).
            threads::on_run_status(tx, run_id, status)?;
            // Streams of the run on other leads read it when this commits.
            if tx.dialect() == Dialect::Postgres {
                tx.execute(notices::NOTIFY, args![run_id])?;
            }
            Ok(())
        };
        self.fenced_write(run_id, body)
    }

    /// Records the outputs as they were when the run started (the first write wins).
    pub fn save_outputs_snapshot(
        &self,
        run_id: &str,
        snapshot: &OutputsSnapshot,
    ) -> Result<(), CheckpointError> {
        let snapshot = serde_json::to_string(snapshot)?;
        self.insert_once(
            run_id,
            OnceRow {
                table: "outputs_snapshots",
                columns: &[("snapshot", "text")],
                key: "run_id",
                values: vec![snapshot.into()],
            },
        )?;
        Ok(())
    }

    /// The outputs as they were when the run started.
    pub fn outputs_snapshot(
        &self,
        run_id: &str,
    ) -> Result<Option<OutputsSnapshot>, CheckpointError> {
        self.json_row(
            "SELECT snapshot FROM outputs_snapshots WHERE run_id = ?1",
            run_id,
        )
    }

    /// Writes the run's delivery receipt unless it has one; `false` when it had.
    pub fn put_receipt_if_absent(
        &self,
        run_id: &str,
        receipt: &DeliveryReceipt,
    ) -> Result<bool, CheckpointError> {
        let receipt = serde_json::to_string(receipt)?;
        self.insert_once(
            run_id,
            OnceRow {
                table: "receipts",
                columns: &[("receipt", "text")],
                key: "run_id",
                values: vec![receipt.into()],
            },
        )
    }

    /// The run's delivery receipt.
    pub fn receipt(&self, run_id: &str) -> Result<Option<DeliveryReceipt>, CheckpointError> {
        self.json_row("SELECT receipt FROM receipts WHERE run_id = ?1", run_id)
    }

    fn json_row<T: serde::de::DeserializeOwned>(
        &self,
        sql: &str,
        run_id: &str,
    ) -> Result<Option<T>, CheckpointError> {
        let Some(row) = self.db().query_opt(sql, args![run_id])? else {
            return Ok(None);
        };
        serde_json::from_str(&row.str(0)?)
            .map(Some)
            .map_err(|source| CheckpointError::Decode {
                run_id: run_id.to_owned(),
                step: -1,
                source,
            })
    }

    /// A run's record.
    pub fn run(&self, run_id: &str) -> Result<Option<RunRecord>, CheckpointError> {
        self.db()
            .query_opt(&format!("{SELECT_RUN} WHERE run_id = ?1"), args![run_id])?
            .map(|row| record(&row))
            .transpose()
    }

    /// The ids of `user`'s runs in `status` (read from the runs table alone: no checkpoint
    /// is read).
    pub fn run_ids(&self, user: &str, status: RunStatus) -> Result<Vec<String>, CheckpointError> {
        self.db()
            .query(
                "SELECT run_id FROM runs WHERE user_id = ?1 AND status = ?2",
                args![user, status.as_str()],
            )?
            .iter()
            .map(|r| r.str(0))
            .collect()
    }

    /// What the runs list shows of the newest `limit` runs (of `user`, with `status`):
    /// the record, when it started and ended, the tokens and tool calls of its last
    /// checkpoint, and its delivery receipt. Read by the database's JSON functions, so no
    /// state is decoded here.
    pub fn list_summaries(
        &self,
        user: Option<&str>,
        status: Option<RunStatus>,
        limit: usize,
    ) -> Result<Vec<RunSummary>, CheckpointError> {
        let mut db = self.db();
        let (tokens, tool_calls) = match db.dialect() {
            Dialect::Sqlite => (
                "json_extract(c.state, '$.token_usage.total_tokens')",
                "(SELECT COUNT(*) FROM json_each(c.state, '$.messages') m,
                                       json_each(m.value, '$.tool_calls'))",
            ),
            Dialect::Postgres => (
                "(c.state::jsonb #>> '{token_usage,total_tokens}')::numeric::bigint",
                "(SELECT COUNT(*) FROM jsonb_array_elements(CASE
                      WHEN jsonb_typeof(c.state::jsonb -> 'messages') = 'array'
                      THEN c.state::jsonb -> 'messages' ELSE '[]'::jsonb END) m,
                  jsonb_array_elements(CASE WHEN jsonb_typeof(m -> 'tool_calls') = 'array'
                      THEN m -> 'tool_calls' ELSE '[]'::jsonb END) t)",
            ),
        };
        let sql = format!(
            "SELECT r.run_id, r.user_id, r.thread_id, r.task, r.model, r.status, r.detail,
                    r.clarification, r.options, r.started_ms, r.ended_ms,
                    {tokens}, {tool_calls},
                    (SELECT receipt FROM receipts WHERE run_id = r.run_id)
             FROM runs r
             LEFT JOIN checkpoints c ON c.run_id = r.run_id
                 AND c.step = (SELECT MAX(step) FROM checkpoints WHERE run_id = r.run_id)
             WHERE (CAST(?1 AS TEXT) IS NULL OR r.user_id = ?1)
               AND (CAST(?2 AS TEXT) IS NULL OR r.status = ?2)
             ORDER BY r.rowid DESC LIMIT ?3"
        );
        let max = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = db.query(&sql, args![user, status.map(|s| s.as_str()), max])?;
        rows.iter()
            .map(|row| {
                Ok(RunSummary {
                    record: record(row)?,
                    started_ms: row.opt_i64(9)?,
                    ended_ms: row.opt_i64(10)?,
                    total_tokens: row.opt_i64(11)?.map(|t| t.max(0) as u64),
                    tool_calls: row.opt_i64(12)?.map(|t| t.max(0) as u64).unwrap_or(0),
                    delivery: row.opt_str(13)?.and_then(|r| serde_json::from_str(&r).ok()),
                })
            })
            .collect()
    }

    /// The runs still `running` (interrupted by a crash), in run id order: the lead
    /// resumes these when it starts.
    pub fn in_progress(&self) -> Result<Vec<RunRecord>, CheckpointError> {
        self.db()
            .query(
                &format!("{SELECT_RUN} WHERE status = 'running' ORDER BY run_id"),
                args![],
            )?
            .iter()
            .map(record)
            .collect()
    }
}

/// One row of the runs list.
#[derive(Debug, Clone)]
pub struct RunSummary {
    pub record: RunRecord,
    pub started_ms: Option<i64>,
    pub ended_ms: Option<i64>,
    pub total_tokens: Option<u64>,
    pub tool_calls: u64,
    pub delivery: Option<DeliveryReceipt>,
}

/// Now, in Unix milliseconds, as the store keeps times.
fn now_ms() -> i64 {
    antler_protocol::sys::unix_ms() as i64
}

const SELECT_RUN: &str =
    "SELECT run_id, user_id, thread_id, task, model, status, detail, clarification, options FROM runs";

/// A run's record from a row whose first columns are [`SELECT_RUN`]'s.
fn record(row: &Row) -> Result<RunRecord, CheckpointError> {
    let run_id = row.str(0)?;
    let status = row.str(5)?;
    // Options this version does not know are ignored; unreadable ones are the defaults.
    let options: RunOptions = serde_json::from_str(&row.str(8)?).unwrap_or_default();
    let status = RunStatus::parse(&status)
        .ok_or_else(|| CheckpointError::Status(run_id.clone(), status.clone()))?;
    Ok(RunRecord {
        run_id,
        user_id: row.str(1)?,
        thread_id: row.str(2)?,
        task: row.str(3)?,
        model: row.str(4)?,
        status,
        detail: row.opt_str(6)?,
        clarification: row.bool(7)?,
        agent: options.agent,
        bootstrap: options.bootstrap,
        non_interactive: options.non_interactive,
        subagents: options.subagents,
        role: options.role,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use antler_engine::{ActiveSkill, Message, SkillSource, StateUpdate};

    pub(super) fn record(run_id: &str) -> RunRecord {
        RunRecord {
            run_id: run_id.into(),
            user_id: "u1".into(),
            thread_id: "t1".into(),
            task: "write a report".into(),
            model: "scripted:play.yaml".into(),
            status: RunStatus::Running,
            detail: None,
            clarification: false,
            agent: Some("writer".into()),
            bootstrap: true,
            non_interactive: true,
            subagents: true,
            role: Some("member".into()),
        }
    }

    #[test]
    fn a_connection_opened_read_only_is_replaced_once_the_file_can_be_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.sqlite");
        let store = CheckpointStore::open(&path).unwrap();
        store
            .create_run(&record("run-1"), &ThreadState::new("write"))
            .unwrap();
        // As SQLite does when the file cannot be written at open: a read-only connection.
        *store.db() = Db::Sqlite(
            Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap(),
        );
        let refused = store
            .set_status("run-1", RunStatus::Success, None)
            .unwrap_err();
        assert!(refused.is_read_only() && refused.is_storage(), "{refused}");
        assert!(store.reopen_if_read_only());
        assert!(
            !store.reopen_if_read_only(),
            "a writable connection is kept"
        );
        store.set_status("run-1", RunStatus::Success, None).unwrap();
        assert_eq!(
            store.run("run-1").unwrap().unwrap().status,
            RunStatus::Success
        );
    }

    #[test]
    fn the_runs_list_summarises_each_run_from_its_last_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(&dir.path().join("runs.sqlite")).unwrap();
        store
            .create_run(&record("run-1"), &ThreadState::new("write"))
            .unwrap();
        store
            .create_run(&record("run-2"), &ThreadState::new("write"))
            .unwrap();
        store
            .save_encoded(
                "run-1",
                1,
                r#"{"messages": [{"role": "assistant", "tool_calls": [{"id": "a"}, {"id": "b"}]},
                                 {"role": "tool", "tool_call_id": "a"},
                                 {"role": "assistant", "tool_calls": [{"id": "c"}]}],
                    "token_usage": {"input_tokens": 30, "output_tokens": 12, "total_tokens": 42}}"#,
            )
            .unwrap();
        store
            .put_receipt_if_absent(
                "run-1",
                &DeliveryReceipt::settle(&["/mnt/user-data/outputs/r.md".into()], &[]),
            )
            .unwrap();
        store.set_status("run-1", RunStatus::Success, None).unwrap();
        let list = store.list_summaries(None, None, 10).unwrap();
        assert_eq!(list.len(), 2);
        // Newest first: run-2 has not ended and has no receipt.
        assert_eq!(list[0].record.run_id, "run-2");
        assert!(list[0].started_ms.is_some() && list[0].ended_ms.is_none());
        assert_eq!(list[0].tool_calls, 0);
        assert!(list[0].delivery.is_none());
        let one = &list[1];
        assert_eq!(one.record.model, "scripted:play.yaml");
        assert_eq!(one.total_tokens, Some(42));
        assert_eq!(one.tool_calls, 3);
        assert_eq!(one.delivery.as_ref().map(|d| d.presented), Some(1));
        let (from, to) = (one.started_ms.unwrap(), one.ended_ms.unwrap());
        assert!(to >= from, "{from} {to}");
        // Filters apply as in the plain list.
        assert_eq!(
            store
                .list_summaries(None, Some(RunStatus::Success), 10)
                .unwrap()
                .len(),
            1
        );
        assert!(store
            .list_summaries(Some("u2"), None, 10)
            .unwrap()
            .is_empty());
        // Driven again, it has not ended.
        store.set_status("run-1", RunStatus::Running, None).unwrap();
        let again = store
            .list_summaries(None, Some(RunStatus::Running), 10)
            .unwrap();
        assert!(again.iter().all(|s| s.ended_ms.is_none()));
    }

    #[test]
    fn steps_survive_reopening_the_file_and_resume_from_the_last() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/checkpoints.sqlite");
        let mut state = ThreadState::new("write a report");
        {
            let store = CheckpointStore::open(&path).unwrap();
            store.create_run(&record("run-1"), &state).unwrap();
            state
                .apply(StateUpdate {
                    artifacts: vec!["/mnt/user-data/outputs/r.md".into()],
                    ..StateUpdate::default()
                })
                .unwrap();
            assert!(store.save("run-1", 1, &state).unwrap());
        }
        let store = CheckpointStore::open(&path).unwrap();
        assert_eq!(store.latest("run-1").unwrap(), Some((1, state.clone())));
        assert_eq!(store.run("run-1").unwrap(), Some(record("run-1")));
        assert_eq!(store.latest("nope").unwrap(), None);
        assert_eq!(store.run("nope").unwrap(), None);
    }

    #[test]
    fn a_step_is_written_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(&dir.path().join("c.sqlite")).unwrap();
        let first = ThreadState::new("task");
        store.create_run(&record("run-1"), &first).unwrap();
        let mut second = first.clone();
        second
            .apply(StateUpdate::messages([Message::human("more")]))
            .unwrap();
        assert!(store.save("run-1", 1, &second).unwrap());
        assert!(!store.save("run-1", 1, &first).unwrap());
        assert_eq!(store.latest("run-1").unwrap(), Some((1, second)));
    }

    #[test]
    fn runs_still_running_are_listed_for_resumption() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(&dir.path().join("c.sqlite")).unwrap();
        for id in ["run-b", "run-a", "run-c"] {
            store
                .create_run(&record(id), &ThreadState::new("t"))
                .unwrap();
        }
        store
            .set_status("run-c", RunStatus::Error, Some("model failed"))
            .unwrap();
        let running: Vec<String> = store
            .in_progress()
            .unwrap()
            .into_iter()
            .map(|r| r.run_id)
            .collect();
        assert_eq!(running, ["run-a", "run-b"]);
        let ended = store.run("run-c").unwrap().unwrap();
        assert_eq!(
            (ended.status, ended.detail.as_deref()),
            (RunStatus::Error, Some("model failed"))
        );
        assert_eq!(
            store
                .set_status("ghost", RunStatus::Success, None)
                .unwrap_err()
                .to_string(),
            "checkpoint store: no run ghost"
        );
    }

    #[test]
    fn the_receipt_is_written_once_and_the_start_snapshot_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(&dir.path().join("c.sqlite")).unwrap();
        store
            .create_run(&record("run-1"), &ThreadState::new("t"))
            .unwrap();
        let mut snapshot = OutputsSnapshot::default();
        snapshot
            .files
            .insert("/mnt/user-data/outputs/a.md".into(), (1, 2));
        store.save_outputs_snapshot("run-1", &snapshot).unwrap();
        store
            .save_outputs_snapshot("run-1", &OutputsSnapshot::default())
            .unwrap();
        assert_eq!(store.outputs_snapshot("run-1").unwrap(), Some(snapshot));
        let first = DeliveryReceipt::settle(&["/mnt/user-data/outputs/a.md".into()], &[]);
        let second = DeliveryReceipt::settle(&[], &[]);
        assert!(store.put_receipt_if_absent("run-1", &first).unwrap());
        assert!(!store.put_receipt_if_absent("run-1", &second).unwrap());
        assert_eq!(store.receipt("run-1").unwrap(), Some(first));
        assert_eq!(store.receipt("run-2").unwrap(), None);
    }

    #[test]
    fn a_corrupt_checkpoint_names_the_run_and_step() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sqlite");
        let store = CheckpointStore::open(&path).unwrap();
        store
            .create_run(&record("run-1"), &ThreadState::new("t"))
            .unwrap();
        let raw = Connection::open(&path).unwrap();
        raw.execute(
            "INSERT INTO checkpoints (run_id, step, state) VALUES ('run-1', 1, '{not json')",
            [],
        )
        .unwrap();
        let err = store.latest("run-1").unwrap_err().to_string();
        assert!(
            err.starts_with("checkpoint of run run-1 step 1 does not decode: "),
            "{err}"
        );
    }

    fn active_skill(name: &str, path: &str, source: SkillSource) -> ActiveSkill {
        ActiveSkill {
            name: name.into(),
            path: path.into(),
            source,
        }
    }

    #[test]
    fn active_skills_survive_a_checkpoint_round_trip_and_old_checkpoints_load() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(&dir.path().join("checkpoints.sqlite")).unwrap();
        let mut state = ThreadState::new("/pdf summarise");
        store
            .create_run(
                &RunRecord {
                    run_id: "run-1".into(),
                    user_id: "u1".into(),
                    thread_id: "t1".into(),
                    task: "/pdf summarise".into(),
                    model: "scripted:play.yaml".into(),
                    status: RunStatus::Running,
                    detail: None,
                    clarification: false,
                    agent: None,
                    bootstrap: false,
                    non_interactive: false,
                    subagents: false,
                    role: None,
                },
                &state,
            )
            .unwrap();
        state
            .apply(StateUpdate {
                active_skills: vec![
                    active_skill("pdf", "/mnt/skills/public/pdf/SKILL.md", SkillSource::Slash),
                    active_skill(
                        "charts",
                        "/mnt/skills/custom/charts/SKILL.md",
                        SkillSource::Read,
                    ),
                ],
                ..StateUpdate::default()
            })
            .unwrap();
        store.save("run-1", 1, &state).unwrap();
        let (_, loaded) = store.latest("run-1").unwrap().unwrap();
        assert_eq!(loaded, state);
        let json = serde_json::to_value(&loaded).unwrap();
        assert_eq!(json["active_skills"][0]["source"], "slash");
        assert_eq!(
            json["active_skills"][1]["path"],
            "/mnt/skills/custom/charts/SKILL.md"
        );
        // A checkpoint written before skills could be activated has no such field.
        let mut old = serde_json::to_value(ThreadState::new("task")).unwrap();
        assert!(old.get("active_skills").is_none());
        old.as_object_mut().unwrap().remove("active_skills");
        let old: ThreadState = serde_json::from_value(old).unwrap();
        assert!(old.active_skills.is_empty());
    }
}
