//! The stdio session pool (spec 5.3): a call that names a user or thread runs on its own
//! session of a stdio server, keyed by `(server, "user:thread")`, with the working directory
//! pinned to the thread's workspace and `TMPDIR`/`TMP`/`TEMP` under `workspace/.mcp/tmp`
//! (mode 0700; the server's configured `env` wins). At most 256 sessions, evicted least
//! recently used first; a session whose server was changed or removed is stopped. The lock
//! is held only to look up or insert, never across an await.

use std::{collections::HashMap, path::Path, sync::Mutex};

use antler_protocol::config::Transport;
use tokio::sync::broadcast;

use crate::{server::ServerHandle, transport::OpenOptions};

/// `MAX_SESSIONS`.
pub const MAX_SESSIONS: usize = 256;
/// The thread id when a call names only a user.
const DEFAULT_THREAD: &str = "default";
/// The user id when a call names only a thread.
const DEFAULT_USER: &str = "default";

struct Entry {
    handle: ServerHandle,
    last_used: u64,
}

/// Pooled sessions of every stdio server of this host.
#[derive(Default)]
pub struct SessionPool {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<(String, String), Entry>,
    tick: u64,
}

impl SessionPool {
    /// The pooled session of `base` for `user`/`thread`, started when missing.
    pub fn session(
        &self,
        base: &ServerHandle,
        user: Option<&str>,
        thread: Option<&str>,
        workspace: Option<&str>,
    ) -> Result<ServerHandle, String> {
        let key = (
            base.name().to_owned(),
            format!(
                "{}:{}",
                user.unwrap_or(DEFAULT_USER),
                thread.unwrap_or(DEFAULT_THREAD)
            ),
        );
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.tick += 1;
        let tick = inner.tick;
        if let Some(e) = inner.entries.get_mut(&key) {
            if e.handle.config() == base.config() {
                e.last_used = tick;
                return Ok(e.handle.clone());
            }
            // The server was changed since: this session is stale.
            e.handle.stop();
            inner.entries.remove(&key);
        }
        let mut options = OpenOptions::default();
        if let Some(ws) = workspace {
            options.cwd = Some(ws.to_owned());
            let tmp = Path::new(ws).join(".mcp").join("tmp");
            make_private_dir(&tmp).map_err(|e| format!("cannot prepare {}: {e}", tmp.display()))?;
            let tmp = tmp.display().to_string();
            options.default_env = ["TMPDIR", "TMP", "TEMP"]
                .iter()
                .map(|k| (k.to_string(), tmp.clone()))
                .collect();
        }
        let handle = ServerHandle::spawn(
            base.name().to_owned(),
            base.config().clone(),
            Transport::Stdio,
            // Pooled sessions list the same tools as the base session: no announcements.
            broadcast::channel(1).0,
            options,
        );
        while inner.entries.len() >= MAX_SESSIONS {
            let Some(oldest) = inner
                .entries
                .iter()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some(e) = inner.entries.remove(&oldest) {
                e.handle.stop();
            }
        }
        inner.entries.insert(
            key,
            Entry {
                handle: handle.clone(),
                last_used: tick,
            },
        );
        Ok(handle)
    }

    /// Stops the sessions whose server is gone or was changed.
    pub fn retain_current(&self, servers: &[ServerHandle]) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
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

    /// Stops every pooled session; returns them so the caller can wait for them.
    pub fn stop_all(&self) -> Vec<ServerHandle> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner
            .entries
            .drain()
            .map(|(_, e)| {
                e.handle.stop();
                e.handle
            })
            .collect()
    }
}

fn make_private_dir(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
}
