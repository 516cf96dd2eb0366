//! The session pool (spec 5.3): a call that names a user or thread runs on its own
//! session of a stdio server, keyed by `(server, "user:thread")`, with the working directory
//! pinned to the thread's workspace, the workspace as its only root (`roots/list`; a later
//! call naming another workspace changes the root and tells the server), and
//! `TMPDIR`/`TMP`/`TEMP` under `workspace/.mcp/tmp` (mode 0700; the server's configured
//! `env` wins). A call that names a user of an HTTP server users log in to (OAuth
//! authorization code) runs on that user's session, with that user's tokens, keyed
//! `(server, "user:default")`. The pool is bounded (`antler.mcp_pool`):
//! a session unused for the idle timeout is stopped, and past the session count or the
//! servers' summed resident memory the least recently used ones are; a session whose
//! server was changed or removed is stopped. The lock is held only to look up, insert or
//! remove, never across an await; `/proc` is read on a blocking thread.

use std::{
    collections::{HashMap, HashSet},
    path::Path,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use antler_protocol::config::{McpPoolSection, Transport};
use tokio::sync::broadcast;

use crate::{server::McpServer, transport::OpenOptions};

/// The thread id when a call names only a user.
const DEFAULT_THREAD: &str = "default";
/// The user id when a call names only a thread.
const DEFAULT_USER: &str = "default";
/// The longest pause between two sweeps of the pool.
const MAX_SWEEP_PERIOD: Duration = Duration::from_secs(5);
/// The shortest pause between two sweeps of the pool.
const MIN_SWEEP_PERIOD: Duration = Duration::from_millis(250);

/// The pool's bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolLimits {
    /// A session unused this long is stopped.
    pub idle_timeout: Duration,
    /// Sessions at most.
    pub max_sessions: usize,
    /// Resident memory of the pooled servers' process groups at most, in bytes.
    pub max_rss_bytes: u64,
}

impl Default for PoolLimits {
    fn default() -> Self {
        Self::from(&McpPoolSection::default())
    }
}

impl From<&McpPoolSection> for PoolLimits {
    fn from(c: &McpPoolSection) -> Self {
        Self {
            idle_timeout: c.idle_timeout(),
            max_sessions: c.max_sessions.max(1),
            max_rss_bytes: c.max_rss_bytes(),
        }
    }
}

impl PoolLimits {
    /// How often the pool is swept: a fraction of the idle timeout, within bounds.
    fn sweep_period(&self) -> Duration {
        (self.idle_timeout / 4).clamp(MIN_SWEEP_PERIOD, MAX_SWEEP_PERIOD)
    }
}

struct Entry {
    handle: McpServer,
    /// Order of last use (higher is more recent).
    last_used: u64,
    used_at: Instant,
}

/// Pooled sessions of the servers of this host.
#[derive(Default)]
pub struct SessionPool {
    inner: Mutex<Inner>,
    limits: PoolLimits,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<(String, String), Entry>,
    tick: u64,
}

/// One pooled session as a sweep sees it.
#[derive(Debug, Clone)]
struct Candidate {
    last_used: u64,
    used_at: Instant,
    /// Calls running on it now, or it is starting for one: a sweep never stops it.
    busy: bool,
    rss_bytes: u64,
}

/// Why a sweep stops a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Eviction {
    Idle,
    Memory,
}

/// The sessions a sweep stops (indices into `candidates`): the idle ones, then the least
/// recently used until the rest fit the memory cap.
fn plan(candidates: &[Candidate], limits: &PoolLimits, now: Instant) -> Vec<(usize, Eviction)> {
    let mut out = Vec::new();
    let mut kept: Vec<usize> = Vec::new();
    for (i, c) in candidates.iter().enumerate() {
        if !c.busy && now.saturating_duration_since(c.used_at) >= limits.idle_timeout {
            out.push((i, Eviction::Idle));
        } else {
            kept.push(i);
        }
    }
    let mut total: u64 = kept.iter().map(|&i| candidates[i].rss_bytes).sum();
    kept.sort_by_key(|&i| candidates[i].last_used);
    for i in kept {
        if total <= limits.max_rss_bytes {
            break;
        }
        if candidates[i].busy {
            continue;
        }
        total = total.saturating_sub(candidates[i].rss_bytes);
        out.push((i, Eviction::Memory));
    }
    out
}

