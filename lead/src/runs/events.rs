//! [`EventLog`]: one run's events as JSON text, in order, for any number of watchers. A
//! watcher reads the events so far, then waits for more; when a drive of the run stops
//! (an answer, an interrupt, an error) the log holds the run's view and watchers end
//! with it. The log keeps at most [`MAX_EVENTS`] events (the oldest go first, counted),
//! so a long run cannot grow the lead without bound. A transient event (a streamed
//! `model_delta`) reaches live watchers like any other but is not among the [`kept`]
//! events the runs store keeps: a later watcher reads the finished messages instead.
//!
//! Each kept event has an [`EventId`]: its log's generation and its place in the run's
//! history. A run's log is journaled ([`EventLog::journaled`]): each kept event is handed
//! to the runs store as it happens (`runs::event_journal`), so another lead can follow the
//! run and a watcher that reconnects with its last event id misses nothing.
//!
//! [`kept`]: EventLog::kept

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

/// Where a kept event stands in its run's history: the generation of the log that wrote it
/// (each lead that adopts a run, by a takeover, a restart or an answer, starts a higher
/// one) and its sequence number (one count across the run's generations). Ordered by
/// generation, then sequence: an event of a newer generation comes after every event of an
/// older one, so a watcher whose last event an old lead showed but never stored (it died
/// first) still misses nothing of the new lead's. On the wire (the SSE `id`, and
/// `Last-Event-ID`): `"{gen}-{seq}"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventId {
    pub gen: u64,
    pub seq: u64,
}

impl std::fmt::Display for EventId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.gen, self.seq)
    }
}

impl std::str::FromStr for EventId {
    type Err = ();

    /// `"{gen}-{seq}"`; anything else (a foreign id) is `Err`.
    fn from_str(text: &str) -> Result<EventId, ()> {
        let (gen, seq) = text.trim().split_once('-').ok_or(())?;
        Ok(EventId {
            gen: gen.parse().map_err(|_| ())?,
            seq: seq.parse().map_err(|_| ())?,
        })
    }
}

/// Where a journaled log's kept events go as they happen (the runs store).
pub trait EventJournal: Send + Sync {
    /// One kept event, in the log's order.
    fn record(&self, id: EventId, event: &Arc<str>);
    /// The run is no longer this lead's: nothing more is written, pending events neither.
    fn close(&self);
}

/// Events a run keeps for late watchers.
pub const MAX_EVENTS: usize = 10_000;

struct Inner {
    /// Every event, with its id when it is kept.
    events: VecDeque<(Option<EventId>, Arc<str>)>,
    /// The events that are not transient, bounded on their own, so streamed deltas never
    /// push a kept event out.
    kept: VecDeque<Arc<str>>,
    /// Events dropped from the front (the index of `events[0]`).
    dropped: usize,
    /// The run's view when its drive stopped; `None` while it is driven.
    stopped: Option<Arc<str>>,
    /// The id the next kept event gets.
    next_id: EventId,
}

/// One run's events.
pub struct EventLog {
    inner: Mutex<Inner>,
    changed: watch::Sender<u64>,
    /// The id of this log's first kept event: what came before it is in the store.
    origin: EventId,
    journal: Option<Arc<dyn EventJournal>>,
}

impl Default for EventLog {
    /// A log of generation 1 from sequence 0, kept in memory only.
    fn default() -> Self {
        EventLog::starting_at(EventId { gen: 1, seq: 0 }, None)
    }
}

/// What a watcher gets: the events after its cursor (with their ids, `None` for a
/// transient one), and the view if the drive stopped.
pub struct Batch {
    pub events: Vec<Arc<str>>,
    pub ids: Vec<Option<EventId>>,
    pub next: usize,
    pub stopped: Option<Arc<str>>,
}

impl EventLog {
    fn starting_at(origin: EventId, journal: Option<Arc<dyn EventJournal>>) -> EventLog {
        EventLog {
            inner: Mutex::new(Inner {
                events: VecDeque::new(),
                kept: VecDeque::new(),
                dropped: 0,
                stopped: None,
                next_id: origin,
            }),
            changed: watch::channel(0).0,
            origin,
            journal,
        }
    }

    /// A log whose kept events get ids from `origin` on and go to `journal` as they are
    /// pushed.
    pub fn journaled(origin: EventId, journal: Arc<dyn EventJournal>) -> EventLog {
        EventLog::starting_at(origin, Some(journal))
    }

    /// The id of this log's first kept event: the run's earlier events are in the store.
    pub fn origin(&self) -> EventId {
        self.origin
    }

    /// Appends an event read back from the store, with its id (a log rebuilt for a run
    /// that ended); nothing is journaled.
    pub fn push_stored(&self, id: EventId, json: String) {
        {
            let mut inner = self.lock();
            let event: Arc<str> = Arc::from(json);
            inner.kept.push_back(event.clone());
            inner.events.push_back((Some(id), event));
            inner.next_id = EventId {
                gen: id.gen,
                seq: id.seq + 1,
            };
        }
        self.bump();
    }

