//! When an MCP session's end is done: [`Released`], the latch a session fires once its
//! run is released (its sandbox back in its pool, its
//! end recorded, its thread free for the next run). The gateway's `DELETE /mcp` and
//! `antler mcp serve`'s end of stdin wait on it, so a client that opens a new session on
//! the same thread right after closing one finds the thread free.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Fires once a session's run is released; clones share it. It is claimed by the
/// session that will fire it (the one whose requests carried it): waiting on one no
/// session claimed (a session that never got past `initialize`) returns at once.
#[derive(Debug, Clone, Default)]
pub struct Released {
    fired: CancellationToken,
    claimed: Arc<AtomicBool>,
}

impl Released {
    pub fn new() -> Released {
        Released::default()
    }

    /// The session that will fire it takes it.
    pub fn claim(&self) -> Released {
        self.claimed.store(true, Ordering::SeqCst);
        self.clone()
    }

    /// The session's run is released (or it had none).
    pub fn fire(&self) {
        self.fired.cancel();
    }

    /// Waits until the claiming session's run is released (at once when none claimed it).
    pub async fn wait(&self) {
        if self.claimed.load(Ordering::SeqCst) {
            self.fired.cancelled().await;
        }
    }
}
