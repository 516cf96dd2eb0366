//! Where the runs store lives: a SQLite file (the default) or a PostgreSQL database
//! (cluster mode), from `antler.store.postgres.dsn` or the [`STORE_DSN_ENV`] variable that
//! overrides it (a Kubernetes Secret). The DSN holds a password: it is never printed.

use std::path::PathBuf;

/// The environment variable whose DSN overrides `antler.store.postgres.dsn`.
pub const STORE_DSN_ENV: &str = "ANTLER_STORE_DSN";

/// Where the runs store lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreLocation {
    /// One SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL database, shared by several leads.
    Postgres(Dsn),
}

impl StoreLocation {
    /// The store [`STORE_DSN_ENV`] names, else `configured` (`antler.store.postgres.dsn`),
    /// else the SQLite file `sqlite`. An empty DSN is none.
    pub fn resolve(configured: Option<&str>, sqlite: PathBuf) -> StoreLocation {
        let from_env = std::env::var(STORE_DSN_ENV).ok();
        StoreLocation::pick(from_env.as_deref(), configured, sqlite)
    }

    /// [`StoreLocation::resolve`] with the environment's DSN given.
    fn pick(from_env: Option<&str>, configured: Option<&str>, sqlite: PathBuf) -> StoreLocation {
        match given(from_env).or(given(configured)) {
            Some(dsn) => StoreLocation::Postgres(Dsn(dsn.to_owned())),
            None => StoreLocation::Sqlite(sqlite),
        }
    }
}

/// `dsn` unless it is missing or blank.
fn given(dsn: Option<&str>) -> Option<&str> {
    dsn.map(str::trim).filter(|d| !d.is_empty())
}

/// A PostgreSQL DSN; its `Debug` and `Display` never show it (it may hold a password).
#[derive(Clone, PartialEq, Eq)]
pub struct Dsn(String);

impl Dsn {
    pub fn new(dsn: impl Into<String>) -> Dsn {
        Dsn(dsn.into())
    }

    /// The DSN itself, for the connect.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Dsn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Dsn(…)")
    }
}

impl std::fmt::Display for Dsn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the PostgreSQL store (antler.store.postgres.dsn)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_overrides_the_config_and_no_dsn_is_sqlite() {
        let file = PathBuf::from("run/runs.sqlite");
        let pg = |dsn: &str| StoreLocation::Postgres(Dsn::new(dsn));
        assert_eq!(
            StoreLocation::pick(Some("host=env"), Some("host=cfg"), file.clone()),
            pg("host=env")
        );
        assert_eq!(
            StoreLocation::pick(Some(" "), Some("host=cfg"), file.clone()),
            pg("host=cfg")
        );
        assert_eq!(
            StoreLocation::pick(None, Some(""), file.clone()),
            StoreLocation::Sqlite(file.clone())
        );
        let secret = pg("postgres://antler:hunter2@db/antler");
        assert!(!format!("{secret:?}").contains("hunter2"));
    }
}
