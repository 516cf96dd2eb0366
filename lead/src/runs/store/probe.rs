//! The runs database's write probe: one row written every [`PROBE_INTERVAL`] on the
//! store's thread, so a database that cannot be written (a volume read-only or full) is
//! seen, logged and shown (`antler status`, `/ready`) while no run writes.

use std::sync::Mutex;
use std::time::Duration;

use super::{CheckpointError, CheckpointStore};

/// Why the runs database cannot be written now (`None`: it can), as the lead's own health
/// shows it in `antler status` and the gateway's cluster view. Set by [`probe_writes`].
static UNWRITABLE: Mutex<Option<String>> = Mutex::new(None);

/// Why this lead's runs database cannot be written, if it cannot.
pub fn unwritable() -> Option<String> {
    UNWRITABLE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// How often [`probe_writes`] writes.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(2);

/// Writes one row every [`PROBE_INTERVAL`], so a runs database that cannot be written (a
/// volume read-only or full) is seen, logged and shown while no run writes, not only when
/// a run's checkpoint fails. Runs until the runtime stops.
pub async fn probe_writes(store: CheckpointStore) {
    let mut tick = tokio::time::interval(PROBE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let result = store
            .call(|s| {
                let first = s.probe_write();
                match first {
                    Err(e) if e.is_read_only() && s.reopen_if_read_only() => s.probe_write(),
                    other => other,
                }
            })
            .await;
        let problem = match result {
            Ok(()) => None,
            Err(e) if e.is_busy() => continue,
            Err(CheckpointError::ThreadGone) => continue,
            Err(e) => Some(format!("runs database cannot be written: {e}")),
        };
        let mut now = UNWRITABLE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match (&*now, &problem) {
            (None, Some(p)) => tracing::error!("{p}"),
            (Some(_), None) => tracing::info!("runs database can be written again"),
            _ => {}
        }
        *now = problem;
    }
}
