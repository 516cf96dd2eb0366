//! The fencing table every host and worker keeps (issue 38, docs/ha.md): per run, the
//! highest lease epoch its requests have carried. A request of a run with an epoch
//! ([`TraceContext::epoch`]) above the mark raises it, one equal to it passes, one below
//! it is refused with [`RemoteError::Fenced`] before the role's handler sees it: a lead
//! paused past its lease that wakes cannot act. A request with no epoch passes, as ever.
//! Marks of runs not seen for [`IDLE_RETENTION`] are forgotten (see [`Fences::sweep`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dashmap::DashMap;

use crate::envelope::{RemoteError, TraceContext};

/// How long a run's mark is kept after its last request. An epoch only grows and the
/// lease store is the source of truth: the mark only guards the window between a lead
/// losing its lease and noticing it (its next renewal, a fraction of the lease's TTL,
/// seconds). A run no lead has sent for in an hour is finished or idle; should a lead
/// asleep for that long wake, its first renewal fails and it stops acting for the run.
pub const IDLE_RETENTION: Duration = Duration::from_secs(3600);
/// How often, at most, a request pays for a sweep of the table.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// The highest epoch seen per run, read and raised from every connection's tasks.
#[derive(Debug)]
pub struct Fences {
    marks: DashMap<String, Mark>,
    /// When the table was made: the origin of `last_sweep_ms` and of each mark's `seen`.
    origin: Instant,
    /// Milliseconds after `origin` of the last sweep.
    last_sweep_ms: AtomicU64,
    retention: Duration,
}

#[derive(Debug, Clone, Copy)]
struct Mark {
    epoch: u64,
    /// Milliseconds after the table's origin of the run's last admitted request.
    seen_ms: u64,
}

impl Default for Fences {
    fn default() -> Self {
        Fences::with_retention(IDLE_RETENTION)
    }
}

impl Fences {
    /// A table that forgets a run's mark `retention` after its last request.
    pub fn with_retention(retention: Duration) -> Self {
        Fences {
            marks: DashMap::new(),
            origin: Instant::now(),
            last_sweep_ms: AtomicU64::new(0),
            retention,
        }
    }

    /// Admits a request sent under `trace`: `Ok` when it carries no run or no epoch, or
    /// an epoch at or above its run's mark (raising the mark); `Err(Fenced)` below it.
    pub fn admit(&self, trace: &TraceContext) -> Result<(), RemoteError> {
        match (trace.run_id.as_deref(), trace.epoch) {
            (Some(run_id), Some(epoch)) => self.check(run_id, epoch),
            _ => Ok(()),
        }
    }

    /// Admits epoch `epoch` of `run_id` (see [`Fences::admit`]).
    pub fn check(&self, run_id: &str, epoch: u64) -> Result<(), RemoteError> {
        self.check_at(run_id, epoch, self.now_ms())
    }

    fn check_at(&self, run_id: &str, epoch: u64, now_ms: u64) -> Result<(), RemoteError> {
        self.sweep_if_due(now_ms);
        // The common case (a run already known) takes no allocation.
        if let Some(mut mark) = self.marks.get_mut(run_id) {
            return admit_into(&mut mark, run_id, epoch, now_ms);
        }
        let mut mark = self.marks.entry(run_id.to_owned()).or_insert(Mark {
            epoch,
            seen_ms: now_ms,
        });
        admit_into(&mut mark, run_id, epoch, now_ms)
    }

    /// The highest epoch seen for `run_id`, if it is remembered.
    pub fn current(&self, run_id: &str) -> Option<u64> {
        self.marks.get(run_id).map(|m| m.epoch)
    }

    /// How many runs have a mark.
    pub fn len(&self) -> usize {
        self.marks.len()
    }

    /// Whether no run has a mark.
    pub fn is_empty(&self) -> bool {
        self.marks.is_empty()
    }

    /// Forgets the marks of runs with no request for the retention period. Done by the
    /// requests themselves, at most once a [`SWEEP_EVERY`] (no task to own), so the table
    /// holds the runs of the last retention period and no more.
    pub fn sweep(&self) {
        self.sweep_at(self.now_ms());
    }

    fn sweep_at(&self, now_ms: u64) {
        let retention_ms = self.retention.as_millis() as u64;
        self.marks
            .retain(|_, mark| now_ms.saturating_sub(mark.seen_ms) < retention_ms);
    }

