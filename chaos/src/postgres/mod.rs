//! PostgreSQL for the multi-lead chaos mode: a throwaway cluster this command starts
//! ([`server`]) or the database `--pg-dsn` names; the DSN each lead dials (through its
//! [`Forwarder`], with an `application_name` naming the lead's incarnation, so the
//! database can tell which lead wrote what), and this command's own connection, which
//! dials the database straight, never through a forwarder.

mod forwarder;
mod server;

use std::net::{SocketAddr, ToSocketAddrs as _};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use anyhow::Context as _;

pub use forwarder::Forwarder;
use server::Throwaway;

/// The database the leads share.
pub struct Database {
    /// As this command dials it.
    dsn: url::Url,
    /// Where the server listens: what the forwarders dial.
    pub upstream: SocketAddr,
    /// The cluster this command started, when no `--pg-dsn` was given (taken when stopped).
    server: Mutex<Option<Throwaway>>,
}

impl Database {
    /// A throwaway cluster of this command's own, its `postgres` database.
    pub fn throwaway() -> anyhow::Result<Database> {
        let server = Throwaway::start()?;
        let dsn = url::Url::parse(&format!(
            "postgres://postgres@127.0.0.1:{}/postgres",
            server.port
        ))?;
        Ok(Database {
            dsn,
            upstream: SocketAddr::from(([127, 0, 0, 1], server.port)),
            server: Mutex::new(Some(server)),
        })
    }

    /// The database a `postgres://` URL names (its server must take plain connections from
    /// this machine: the forwarders carry TCP, and this command's own client has no TLS).
    pub fn given(dsn: &str) -> anyhow::Result<Database> {
        let parsed = url::Url::parse(dsn)
            .ok()
            .filter(|u| matches!(u.scheme(), "postgres" | "postgresql"))
            .context("--pg-dsn: expected a URL, postgres://user[:password]@host[:port]/database")?;
        let host = parsed.host_str().context("--pg-dsn names no host")?;
        let port = parsed.port().unwrap_or(5432);
        let upstream = (host, port)
            .to_socket_addrs()
            .with_context(|| format!("--pg-dsn: cannot resolve {host}"))?
            .next()
            .with_context(|| format!("--pg-dsn: {host} has no address"))?;
        Ok(Database {
            dsn: parsed,
            upstream,
            server: Mutex::new(None),
        })
    }

    /// The DSN of the same database dialed at `port` of 127.0.0.1 (a forwarder), with
    /// `application_name` set to `name`.
    pub fn via(&self, port: u16, name: &str) -> String {
        let mut dsn = self.dsn.clone();
        // A URL with a host takes any host and port: these cannot fail.
        let _ = dsn.set_host(Some("127.0.0.1"));
        let _ = dsn.set_port(Some(port));
        let kept: Vec<(String, String)> = dsn
            .query_pairs()
            .filter(|(k, _)| k != "application_name")
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        dsn.query_pairs_mut()
            .clear()
            .extend_pairs(kept)
            .append_pair("application_name", name);
        dsn.to_string()
    }

    /// This command's own connection (straight to the server), driven by a task of the
    /// current runtime.
    pub async fn connect(&self) -> anyhow::Result<tokio_postgres::Client> {
        let mut dsn = self.dsn.clone();
        dsn.query_pairs_mut()
            .append_pair("application_name", "antler-chaos")
            .append_pair("connect_timeout", "5");
        let (client, connection) = tokio_postgres::connect(dsn.as_str(), tokio_postgres::NoTls)
            .await
            .context("cannot connect to PostgreSQL")?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(client)
    }

    /// The throwaway cluster's directory, while it runs.
    pub fn server_dir(&self) -> Option<PathBuf> {
        self.server().as_ref().map(|s| s.dir.clone())
    }

    /// Stops the throwaway cluster (its log kept in `log`) and removes its directory; a
    /// given database is left as it is.
    pub fn stop(&self, log: &Path) {
        if let Some(mut server) = self.server().take() {
            server.stop_keeping_log(Some(log));
        }
    }

    fn server(&self) -> std::sync::MutexGuard<'_, Option<Throwaway>> {
        self.server.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
