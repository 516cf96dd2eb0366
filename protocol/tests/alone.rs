//! antler-protocol's tests that measure the whole process, in a test binary apart from
//! `all`: the process's open descriptors (`close_at_once`), the wakes of its one I/O thread
//! (`reply_on_caller`), its resident memory (`heap_trim`), and the heartbeats that thread
//! must keep sending within 150 ms while a runtime blocks (`heartbeat_starvation`). Beside
//! `all`'s tests these would count other tests' sockets, wakes and allocations; here each
//! test holds [`ALONE`] while it runs, so they take turns.

mod alone_suite;
// The peer `all` shares; these tests use part of it.
#[allow(dead_code)]
mod common_peer;

/// Held by every test of this binary for its whole run: one test at a time measures the
/// process.
static ALONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
