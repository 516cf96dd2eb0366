//! The `/mcp` sessions the gateway opened: whose each one is ([`SessionOwners`]: a
//! session belongs to the user that opened it), its [`Released`] latch (carried by its
//! requests, waited on by its `DELETE`), and when it idles out. A session is idle while
//! none of its requests is answering (a long `tools/call` keeps it, however long it
//! takes) and it got no request for the configured idle time
//! (`antler.gateway.mcp_server.session_idle_s`); [`reap`] closes such sessions in rmcp's
//! session manager, which ends them as a `DELETE` would: their runs end, their sandboxes
//! go back to their pools and their threads are free.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::SessionManager as _;

use crate::mcp_server::Released;

/// How often the reaper looks for idle sessions at most (a short idle limit is checked
/// four times per limit).
const REAP_EVERY: Duration = Duration::from_secs(5);

/// A request of a session that is still answering (its response streams); the session
/// is not idle while one lives.
pub struct Busy {
    _held: Arc<()>,
}

/// What a request of an open session carries.
pub struct SessionUse {
    pub released: Released,
    pub busy: Busy,
}

struct Entry {
    user: String,
    seen: Instant,
    released: Released,
    /// One more holder per request still answering.
    busy: Arc<()>,
}

/// The user of each open session, when it was last used and its [`Released`].
#[derive(Default)]
pub struct SessionOwners {
    by_id: HashMap<String, Entry>,
}

impl SessionOwners {
    /// A session opened (or answered) for `user`; the first owner stays.
    pub fn open(&mut self, id: &str, user: &str) {
        let now = Instant::now();
        self.by_id
            .entry(id.to_owned())
            .or_insert_with(|| Entry {
                user: user.to_owned(),
                seen: now,
                released: Released::new(),
                busy: Arc::new(()),
            })
            .seen = now;
    }

    /// The use of `id` by a request when it is `user`'s open session (it is then used
    /// now, and busy while the request answers).
    pub fn touch(&mut self, id: &str, user: &str) -> Option<SessionUse> {
        match self.by_id.get_mut(id) {
            Some(entry) if entry.user == user => {
                entry.seen = Instant::now();
                Some(SessionUse {
                    released: entry.released.clone(),
                    busy: Busy {
                        _held: entry.busy.clone(),
                    },
                })
            }
            _ => None,
        }
    }

    /// The [`Released`] of every open session.
    pub fn released(&self) -> Vec<Released> {
        self.by_id.values().map(|e| e.released.clone()).collect()
    }

    pub fn remove(&mut self, id: &str) {
        self.by_id.remove(id);
    }

    /// The sessions idle for `idle` at `now`, forgotten.
    fn take_idle(&mut self, idle: Duration, now: Instant) -> Vec<String> {
        let expired: Vec<String> = self
            .by_id
            .iter()
            .filter(|(_, e)| Arc::strong_count(&e.busy) == 1 && now.duration_since(e.seen) >= idle)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &expired {
            self.by_id.remove(id);
        }
        expired
    }
}

/// Closes the sessions of `owners` idle for `idle` in `sessions`, until `stop` fires.
/// Runs on the lead's arbiter.
pub async fn reap(
    owners: Arc<Mutex<SessionOwners>>,
    sessions: Arc<LocalSessionManager>,
    idle: Duration,
    stop: tokio_util::sync::CancellationToken,
) {
    let every = (idle / 4).clamp(Duration::from_millis(100), REAP_EVERY);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        let expired = owners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take_idle(idle, Instant::now());
        for id in expired {
            tracing::info!(session = %id, "an MCP session idled out after {idle:?}");
            if let Err(e) = sessions.close_session(&Arc::from(id.as_str())).await {
                tracing::warn!(session = %id, "cannot close an idle MCP session: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_session_is_its_owners_alone_and_unknown_ids_are_refused() {
        let mut owners = SessionOwners::default();
        owners.open("s1", "alice");
        owners.open("s1", "bob");
        assert!(owners.touch("s1", "alice").is_some());
        assert!(owners.touch("s1", "bob").is_none(), "the first owner stays");
        assert!(owners.touch("made-up", "alice").is_none(), "fail closed");
        owners.remove("s1");
        assert!(owners.touch("s1", "alice").is_none());
    }

    #[test]
    fn the_gateway_waits_on_every_open_sessions_latch() {
        let mut owners = SessionOwners::default();
        owners.open("s1", "alice");
        owners.open("s2", "bob");
        assert_eq!(owners.released().len(), 2);
        owners.remove("s2");
        assert_eq!(owners.released().len(), 1);
    }

    #[test]
    fn a_session_idles_out_only_when_no_request_answers() {
        let idle = Duration::from_secs(60);
        let mut owners = SessionOwners::default();
        owners.open("calling", "alice");
        owners.open("quiet", "alice");
        owners.open("recent", "alice");
        let call = owners.touch("calling", "alice").unwrap();
        let later = Instant::now() + idle;
        owners.by_id.get_mut("recent").unwrap().seen = later;
        assert_eq!(owners.take_idle(idle, later), vec!["quiet".to_owned()]);
        assert!(owners.touch("quiet", "alice").is_none(), "forgotten");
        drop(call);
        assert_eq!(owners.take_idle(idle, later), vec!["calling".to_owned()]);
        assert!(owners.touch("recent", "alice").is_some());
    }
}
