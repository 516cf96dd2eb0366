//! The multi-lead invariants over the audit ([`super::audit`]): at most one epoch acts for
//! a run (every write for it comes from the incarnation holding its newest epoch at that
//! moment: none of an older epoch lands after a newer one took the run, and none from a
//! lead that never held it), and every takeover is visible (each epoch taken from another
//! lead's lapsed lease, that then drove the run, has its `lead_takeover` event naming both
//! leads and epochs). And the time from each lead fault to its runs' new epochs.

use std::collections::HashMap;
use std::time::Duration;

use super::audit::{Evidence, Write};
use crate::checks::{invariant, Invariant};

/// One epoch of a run: taken by `writer` (its lead id `lead`) at `at` (the database's clock).
#[derive(Debug, Clone)]
pub struct Acquisition {
    pub at: f64,
    pub epoch: i64,
    pub writer: String,
    pub lead: String,
    /// The owner and epoch it was taken from, when their lease was held (lapsed) rather
    /// than new or released: a takeover.
    pub from: Option<(String, i64)>,
}

/// A run's epochs in order, and the writes no epoch may make (each described).
#[derive(Debug, Default)]
struct Timeline {
    acquisitions: Vec<Acquisition>,
    stale: Vec<String>,
    /// Per acquisition (by index): whether its writer wrote for the run while it held it.
    acted: Vec<bool>,
}

/// Walks a run's audited writes in order.
fn timeline(run: &str, writes: &[Write]) -> Timeline {
    let mut t = Timeline::default();
    // The lease row as last written: owner and epoch.
    let mut row: Option<(Option<String>, i64)> = None;
    let mut before_lease: Vec<&Write> = Vec::new();
    for w in writes {
        if w.table == "run_leases" {
            let epoch = w.epoch.unwrap_or(0);
            let newer = row.as_ref().is_none_or(|(_, e)| epoch > *e);
            if let (Some(lead), true) = (&w.lead_id, newer) {
                let from = row
                    .as_ref()
                    .and_then(|(owner, e)| owner.clone().map(|o| (o, *e)));
                t.acquisitions.push(Acquisition {
                    at: w.at,
                    epoch,
                    writer: w.writer.clone(),
                    lead: lead.clone(),
                    from,
                });
                t.acted.push(false);
            }
            row = Some((w.lead_id.clone(), epoch));
            continue;
        }
        let Some(holder) = t.acquisitions.last() else {
            before_lease.push(w);
            continue;
        };
        if w.writer == holder.writer {
            if let Some(acted) = t.acted.last_mut() {
                *acted = true;
            }
            continue;
        }
        let held = t
            .acquisitions
            .iter()
            .rev()
            .find(|a| a.writer == w.writer)
            .map(|a| format!("epoch {} of {}", a.epoch, w.writer))
            .unwrap_or_else(|| format!("{}, which never held it,", w.writer));
        t.stale.push(format!(
            "{run}: {held} wrote {} {} {} ms after {} took epoch {}",
            w.table,
            w.detail,
            ((w.at - holder.at) * 1000.0).round() as i64,
            holder.writer,
            holder.epoch
        ));
    }
    if let Some(first) = t.acquisitions.first() {
        for w in before_lease.iter().filter(|w| w.writer != first.writer) {
            t.stale.push(format!(
                "{run}: {} wrote {} {} before {} took epoch {}",
                w.writer, w.table, w.detail, first.writer, first.epoch
            ));
        }
    }
    t
}

/// The two invariants, and every run's epochs (for the takeover times).
pub fn invariants(
    evidence: &Evidence,
    runs: &[String],
) -> ([Invariant; 2], HashMap<String, Vec<Acquisition>>) {
    let mut stale = Vec::new();
    let mut invisible = Vec::new();
    let mut given_up = Vec::new();
    let (mut epochs, mut takeovers, mut writes) = (0, 0, 0);
    let mut all = HashMap::new();
    for run in runs {
        let audited = evidence.writes.get(run).map(Vec::as_slice).unwrap_or(&[]);
        writes += audited.len();
        let t = timeline(run, audited);
        stale.extend(t.stale.iter().cloned());
        epochs += t.acquisitions.len();
        let events = evidence.events.get(run).map(Vec::as_slice).unwrap_or(&[]);
        let newest = t.acquisitions.last().map_or(0, |a| a.epoch);
        if let Some(now) = evidence.epochs.get(run) {
            if *now != newest {
                invisible.push(format!(
                    "{run}: its lease is at epoch {now}, the audit saw epoch {newest}"
                ));
            }
        }
        for (a, acted) in t.acquisitions.iter().zip(&t.acted) {
            let Some((from_lead, from_epoch)) = &a.from else {
                continue;
            };
            takeovers += 1;
            let seen = events.iter().any(|e| {
                e["event"] == "lead_takeover"
                    && e["epoch"] == a.epoch
                    && e["from_epoch"] == *from_epoch
                    && e["lead"] == a.lead.as_str()
                    && e["from_lead"] == from_lead.as_str()
            });
            if seen {
                continue;
            }
            if *acted {
                invisible.push(format!(
                    "{run}: {} took epoch {} from {from_lead} (epoch {from_epoch}) and drove it, with no lead_takeover event",
                    a.writer, a.epoch
                ));
            } else {
                given_up.push(format!("{run} epoch {}", a.epoch));
            }
        }
        for e in events.iter().filter(|e| e["event"] == "lead_takeover") {
            if !t.acquisitions.iter().any(|a| e["epoch"] == a.epoch) {
                invisible.push(format!(
                    "{run}: a lead_takeover event names an epoch no lead took: {e}"
                ));
            }
        }
        all.insert(run.clone(), t.acquisitions);
    }
    let visible_detail = if given_up.is_empty() {
        format!("{takeovers} takeovers, each with its lead_takeover event")
    } else {
        format!(
            "{takeovers} takeovers; each that drove its run has its lead_takeover event; {} taken and given up at once without driving (a run waiting for an answer, or ended), which the lead journals no event for: {}",
            given_up.len(),
            given_up.join(", ")
        )
    };
    (
        [
            invariant(
                "at most one epoch acts for a run",
                stale,
                format!(
                    "{writes} audited writes over {epochs} epochs of {} runs: each from the lead holding the run's newest epoch",
                    runs.len()
                ),
            ),
            invariant("every takeover is visible in the run's events", invisible, visible_detail),
        ],
        all,
    )
}

