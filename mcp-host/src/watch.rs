//! Watching the extensions config: file events on its directory (so an atomic rename is
//! seen) plus a slow poll, both compared by the signature `(mtime, size, sha256)` of spec
//! 5.5, which catches same-second edits and equal-size swaps. A change asks the registry
//! to reload; the watcher lives as long as the registry.

use std::{
    path::{Path, PathBuf},
    time::{Duration, SystemTime},
};

use actix::Addr;
use notify::{RecursiveMode, Watcher};
use sha2::{Digest, Sha256};

use crate::registry::{McpRegistry, Reload};

/// How often the file is checked even without an event.
const POLL: Duration = Duration::from_secs(2);
/// Events within this window are handled as one change.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// `(mtime, size, sha256)` of a file; parts are None when stat or read fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    pub mtime: Option<SystemTime>,
    pub size: Option<u64>,
    pub sha256: Option<[u8; 32]>,
}

impl Signature {
    pub fn of(path: &Path) -> Signature {
        let meta = std::fs::metadata(path).ok();
        Signature {
            mtime: meta.as_ref().and_then(|m| m.modified().ok()),
            size: meta.as_ref().map(|m| m.len()),
            sha256: std::fs::read(path).ok().map(|b| Sha256::digest(&b).into()),
        }
    }

    /// Whether the file could be both stat'ed and read.
    pub fn is_complete(&self) -> bool {
        self.mtime.is_some() && self.size.is_some() && self.sha256.is_some()
    }
}

/// Starts watching `path` for the registry; the task ends when the registry stops.
pub fn spawn(path: PathBuf, registry: Addr<McpRegistry>) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let file_name = path.file_name().map(|n| n.to_os_string());
    let watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
        if let Ok(ev) = ev {
            if ev
                .paths
                .iter()
                .any(|p| p.file_name().map(|n| n.to_os_string()) == file_name)
            {
                let _ = tx.send(());
            }
        }
    });
    let mut watcher = match watcher {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!("cannot watch the extensions config ({e}); polling every {POLL:?}");
            None
        }
    };
    if let (Some(w), Some(dir)) = (watcher.as_mut(), path.parent()) {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        if let Err(e) = w.watch(dir, RecursiveMode::NonRecursive) {
            tracing::warn!(dir = %dir.display(), "cannot watch ({e}); polling every {POLL:?}");
        }
    }
    tokio::spawn(async move {
        // The watcher stops when this task ends.
        let _watcher = watcher;
        loop {
            tokio::select! {
                Some(()) = rx.recv() => {
                    tokio::time::sleep(DEBOUNCE).await;
                    while rx.try_recv().is_ok() {}
                }
                _ = tokio::time::sleep(POLL) => {}
            }
            if registry.send(Reload { force: false }).await.is_err() {
                break;
            }
        }
    });
}