impl SessionPool {
    /// An empty pool with these bounds.
    pub fn new(limits: PoolLimits) -> Self {
        Self {
            inner: Mutex::default(),
            limits,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The pooled session of `base` for `user`/`thread`, started when missing.
    pub fn session(
        &self,
        base: &McpServer,
        user: Option<&str>,
        thread: Option<&str>,
        workspace: Option<&str>,
    ) -> Result<McpServer, String> {
        let key = (
            base.name().to_owned(),
            format!(
                "{}:{}",
                user.unwrap_or(DEFAULT_USER),
                thread.unwrap_or(DEFAULT_THREAD)
            ),
        );
        let mut inner = self.lock();
        inner.tick += 1;
        let tick = inner.tick;
        if let Some(e) = inner.entries.get_mut(&key) {
            if e.handle.config() == base.config() {
                e.last_used = tick;
                e.used_at = Instant::now();
                // The thread's workspace moved: the server is told its roots changed (its
                // working directory stays where the session started).
                if let Some(ws) = workspace {
                    e.handle.set_roots(vec![ws.to_owned()]);
                }
                return Ok(e.handle.clone());
            }
            // The server was changed since: this session is stale.
            e.handle.stop();
            inner.entries.remove(&key);
        }
        let mut options = OpenOptions::default();
        if base.transport() != Transport::Stdio {
            // A user's session of a server users log in to: that user's tokens.
            options.oauth = base.oauth_broker();
            options.user = user.map(str::to_owned);
        } else if let Some(ws) = workspace {
            options.cwd = Some(ws.to_owned());
            options.roots = vec![ws.to_owned()];
            let tmp = Path::new(ws).join(".mcp").join("tmp");
            make_private_dir(&tmp).map_err(|e| format!("cannot prepare {}: {e}", tmp.display()))?;
            let tmp = tmp.display().to_string();
            options.default_env = ["TMPDIR", "TMP", "TEMP"]
                .iter()
                .map(|k| (k.to_string(), tmp.clone()))
                .collect();
        }
        let handle = McpServer::spawn(
            base.name().to_owned(),
            base.config().clone(),
            base.transport(),
            // Pooled sessions list the same tools as the base session: no announcements.
            broadcast::channel(1).0,
            options,
        );
        while inner.entries.len() >= self.limits.max_sessions {
            let Some(oldest) = inner
                .entries
                .iter()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some(e) = inner.entries.remove(&oldest) {
                tracing::info!(server = %oldest.0, session = %oldest.1, "pooled session stopped: the pool is full");
                e.handle.stop();
            }
        }
        inner.entries.insert(
            key,
            Entry {
                handle: handle.clone(),
                last_used: tick,
                used_at: Instant::now(),
            },
        );
        Ok(handle)
    }

    /// Stops the sessions whose server is gone or was changed.
    pub fn retain_current(&self, servers: &[McpServer]) {
        let mut inner = self.lock();
        inner.entries.retain(|(name, _), e| {
            let keep = servers
                .iter()
                .any(|s| s.name() == name && s.config() == e.handle.config());
            if !keep {
                e.handle.stop();
            }
            keep
        });
    }

    /// Stops the idle sessions, then the least recently used ones past the memory cap.
    pub async fn sweep(&self) {
        let snapshot: Vec<((String, String), McpServer, u64, Instant)> = self
            .lock()
            .entries
            .iter()
            .map(|(k, e)| (k.clone(), e.handle.clone(), e.last_used, e.used_at))
            .collect();
        if snapshot.is_empty() {
            return;
        }
        let usage =
            futures::future::join_all(snapshot.iter().map(|(_, h, _, _)| h.occupancy())).await;
        let groups: HashSet<u32> = usage.iter().filter_map(|u| u.pid).collect();
        let rss = tokio::task::spawn_blocking(move || group_rss(&groups))
            .await
            .unwrap_or_default();
        let candidates: Vec<Candidate> = snapshot
            .iter()
            .zip(&usage)
            .map(|((_, _, last_used, used_at), u)| Candidate {
                last_used: *last_used,
                used_at: *used_at,
                // A session still starting has a call waiting for it.
                busy: u.busy,
                rss_bytes: u.pid.and_then(|p| rss.get(&p).copied()).unwrap_or(0),
            })
            .collect();
        let evictions = plan(&candidates, &self.limits, Instant::now());
        if evictions.is_empty() {
            return;
        }
        let mut inner = self.lock();
        for (i, why) in evictions {
            let (key, handle, last_used, _) = &snapshot[i];
            // Used or replaced since the snapshot: leave it for the next sweep.
            let unchanged = inner
                .entries
                .get(key)
                .is_some_and(|e| e.handle.same(handle) && e.last_used == *last_used);
            if !unchanged {
                continue;
            }
            if let Some(e) = inner.entries.remove(key) {
                tracing::info!(server = %key.0, session = %key.1, reason = ?why, "pooled session stopped");
                e.handle.stop();
            }
        }
    }

    /// Sweeps the pool periodically until the returned task is aborted.
    pub fn spawn_sweeper(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let pool = self.clone();
        let period = self.limits.sweep_period();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                pool.sweep().await;
            }
        })
    }

    /// The pooled sessions of the server `name` (every user and thread).
    pub fn sessions_of(&self, name: &str) -> Vec<McpServer> {
        self.lock()
            .entries
            .iter()
            .filter(|((server, _), _)| server == name)
            .map(|(_, e)| e.handle.clone())
            .collect()
    }

    /// Reconnects now the pooled sessions of `server` for `user` that wait out a backoff
    /// (that user's login just completed).
    pub fn wake(&self, server: &str, user: &str) {
        let prefix = format!("{user}:");
        for ((name, session), e) in self.lock().entries.iter() {
            if name == server && session.starts_with(&prefix) {
                e.handle.wake();
            }
        }
    }

    /// Stops every pooled session; returns them so the caller can wait for them.
    pub fn stop_all(&self) -> Vec<McpServer> {
        self.lock()
            .entries
            .drain()
            .map(|(_, e)| {
                e.handle.stop();
                e.handle
            })
            .collect()
    }
}

