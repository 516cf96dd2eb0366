//! The process's I/O thread: one runtime of its own (thread `antler-io`) on which every
//! connection's reader, writer, heartbeat and deadline tasks run, and on which sockets are
//! made, so heartbeats are sent and checked, and requests given up when due, however busy
//! the threads that serve requests and drive runs are. Requests are still served on the runtime that started the connection (but
//! for those its service answers at once); senders write their own frames while the
//! socket takes them, and the writer task here drains the rest; a caller waiting alone
//! for its reply reads it on its own thread ([`crate::sock`]).

use std::{
    cell::Cell,
    os::fd::{AsRawFd, OwnedFd},
    sync::OnceLock,
};

use tokio::{
    io::{unix::AsyncFd, Interest},
    runtime::{Handle, Runtime},
};

use crate::sock::Watched;

thread_local! {
    /// This thread is the I/O thread.
    static ON_IO_THREAD: Cell<bool> = const { Cell::new(false) };
    /// This thread ran a runtime without an I/O driver (see [`register`]).
    static NO_IO_DRIVER: Cell<bool> = const { Cell::new(false) };
}

/// Whether the current thread is the I/O thread.
pub(crate) fn on_io_thread() -> bool {
    ON_IO_THREAD.with(Cell::get)
}

/// Whether this thread was found running a runtime without an I/O driver.
pub(crate) fn no_driver_here() -> bool {
    NO_IO_DRIVER.with(Cell::get) || Handle::try_current().is_err()
}

/// Registers `fd` with the I/O thread's runtime (`on_io`) or the current thread's, if it
/// has an I/O driver. Tokio has no question for that but to try (it panics without one);
/// a thread found without one, which no runtime of Antler's is, is not tried again. The
/// registration must be dropped before `fd` is closed.
pub(crate) fn register(fd: &OwnedFd, interest: Interest, on_io: bool) -> Option<AsyncFd<Watched>> {
    let io = on_io.then(handle);
    let _io = io.as_ref().map(|h| h.enter());
    if !on_io && no_driver_here() {
        return None;
    }
    let watched = Watched(fd.as_raw_fd());
    // SAFETY: `fd` stays open, and the same descriptor, until the registration is dropped
    // (the caller's promise above).
    let register = move || unsafe { AsyncFd::register_with_interest(watched, interest) };
    match std::panic::catch_unwind(register) {
        Ok(watch) => watch.ok(),
        Err(_) => {
            if !on_io {
                NO_IO_DRIVER.with(|c| c.set(true));
            }
            None
        }
    }
}

static IO_RUNTIME: OnceLock<Option<Handle>> = OnceLock::new();

/// The I/O runtime's handle. Built on first use: a current-thread runtime driven by its own
/// thread, `antler-io`, for the life of the process (one thread has no use for a
/// multi-thread scheduler's work stealing, parking protocol and statistics, which it
/// would pay for at every frame). Should the thread not start (the process is out of
/// threads), the caller's runtime is used and heartbeats share it.
pub fn handle() -> Handle {
    let runtime = IO_RUNTIME.get_or_init(|| {
        let built = tokio::runtime::Builder::new_current_thread()
            .max_blocking_threads(1)
            // No signal or process driver: they would look for exited children at every
            // park of this thread, that is at every frame.
            .enable_io()
            .enable_time()
            .build();
        let started = built.map_err(|e| e.to_string()).and_then(|rt: Runtime| {
            let handle = rt.handle().clone();
            std::thread::Builder::new()
                .name("antler-io".into())
                .spawn(move || {
                    ON_IO_THREAD.with(|c| c.set(true));
                    rt.block_on(std::future::pending::<()>());
                })
                .map(|_| handle)
                .map_err(|e| e.to_string())
        });
        match started {
            Ok(handle) => Some(handle),
            Err(e) => {
                tracing::error!(
                    "cannot start the I/O thread ({e}); connections share the caller's runtime"
                );
                None
            }
        }
    });
    match runtime {
        Some(handle) => handle.clone(),
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
