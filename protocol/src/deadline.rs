//! When a connection's unary requests give up. One task per connection, on the I/O
//! thread, sleeps until the earliest deadline of the requests in flight and fails the
//! overdue ones with `DeadlineExceeded` (see `connection::deadline_loop`); a request costs
//! its caller no timer of its own (a registration in its runtime's timer wheel, then its
//! removal, on the hot path of every request). Deadlines are kept in whole milliseconds
//! since the connection started, rounded up, so none fires early; they fire as late as the
//! I/O thread is starved, and a zero timeout about a millisecond after the send.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use tokio::sync::Notify;

/// No request waits: the task sleeps until one registers.
const NONE_DUE: u64 = u64::MAX;

/// The earliest deadline the task sleeps to, and how a registration wakes it.
pub(crate) struct Deadlines {
    started: Instant,
    /// Milliseconds since `started` when the task next looks for overdue requests.
    next_ms: AtomicU64,
    wake: Notify,
}

impl Deadlines {
    pub(crate) fn new(started: Instant) -> Self {
        Self {
            started,
            next_ms: AtomicU64::new(NONE_DUE),
            wake: Notify::new(),
        }
    }

    /// Now, in milliseconds since the connection started (rounded down).
    pub(crate) fn now_ms(&self) -> u64 {
        capped(self.started.elapsed().as_millis())
    }

    /// The due time of a request sent at `sent` that may wait `timeout` (rounded up).
    pub(crate) fn due_at(&self, sent: Instant, timeout: Duration) -> u64 {
        capped(
            sent.saturating_duration_since(self.started)
                .saturating_add(timeout)
                .as_micros()
                .div_ceil(1000),
        )
    }

    /// Notes a request's due time; called under the lock of the table that holds it.
    /// True when it is earlier than the task's: call [`Deadlines::wake`] once the lock is
    /// released.
    pub(crate) fn registered(&self, due: u64) -> bool {
        if due < self.next_ms.load(Ordering::Acquire) {
            self.next_ms.store(due, Ordering::Release);
            return true;
        }
        false
    }

    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }

    /// Sets the next due time after an expiry, under the same lock as `registered`.
    pub(crate) fn set_next(&self, next: Option<u64>) {
        self.next_ms
            .store(next.unwrap_or(NONE_DUE), Ordering::Release);
    }

    /// Waits until the earliest due time (true), or until an earlier one is registered
    /// (false: look again).
    pub(crate) async fn wait(&self) -> bool {
        let woken = self.wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let next = self.next_ms.load(Ordering::Acquire);
        if next == NONE_DUE {
            woken.await;
            return false;
        }
        let at = self.started + Duration::from_millis(next);
        tokio::select! {
            biased;
            _ = woken => false,
            _ = tokio::time::sleep_until(at.into()) => true,
        }
    }
}

/// Milliseconds as a due time: short of [`NONE_DUE`], however far.
fn capped(ms: u128) -> u64 {
    ms.min(u128::from(NONE_DUE - 1)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_due_time_is_rounded_up_and_only_an_earlier_one_wakes() {
        let d = Deadlines::new(Instant::now());
        let due = d.due_at(Instant::now(), Duration::from_millis(50));
        assert!((50..=60).contains(&due), "{due}");
        assert!(d.registered(due));
        assert!(!d.registered(due + 10));
        assert!(d.registered(due - 10));
        d.set_next(None);
        assert!(d.registered(due + 10));
        assert!(d.due_at(Instant::now(), Duration::MAX) < NONE_DUE);
    }

    #[tokio::test]
    async fn the_wait_ends_at_the_due_time_or_at_an_earlier_registration() {
        let d = std::sync::Arc::new(Deadlines::new(Instant::now()));
        let t = Instant::now();
        d.registered(d.due_at(Instant::now(), Duration::from_millis(30)));
        assert!(d.wait().await);
        assert!(t.elapsed() >= Duration::from_millis(30));
        // None due: the wait lasts until a registration wakes it.
        d.set_next(None);
        let waiter = tokio::spawn({
            let d = d.clone();
            async move { d.wait().await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiter.is_finished());
        if d.registered(d.due_at(Instant::now(), Duration::from_millis(5))) {
            d.wake();
        }
        assert!(!waiter.await.unwrap());
    }
}
