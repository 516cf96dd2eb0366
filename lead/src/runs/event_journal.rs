//! [`StoreJournal`]: a run's kept events written to the runs store as they happen, so a
//! watcher on another lead (or on this one after a restart) follows the run and one that
//! reconnects with its last event id misses nothing.
//!
//! Events wait in a buffer; the first event of an empty buffer sends one write to the
//! store's thread, which takes the whole buffer when it runs. Under load the writes
//! coalesce (everything pushed while one waits in the queue goes with it); idle, each
//! event is written at once. The store's thread runs requests in the order they were
//! sent, and the run loop's journal writes (a checkpoint, the run's status) go the same
//! way after the events the run emitted before them: when the store says a run ended, its
//! events are there. A write the storage fails keeps its events for the next one.

use std::sync::{Arc, Mutex};

use super::events::{EventId, EventJournal};
use super::store::CheckpointStore;

/// Events waiting for the store's thread.
#[derive(Default)]
struct Pending {
    events: Vec<(EventId, Arc<str>)>,
    /// A write is queued on the store's thread and will take `events`.
    queued: bool,
    /// The run is no longer this lead's: nothing more is written.
    closed: bool,
}

/// One run's events on their way to the store.
pub struct StoreJournal {
    store: CheckpointStore,
    run_id: String,
    /// The lease epoch the lead holds the run at: a write fenced by a newer one is dropped
    /// (`None`: no leases).
    fence: Option<u64>,
    pending: Mutex<Pending>,
}

impl StoreJournal {
    pub fn new(store: CheckpointStore, run_id: String, fence: Option<u64>) -> Arc<StoreJournal> {
        Arc::new(StoreJournal {
            store,
            run_id,
            fence,
            pending: Mutex::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues one write on the store's thread, which takes what is pending when it runs.
    fn queue(self: &Arc<Self>) {
        let me = Arc::clone(self);
        // Sent to the store's thread now; nobody waits for its answer.
        drop(self.store.call(move |store| {
            let events = {
                let mut pending = me.lock();
                pending.queued = false;
                if pending.closed {
                    return Ok(());
                }
                std::mem::take(&mut pending.events)
            };
            if events.is_empty() {
                return Ok(());
            }
            match store.append_events(&me.run_id, &events, me.fence) {
                Ok(true) => {}
                Ok(false) => {
                    tracing::warn!(run = %me.run_id, "a newer lead holds the run: its events are not written");
                    me.lock().closed = true;
                }
                Err(e) => {
                    tracing::warn!(run = %me.run_id, "cannot keep the run's events yet: {e}");
                    // Kept for the next write, ahead of what came since.
                    let mut pending = me.lock();
                    let newer = std::mem::replace(&mut pending.events, events);
                    pending.events.extend(newer);
                }
            }
            Ok(())
        }));
    }
}

/// The journal of one run's log: `Arc<StoreJournal>` so a queued write can hold it.
pub struct Journaled(pub Arc<StoreJournal>);

impl EventJournal for Journaled {
    fn record(&self, id: EventId, event: &Arc<str>) {
        let queue = {
            let mut pending = self.0.lock();
            if pending.closed {
                return;
            }
            pending.events.push((id, Arc::clone(event)));
            !std::mem::replace(&mut pending.queued, true)
        };
        if queue {
            self.0.queue();
        }
    }

    fn close(&self) {
        let mut pending = self.0.lock();
        pending.closed = true;
        pending.events.clear();
    }
}