/// The resident memory of each process group in `groups`, summed over its processes
/// (`/proc/<pid>/statm`), in bytes. Blocking: reads `/proc`.
fn group_rss(groups: &HashSet<u32>) -> HashMap<u32, u64> {
    let mut out = HashMap::new();
    if groups.is_empty() {
        return out;
    }
    // SAFETY: sysconf has no memory-safety preconditions.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Some(group) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| process_group(&stat))
        else {
            continue;
        };
        if !groups.contains(&group) {
            continue;
        }
        let pages = std::fs::read_to_string(format!("/proc/{pid}/statm"))
            .ok()
            .and_then(|m| m.split_whitespace().nth(1)?.parse::<u64>().ok())
            .unwrap_or(0);
        *out.entry(group).or_default() += pages.saturating_mul(page);
    }
    out
}

/// The process group of a `/proc/<pid>/stat` line (the fifth field, counted after the
/// parenthesised command name, which may hold spaces).
fn process_group(stat: &str) -> Option<u32> {
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(2)?.parse().ok()
}

fn make_private_dir(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn limits(idle_s: u64, max_rss: u64) -> PoolLimits {
        PoolLimits {
            idle_timeout: Duration::from_secs(idle_s),
            max_sessions: 256,
            max_rss_bytes: max_rss,
        }
    }

    fn candidate(
        last_used: u64,
        idle_for: Duration,
        busy: bool,
        rss: u64,
        now: Instant,
    ) -> Candidate {
        Candidate {
            last_used,
            used_at: now - idle_for,
            busy,
            rss_bytes: rss,
        }
    }

    #[test]
    fn idle_sessions_go_unless_busy() {
        let now = Instant::now();
        let c = [
            candidate(1, Duration::from_secs(30), false, 10, now),
            candidate(2, Duration::from_secs(30), true, 10, now),
            candidate(3, Duration::from_secs(1), false, 10, now),
        ];
        assert_eq!(plan(&c, &limits(10, 1000), now), [(0, Eviction::Idle)]);
    }

    #[test]
    fn past_the_memory_cap_the_least_recently_used_go_first() {
        let now = Instant::now();
        let fresh = Duration::from_secs(1);
        let c = [
            candidate(5, fresh, false, 100, now),
            candidate(2, fresh, false, 100, now),
            candidate(1, fresh, true, 100, now),
            candidate(9, fresh, false, 100, now),
        ];
        // 400 bytes against a cap of 200: the two least recently used idle ones go (the
        // busy one, older still, stays).
        assert_eq!(
            plan(&c, &limits(600, 200), now),
            [(1, Eviction::Memory), (0, Eviction::Memory)]
        );
        assert!(plan(&c, &limits(600, 400), now).is_empty());
    }

    #[test]
    fn the_process_group_is_read_after_the_command_name() {
        let stat = "4242 (node (weird) name) S 1 4240 4240 0 -1 4194560 100";
        assert_eq!(process_group(stat), Some(4240));
    }

    #[test]
    fn rss_is_summed_over_a_process_group() {
        let own = std::fs::read_to_string("/proc/self/stat").unwrap();
        let group = process_group(&own).unwrap();
        let rss = group_rss(&HashSet::from([group]));
        assert!(rss.get(&group).copied().unwrap_or(0) > 0, "{rss:?}");
    }

    #[test]
    fn the_sweep_period_follows_the_idle_timeout_within_bounds() {
        assert_eq!(limits(2, 1).sweep_period(), Duration::from_millis(500));
        assert_eq!(limits(600, 1).sweep_period(), MAX_SWEEP_PERIOD);
        assert_eq!(
            PoolLimits {
                idle_timeout: Duration::from_millis(100),
                ..limits(1, 1)
            }
            .sweep_period(),
            MIN_SWEEP_PERIOD
        );
    }
}
