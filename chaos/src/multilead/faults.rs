//! The lead faults of a multi-lead schedule, each aimed at a lead holding running runs
//! (waiting up to [`AIM_WAIT`] for one) and measured: `kill -9` (the orchestrator starts
//! the slot's next incarnation), SIGSTOP for longer than the lease's time to live then
//! SIGCONT (the woken lead must find its runs lost and stop them), and a partition between
//! the lead and PostgreSQL (its forwarder cut for as long, then healed). Recovery is the
//! time until the slot's lead serves again (from the kill, or from the pause's or the
//! cut's end); the runs it held are timed to their new epochs afterwards, from the audit.
//! Each fault must leave a trace: a new incarnation serving in place of the killed one,
//! or the woken or reconnected lead's log saying it lost its runs' leases (else, for a
//! lead that had let its runs go already, those runs going on at newer epochs).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::audit;
use super::leads::Leads;
use crate::faults::{FaultKind, FaultOutcome, Signal, AIM_WAIT, RECOVERY_LIMIT};
use crate::procfs::send;

/// What the lead logs for a run whose lease it lost (`lead/src/runs/manager/leases.rs`).
const RUN_LOST: &str = "lost the run's lease";

/// One lead fault and what it hit.
pub struct LeadFault {
    pub outcome: FaultOutcome,
    /// The running runs the lead held when hit, with their epochs.
    pub held: Vec<(String, i64)>,
    /// When it was hit, on the database's clock (seconds since the Unix epoch).
    pub db_hit: Option<f64>,
}

/// The lead id slot `k`'s current lead advertises (`leads`, by its gateway's URL).
async fn lead_id(pg: &tokio_postgres::Client, leads: &Leads, k: usize) -> Option<String> {
    pg.query_opt(
        "SELECT lead_id FROM leads WHERE gateway_url = $1 ORDER BY renewed_at DESC LIMIT 1",
        &[&format!("http://{}", leads.slots[k].gateway)],
    )
    .await
    .ok()
    .flatten()
    .map(|r| r.get(0))
}

/// The runs `lead` holds live that are `running` in the store, with their epochs.
async fn held(pg: &tokio_postgres::Client, lead: &str) -> Vec<(String, i64)> {
    pg.query(
        "SELECT l.run_id, l.epoch FROM run_leases l JOIN runs r ON r.run_id = l.run_id \
         WHERE l.lead_id = $1 AND l.expires_at > now() AND r.status = 'running' ORDER BY l.run_id",
        &[&lead],
    )
    .await
    .map(|rows| rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    .unwrap_or_default()
}

/// A slot no other fault holds whose lead runs and holds running runs, chosen by `pick`,
/// waiting up to [`AIM_WAIT`]; the slot is marked held by this fault.
async fn aim(
    pg: &tokio_postgres::Client,
    leads: &Leads,
    pick: usize,
) -> Option<(usize, u32, Vec<(String, i64)>)> {
    let until = Instant::now() + AIM_WAIT;
    loop {
        let mut candidates = Vec::new();
        for (k, slot) in leads.slots.iter().enumerate() {
            if slot.faulted.load(Ordering::SeqCst) {
                continue;
            }
            let (Some(pid), Some(id)) = (leads.pid(k), lead_id(pg, leads, k).await) else {
                continue;
            };
            let runs = held(pg, &id).await;
            if !runs.is_empty() {
                candidates.push((k, pid, runs));
            }
        }
        if !candidates.is_empty() {
            let chosen = candidates.swap_remove(pick % candidates.len());
            if !leads.slots[chosen.0].faulted.swap(true, Ordering::SeqCst) {
                return Some(chosen);
            }
        }
        if Instant::now() >= until {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

/// Injects one lead fault and measures it.
pub async fn inject(
    leads: &Leads,
    pg: &tokio_postgres::Client,
    kind: FaultKind,
    pause: Duration,
    started: Instant,
    pick: usize,
) -> LeadFault {
    let mut fault = LeadFault {
        outcome: FaultOutcome::begun(kind, started),
        held: Vec::new(),
        db_hit: None,
    };
    let Some((k, pid, held)) = aim(pg, leads, pick).await else {
        return fault;
    };
    let slot = &leads.slots[k];
    let log = leads.current_log(k);
    let lost_before = count_lost(&log);
    fault.held = held;
    fault.outcome.replica = k as u32;
    fault.outcome.at_s = started.elapsed().as_secs_f64();
    fault.db_hit = audit::now(pg).await;
    fault.outcome.hit = Instant::now();
    fault.outcome.pid = Some(pid);
    let from = match kind.signal {
        Signal::Kill => {
            send(pid, libc::SIGKILL);
            leads.restart(k, pid).await;
            fault.outcome.hit
        }
        Signal::Stop => {
            send(pid, libc::SIGSTOP);
            tokio::time::sleep(pause).await;
            send(pid, libc::SIGCONT);
            Instant::now()
        }
        _ => {
            slot.forwarder.cut();
            tokio::time::sleep(pause).await;
            slot.forwarder.heal();
            Instant::now()
        }
    };
    fault.outcome.recovery = leads
        .wait_healthy(k, RECOVERY_LIMIT)
        .await
        .map(|_| from.elapsed());
    fault.outcome.back = fault.outcome.recovery.map(|r| from + r);
    fault.outcome.evidence = match kind.signal {
        Signal::Kill => leads.pid(k).filter(|p| *p != pid).map(|p| {
            format!(
                "{} started in its place (pid {p}) and serves",
                leads.incarnation(k)
            )
        }),
        _ => match lost_since(&log, lost_before).await {
            Some(n) => Some(format!(
                "{} says it lost {n} run lease(s) and stopped those runs",
                leads.incarnation(k)
            )),
            // A lead that had let a run go already (its resume failed) has nothing to
            // stop: the runs it held going on at newer epochs show the fault.
            None => taken_over(pg, &fault.held).await.map(|n| {
                format!(
                    "{n} run(s) {} held went on at a newer epoch (it logged no loss)",
                    leads.incarnation(k)
                )
            }),
        },
    };
    slot.faulted.store(false, Ordering::SeqCst);
    fault
}

/// How many of `held` (run, epoch) have a newer epoch now; `None` when none has.
async fn taken_over(pg: &tokio_postgres::Client, held: &[(String, i64)]) -> Option<usize> {
    let mut n = 0;
    for (run, epoch) in held {
        let newer = pg
            .query_opt(
                "SELECT 1 FROM run_leases WHERE run_id = $1 AND epoch > $2",
                &[run, epoch],
            )
            .await
            .ok()
            .flatten();
        n += usize::from(newer.is_some());
    }
    (n > 0).then_some(n)
}

/// The lines of `log` that say a run's lease was lost.
fn count_lost(log: &std::path::Path) -> usize {
    std::fs::read_to_string(log)
        .map(|t| t.lines().filter(|l| l.contains(RUN_LOST)).count())
        .unwrap_or(0)
}

/// How many more lost leases `log` tells of than `before`, waiting up to 30 s for one.
async fn lost_since(log: &std::path::Path, before: usize) -> Option<usize> {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let now = count_lost(log);
        if now > before {
            return Some(now - before);
        }
        if Instant::now() >= until {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
