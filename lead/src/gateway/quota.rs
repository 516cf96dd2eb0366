//! What one user may take of a shared gateway: submissions per minute (a GCRA limiter
//! keyed by user, from `governor`; with several leads on PostgreSQL, the same GCRA in the
//! database, shared by every lead: `ha::Leases::take_submission`), runs running at once,
//! and open event streams (per lead), each against `antler.gateway.limits`. A user over its own limit gets 429 with `Retry-After`;
//! the operator is not limited. Open streams are counted by a [`StreamSlot`] that gives
//! its place back when the stream is dropped, however it ends; a cap on every user's
//! streams together keeps connections free for everything else (`/health` included).

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use antler_protocol::config::LimitsSection;
use dashmap::DashMap;
use governor::{clock::Clock, DefaultKeyedRateLimiter, Quota};

/// Why a user's request is refused for its own use of the gateway.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverLimit {
    #[error("user {user} submitted more than {per_minute} runs in a minute: retry after {retry_after_s} s")]
    Submissions {
        user: String,
        per_minute: u32,
        retry_after_s: u64,
    },
    #[error("user {user} has {limit} runs running (antler.gateway.limits.concurrent_runs): wait for one to end")]
    ConcurrentRuns { user: String, limit: u32 },
    #[error("user {user} has {limit} event streams open (antler.gateway.limits.event_streams): close one")]
    Streams { user: String, limit: u32 },
    #[error("the gateway has {limit} event streams open: retry later")]
    AllStreams { limit: u32 },
}

impl OverLimit {
    /// Seconds a client should wait before it tries again.
    pub fn retry_after_s(&self) -> u64 {
        match self {
            OverLimit::Submissions { retry_after_s, .. } => (*retry_after_s).max(1),
            OverLimit::ConcurrentRuns { .. } => 5,
            OverLimit::Streams { .. } | OverLimit::AllStreams { .. } => 2,
        }
    }

    /// Whether the cluster as a whole is full (503), not the user over its own share (429).
    pub fn is_cluster_wide(&self) -> bool {
        matches!(self, OverLimit::AllStreams { .. })
    }
}

/// Every user's use of the gateway now.
pub struct Quotas {
    limits: LimitsSection,
    submissions: DefaultKeyedRateLimiter<String>,
    streams: Arc<DashMap<String, u32>>,
    all_streams: Arc<AtomicU32>,
}

impl Quotas {
    pub fn new(limits: &LimitsSection) -> Quotas {
        let per_minute = NonZeroU32::new(limits.submissions_per_minute).unwrap_or(NonZeroU32::MIN);
        Quotas {
            limits: limits.clone(),
            submissions: governor::RateLimiter::keyed(Quota::per_minute(per_minute)),
            streams: Arc::default(),
            all_streams: Arc::default(),
        }
    }

    /// Takes one submission of `user`'s budget.
    pub fn submit(&self, user: &str) -> Result<(), OverLimit> {
        let key = user.to_owned();
        match self.submissions.check_key(&key) {
            Ok(()) => Ok(()),
            Err(not_until) => {
                let wait = not_until.wait_time_from(governor::clock::DefaultClock::default().now());
                Err(OverLimit::Submissions {
                    user: key,
                    per_minute: self.limits.submissions_per_minute,
                    retry_after_s: wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
                })
            }
        }
    }

    /// Takes one submission of `user`'s budget: the budget every lead shares in PostgreSQL
    /// when `shared` (the leases) is given, else this lead's own. A shared budget the
    /// database cannot answer for falls back to this lead's (a lead never refuses for its
    /// database's sake what it would accept alone).
    pub async fn submit_shared(
        &self,
        shared: Option<&crate::ha::Ownership>,
        user: &str,
    ) -> Result<(), OverLimit> {
        let Some(shared) = shared else {
            return self.submit(user);
        };
        let per_minute = self.limits.submissions_per_minute;
        match shared.take_submission(user, per_minute).await {
            Ok(None) => Ok(()),
            Ok(Some(wait)) => Err(OverLimit::Submissions {
                user: user.to_owned(),
                per_minute,
                retry_after_s: wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
            }),
            Err(e) => {
                tracing::warn!(
                    user,
                    "the shared submission budget did not answer; this lead's own counts: {e}"
                );
                self.submit(user)
            }
        }
    }

