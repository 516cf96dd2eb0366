//! One connection to PostgreSQL from a DSN: tokio-postgres's client, and the task that
//! drives its socket (owned here, aborted when the connection is dropped). Every request
//! has a deadline ([`Postgres::deadline`]), so a stalled or unreachable database is an error
//! after seconds rather than a lead that waits forever. No TLS yet: the connection is
//! plain TCP or a Unix socket (`NoTls`), for a PostgreSQL on a trusted network.

use std::future::Future;
use std::str::FromStr;
use std::time::Duration;

use tokio_postgres::{Client, Config, NoTls};

use super::HaError;

/// The deadline of a request unless [`Postgres::with_deadline`] says otherwise, and of the
/// connect unless the DSN's `connect_timeout` does.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(5);

/// The `application_name` a lead's connections carry unless the DSN names one (it shows
/// in `pg_stat_activity`).
const APPLICATION_NAME: &str = "antler-lead";

/// A connection to PostgreSQL.
pub struct Postgres {
    client: Client,
    /// Drives the connection's socket; ends when the client is dropped or the socket fails.
    driver: tokio::task::JoinHandle<()>,
    deadline: Duration,
}

impl Postgres {
    /// Connects to the PostgreSQL the DSN names (`postgres://user@host:port/db` or
    /// `host=… port=… user=… dbname=…`). Must be called inside a tokio runtime.
    pub async fn connect(dsn: &str) -> Result<Self, HaError> {
        let mut config = Config::from_str(dsn).map_err(HaError::Dsn)?;
        // The DSN's `connect_timeout` bounds the whole connect (socket and handshake), as
        // libpq's does.
        let connect_deadline = match config.get_connect_timeout() {
            Some(deadline) => *deadline,
            None => {
                config.connect_timeout(DEFAULT_DEADLINE);
                DEFAULT_DEADLINE
            }
        };
        if config.get_application_name().is_none() {
            config.application_name(APPLICATION_NAME);
        }
        let (client, connection) = within(connect_deadline, "connect", config.connect(NoTls))
            .await
            .map_err(|e| match e {
                HaError::Query { source, .. } => HaError::Connect(source),
                other => other,
            })?;
        let driver = tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!(error = %e, "the connection to PostgreSQL ended");
            }
        });
        Ok(Self {
            client,
            driver,
            deadline: DEFAULT_DEADLINE,
        })
    }

    /// The same connection with another deadline for each request.
    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// How long a request may wait for its answer.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// Whether the connection is gone (the socket failed or the server ended it); a closed
    /// connection fails every request, and the lead connects again.
    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    pub(super) fn client_mut(&mut self) -> &mut Client {
        &mut self.client
    }

    /// `request` within this connection's deadline.
    pub(crate) async fn within<T>(
        &self,
        what: &'static str,
        request: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, HaError> {
        within(self.deadline, what, request).await
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// `request` within `deadline`: its error or [`HaError::Timeout`].
pub(super) async fn within<T>(
    deadline: Duration,
    what: &'static str,
    request: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, HaError> {
    match tokio::time::timeout(deadline, request).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(source)) => Err(HaError::Query { what, source }),
        Err(_) => Err(HaError::Timeout {
            what,
            after: deadline,
        }),
    }
}
