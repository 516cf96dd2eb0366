//! Streamed tokens as run events: [`Deltas`] gathers one model turn's text and reasoning
//! deltas as the provider streams them and emits them as [`RunEvent::ModelDelta`], at most
//! one event per [`FLUSH_INTERVAL`] and once more when the reply ends. Nothing is lost: the
//! concatenation of a turn's `text` fields is the text the model streamed (likewise
//! `reasoning`), so a 2,000-token reply is tens of events, not thousands.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::run::events::{EventSink, RunEvent};

/// The least time between two `model_delta` events of a turn.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(80);

/// One model turn's streamed deltas, on their way to the run's events.
pub(super) struct Deltas {
    turn: usize,
    message_id: String,
    events: Option<EventSink>,
    pending: Mutex<Pending>,
}

struct Pending {
    text: String,
    reasoning: String,
    /// When the last event was emitted (or the turn began).
    last_flush: Instant,
}

impl Deltas {
    pub(super) fn new(turn: usize, message_id: String, events: Option<EventSink>) -> Deltas {
        Deltas {
            turn,
            message_id,
            events,
            pending: Mutex::new(Pending {
                text: String::new(),
                reasoning: String::new(),
                last_flush: Instant::now(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A text delta, heard at `now`.
    pub(super) fn text(&self, text: &str, now: Instant) {
        if self.events.is_none() || text.is_empty() {
            return;
        }
        let mut pending = self.lock();
        pending.text.push_str(text);
        self.flush_if_due(&mut pending, now);
    }

    /// A reasoning delta, heard at `now`.
    pub(super) fn reasoning(&self, text: &str, now: Instant) {
        if self.events.is_none() || text.is_empty() {
            return;
        }
        let mut pending = self.lock();
        pending.reasoning.push_str(text);
        self.flush_if_due(&mut pending, now);
    }

    /// Emits what is buffered (the reply ended, or a retry is about to start over).
    pub(super) fn flush(&self, now: Instant) {
        let mut pending = self.lock();
        self.emit(&mut pending, now);
    }

    fn flush_if_due(&self, pending: &mut Pending, now: Instant) {
        if now.saturating_duration_since(pending.last_flush) >= FLUSH_INTERVAL {
            self.emit(pending, now);
        }
    }

    /// Emitted under the lock, so the events keep the order of the deltas.
    fn emit(&self, pending: &mut Pending, now: Instant) {
        let Some(events) = &self.events else { return };
        if pending.text.is_empty() && pending.reasoning.is_empty() {
            return;
        }
        pending.last_flush = now;
        events(&RunEvent::ModelDelta {
            turn: self.turn,
            message_id: self.message_id.clone(),
            text: std::mem::take(&mut pending.text),
            reasoning: std::mem::take(&mut pending.reasoning),
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn heard() -> (Arc<Mutex<Vec<RunEvent>>>, EventSink) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        (
            seen,
            Arc::new(move |e: &RunEvent| sink.lock().unwrap().push(e.clone())),
        )
    }

    #[test]
    fn two_thousand_deltas_a_millisecond_apart_are_a_few_dozen_events_and_lose_nothing() {
        let (seen, sink) = heard();
        let start = Instant::now();
        let deltas = Deltas::new(3, "ai-3".into(), Some(sink));
        let mut streamed = String::new();
        for i in 0..2000u64 {
            let token = format!("t{i} ");
            if i < 10 {
                deltas.reasoning(&token, start + Duration::from_millis(i));
            } else {
                deltas.text(&token, start + Duration::from_millis(i));
                streamed.push_str(&token);
            }
        }
        deltas.flush(start + Duration::from_millis(2000));
        let events = seen.lock().unwrap();
        // 2 s of stream, one event per 80 ms at most, and the last flush.
        assert!(events.len() <= 2000 / 80 + 1, "{} events", events.len());
        assert!(events.len() >= 20, "{} events", events.len());
        let mut text = String::new();
        let mut reasoning = String::new();
        for event in events.iter() {
            let RunEvent::ModelDelta {
                turn,
                message_id,
                text: t,
                reasoning: r,
            } = event
            else {
                panic!("{event:?}")
            };
            assert_eq!((*turn, message_id.as_str()), (3, "ai-3"));
            text.push_str(t);
            reasoning.push_str(r);
        }
        assert_eq!(text, streamed);
        assert_eq!(
            reasoning,
            (0..10).map(|i| format!("t{i} ")).collect::<String>()
        );
    }

    #[test]
    fn the_event_omits_what_is_empty() {
        let (seen, sink) = heard();
        let deltas = Deltas::new(1, "ai-1".into(), Some(sink));
        deltas.text("Hel", Instant::now());
        deltas.flush(Instant::now());
        deltas.flush(Instant::now());
        let events = seen.lock().unwrap();
        assert_eq!(events.len(), 1, "an empty buffer emits nothing");
        assert_eq!(
            serde_json::to_string(&events[0]).unwrap(),
            r#"{"event":"model_delta","turn":1,"message_id":"ai-1","text":"Hel"}"#
        );
    }
}
