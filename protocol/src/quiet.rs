//! Warnings that repeat: a peer refused again and again (a host left on another build by
//! a rolling upgrade, a client with a stale token) would otherwise log the same warning at
//! every redial, for as long as it lasts. The first warning of a kind is logged; repeats
//! within the window go to debug; the next warning after the window says how many were
//! quieted.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

/// How long repeats of one warning stay quiet.
pub const QUIET_WINDOW: Duration = Duration::from_secs(60);
/// Kinds remembered at once; past it the oldest memory is dropped (a storm of distinct
/// reasons is logged, not hidden).
const KINDS: usize = 64;

/// Decides which repeats of a warning are logged. Shared by the tasks that log it.
#[derive(Debug)]
pub struct Quieter {
    window: Duration,
    /// Per kind: when it was last logged, and the repeats quieted since.
    seen: Mutex<HashMap<String, (Instant, u32)>>,
}

impl Default for Quieter {
    fn default() -> Self {
        Self::new(QUIET_WINDOW)
    }
}

impl Quieter {
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// Whether a warning of kind `kind` is logged now: `Some(n)` with the repeats quieted
    /// since it was last logged, `None` when it is a repeat to log at debug only.
    pub fn admit(&self, kind: &str) -> Option<u32> {
        let Ok(mut seen) = self.seen.lock() else {
            return Some(0);
        };
        let now = Instant::now();
        match seen.get_mut(kind) {
            Some((at, quieted)) if now.duration_since(*at) < self.window => {
                *quieted = quieted.saturating_add(1);
                None
            }
            Some((at, quieted)) => {
                let n = *quieted;
                *at = now;
                *quieted = 0;
                Some(n)
            }
            None => {
                if seen.len() >= KINDS {
                    if let Some(oldest) = seen
                        .iter()
                        .min_by_key(|(_, (at, _))| *at)
                        .map(|(k, _)| k.clone())
                    {
                        seen.remove(&oldest);
                    }
                }
                seen.insert(kind.to_owned(), (now, 0));
                Some(0)
            }
        }
    }

    /// Forgets every kind (the condition ended: its next occurrence is news again).
    pub fn clear(&self) {
        if let Ok(mut seen) = self.seen.lock() {
            seen.clear();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_first_of_a_kind_is_logged_repeats_are_quiet_until_the_window_ends() {
        let q = Quieter::new(Duration::from_millis(50));
        assert_eq!(q.admit("schema"), Some(0));
        assert_eq!(q.admit("schema"), None);
        assert_eq!(q.admit("schema"), None);
        // Another kind is news.
        assert_eq!(q.admit("token"), Some(0));
        std::thread::sleep(Duration::from_millis(60));
        // After the window: logged again, saying how many were quiet.
        assert_eq!(q.admit("schema"), Some(2));
        assert_eq!(q.admit("schema"), None);
        q.clear();
        assert_eq!(q.admit("schema"), Some(0));
    }

    #[test]
    fn a_storm_of_distinct_kinds_is_logged() {
        let q = Quieter::new(Duration::from_secs(60));
        for i in 0..(KINDS * 2) {
            assert_eq!(q.admit(&format!("reason {i}")), Some(0));
        }
        assert!(q.seen.lock().unwrap().len() <= KINDS);
    }
}