/// For a lead fault at `hit` (the database's clock) on a lead holding `held` (run, epoch):
/// how long until each run had a newer epoch.
pub fn taken_over_after(
    acquisitions: &HashMap<String, Vec<Acquisition>>,
    held: &[(String, i64)],
    hit: f64,
) -> Vec<Duration> {
    held.iter()
        .filter_map(|(run, epoch)| {
            acquisitions
                .get(run)?
                .iter()
                .find(|a| a.epoch > *epoch)
                .map(|a| Duration::from_secs_f64((a.at - hit).max(0.0)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(seq: i64, writer: &str, table: &str, lease: Option<(&str, i64)>) -> Write {
        Write {
            at: seq as f64,
            writer: writer.into(),
            table: table.into(),
            lead_id: lease.map(|(l, _)| l.to_owned()),
            epoch: lease.map(|(_, e)| e),
            detail: String::new(),
        }
    }

    fn release(seq: i64, writer: &str, epoch: i64) -> Write {
        Write {
            epoch: Some(epoch),
            ..w(seq, writer, "run_leases", None)
        }
    }

    #[test]
    fn a_write_of_an_older_epoch_after_a_takeover_is_stale() {
        let writes = vec![
            w(1, "lead-0.1", "run_leases", Some(("A", 1))),
            w(2, "lead-0.1", "runs", None),
            w(3, "lead-0.1", "checkpoints", None),
            w(4, "lead-1.1", "run_leases", Some(("B", 2))),
            w(5, "lead-1.1", "checkpoints", None),
            w(6, "lead-0.1", "checkpoints", None),
            release(7, "lead-1.1", 2),
            w(8, "lead-1.1", "run_events", None),
        ];
        let t = timeline("r", &writes);
        assert_eq!(t.acquisitions.len(), 2);
        assert_eq!(t.acquisitions[1].from, Some(("A".to_owned(), 1)));
        assert_eq!(t.stale.len(), 1, "{:?}", t.stale);
        assert!(t.stale[0].contains("epoch 1 of lead-0.1 wrote checkpoints"));
        assert_eq!(t.acted, [true, true]);
    }

    #[test]
    fn a_takeover_that_drove_the_run_needs_its_event() {
        let writes = vec![
            w(1, "lead-0.1", "run_leases", Some(("A", 1))),
            w(2, "lead-0.1", "checkpoints", None),
            w(3, "lead-1.1", "run_leases", Some(("B", 2))),
            w(4, "lead-1.1", "checkpoints", None),
            release(5, "lead-1.1", 2),
            // Re-acquired after a release: not a takeover.
            w(6, "lead-2.1", "run_leases", Some(("C", 3))),
        ];
        let runs = vec!["r".to_owned()];
        let mut evidence = Evidence::default();
        evidence.writes.insert("r".into(), writes);
        evidence.epochs.insert("r".into(), 3);
        let ([alone, visible], _) = invariants(&evidence, &runs);
        assert!(alone.held, "{}", alone.detail);
        assert!(!visible.held);
        evidence.events.insert(
            "r".into(),
            vec![serde_json::json!({"event": "lead_takeover", "from_lead": "A", "from_epoch": 1, "lead": "B", "epoch": 2})],
        );
        let ([_, visible], all) = invariants(&evidence, &runs);
        assert!(visible.held, "{}", visible.detail);
        let took = taken_over_after(&all, &[("r".to_owned(), 1)], 1.5);
        assert_eq!(took, [Duration::from_millis(1500)]);
    }
}
