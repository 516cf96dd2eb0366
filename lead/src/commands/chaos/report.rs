//! The chaos report: per fault kind, how many were injected, survived, and how long
//! recovery took (p50 and max); the invariants; the runs and their throughput. As a table
//! for people and as one JSON object.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use super::checks::Invariant;
use super::faults::FaultOutcome;
use super::plan::Plan;
use super::RunOutcome;

/// The report in both forms, and whether every invariant held.
pub struct Report {
    pub table: String,
    pub json: Value,
    pub ok: bool,
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

pub fn build(
    plan: &Plan,
    mode: super::Mode,
    workers: u32,
    runs: &[RunOutcome],
    faults: &[FaultOutcome],
    invariants: Vec<Invariant>,
    elapsed: Duration,
) -> Report {
    let mut by_kind: BTreeMap<String, Vec<&FaultOutcome>> = BTreeMap::new();
    for f in faults {
        by_kind.entry(f.kind.name()).or_default().push(f);
    }
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
    let mut kinds_json = Vec::new();
    for (name, list) in &by_kind {
        let injected: Vec<&&FaultOutcome> = list.iter().filter(|f| f.pid.is_some()).collect();
        let skipped = list.len() - injected.len();
        let mut recoveries: Vec<Duration> = injected.iter().filter_map(|f| f.recovery).collect();
        recoveries.sort();
        let survived = recoveries.len();
        let p50 = recoveries.get(recoveries.len() / 2).copied();
        let max = recoveries.last().copied();
        let show = |d: Option<Duration>| d.map(|d| ms(d).to_string()).unwrap_or_else(|| "-".into());
        table.push_str(&format!(
            "{name:<26} {:>8} {skipped:>8} {survived:>8} {:>10} {:>10}\n",
            injected.len(),
            show(p50),
            show(max)
        ));
        kinds_json.push(json!({
            "kind": name,
            "injected": injected.len(),
            "skipped": skipped,
            "survived": survived,
            "recovery_ms": {"p50": p50.map(ms), "max": max.map(ms)},
        }));
    }
    table.push_str("\nINVARIANT\n");
    for inv in &invariants {
        table.push_str(&format!(
            "{} {}: {}\n",
            if inv.held { "held  " } else { "BROKEN" },
            inv.name,
            inv.detail
        ));
    }
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
    let ok = invariants.iter().all(|i| i.held);
    let json = json!({
        "seed": plan.seed,
        "mode": mode.as_str(),
        "workers": workers,
        "elapsed_s": (elapsed.as_secs_f64() * 10.0).round() / 10.0,
        "runs": {"planned": runs.len(), "ended": ended, "success": success, "error": error,
                 "throughput_per_min": (per_min * 10.0).round() / 10.0},
        "faults": kinds_json,
        "fault_events": faults.iter().map(|f| json!({
            "kind": f.kind.name(),
            "at_s": (f.at_s * 10.0).round() / 10.0,
            "pid": f.pid,
            "recovery_ms": f.recovery.map(ms),
            "evidence": f.evidence,
        })).collect::<Vec<_>>(),
        "invariants": invariants.iter().map(|i| json!({
            "name": i.name, "held": i.held, "detail": i.detail,
        })).collect::<Vec<_>>(),
        "ok": ok,
    });
    Report { table, json, ok }
}
