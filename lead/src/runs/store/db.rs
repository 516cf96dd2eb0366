//! The runs store's SQL layer, written once for two engines: [`Db`] is SQLite (one file,
//! the default) or PostgreSQL (cluster mode, `antler.store.postgres.dsn`). Statements use
//! `?1`-style placeholders (rewritten to `$1` for PostgreSQL, outside string literals),
//! `INSERT … ON CONFLICT … DO NOTHING/DO UPDATE`, which both accept, and typed [`Param`]s;
//! rows come back as [`Row`]s read by column index. The PostgreSQL client has a
//! current-thread tokio runtime of its own ([`PgLink`]): a caller outside any runtime (the
//! store's thread, the CLI) drives it on its own thread for each statement; a caller inside
//! one hands the statement to the client's thread and waits for its answer, so no caller
//! ever starts a runtime inside another.

use std::collections::HashMap;
use std::sync::{mpsc, Arc, Mutex};

use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::Connection;
use tokio_postgres::types::{to_sql_checked, IsNull, ToSql, Type};

use super::CheckpointError;
use crate::ha::{HaError, Postgres};

/// Which engine a statement runs on, for the few statements written per engine (JSON).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
}

/// One statement parameter (or one column of a row).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Param {
    Null,
    Int(i64),
    Real(f64),
    Bool(bool),
    Text(String),
    Bytes(Vec<u8>),
}

impl From<i64> for Param {
    fn from(v: i64) -> Param {
        Param::Int(v)
    }
}

impl From<f64> for Param {
    fn from(v: f64) -> Param {
        Param::Real(v)
    }
}

impl From<bool> for Param {
    fn from(v: bool) -> Param {
        Param::Bool(v)
    }
}

impl From<&str> for Param {
    fn from(v: &str) -> Param {
        Param::Text(v.to_owned())
    }
}

impl From<String> for Param {
    fn from(v: String) -> Param {
        Param::Text(v)
    }
}

impl From<&String> for Param {
    fn from(v: &String) -> Param {
        Param::Text(v.clone())
    }
}

impl From<Vec<u8>> for Param {
    fn from(v: Vec<u8>) -> Param {
        Param::Bytes(v)
    }
}

impl From<&Vec<u8>> for Param {
    fn from(v: &Vec<u8>) -> Param {
        Param::Bytes(v.clone())
    }
}

impl<T: Into<Param>> From<Option<T>> for Param {
    fn from(v: Option<T>) -> Param {
        v.map_or(Param::Null, Into::into)
    }
}

impl From<&Option<String>> for Param {
    fn from(v: &Option<String>) -> Param {
        v.as_deref().map_or(Param::Null, Param::from)
    }
}

/// A statement's parameters: `args![run_id, step, state]`.
macro_rules! args {
    ($($value:expr),* $(,)?) => {
        &[$($crate::runs::store::db::Param::from($value)),*][..]
    };
}
pub(crate) use args;

impl rusqlite::ToSql for Param {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self {
            Param::Null => ToSqlOutput::Borrowed(ValueRef::Null),
            Param::Int(v) => ToSqlOutput::Borrowed(ValueRef::Integer(*v)),
            Param::Real(v) => ToSqlOutput::Borrowed(ValueRef::Real(*v)),
            Param::Bool(v) => ToSqlOutput::Borrowed(ValueRef::Integer(i64::from(*v))),
            Param::Text(v) => ToSqlOutput::Borrowed(ValueRef::Text(v.as_bytes())),
            Param::Bytes(v) => ToSqlOutput::Borrowed(ValueRef::Blob(v)),
        })
    }
}

