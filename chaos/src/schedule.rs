//! The schedule from start to report: the cluster started and warmed by one run, the
//! memory measured, the runs driven while the faults fire at their times, the invariants
//! checked once every run has ended, the cluster stopped and checked for leftovers, the
//! report built.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::checks;
use crate::cluster::ChaosCluster;
use crate::command::Mode;
use crate::faults::{self, FaultOutcome};
use crate::plan::{self, Plan, PlannedRun};
use crate::report;
use crate::runs::{drive, RunOutcome};

/// The schedule from start to report.
pub async fn schedule(
    cluster: Arc<ChaosCluster>,
    plan: Plan,
    workers: u32,
    mode: Mode,
) -> anyhow::Result<report::Report> {
    start(&cluster).await?;
    tokio::spawn(ChaosCluster::watch_lead(cluster.clone()));
    let memory_before = warm_up(&cluster).await;
    let started = Instant::now();
    let (fault_outcomes, runs) = play(&cluster, &plan, started).await;
    let elapsed = started.elapsed();
    let healthy = cluster.wait_healthy(Duration::from_secs(60)).await;
    let invariants =
        checks::after_runs(&cluster, &runs, &memory_before, healthy, &fault_outcomes).await;
    let lead_pid = cluster.lead_pid();
    cluster.stop();
    let mut invariants = invariants;
    invariants.push(checks::nothing_left(&cluster.dir, lead_pid));
    let figures = figures(&cluster, &fault_outcomes);
    Ok(report::build(
        &plan,
        mode,
        workers,
        &runs,
        &fault_outcomes,
        invariants,
        elapsed,
        figures,
    ))
}

/// Starts the cluster (in multi-host mode its hosts and proxies first, then the lead)
/// and waits until every process is healthy; stops it when it does not come up.
async fn start(cluster: &ChaosCluster) -> anyhow::Result<()> {
    if let Some(m) = &cluster.multi {
        if let Err(e) = m.start() {
            cluster.stop();
            return Err(e);
        }
    }
    if let Err(e) = cluster.start_lead(None) {
        cluster.stop();
        return Err(e);
    }
    if !cluster.wait_healthy(Duration::from_secs(90)).await {
        cluster.stop();
        anyhow::bail!(
            "the cluster did not come up; see {}",
            cluster.lead_log(1).display()
        );
    }
    Ok(())
}

/// One run before the schedule warms every process, so their memory is measured warm:
/// that memory.
async fn warm_up(cluster: &Arc<ChaosCluster>) -> checks::Memory {
    let warm = PlannedRun {
        index: 10_000,
        kind: plan::RunKind::Tools,
        at: Duration::ZERO,
    };
    let now = Instant::now();
    drive(cluster.clone(), warm, now, now + Duration::from_secs(120)).await;
    checks::memory(cluster).await
}

/// The schedule's runs driven and its faults fired, each at its time after `started`:
/// what came of each fault and each run, once all have ended.
async fn play(
    cluster: &Arc<ChaosCluster>,
    plan: &Plan,
    started: Instant,
) -> (Vec<FaultOutcome>, Vec<RunOutcome>) {
    // Runs get the schedule plus time to finish once the faults have stopped.
    let deadline = started + plan.duration + Duration::from_secs(180);
    let drivers: Vec<_> = plan
        .runs
        .iter()
        .cloned()
        .map(|run| tokio::spawn(drive(cluster.clone(), run, started, deadline)))
        .collect();
    let faults: Vec<_> = plan
        .faults
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, fault)| {
            let cluster = cluster.clone();
            let pick = (plan.seed as usize).wrapping_add(i * 7919);
            tokio::spawn(async move {
                tokio::time::sleep_until((started + fault.at).into()).await;
                faults::inject(&cluster, fault.kind, fault.pause, started, pick).await
            })
        })
        .collect();
    let mut fault_outcomes: Vec<FaultOutcome> = Vec::new();
    for f in faults {
        if let Ok(o) = f.await {
            fault_outcomes.push(o);
        }
    }
    let mut runs: Vec<RunOutcome> = Vec::new();
    for d in drivers {
        if let Ok(o) = d.await {
            runs.push(o);
        }
    }
    (fault_outcomes, runs)
}

/// The recovery figures, from the faults and the events the runs reported.
fn figures(cluster: &ChaosCluster, fault_outcomes: &[FaultOutcome]) -> report::Figures {
    let observed = cluster.events.all();
    let node_of = |replica: u32| match &cluster.multi {
        Some(m) => m
            .node("subagent", replica)
            .map(|i| m.nodes[i].name.clone())
            .unwrap_or_default(),
        None => format!("subagent-{replica}"),
    };
    report::Figures::from(fault_outcomes, &observed, node_of)
}
