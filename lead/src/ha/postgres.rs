//! One connection to PostgreSQL from a DSN: tokio-postgres's client, and the task that
//! drives its socket (owned here, aborted when the connection is dropped). Every request
//! has a deadline ([`Postgres::deadline`]), so a stalled or unreachable database is an error
//! after seconds rather than a lead that waits forever. TLS follows the DSN's `sslmode` and
//! `sslrootcert` as libpq reads them ([`super::dsn`], [`super::tls`]).

use std::future::Future;
use std::str::FromStr;
use std::time::Duration;

use tokio_postgres::config::Host;
use tokio_postgres::{Client, Config};

use super::dsn::{self, SslMode};
use super::tls::{self, RustlsConnect};
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
    /// `host=… port=… user=… dbname=…`), with TLS as its `sslmode` says (libpq's default
    /// `prefer`). Must be called inside a tokio runtime. A failure names the hosts and the
    /// reason, never the password.
    pub async fn connect(dsn: &str) -> Result<Self, HaError> {
        Self::connect_with(dsn, None).await
    }

    /// [`Postgres::connect`] whose notifications (`LISTEN`'s, their payloads) go to
    /// `notices` while the connection lives.
    pub async fn connect_listening(
        dsn: &str,
        notices: tokio::sync::mpsc::UnboundedSender<String>,
    ) -> Result<Self, HaError> {
        Self::connect_with(dsn, Some(notices)).await
    }

    async fn connect_with(
        dsn: &str,
        notices: Option<tokio::sync::mpsc::UnboundedSender<String>>,
    ) -> Result<Self, HaError> {
        let (dsn, ssl) = dsn::split(dsn)?;
        let mut config = Config::from_str(&dsn).map_err(|e| HaError::Dsn(dsn_error(&e)))?;
        config.ssl_mode(match ssl.mode {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
                tokio_postgres::config::SslMode::Require
            }
        });
        let tls = RustlsConnect::new(&ssl)?;
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
        let (client, connection) = within(connect_deadline, "connect", config.connect(tls))
            .await
            .map_err(|e| match e {
                HaError::Query { source, .. } => HaError::Connect {
                    hosts: hosts(&config),
                    reason: tls::reason(&source, &ssl),
                    source,
                },
                other => other,
            })?;
        let driver = tokio::spawn(async move {
            let Some(notices) = notices else {
                if let Err(e) = connection.await {
                    tracing::warn!(error = %e, "the connection to PostgreSQL ended");
                }
                return;
            };
            // Polling its messages drives the connection as awaiting it does, and hands
            // over the notifications that awaiting drops.
            let mut connection = connection;
            loop {
                match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                    Some(Ok(tokio_postgres::AsyncMessage::Notification(notice))) => {
                        let _ = notices.send(notice.payload().to_owned());
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "the connection to PostgreSQL ended");
                        return;
                    }
                    None => return,
                }
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

/// tokio-postgres's reason for refusing a DSN, with its cause, credentials masked.
fn dsn_error(error: &tokio_postgres::Error) -> String {
    use std::error::Error as _;
    let text = match error.source() {
        Some(cause) => format!("{error}: {cause}"),
        None => error.to_string(),
    };
    mask_credentials(&text)
}

/// `scheme://user:password@` becomes `scheme://***@`, wherever it is in `text`: from the
/// scheme to the last `@` of the word, so a password holding `/`, `?` or `@` is masked whole.
fn mask_credentials(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c.is_whitespace() || c == '`')
            .unwrap_or(tail.len());
        match tail[..end].rfind('@') {
            Some(cred_end) => {
                out.push_str("***");
                rest = &tail[cred_end..];
            }
            None => rest = tail,
        }
    }
    out.push_str(rest);
    out
}

/// The hosts a DSN names, `host:port` each, for errors.
fn hosts(config: &Config) -> String {
    let ports = config.get_ports();
    config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            match host {
                Host::Tcp(name) => format!("{name}:{port}"),
                Host::Unix(dir) => format!("{}/.s.PGSQL.{port}", dir.display()),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_dsn_shows_no_credentials() {
        assert_eq!(
            mask_credentials("unknown option `me://u:p@ss@h:1/db?x`, and x://h/"),
            "unknown option `me://***@h:1/db?x`, and x://h/"
        );
        assert_eq!(mask_credentials("x://u:pa/s?s@h/db"), "x://***@h/db");
        let err = Config::from_str("antler://user:s3cret@db:5432/x?sslmode=require").unwrap_err();
        let text = dsn_error(&err);
        assert!(!text.contains("s3cret"), "{text}");
        assert!(text.contains("invalid connection string"), "{text}");
    }
}