impl ToSql for Param {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        let int = |v: i64, out: &mut bytes::BytesMut| {
            if *ty == Type::INT8 {
                v.to_sql(ty, out)
            } else if *ty == Type::INT4 {
                i32::try_from(v)?.to_sql(ty, out)
            } else if *ty == Type::INT2 {
                i16::try_from(v)?.to_sql(ty, out)
            } else if *ty == Type::BOOL {
                (v != 0).to_sql(ty, out)
            } else if *ty == Type::FLOAT8 {
                (v as f64).to_sql(ty, out)
            } else {
                Err(format!("an integer cannot be a {ty} parameter").into())
            }
        };
        match self {
            Param::Null => Ok(IsNull::Yes),
            Param::Int(v) => int(*v, out),
            Param::Real(v) if *ty == Type::FLOAT4 => (*v as f32).to_sql(ty, out),
            Param::Real(v) => v.to_sql(ty, out),
            Param::Bool(v) if *ty == Type::BOOL => v.to_sql(ty, out),
            Param::Bool(v) => int(i64::from(*v), out),
            Param::Text(v) => v.as_str().to_sql(ty, out),
            Param::Bytes(v) => v.as_slice().to_sql(ty, out),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// One row of a query's answer, read by column index.
#[derive(Debug)]
pub(crate) struct Row(Vec<Param>);

impl Row {
    fn at(&self, i: usize) -> Result<&Param, CheckpointError> {
        self.0
            .get(i)
            .ok_or_else(|| CheckpointError::Column(format!("no column {i}")))
    }

    fn mismatch(&self, i: usize, want: &str) -> CheckpointError {
        CheckpointError::Column(format!("column {i} is not {want}: {:?}", self.0.get(i)))
    }

    pub(crate) fn opt_str(&self, i: usize) -> Result<Option<String>, CheckpointError> {
        match self.at(i)? {
            Param::Null => Ok(None),
            Param::Text(v) => Ok(Some(v.clone())),
            _ => Err(self.mismatch(i, "text")),
        }
    }

    pub(crate) fn str(&self, i: usize) -> Result<String, CheckpointError> {
        self.opt_str(i)?.ok_or_else(|| self.mismatch(i, "text"))
    }

    pub(crate) fn opt_i64(&self, i: usize) -> Result<Option<i64>, CheckpointError> {
        match self.at(i)? {
            Param::Null => Ok(None),
            Param::Int(v) => Ok(Some(*v)),
            Param::Real(v) => Ok(Some(*v as i64)),
            Param::Bool(v) => Ok(Some(i64::from(*v))),
            _ => Err(self.mismatch(i, "an integer")),
        }
    }

    pub(crate) fn i64(&self, i: usize) -> Result<i64, CheckpointError> {
        self.opt_i64(i)?
            .ok_or_else(|| self.mismatch(i, "an integer"))
    }

    pub(crate) fn bool(&self, i: usize) -> Result<bool, CheckpointError> {
        Ok(self.i64(i)? != 0)
    }

    pub(crate) fn opt_bytes(&self, i: usize) -> Result<Option<Vec<u8>>, CheckpointError> {
        match self.at(i)? {
            Param::Null => Ok(None),
            Param::Bytes(v) => Ok(Some(v.clone())),
            _ => Err(self.mismatch(i, "bytes")),
        }
    }
}

/// The store's connection: a SQLite file or a link to PostgreSQL.
pub(crate) enum Db {
    Sqlite(Connection),
    Postgres(PgLink),
}

impl Db {
    pub(crate) fn dialect(&self) -> Dialect {
        match self {
            Db::Sqlite(_) => Dialect::Sqlite,
            Db::Postgres(_) => Dialect::Postgres,
        }
    }

    /// Runs a statement; the rows it changed.
    pub(crate) fn execute(&mut self, sql: &str, args: &[Param]) -> Result<u64, CheckpointError> {
        match self {
            Db::Sqlite(c) => {
                let mut statement = c.prepare_cached(sql)?;
                let changed = statement.execute(rusqlite::params_from_iter(args))?;
                Ok(changed as u64)
            }
            Db::Postgres(link) => {
                let (sql, args) = (sql.to_owned(), args.to_vec());
                link.run(move |s| s.execute(&sql, &args))?
            }
        }
    }

    /// Every row a query answers.
    pub(crate) fn query(&mut self, sql: &str, args: &[Param]) -> Result<Vec<Row>, CheckpointError> {
        match self {
            Db::Sqlite(c) => {
                let mut statement = c.prepare_cached(sql)?;
                let columns = statement.column_count();
                let mut rows = statement.query(rusqlite::params_from_iter(args))?;
                let mut answer = Vec::new();
                while let Some(row) = rows.next()? {
                    let mut values = Vec::with_capacity(columns);
                    for i in 0..columns {
                        values.push(match row.get_ref(i)? {
                            ValueRef::Null => Param::Null,
                            ValueRef::Integer(v) => Param::Int(v),
                            ValueRef::Real(v) => Param::Real(v),
                            ValueRef::Text(v) => {
                                Param::Text(String::from_utf8_lossy(v).into_owned())
                            }
                            ValueRef::Blob(v) => Param::Bytes(v.to_vec()),
                        });
                    }
                    answer.push(Row(values));
                }
                Ok(answer)
            }
            Db::Postgres(link) => {
                let (sql, args) = (sql.to_owned(), args.to_vec());
                link.run(move |s| s.query(&sql, &args))?
            }
        }
    }

    /// The first row a query answers, if any.
    pub(crate) fn query_opt(
        &mut self,
        sql: &str,
        args: &[Param],
    ) -> Result<Option<Row>, CheckpointError> {
        Ok(self.query(sql, args)?.into_iter().next())
    }

    /// The first row a query answers; a query that answers none is an error.
    pub(crate) fn query_one(&mut self, sql: &str, args: &[Param]) -> Result<Row, CheckpointError> {
        self.query_opt(sql, args)?
            .ok_or_else(|| CheckpointError::Column("the query answered no row".to_owned()))
    }

    /// Runs `body` in one transaction: committed when it answers `Ok`, rolled back
    /// otherwise (its answer kept either way).
    pub(crate) fn transaction<T, E: From<CheckpointError>>(
        &mut self,
        body: impl FnOnce(&mut Db) -> Result<T, E>,
    ) -> Result<T, E> {
        self.control(match self.dialect() {
            // Takes the write lock at once, so a transaction that reads first cannot
            // deadlock with another writer.
            Dialect::Sqlite => "BEGIN IMMEDIATE",
            Dialect::Postgres => "BEGIN",
        })?;
        match body(self) {
            Ok(value) => {
                if let Err(e) = self.control("COMMIT") {
                    let _ = self.control("ROLLBACK");
                    return Err(e.into());
                }
                Ok(value)
            }
            Err(e) => {
                let _ = self.control("ROLLBACK");
                Err(e)
            }
        }
    }

    fn control(&mut self, sql: &'static str) -> Result<(), CheckpointError> {
        match self {
            Db::Sqlite(c) => Ok(c.execute_batch(sql)?),
            Db::Postgres(link) => link.run(move |s| s.control(sql))?,
        }
    }
}

/// `?1`-style placeholders as PostgreSQL's `$1`, outside string literals.
pub(crate) fn to_postgres(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut quoted = false;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                quoted = !quoted;
                out.push(c);
            }
            '?' if !quoted && chars.peek().is_some_and(char::is_ascii_digit) => out.push('$'),
            _ => out.push(c),
        }
    }
    out
}

