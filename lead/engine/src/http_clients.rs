//! The process's HTTP clients to model endpoints and web backends, built once per client
//! configuration and shared by every run: building a reqwest client loads and parses the
//! system's CA store, which cost half of the lead's CPU per run when each run built two.
//! A client is keyed by everything its builder is given ([`ClientKind`]); a clone shares
//! the one connection pool. [`clients_built`] counts the builds (the lead's `/metrics`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::Duration;

use reqwest::Client;

/// Redirects a web backend's API client follows.
pub const API_MAX_REDIRECTS: usize = 5;
/// How long a web backend's API client waits for a connection.
const API_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What a shared client is built with: two kinds with the same key share one client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClientKind {
    /// A model endpoint's client (`OpenAiModel`), with its connect timeout.
    Model { connect_timeout: Duration },
    /// The web backends' API client (`ApiClient`).
    WebApi,
}

impl ClientKind {
    fn build(self) -> Result<Client, reqwest::Error> {
        match self {
            ClientKind::Model { connect_timeout } => {
                Client::builder().connect_timeout(connect_timeout).build()
            }
            ClientKind::WebApi => Client::builder()
                .redirect(reqwest::redirect::Policy::limited(API_MAX_REDIRECTS))
                .connect_timeout(API_CONNECT_TIMEOUT)
                .build(),
        }
    }
}

/// One kind's client and how often it was built.
struct Shared {
    client: Client,
    builds: u64,
}

/// The clients built so far, by kind.
static CLIENTS: LazyLock<Mutex<HashMap<ClientKind, Shared>>> = LazyLock::new(Mutex::default);
/// How many clients this process built.
static BUILT: AtomicU64 = AtomicU64::new(0);

/// The process's client of `kind`, built on first use. A build that fails is not kept:
/// the next call tries again.
pub fn shared_client(kind: ClientKind) -> Result<Client, reqwest::Error> {
    if let Some(shared) = clients().get(&kind) {
        return Ok(shared.client.clone());
    }
    // Built outside the lock (no caller waits on another's build): two first uses that
    // race build twice at worst, and the first stored wins.
    let built = kind.build()?;
    BUILT.fetch_add(1, Ordering::Relaxed);
    let mut clients = clients();
    let shared = clients.entry(kind).or_insert(Shared {
        client: built,
        builds: 0,
    });
    shared.builds += 1;
    Ok(shared.client.clone())
}

/// How many HTTP clients this process built (one per [`ClientKind`] in use, however
/// many runs use them).
pub fn clients_built() -> u64 {
    BUILT.load(Ordering::Relaxed)
}

/// How many times a client of `kind` was built in this process (0: none exists).
#[cfg(test)]
pub fn builds_of(kind: ClientKind) -> u64 {
    clients().get(&kind).map_or(0, |shared| shared.builds)
}

fn clients() -> std::sync::MutexGuard<'static, HashMap<ClientKind, Shared>> {
    CLIENTS.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_is_built_once_however_often_it_is_asked_for() {
        // A connect timeout no other test uses: the key is this test's alone.
        let kind = ClientKind::Model {
            connect_timeout: Duration::from_millis(12_345),
        };
        assert_eq!(builds_of(kind), 0);
        for _ in 0..5 {
            shared_client(kind).unwrap();
        }
        assert_eq!(builds_of(kind), 1);
        assert!(clients_built() >= 1);
        let other = ClientKind::Model {
            connect_timeout: Duration::from_millis(12_346),
        };
        assert_eq!(
            builds_of(other),
            0,
            "a kind nobody asked for is never built"
        );
    }
}
