//! The chaos report: per fault kind, how many were injected, survived, and how long
//! recovery took (p50 and max) against its target; the invariants; the runs and their
//! throughput. As a table for people and as one JSON object. It passes (`ok`, exit 0) only
//! when every invariant held and every recovery target was met.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use crate::checks::Invariant;
use crate::events::{self, Observed};
use crate::faults::{FaultOutcome, Signal, Target};
use crate::plan::Plan;
use crate::runs::RunOutcome;

/// The recovery figures the benchmark names, from the schedule's faults and the
/// runs' events: a restarted host serving again, a resumed run continuing after the lead
/// is back, a lost worker's task reported failed. Each a list of samples.
pub struct Figures {
    /// Run events followed (for the last two).
    pub events: usize,
    pub host_serving: Vec<Duration>,
    pub run_continuing: Vec<Duration>,
    pub task_failed: Vec<Duration>,
    /// Multi-lead mode: from a lead fault to each running run it held having a new epoch.
    pub taken_over: Vec<Duration>,
}

/// Targets: at most 3 s, 5 s, 4 s and 5 s (issue 38: a dead lead's runs taken over
/// within 5 s).
const TARGETS_MS: [u64; 4] = [3000, 5000, 4000, 5000];

impl Figures {
    /// `node_of(replica)`: the node name a worker replica's tasks report.
    pub fn from(
        faults: &[FaultOutcome],
        observed: &[Observed],
        node_of: impl Fn(u32) -> String,
    ) -> Figures {
        let killed = |f: &&FaultOutcome| {
            f.pid.is_some() && matches!(f.kind.signal, Signal::Kill | Signal::Term)
        };
        let host_serving = faults
            .iter()
            .filter(killed)
            .filter(|f| {
                matches!(
                    f.kind.target,
                    Target::McpHost | Target::SandboxHost | Target::Worker
                )
            })
            // From the old process's exit: a SIGTERM's drain (the work in flight
            // finished first) is the grace an operator gives, not the restart.
            .filter_map(|f| Some(f.recovery?.saturating_sub(f.drained.unwrap_or_default())))
            .collect();
        let run_continuing = faults
            .iter()
            .filter(killed)
            .filter(|f| f.kind.target == Target::Lead)
            .filter_map(|f| Some(events::continued_after(observed, f.hit, f.back?)))
            .flatten()
            .collect();
        let task_failed = faults
            .iter()
            .filter(killed)
            .filter(|f| f.kind.target == Target::Worker)
            .flat_map(|f| events::lost_tasks_failed(observed, &node_of(f.replica), f.hit))
            .collect();
        Figures {
            events: observed.len(),
            host_serving,
            run_continuing,
            task_failed,
            taken_over: Vec::new(),
        }
    }