/// One request to the PostgreSQL thread: it runs there and sends its own answer.
type PgJob = Box<dyn FnOnce(&mut PgSession) + Send>;

/// A handle to the PostgreSQL client (a current-thread runtime and the connection) and to
/// its thread, which runs the statements of callers inside a runtime; the thread ends, and
/// drops the client, when the handle is dropped.
pub(crate) struct PgLink {
    /// Dropped before `jobs`, so the thread holds the last reference and drops the
    /// runtime there (never inside a caller's runtime).
    session: Arc<Mutex<PgSession>>,
    jobs: mpsc::Sender<PgJob>,
}

impl PgLink {
    /// Starts the thread, connects to `dsn` and brings its schema to the lead's version.
    pub(crate) fn open(dsn: &str) -> Result<PgLink, HaError> {
        let (jobs, queue) = mpsc::channel::<PgJob>();
        let (opened, answer) = mpsc::channel::<Result<Arc<Mutex<PgSession>>, HaError>>();
        let dsn = dsn.to_owned();
        let spawned = std::thread::Builder::new()
            .name("runs-store-pg".to_owned())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = opened.send(Err(HaError::Runtime(e.to_string())));
                        return;
                    }
                };
                let mut session = PgSession {
                    runtime,
                    dsn,
                    connection: None,
                    statements: HashMap::new(),
                    in_transaction: false,
                };
                if let Err(e) = session.connect() {
                    let _ = opened.send(Err(e));
                    return;
                }
                let session = Arc::new(Mutex::new(session));
                if opened.send(Ok(Arc::clone(&session))).is_err() {
                    return;
                }
                for job in queue {
                    job(&mut lock(&session));
                }
            });
        if let Err(e) = spawned {
            return Err(HaError::Runtime(e.to_string()));
        }
        let session = answer
            .recv()
            .map_err(|_| HaError::Runtime("the PostgreSQL thread ended".to_owned()))??;
        Ok(PgLink { session, jobs })
    }

    /// Runs `job` with the client: here, when this thread is in no runtime (a round trip
    /// to PostgreSQL and nothing more), else on the client's thread, waiting for its answer.
    fn run<T: Send + 'static>(
        &self,
        job: impl FnOnce(&mut PgSession) -> T + Send + 'static,
    ) -> Result<T, CheckpointError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Ok(job(&mut lock(&self.session)));
        }
        let (reply, answer) = mpsc::sync_channel(1);
        self.jobs
            .send(Box::new(move |session: &mut PgSession| {
                let _ = reply.send(job(session));
            }))
            .map_err(|_| CheckpointError::ThreadGone)?;
        answer.recv().map_err(|_| CheckpointError::ThreadGone)
    }
}