    /// Refuses a run when `user` already has `running` runs at its limit.
    pub fn concurrent(&self, user: &str, running: usize) -> Result<(), OverLimit> {
        if running >= self.limits.concurrent_runs as usize {
            return Err(OverLimit::ConcurrentRuns {
                user: user.to_owned(),
                limit: self.limits.concurrent_runs,
            });
        }
        Ok(())
    }

    /// A place for one more open stream of `user` (`None`: the operator, counted only
    /// in the gateway's total).
    pub fn open_stream(&self, user: Option<&str>) -> Result<StreamSlot, OverLimit> {
        // Half the connections at most hold streams: the rest stay for other requests.
        let all_limit = (self.limits.connections / 2).max(1);
        let taken = self.all_streams.fetch_add(1, Ordering::AcqRel);
        let mut slot = StreamSlot {
            user: None,
            streams: self.streams.clone(),
            all_streams: self.all_streams.clone(),
        };
        if taken >= all_limit {
            return Err(OverLimit::AllStreams { limit: all_limit });
        }
        let Some(user) = user else {
            return Ok(slot);
        };
        let mut count = self.streams.entry(user.to_owned()).or_insert(0);
        if *count >= self.limits.event_streams {
            return Err(OverLimit::Streams {
                user: user.to_owned(),
                limit: self.limits.event_streams,
            });
        }
        *count += 1;
        drop(count);
        slot.user = Some(user.to_owned());
        Ok(slot)
    }

    /// Open streams now (all users).
    #[cfg(test)]
    fn open(&self) -> u32 {
        self.all_streams.load(Ordering::Acquire)
    }
}

/// One open event stream, counted until dropped.
#[derive(Debug)]
pub struct StreamSlot {
    user: Option<String>,
    streams: Arc<DashMap<String, u32>>,
    all_streams: Arc<AtomicU32>,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.all_streams.fetch_sub(1, Ordering::AcqRel);
        if let Some(user) = &self.user {
            let emptied = match self.streams.get_mut(user) {
                Some(mut count) => {
                    *count = count.saturating_sub(1);
                    *count == 0
                }
                None => false,
            };
            if emptied {
                self.streams.remove_if(user, |_, c| *c == 0);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn limits(per_minute: u32, streams: u32) -> LimitsSection {
        LimitsSection {
            submissions_per_minute: per_minute,
            event_streams: streams,
            concurrent_runs: 2,
            connections: 100,
        }
    }

    #[test]
    fn a_burst_past_the_rate_is_refused_for_that_user_only() {
        let q = Quotas::new(&limits(3, 1));
        for _ in 0..3 {
            q.submit("alice").unwrap();
        }
        let refused = q.submit("alice").unwrap_err();
        assert!(refused.retry_after_s() >= 1, "{refused}");
        assert!(!refused.is_cluster_wide());
        q.submit("bob").unwrap();
    }

    #[test]
    fn streams_are_counted_per_user_and_given_back_when_dropped() {
        let q = Quotas::new(&limits(3, 2));
        let a = q.open_stream(Some("alice")).unwrap();
        let b = q.open_stream(Some("alice")).unwrap();
        assert!(matches!(
            q.open_stream(Some("alice")),
            Err(OverLimit::Streams { .. })
        ));
        let bob = q.open_stream(Some("bob")).unwrap();
        drop(a);
        let c = q.open_stream(Some("alice")).unwrap();
        drop((b, c, bob));
        assert_eq!(q.open(), 0);
        // The gateway's total: half of its connections.
        let held: Vec<_> = (0..50).map(|_| q.open_stream(None).unwrap()).collect();
        assert!(q.open_stream(None).unwrap_err().is_cluster_wide());
        drop(held);
        assert_eq!(q.open(), 0);
    }

    #[test]
    fn concurrent_runs_stop_at_the_limit() {
        let q = Quotas::new(&limits(3, 2));
        q.concurrent("alice", 1).unwrap();
        assert!(q.concurrent("alice", 2).is_err());
    }
}
