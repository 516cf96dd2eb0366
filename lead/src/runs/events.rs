//! [`EventLog`]: one run's events as JSON text, in order, for any number of watchers. A
//! watcher reads the events so far, then waits for more; when a drive of the run stops
//! (an answer, an interrupt, an error) the log holds the run's view and watchers end
//! with it. The log keeps at most [`MAX_EVENTS`] events (the oldest go first, counted),
//! so a long run cannot grow the lead without bound. A transient event (a streamed
//! `model_delta`) reaches live watchers like any other but is not among the [`kept`]
//! events the runs store keeps: a later watcher reads the finished messages instead.
//!
//! [`kept`]: EventLog::kept

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

/// Events a run keeps for late watchers.
pub const MAX_EVENTS: usize = 10_000;

struct Inner {
    events: VecDeque<Arc<str>>,
    /// The events that are not transient, bounded on their own, so streamed deltas never
    /// push a kept event out.
    kept: VecDeque<Arc<str>>,
    /// Events dropped from the front (the index of `events[0]`).
    dropped: usize,
    /// The run's view when its drive stopped; `None` while it is driven.
    stopped: Option<Arc<str>>,
}

/// One run's events.
pub struct EventLog {
    inner: Mutex<Inner>,
    changed: watch::Sender<u64>,
}

impl Default for EventLog {
    fn default() -> Self {
        EventLog {
            inner: Mutex::new(Inner {
                events: VecDeque::new(),
                kept: VecDeque::new(),
                dropped: 0,
                stopped: None,
            }),
            changed: watch::channel(0).0,
        }
    }
}

/// What a watcher gets: the events after its cursor, and the view if the drive stopped.
pub struct Batch {
    pub events: Vec<Arc<str>>,
    pub next: usize,
    pub stopped: Option<Arc<str>>,
}

impl EventLog {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn bump(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// The bytes of text the log holds (its events and its stopped view).
    pub fn bytes(&self) -> usize {
        let inner = self.lock();
        inner.events.iter().map(|e| e.len()).sum::<usize>()
            + inner.stopped.as_ref().map_or(0, |v| v.len())
    }

    /// Appends one event.
    pub fn push(&self, json: String) {
        self.append(json, false);
    }

    /// Appends one event for live watchers only (a streamed delta), never kept.
    pub fn push_transient(&self, json: String) {
        self.append(json, true);
    }

    fn append(&self, json: String, transient: bool) {
        {
            let mut inner = self.lock();
            if inner.events.len() == MAX_EVENTS {
                inner.events.pop_front();
                inner.dropped += 1;
            }
            let event: Arc<str> = Arc::from(json);
            if !transient {
                if inner.kept.len() == MAX_EVENTS {
                    inner.kept.pop_front();
                }
                inner.kept.push_back(event.clone());
            }
            inner.events.push_back(event);
        }
        self.bump();
    }

    /// The events the runs store keeps for later watchers: all but the transient ones (the
    /// last [`MAX_EVENTS`] of them).
    pub fn kept(&self) -> Vec<Arc<str>> {
        self.lock().kept.iter().cloned().collect()
    }

    /// A drive begins: watchers wait for its events.
    pub fn driving(&self) {
        self.lock().stopped = None;
        self.bump();
    }

    /// The drive stopped with this view of the run.
    pub fn stop(&self, view: String) {
        self.lock().stopped = Some(Arc::from(view));
        self.bump();
    }

    /// Whether a drive is under way.
    pub fn is_driving(&self) -> bool {
        self.lock().stopped.is_none()
    }

    /// The view of the stopped drive.
    pub fn stopped(&self) -> Option<Arc<str>> {
        self.lock().stopped.clone()
    }

    /// Events from `cursor` on (events dropped meanwhile are skipped).
    pub fn since(&self, cursor: usize) -> Batch {
        let inner = self.lock();
        let start = cursor.max(inner.dropped) - inner.dropped;
        let events: Vec<Arc<str>> = inner.events.iter().skip(start).cloned().collect();
        Batch {
            next: inner.dropped + inner.events.len(),
            events,
            stopped: inner.stopped.clone(),
        }
    }

    /// A receiver that wakes on every change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Streams every event to `sink` until the drive stops; returns the run's view. Ends
    /// early with `None` when `sink` fails (the watcher went away).
    pub async fn follow<F, Fut>(&self, mut sink: F) -> Option<Arc<str>>
    where
        F: FnMut(Arc<str>) -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let mut changes = self.subscribe();
        let mut cursor = 0;
        loop {
            changes.borrow_and_update();
            let batch = self.since(cursor);
            cursor = batch.next;
            for event in batch.events {
                if !sink(event).await {
                    return None;
                }
            }
            if let Some(view) = batch.stopped {
                return Some(view);
            }
            if changes.changed().await.is_err() {
                return None;
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_watcher_gets_past_and_new_events_then_the_view() {
        let log = Arc::new(EventLog::default());
        log.push("a".into());
        let watcher = {
            let log = log.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let view = log
                    .follow(|e| {
                        seen.push(e.to_string());
                        async { true }
                    })
                    .await;
                (seen, view)
            })
        };
        tokio::task::yield_now().await;
        log.push("b".into());
        log.stop("done".into());
        let (seen, view) = watcher.await.unwrap();
        assert_eq!(seen, ["a", "b"]);
        assert_eq!(view.as_deref(), Some("done"));
        log.driving();
        assert!(log.is_driving());
    }

    #[test]
    fn the_log_is_bounded_and_cursors_skip_what_was_dropped() {
        let log = EventLog::default();
        for i in 0..MAX_EVENTS + 5 {
            log.push(i.to_string());
        }
        let batch = log.since(0);
        assert_eq!(batch.events.len(), MAX_EVENTS);
        assert_eq!(&*batch.events[0], "5");
        assert_eq!(batch.next, MAX_EVENTS + 5);
        assert!(log.since(batch.next).events.is_empty());
    }

    #[test]
    fn watchers_see_transient_events_and_the_kept_ones_leave_them_out() {
        let log = EventLog::default();
        log.push("started".into());
        log.push_transient("delta 1".into());
        log.push_transient("delta 2".into());
        log.push("finished".into());
        let seen: Vec<String> = log.since(0).events.iter().map(|e| e.to_string()).collect();
        assert_eq!(seen, ["started", "delta 1", "delta 2", "finished"]);
        let kept: Vec<String> = log.kept().iter().map(|e| e.to_string()).collect();
        assert_eq!(kept, ["started", "finished"]);
        // However many deltas stream, no kept event is pushed out.
        for i in 0..MAX_EVENTS {
            log.push_transient(format!("delta {i}"));
        }
        let kept: Vec<String> = log.kept().iter().map(|e| e.to_string()).collect();
        assert_eq!(kept, ["started", "finished"]);
    }
}