    fn sweep_if_due(&self, now_ms: u64) {
        let last = self.last_sweep_ms.load(Ordering::Relaxed);
        let every = SWEEP_EVERY.min(self.retention).as_millis() as u64;
        if now_ms.saturating_sub(last) < every {
            return;
        }
        // One request sweeps; the others go on.
        if self
            .last_sweep_ms
            .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            self.sweep_at(now_ms);
        }
    }

    fn now_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }
}

fn admit_into(mark: &mut Mark, run_id: &str, epoch: u64, now_ms: u64) -> Result<(), RemoteError> {
    if epoch < mark.epoch {
        return Err(RemoteError::Fenced {
            run_id: run_id.to_owned(),
            current: mark.epoch,
            epoch,
        });
    }
    mark.epoch = epoch;
    mark.seen_ms = now_ms;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(run: &str, epoch: Option<u64>) -> TraceContext {
        TraceContext::for_run(run).fenced(run, epoch)
    }

    #[test]
    fn a_higher_epoch_raises_the_mark_an_equal_one_passes_a_lower_one_is_fenced() {
        let fences = Fences::default();
        assert_eq!(fences.admit(&trace("r", Some(2))), Ok(()));
        assert_eq!(fences.current("r"), Some(2));
        assert_eq!(
            fences.admit(&trace("r", Some(1))),
            Err(RemoteError::Fenced {
                run_id: "r".into(),
                current: 2,
                epoch: 1
            })
        );
        assert_eq!(
            fences.current("r"),
            Some(2),
            "a refused epoch moves nothing"
        );
        assert_eq!(fences.admit(&trace("r", Some(2))), Ok(()));
        assert_eq!(fences.admit(&trace("r", Some(3))), Ok(()));
        let fenced = fences.admit(&trace("r", Some(2))).unwrap_err();
        assert_eq!(
            fenced.to_string(),
            "run r is owned by a newer lead (epoch 3); this lead's epoch 2 is fenced"
        );
    }

    #[test]
    fn no_epoch_or_no_run_passes_and_runs_are_fenced_apart() {
        let fences = Fences::default();
        assert_eq!(fences.admit(&trace("r", Some(5))), Ok(()));
        assert_eq!(fences.admit(&trace("r", None)), Ok(()));
        assert_eq!(fences.admit(&TraceContext::new_root()), Ok(()));
        let mut no_run = TraceContext::new_root();
        no_run.epoch = Some(1);
        assert_eq!(fences.admit(&no_run), Ok(()));
        assert_eq!(fences.admit(&trace("other", Some(1))), Ok(()));
        assert_eq!(fences.current("r"), Some(5));
        assert_eq!(fences.current("other"), Some(1));
        assert_eq!(fences.len(), 2);
    }

    #[test]
    fn marks_of_idle_runs_are_forgotten_and_live_ones_kept() {
        // Times are given (milliseconds after the table's origin): nothing sleeps.
        let fences = Fences::with_retention(Duration::from_secs(60));
        fences.check_at("idle", 4, 0).unwrap();
        fences.check_at("live", 1, 30_000).unwrap();
        fences.check_at("live", 1, 100_000).unwrap();
        fences.sweep_at(110_000);
        assert_eq!(fences.current("idle"), None);
        assert_eq!(fences.current("live"), Some(1));
        // Forgotten: the lease store is the truth again; the next epoch seen is the mark.
        fences.check_at("idle", 2, 110_001).unwrap();
        assert_eq!(fences.current("idle"), Some(2));
    }

    #[test]
    fn requests_sweep_the_table_once_a_minute_at_most() {
        let fences = Fences::with_retention(Duration::from_secs(3600));
        fences.check_at("old", 1, 0).unwrap();
        // Within the minute: no sweep, even past the retention of "old".
        fences.check_at("new", 1, 59_000).unwrap();
        assert_eq!(fences.len(), 2);
        // The first request after the minute sweeps; "old" is an hour idle by then.
        fences.check_at("new", 1, 3_600_000).unwrap();
        assert_eq!(fences.current("old"), None);
        assert_eq!(fences.current("new"), Some(1));
    }

    #[test]
    fn concurrent_admissions_keep_the_highest_epoch() {
        let fences = std::sync::Arc::new(Fences::default());
        let threads: Vec<_> = (1..=8u64)
            .map(|epoch| {
                let fences = fences.clone();
                std::thread::spawn(move || {
                    for _ in 0..200 {
                        let _ = fences.check("r", epoch);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(fences.current("r"), Some(8));
        assert!(fences.check("r", 7).is_err());
    }
}
