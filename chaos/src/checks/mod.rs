//! The invariants a chaos schedule must keep, checked against what the cluster left: the
//! runs' views through the gateway, their checkpoints and receipts in runs.sqlite, the
//! files their tools and tasks wrote in the threads' directories, the sandbox pool, the
//! processes' memory, and the processes left once the cluster has stopped.
//! Here: the invariants in the order the report lists them; [`runs`] checks what each run
//! left, [`leaks`] what the cluster holds once they ended, [`memory`] its memory.

mod leaks;
mod memory;
mod runs;

use crate::cluster::ChaosCluster;
use crate::faults::FaultOutcome;
use crate::runs::RunOutcome;

pub use leaks::nothing_left;
pub use memory::{memory, Memory};
pub(crate) use runs::{every_run_ended, what_the_runs_left};

/// One invariant and whether it held.
#[derive(Debug, Clone)]
pub struct Invariant {
    pub name: &'static str,
    pub held: bool,
    pub detail: String,
}

pub(crate) fn invariant(name: &'static str, problems: Vec<String>, fine: String) -> Invariant {
    Invariant {
        name,
        held: problems.is_empty(),
        detail: if problems.is_empty() {
            fine
        } else {
            problems.join("; ")
        },
    }
}

/// The invariants over the runs and the cluster once every run has ended.
pub async fn after_runs(
    cluster: &ChaosCluster,
    runs: &[RunOutcome],
    memory_before: &Memory,
    healthy: bool,
    faults: &[FaultOutcome],
) -> Vec<Invariant> {
    let mut out = vec![runs::every_run_ended(runs)];
    let db = cluster.runtime().join("runs.sqlite");
    out.extend(runs::what_the_runs_left(runs, &cluster.bases(), &|id| {
        runs::stored_in_sqlite(&db, id)
    }));
    out.push(leaks::no_sandbox_leaked(cluster).await);
    out.push(leaks::no_stdio_session_leaked(cluster).await);
    out.push(memory::back_within_a_tenth(cluster, memory_before).await);
    out.push(leaks::serves_again_without_zombies(cluster, healthy).await);
    out.extend(faults_seen_and_recovered(faults));
    out
}

/// Every fault that hit something showed with its reason, and was recovered from.
pub(crate) fn faults_seen_and_recovered(faults: &[FaultOutcome]) -> [Invariant; 2] {
    let invisible: Vec<String> = faults
        .iter()
        .filter(|f| f.pid.is_some() && f.recovery.is_some() && f.evidence.is_none())
        .map(|f| format!("{} at {:.1} s left no trace", f.kind.name(), f.at_s))
        .collect();
    let unrecovered: Vec<String> = faults
        .iter()
        .filter(|f| f.pid.is_some() && f.recovery.is_none())
        .map(|f| format!("{} at {:.1} s did not recover", f.kind.name(), f.at_s))
        .collect();
    [
        invariant(
            "every fault is visible with its reason",
            invisible,
            "each fault shows in `antler status`, a counter or a log line".into(),
        ),
        invariant(
            "every fault is recovered from",
            unrecovered,
            "each hit process is replaced or resumed and the cluster serves again".into(),
        ),
    ]
}
