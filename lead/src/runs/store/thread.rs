//! The runs store's own thread: every asynchronous use of the store (the run loop's
//! journal, the `RunManager`'s reads and writes, the write probe, the credentials relay)
//! is a request sent over a `crossbeam-channel` to this one blocking thread, which runs
//! the requests in the order they were sent and answers each on its own
//! `tokio::sync::oneshot`. A request is sent when it is made (not when its answer is
//! awaited), so a read made before a write is answered before that write lands. The
//! channel is unbounded: a sender (an actor) never blocks. The thread ends when the last
//! handle to it goes.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use super::CheckpointStore;

/// One request: it runs on the store's thread and sends its own answer.
type Job = Box<dyn FnOnce(&CheckpointStore) + Send>;

/// The store's thread went away (it could not start), or a request panicked on it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StoreThreadGone;

/// A handle to the thread that runs the store's requests; clones send to the same thread.
#[derive(Clone)]
pub(crate) struct StoreThread {
    requests: crossbeam_channel::Sender<Job>,
}

impl StoreThread {
    /// Starts the thread, which owns `store` (a store with no thread of its own).
    pub(crate) fn spawn(store: CheckpointStore) -> StoreThread {
        let (requests, queue) = crossbeam_channel::unbounded::<Job>();
        let spawned = std::thread::Builder::new()
            .name("runs-store".to_owned())
            .spawn(move || {
                for job in queue {
                    // A request that panics drops its answer (its caller is told the
                    // store is gone); the thread goes on with the next one.
                    let _ = std::panic::catch_unwind(AssertUnwindSafe(|| job(&store)));
                }
            });
        if let Err(e) = spawned {
            // Every request is then answered `StoreThreadGone`.
            tracing::error!("cannot start the runs store's thread: {e}");
        }
        StoreThread { requests }
    }

    /// Sends `request` to the thread now; the future is its answer.
    pub(crate) fn call<T: Send + 'static>(
        &self,
        request: impl FnOnce(&CheckpointStore) -> T + Send + 'static,
    ) -> impl Future<Output = Result<T, StoreThreadGone>> + Send + 'static {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let sent = self.requests.send(Box::new(move |store: &CheckpointStore| {
            let _ = reply.send(request(store));
        }));
        async move {
            sent.map_err(|_| StoreThreadGone)?;
            answer.await.map_err(|_| StoreThreadGone)
        }
    }
}