    fn rows(&self) -> [(&'static str, &Vec<Duration>, u64); 4] {
        [
            (
                "a restarted host serving again (from its exit)",
                &self.host_serving,
                TARGETS_MS[0],
            ),
            (
                "a resumed run continuing after the lead is back",
                &self.run_continuing,
                TARGETS_MS[1],
            ),
            (
                "a lost worker's task reported failed",
                &self.task_failed,
                TARGETS_MS[2],
            ),
            (
                "a lead fault's runs under a new epoch (from the fault)",
                &self.taken_over,
                TARGETS_MS[3],
            ),
        ]
    }
}

fn p50_max(samples: &[Duration]) -> (Option<Duration>, Option<Duration>) {
    let mut sorted = samples.to_vec();
    sorted.sort();
    (
        sorted.get(sorted.len() / 2).copied(),
        sorted.last().copied(),
    )
}

/// The report in both forms, and whether the schedule passed: every invariant held and
/// every recovery target was met.
pub struct Report {
    pub table: String,
    pub json: Value,
    pub ok: bool,
    /// Why it did not pass (empty when `ok`): the invariants broken, the targets missed.
    pub failures: Vec<String>,
}

/// Why a schedule fails: each invariant that broke, and each recovery figure whose worst
/// sample is over its target (a figure without samples is not missed).
pub fn failures(invariants: &[Invariant], figures: &Figures) -> Vec<String> {
    let mut out: Vec<String> = invariants
        .iter()
        .filter(|i| !i.held)
        .map(|i| format!("invariant broken: {}", i.name))
        .collect();
    for (name, samples, target) in figures.rows() {
        if let (_, Some(max)) = p50_max(samples) {
            if ms(max) > target {
                out.push(format!(
                    "recovery target missed: {name}: {} ms against {target} ms",
                    ms(max)
                ));
            }
        }
    }
    out
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// A millisecond figure for the table: `-` when there is none.
fn shown_ms(d: Option<Duration>) -> String {
    d.map(|d| ms(d).to_string()).unwrap_or_else(|| "-".into())
}

/// The report of a schedule: its header, then a section per part (the fault kinds, the
/// recovery figures, the invariants, the runs, what failed), each in the table and in
/// the JSON.
#[allow(clippy::too_many_arguments)]
pub fn build(
    plan: &Plan,
    mode: crate::command::Mode,
    workers: u32,
    runs: &[RunOutcome],
    faults: &[FaultOutcome],
    invariants: Vec<Invariant>,
    elapsed: Duration,
    figures: Figures,
) -> Report {
    let mut table = format!(
        "chaos schedule: seed {}, {} mode, {} runs, {} workers, {:.1} s\n{:<26} {:>8} {:>8} {:>8} {:>10} {:>10}\n",
        plan.seed,
        mode.as_str(),
        runs.len(),
        workers,
        elapsed.as_secs_f64(),
        "FAULT",
        "INJECTED",
        "SKIPPED",
        "SURVIVED",
        "P50 MS",
        "MAX MS"
    );
    let kinds_json = fault_kinds(&mut table, faults);
    let figures_json = recovery_figures(&mut table, &figures);
    invariant_lines(&mut table, &invariants);
    let runs_json = run_summary(&mut table, runs, elapsed);
    let failures = failures(&invariants, &figures);
    let ok = failures.is_empty();
    if !ok {
        table.push_str("\nFAILED\n");
        for failure in &failures {
            table.push_str(&format!("  {failure}\n"));
        }
    }
    let json = json!({
        "seed": plan.seed,
        "mode": mode.as_str(),
        "workers": workers,
        "elapsed_s": (elapsed.as_secs_f64() * 10.0).round() / 10.0,
        "runs": runs_json,
        "faults": kinds_json,
        "recovery": figures_json,
        "events_followed": figures.events,
        "fault_events": faults.iter().map(|f| json!({
            "kind": f.kind.name(),
            "at_s": (f.at_s * 10.0).round() / 10.0,
            "pid": f.pid,
            "recovery_ms": f.recovery.map(ms),
            "drained_ms": f.drained.map(ms),
            "evidence": f.evidence,
        })).collect::<Vec<_>>(),
        "invariants": invariants.iter().map(|i| json!({
            "name": i.name, "held": i.held, "detail": i.detail,
        })).collect::<Vec<_>>(),
        "ok": ok,
        "failures": failures,
    });
    Report {
        table,
        json,
        ok,
        failures,
    }
}

/// Per fault kind (by name): injected, skipped, survived, recovery p50 and max.
fn fault_kinds(table: &mut String, faults: &[FaultOutcome]) -> Vec<Value> {
    let mut by_kind: BTreeMap<String, Vec<&FaultOutcome>> = BTreeMap::new();
    for f in faults {
        by_kind.entry(f.kind.name()).or_default().push(f);
    }
    let mut kinds_json = Vec::new();
    for (name, list) in &by_kind {
        let injected: Vec<&&FaultOutcome> = list.iter().filter(|f| f.pid.is_some()).collect();
        let skipped = list.len() - injected.len();
        let mut recoveries: Vec<Duration> = injected.iter().filter_map(|f| f.recovery).collect();
        recoveries.sort();
        let survived = recoveries.len();
        let p50 = recoveries.get(recoveries.len() / 2).copied();
        let max = recoveries.last().copied();
        table.push_str(&format!(
            "{name:<26} {:>8} {skipped:>8} {survived:>8} {:>10} {:>10}\n",
            injected.len(),
            shown_ms(p50),
            shown_ms(max)
        ));
        kinds_json.push(json!({
            "kind": name,
            "injected": injected.len(),
            "skipped": skipped,
            "survived": survived,
            "recovery_ms": {"p50": p50.map(ms), "max": max.map(ms)},
        }));
    }
    kinds_json
}

/// Each recovery figure: its samples, p50 and max against its target.
fn recovery_figures(table: &mut String, figures: &Figures) -> Vec<Value> {
    table.push_str(&format!(
        "\n{:<50} {:>8} {:>10} {:>10} {:>10}\n",
        "RECOVERY", "SAMPLES", "P50 MS", "MAX MS", "TARGET MS"
    ));
    let mut figures_json = Vec::new();
    for (name, samples, target) in figures.rows() {
        let (p50, max) = p50_max(samples);
        table.push_str(&format!(
            "{name:<50} {:>8} {:>10} {:>10} {target:>10}\n",
            samples.len(),
            shown_ms(p50),
            shown_ms(max)
        ));
        figures_json.push(json!({
            "name": name,
            "samples": samples.len(),
            "p50_ms": p50.map(ms),
            "max_ms": max.map(ms),
            "target_ms": target,
            "met": max.is_none_or(|m| ms(m) <= target),
        }));
    }
    figures_json
}

/// Each invariant, held or broken, with its detail (in the JSON, the caller lists them).
fn invariant_lines(table: &mut String, invariants: &[Invariant]) {
    table.push_str("\nINVARIANT\n");
    for inv in invariants {
        table.push_str(&format!(
            "{} {}: {}\n",
            if inv.held { "held  " } else { "BROKEN" },
            inv.name,
            inv.detail
        ));
    }
}

/// The runs: how many ended, succeeded and failed, the throughput, and why each that
/// ended in error did (a fault it met, in its own words).
fn run_summary(table: &mut String, runs: &[RunOutcome], elapsed: Duration) -> Value {
    let ended = runs.iter().filter(|r| r.ended_at.is_some()).count();
    let success = runs
        .iter()
        .filter(|r| r.view["status"] == "success")
        .count();
    let error = runs.iter().filter(|r| r.view["status"] == "error").count();
    let per_min = ended as f64 / elapsed.as_secs_f64().max(1e-9) * 60.0;
    table.push_str(&format!(
        "\nruns: {ended} of {} ended ({success} success, {error} error), {per_min:.1} runs/min\n",
        runs.len()
    ));
    let errors: Vec<Value> = runs
        .iter()
        .filter(|r| r.view["status"] == "error")
        .map(|r| {
            let why: String = r.view["error"]
                .as_str()
                .unwrap_or("(no error text)")
                .chars()
                .take(300)
                .collect();
            table.push_str(&format!(
                "  run {} ({}): {why}\n",
                r.planned.index,
                r.planned.kind.as_str()
            ));
            json!({"run": r.planned.index, "kind": r.planned.kind.as_str(), "error": why})
        })
        .collect();
    json!({"planned": runs.len(), "ended": ended, "success": success, "error": error,
           "throughput_per_min": (per_min * 10.0).round() / 10.0,
           "errors": errors})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(host_serving_ms: &[u64]) -> Figures {
        Figures {
            events: 0,
            host_serving: host_serving_ms
                .iter()
                .map(|m| Duration::from_millis(*m))
                .collect(),
            run_continuing: Vec::new(),
            task_failed: Vec::new(),
            taken_over: Vec::new(),
        }
    }

    fn held(name: &'static str, held: bool) -> Invariant {
        Invariant {
            name,
            held,
            detail: String::new(),
        }
    }

    #[test]
    fn a_missed_recovery_target_fails_the_schedule_though_every_invariant_held() {
        let invariants = [held("no run lost", true)];
        assert!(failures(&invariants, &figures(&[900, 2_999, 3_000])).is_empty());
        assert_eq!(
            failures(&invariants, &figures(&[900, 4_283])),
            ["recovery target missed: a restarted host serving again (from its exit): 4283 ms against 3000 ms"]
        );
        assert_eq!(
            failures(&[held("no run lost", false)], &figures(&[])),
            ["invariant broken: no run lost"]
        );
    }
}