    /// The run is no longer this lead's: its journal writes nothing more.
    pub fn close_journal(&self) {
        if let Some(journal) = &self.journal {
            journal.close();
        }
    }

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
        inner.events.iter().map(|(_, e)| e.len()).sum::<usize>()
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
            let mut id = None;
            if !transient {
                if inner.kept.len() == MAX_EVENTS {
                    inner.kept.pop_front();
                }
                inner.kept.push_back(event.clone());
                let this = inner.next_id;
                inner.next_id.seq += 1;
                // Handed over under the lock, so the journal sees the log's order.
                if let Some(journal) = &self.journal {
                    journal.record(this, &event);
                }
                id = Some(this);
            }
            inner.events.push_back((id, event));
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
        let (ids, events) = inner.events.iter().skip(start).cloned().unzip();
        Batch {
            next: inner.dropped + inner.events.len(),
            events,
            ids,
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
        self.follow_after(None, |_, event| sink(event)).await
    }

    /// As [`follow`](Self::follow), with each event's id, from after the kept event `after`
    /// (`None`: from the first). Transient events before the first kept one after `after`
    /// are skipped: the watcher may have seen them, and the kept messages say the same.
    pub async fn follow_after<F, Fut>(
        &self,
        after: Option<EventId>,
        mut sink: F,
    ) -> Option<Arc<str>>
    where
        F: FnMut(Option<EventId>, Arc<str>) -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let mut changes = self.subscribe();
        let mut cursor = 0;
        let mut caught_up = after.is_none();
        loop {
            changes.borrow_and_update();
            let batch = self.since(cursor);
            cursor = batch.next;
            for (id, event) in batch.ids.into_iter().zip(batch.events) {
                if !caught_up {
                    match (id, after) {
                        (Some(id), Some(after)) if id > after => caught_up = true,
                        _ => continue,
                    }
                }
                if !sink(id, event).await {
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

    #[test]
    fn event_ids_read_back_and_order_by_generation_then_sequence() {
        let id = |gen, seq| EventId { gen, seq };
        assert_eq!(id(3, 57).to_string(), "3-57");
        assert_eq!("3-57".parse::<EventId>(), Ok(id(3, 57)));
        for foreign in ["", "57", "a-1", "1-", "-1", "1-2-3", "frame-4"] {
            assert!(foreign.parse::<EventId>().is_err(), "{foreign}");
        }
        // A newer generation's event comes after every event of an older one.
        assert!(id(1, 57) < id(2, 56));
        assert!(id(2, 56) < id(2, 57));
    }

    #[derive(Default)]
    struct Recorded(Mutex<Vec<(EventId, String)>>, std::sync::atomic::AtomicBool);

    impl EventJournal for Arc<Recorded> {
        fn record(&self, id: EventId, event: &Arc<str>) {
            if !self.1.load(std::sync::atomic::Ordering::SeqCst) {
                self.0.lock().unwrap().push((id, event.to_string()));
            }
        }
        fn close(&self) {
            self.1.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[test]
    fn a_journaled_log_hands_over_each_kept_event_with_its_id_until_closed() {
        let journal = Arc::new(Recorded::default());
        let log = EventLog::journaled(EventId { gen: 2, seq: 10 }, Arc::new(journal.clone()));
        assert_eq!(log.origin(), EventId { gen: 2, seq: 10 });
        log.push("a".into());
        log.push_transient("delta".into());
        log.push("b".into());
        log.close_journal();
        log.push("c".into());
        let recorded = journal.0.lock().unwrap().clone();
        assert_eq!(
            recorded,
            [
                (EventId { gen: 2, seq: 10 }, "a".to_owned()),
                (EventId { gen: 2, seq: 11 }, "b".to_owned())
            ]
        );
        // Watchers see the ids too; a transient event has none.
        let batch = log.since(0);
        assert_eq!(
            batch.ids,
            [
                Some(EventId { gen: 2, seq: 10 }),
                None,
                Some(EventId { gen: 2, seq: 11 }),
                Some(EventId { gen: 2, seq: 12 })
            ]
        );
    }

    #[tokio::test]
    async fn a_watcher_after_an_id_gets_only_what_came_after_it() {
        let log = Arc::new(EventLog::default());
        log.push("a".into());
        log.push_transient("delta of b".into());
        log.push("b".into());
        log.push_transient("delta of c".into());
        log.push("c".into());
        log.stop("done".into());
        let mut seen = Vec::new();
        let view = log
            .follow_after(Some(EventId { gen: 1, seq: 0 }), |id, e| {
                seen.push((id.map(|i| i.to_string()), e.to_string()));
                async { true }
            })
            .await;
        assert_eq!(view.as_deref(), Some("done"));
        assert_eq!(
            seen,
            [
                (Some("1-1".to_owned()), "b".to_owned()),
                (None, "delta of c".to_owned()),
                (Some("1-2".to_owned()), "c".to_owned())
            ]
        );
        // After an older generation's id: everything.
        let mut all = 0;
        log.follow_after(Some(EventId { gen: 0, seq: 99 }), |_, _| {
            all += 1;
            async { true }
        })
        .await;
        assert_eq!(all, 5);
    }
}