/// The session, for whoever drives it now (one at a time); a poisoned lock is taken over,
/// as the store's own is: each statement checks the connection first.
fn lock(session: &Mutex<PgSession>) -> std::sync::MutexGuard<'_, PgSession> {
    session
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The PostgreSQL thread's state: its runtime, the connection (made again when it closed,
/// between transactions) and the statements prepared on it.
struct PgSession {
    runtime: tokio::runtime::Runtime,
    dsn: String,
    connection: Option<Postgres>,
    statements: HashMap<String, tokio_postgres::Statement>,
    /// A transaction is open: a connection lost now is not made again until it ends, so
    /// its statements never land outside it.
    in_transaction: bool,
}

impl PgSession {
    fn connect(&mut self) -> Result<(), HaError> {
        let dsn = self.dsn.clone();
        let connection = self.runtime.block_on(async move {
            let mut pg = Postgres::connect(&dsn).await?;
            pg.migrate().await?;
            Ok::<_, HaError>(pg)
        })?;
        self.connection = Some(connection);
        self.statements.clear();
        Ok(())
    }

    /// The connection, made again if it closed outside a transaction.
    fn ensure(&mut self) -> Result<(), HaError> {
        let closed = self.connection.as_ref().is_none_or(Postgres::is_closed);
        if closed && !self.in_transaction {
            self.connection = None;
            self.connect()?;
        }
        Ok(())
    }

