//! The process's I/O thread: one runtime of its own (thread `antler-io`) on which every
//! connection's reader, writer and heartbeat run, and on which sockets are made, so
//! heartbeats are sent and checked however busy the threads that serve requests and drive
//! runs are. Requests are still served on the runtime that started the connection (but
//! for those its service answers at once); senders write their own frames while the
//! socket takes them, and the writer task here drains the rest.

use std::sync::OnceLock;

use tokio::runtime::{Handle, Runtime};

static IO_RUNTIME: OnceLock<Option<Runtime>> = OnceLock::new();

/// The I/O runtime's handle. Built on first use; should the thread not start (the
/// process is out of threads), the caller's runtime is used and heartbeats share it.
pub fn handle() -> Handle {
    let runtime = IO_RUNTIME.get_or_init(|| {
        match tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(1)
            .thread_name("antler-io")
            .enable_all()
            .build()
        {
            Ok(rt) => Some(rt),
            Err(e) => {
                tracing::error!(
                    "cannot start the I/O thread ({e}); connections share the caller's runtime"
                );
                None
            }
        }
    });
    match runtime {
        Some(rt) => rt.handle().clone(),
        None => Handle::current(),
    }
}

/// Runs `fut` on the I/O runtime and waits for its output (`None` if it panicked or the
/// runtime is shutting down).
pub async fn run<F>(fut: F) -> Option<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    handle().spawn(fut).await.ok()
}
