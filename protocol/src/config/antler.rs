//! The `antler:` section of `config.yaml`: what is Antler's own and not DeerFlow's (runtime
//! directory, workers, frames, heartbeats, deadlines, draining, the cluster token and the
//! supervisor's restart budget). Every field has a default, so the section may be absent.
//! `check` rejects values the runtime cannot work with (a zero worker count, a zero heartbeat).

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::diagnostics::FieldPath;

/// 16 MiB, the default maximum frame size.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// The keys of `antler:`, for suggestions on a misspelt one.
pub const ANTLER_KEYS: &[&str] = &[
    "runtime_dir",
    "workers",
    "max_frame_bytes",
    "heartbeat_interval_ms",
    "heartbeat_misses",
    "request_timeout_ms",
    "drain_grace_s",
    "cluster_token",
    "listen",
    "restart_max",
    "restart_window_s",
    "playbook_dirs",
];

/// The most subagent workers one local cluster starts.
pub const MAX_WORKERS: usize = 64;

/// Antler's own settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, expecting = "a mapping of Antler settings")]
pub struct AntlerSection {
    /// Where sockets and state live; `None` means the user's runtime or state directory.
    pub runtime_dir: Option<PathBuf>,
    /// Subagent worker processes `antler up` starts.
    pub workers: usize,
    /// The largest frame a peer may send.
    pub max_frame_bytes: usize,
    /// How often peers ping each other.
    pub heartbeat_interval_ms: u64,
    /// Missed heartbeats after which a peer is dead.
    pub heartbeat_misses: u32,
    /// The default deadline of a request across processes.
    pub request_timeout_ms: u64,
    /// How long SIGTERM lets requests in flight finish.
    pub drain_grace_s: u64,
    /// The shared token of TCP cluster mode (`$VAR` reads the environment).
    pub cluster_token: Option<String>,
    /// The TCP address to listen on in cluster mode.
    pub listen: Option<String>,
    /// Crashes within `restart_window_s` after which a child is marked failed.
    pub restart_max: u32,
    /// The window for `restart_max`.
    pub restart_window_s: u64,
    /// Directories whose playbooks `POST /api/runs` may name (`"playbook": "name.yaml"`);
    /// the API reads no other file. Relative entries are relative to config.yaml's directory.
    pub playbook_dirs: Vec<PathBuf>,
}

impl Default for AntlerSection {
    fn default() -> Self {
        Self {
            runtime_dir: None,
            workers: 2,
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            heartbeat_interval_ms: 1000,
            heartbeat_misses: 3,
            request_timeout_ms: 30_000,
            drain_grace_s: 10,
            cluster_token: None,
            listen: None,
            restart_max: 5,
            restart_window_s: 60,
            playbook_dirs: Vec::new(),
        }
    }
}

impl AntlerSection {
    /// The cluster token, if set to a non-empty value (an unset `$VAR` resolves to "").
    pub fn cluster_token(&self) -> Option<&str> {
        self.cluster_token.as_deref().filter(|t| !t.is_empty())
    }

    /// The heartbeat period.
    pub fn heartbeat_interval(&self) -> Duration {
        Duration::from_millis(self.heartbeat_interval_ms)
    }

    /// The default request deadline.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    /// The drain grace period.
    pub fn drain_grace(&self) -> Duration {
        Duration::from_secs(self.drain_grace_s)
    }

    /// The restart-budget window.
    pub fn restart_window(&self) -> Duration {
        Duration::from_secs(self.restart_window_s)
    }

    /// Values the runtime cannot work with, as (path under `antler`, expectation).
    pub(crate) fn check(&self) -> Vec<(FieldPath, &'static str)> {
        let base = FieldPath::root().key("antler");
        let at_least_one = "expected an integer of at least 1";
        let mut problems = Vec::new();
        let mut require = |ok: bool, field: &str, expected: &'static str| {
            if !ok {
                problems.push((base.key(field), expected));
            }
        };
        require(
            (1..=MAX_WORKERS).contains(&self.workers),
            "workers",
            "expected an integer from 1 to 64",
        );
        require(
            self.max_frame_bytes >= 1024,
            "max_frame_bytes",
            "expected an integer of at least 1024",
        );
        require(
            self.heartbeat_interval_ms >= 1,
            "heartbeat_interval_ms",
            at_least_one,
        );
        require(self.heartbeat_misses >= 1, "heartbeat_misses", at_least_one);
        require(
            self.request_timeout_ms >= 1,
            "request_timeout_ms",
            at_least_one,
        );
        require(self.restart_max >= 1, "restart_max", at_least_one);
        require(self.restart_window_s >= 1, "restart_window_s", at_least_one);
        problems
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_issue() {
        let a: AntlerSection = serde_yaml::from_str("{}").unwrap();
        assert_eq!(a, AntlerSection::default());
        assert_eq!(a.workers, 2);
        assert_eq!(a.max_frame_bytes, 16 * 1024 * 1024);
        assert_eq!(a.heartbeat_interval(), Duration::from_secs(1));
        assert_eq!(a.heartbeat_misses, 3);
        assert_eq!(a.request_timeout(), Duration::from_secs(30));
        assert_eq!(a.drain_grace(), Duration::from_secs(10));
        assert_eq!((a.restart_max, a.restart_window_s), (5, 60));
        assert!(a.check().is_empty());
    }

    #[test]
    fn empty_token_counts_as_unset() {
        let a = AntlerSection {
            cluster_token: Some(String::new()),
            ..AntlerSection::default()
        };
        assert_eq!(a.cluster_token(), None);
    }

    #[test]
    fn too_many_workers_is_named() {
        let a = AntlerSection {
            workers: MAX_WORKERS + 1,
            ..AntlerSection::default()
        };
        let problems = a.check();
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].0.to_string(), "antler.workers");
        assert_eq!(problems[0].1, "expected an integer from 1 to 64");
    }

    #[test]
    fn zero_workers_is_named() {
        let a = AntlerSection {
            workers: 0,
            ..AntlerSection::default()
        };
        let problems = a.check();
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].0.to_string(), "antler.workers");
    }
}