    fn statement(&mut self, sql: &str) -> Result<tokio_postgres::Statement, HaError> {
        self.ensure()?;
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let pg = self.connection.as_ref().ok_or(HaError::Closed)?;
        let text = to_postgres(sql);
        let statement = self
            .runtime
            .block_on(pg.within("prepare", pg.client().prepare(&text)))?;
        self.statements.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    fn execute(&mut self, sql: &str, args: &[Param]) -> Result<u64, CheckpointError> {
        let statement = self.statement(sql)?;
        let pg = self.connection.as_ref().ok_or(HaError::Closed)?;
        let refs: Vec<&(dyn ToSql + Sync)> = args.iter().map(|a| a as _).collect();
        Ok(self
            .runtime
            .block_on(pg.within("statement", pg.client().execute(&statement, &refs)))?)
    }

    fn query(&mut self, sql: &str, args: &[Param]) -> Result<Vec<Row>, CheckpointError> {
        let statement = self.statement(sql)?;
        let pg = self.connection.as_ref().ok_or(HaError::Closed)?;
        let refs: Vec<&(dyn ToSql + Sync)> = args.iter().map(|a| a as _).collect();
        let rows = self
            .runtime
            .block_on(pg.within("query", pg.client().query(&statement, &refs)))?;
        rows.iter().map(pg_row).collect()
    }

    fn control(&mut self, sql: &'static str) -> Result<(), CheckpointError> {
        let begin = sql == "BEGIN";
        if begin {
            self.ensure()?;
        }
        let pg = self.connection.as_ref().ok_or(HaError::Closed)?;
        let done = self
            .runtime
            .block_on(pg.within("transaction", pg.client().batch_execute(sql)));
        // Open only once BEGIN succeeded; any other control statement ends it, failed or not.
        self.in_transaction = begin && done.is_ok();
        Ok(done?)
    }
}

/// A PostgreSQL row as the store reads it.
fn pg_row(row: &tokio_postgres::Row) -> Result<Row, CheckpointError> {
    let column = |e: tokio_postgres::Error| CheckpointError::Column(e.to_string());
    let mut values = Vec::with_capacity(row.len());
    for (i, c) in row.columns().iter().enumerate() {
        let ty = c.type_();
        let value = if *ty == Type::INT8 {
            row.try_get::<_, Option<i64>>(i)
                .map_err(column)?
                .map(Param::Int)
        } else if *ty == Type::INT4 {
            row.try_get::<_, Option<i32>>(i)
                .map_err(column)?
                .map(|v| Param::Int(v.into()))
        } else if *ty == Type::INT2 {
            row.try_get::<_, Option<i16>>(i)
                .map_err(column)?
                .map(|v| Param::Int(v.into()))
        } else if *ty == Type::BOOL {
            row.try_get::<_, Option<bool>>(i)
                .map_err(column)?
                .map(Param::Bool)
        } else if *ty == Type::FLOAT8 {
            row.try_get::<_, Option<f64>>(i)
                .map_err(column)?
                .map(Param::Real)
        } else if *ty == Type::FLOAT4 {
            row.try_get::<_, Option<f32>>(i)
                .map_err(column)?
                .map(|v| Param::Real(v.into()))
        } else if *ty == Type::NUMERIC {
            return Err(CheckpointError::Column(format!(
                "column {i} is numeric: cast it to bigint"
            )));
        } else if *ty == Type::BYTEA {
            row.try_get::<_, Option<Vec<u8>>>(i)
                .map_err(column)?
                .map(Param::Bytes)
        } else {
            row.try_get::<_, Option<String>>(i)
                .map_err(column)?
                .map(Param::Text)
        };
        values.push(value.unwrap_or(Param::Null));
    }
    Ok(Row(values))
}

#[cfg(test)]
mod tests {
    use super::to_postgres;

    #[test]
    fn placeholders_become_dollars_outside_literals() {
        assert_eq!(
            to_postgres("SELECT '?1', x FROM t WHERE a = ?1 AND b = ?12 AND c IS NOT NULL"),
            "SELECT '?1', x FROM t WHERE a = $1 AND b = $12 AND c IS NOT NULL"
        );
    }
}
