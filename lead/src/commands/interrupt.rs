//! How a command stopped by ctrl-c (SIGINT) or SIGTERM ends: [`signalled`] resolves on
//! the first of them, the command stops what it started in order (an ephemeral cluster's
//! hosts drain and flush their spans) and returns, and `main` exports this process's
//! spans before it exits (docs/telemetry.md). A second signal while it stops ends the
//! process at once ([`exit_on_second`]).

/// The exit status of a command stopped by a signal (the shell's 128 + SIGINT).
pub const EXIT_INTERRUPTED: u8 = 130;

/// Resolves on SIGINT or SIGTERM; never, when the handlers cannot be installed (the
/// signal's default action then ends the process, as before).
pub async fn signalled() {
    if antler_protocol::host::wait_for_shutdown_signal()
        .await
        .is_err()
    {
        std::future::pending::<()>().await;
    }
}

/// From now on, a second SIGINT or SIGTERM ends the process at once: an orderly stop
/// that hangs cannot hold a user who insists.
pub fn exit_on_second() {
    actix::spawn(async {
        signalled().await;
        std::process::exit(i32::from(EXIT_INTERRUPTED));
    });
}

/// Ends a stdio command stopped by a signal, once what it started has stopped: this
/// process's spans are exported and it exits with `code`. It does not return to `main`,
/// because the stdio transport reads stdin on a blocking thread that the runtime's drop
/// would wait on until the client closes stdin.
pub fn exit_after_stop(code: u8) -> ! {
    antler_protocol::host::finish_telemetry();
    std::process::exit(i32::from(code));
}
