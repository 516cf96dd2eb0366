//! Whether the actor system is being torn down. An actor created just before its system
//! stops (a command that fails while the cluster starts) gets its first poll, and so its
//! `started`, from the runtime's drop, where no reactor runs: anything it spawns, times
//! or starts then panics. Such an actor's `started` does nothing.

/// True while no Tokio runtime is current: the system is being dropped.
pub fn tearing_down() -> bool {
    tokio::runtime::Handle::try_current().is_err()
}
