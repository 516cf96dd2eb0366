//! The invariants over what each run left: it ended; its outputs presented once and on
//! disk; one delivery receipt; every tool call with exactly one result in its last
//! checkpoint (runs.sqlite, or the PostgreSQL store in multi-lead mode); its subagent tasks
//! and its sandbox call run once (their trace files in the thread's directories, on
//! whichever sandbox-host replica holds them).

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{invariant, Invariant};
use crate::plan::{self, RunKind};
use crate::runs::RunOutcome;

/// Every run ends in a terminal state.
pub(crate) fn every_run_ended(runs: &[RunOutcome]) -> Invariant {
    let not_ended: Vec<String> = runs
        .iter()
        .filter(|r| r.ended_at.is_none())
        .map(|r| match &r.run_id {
            None => format!("run {} was never accepted", r.planned.index),
            Some(id) => format!(
                "{id} still `{}`",
                r.view["status"].as_str().unwrap_or("unknown")
            ),
        })
        .collect();
    invariant(
        "every run ends in a terminal state",
        not_ended,
        format!("{} of {} runs ended", runs.len(), runs.len()),
    )
}

/// A run's last checkpointed state and its receipts, by run id, from the runs store.
pub(crate) type Stored<'a> = &'a dyn Fn(&str) -> Result<(Value, u32), String>;

/// The invariants over what the runs that ended left, in the threads' directories under
/// `bases` and in the runs store (`stored`).
pub(crate) fn what_the_runs_left(
    runs: &[RunOutcome],
    bases: &[PathBuf],
    stored: Stored<'_>,
) -> [Invariant; 5] {
    let mut problems = Problems::default();
    for r in runs {
        let (Some(id), Some(_)) = (&r.run_id, r.ended_at) else {
            continue;
        };
        problems.artifacts(r, id, bases);
        problems.stored(r, id, stored);
        problems.traces(r, id, bases);
    }
    let ended = runs.iter().filter(|r| r.ended_at.is_some()).count();
    problems.invariants(ended)
}

/// What the runs' checks found, per invariant.
#[derive(Default)]
struct Problems {
    artifacts: Vec<String>,
    receipts: Vec<String>,
    results: Vec<String>,
    tasks: Vec<String>,
    once: Vec<String>,
}

impl Problems {
    /// The run `id` presents each output once, what it presented is on disk, and an
    /// output it produced is presented when it ended in success.
    fn artifacts(&mut self, r: &RunOutcome, id: &str, bases: &[PathBuf]) {
        let i = r.planned.index;
        let success = r.view["status"] == "success";
        let artifacts: Vec<String> = r.view["artifacts"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let mut seen = std::collections::HashSet::new();
        for a in &artifacts {
            if !seen.insert(a) {
                self.artifacts.push(format!("{id} presents {a} twice"));
            }
        }
        for a in expected_artifacts(r.planned.kind, i) {
            let on_disk = on_disk(bases, i, &a);
            if artifacts.contains(&a) && !on_disk {
                self.artifacts
                    .push(format!("{id} presented {a}, which is gone"));
            }
            // A scripted model goes on after a failed write; an output it did produce
            // must be delivered (settlement turns an unpresented one into an error).
            if success && on_disk && !artifacts.contains(&a) {
                self.artifacts
                    .push(format!("{id} ended success without presenting {a}"));
            }
        }
    }

    /// The run `id`'s last checkpoint answers every tool call once, and a successful run
    /// has one receipt.
    fn stored(&mut self, r: &RunOutcome, id: &str, stored: Stored<'_>) {
        let success = r.view["status"] == "success";
        match stored(id) {
            Err(e) => self.results.push(format!("{id}: {e}")),
            Ok((state, receipts)) => {
                if success && receipts != 1 {
                    self.receipts.push(format!("{id} has {receipts} receipts"));
                }
                let messages = state["messages"].as_array().cloned().unwrap_or_default();
                self.results.extend(
                    unanswered(&messages)
                        .into_iter()
                        .map(|p| format!("{id}: {p}")),
                );
            }
        }
    }

    /// The run `id`'s subagent tasks and its bash call each ran once at most.
    fn traces(&mut self, r: &RunOutcome, id: &str, bases: &[PathBuf]) {
        let i = r.planned.index;
        if r.planned.kind == RunKind::Delegate {
            for task in ["a", "b"] {
                let n = lines(bases, i, &plan::task_trace(i, task));
                if n > 1 {
                    self.tasks.push(format!("{id}: task {task} ran {n} times"));
                }
            }
        }
        if r.planned.kind == RunKind::Tools {
            let n = lines(bases, i, &format!("/mnt/user-data/workspace/bash-{i}.log"));
            if n > 1 {
                self.once.push(format!("{id}: its bash call ran {n} times"));
            }
        }
    }

    /// The five invariants, `ended` runs having been checked.
    fn invariants(self, ended: usize) -> [Invariant; 5] {
        [
            invariant(
                "no artifact is lost or presented twice",
                self.artifacts,
                "every finished run presents its outputs once, and they are on disk".into(),
            ),
            invariant(
                "exactly one delivery receipt per finished run",
                self.receipts,
                "one receipt each".into(),
            ),
            invariant(
                "every tool call has exactly one result in the run's messages",
                self.results,
                format!("checked the last checkpoint of {ended} runs"),
            ),
            invariant(
                "no task runs twice",
                self.tasks,
                "each task's trace file has at most one line".into(),
            ),
            invariant(
                "no sandbox call runs twice",
                self.once,
                "each run's bash trace has at most one line".into(),
            ),
        ]
    }
}

/// The outputs a finished run of `kind` presents.
fn expected_artifacts(kind: RunKind, i: usize) -> Vec<String> {
    let out = |f: String| format!("/mnt/user-data/outputs/{f}");
    match kind {
        RunKind::Tools => vec![out(format!("report-{i}.md"))],
        RunKind::Clarify => vec![out(format!("answered-{i}.md"))],
        RunKind::Delegate => vec![out(format!("sub-{i}-a.md")), out(format!("sub-{i}-b.md"))],
    }
}

/// A virtual path of thread `chaos-i` on each sandbox-host replica's base (its files are
/// on the replica its thread is pinned to).
fn host_paths(bases: &[PathBuf], i: usize, virtual_path: &str) -> Vec<PathBuf> {
    bases
        .iter()
        .map(|b| {
            b.join(format!("users/default/threads/chaos-{i}/user-data"))
                .join(virtual_path.trim_start_matches("/mnt/user-data/"))
        })
        .collect()
}

/// Whether the file is on some replica.
fn on_disk(bases: &[PathBuf], i: usize, virtual_path: &str) -> bool {
    host_paths(bases, i, virtual_path)
        .iter()
        .any(|p| p.is_file())
}

/// The lines of the file, over every replica.
fn lines(bases: &[PathBuf], i: usize, virtual_path: &str) -> usize {
    host_paths(bases, i, virtual_path)
        .iter()
        .map(|p| {
            std::fs::read_to_string(p)
                .map(|t| t.lines().count())
                .unwrap_or(0)
        })
        .sum()
}

/// The run's last checkpointed state and its receipts, from runs.sqlite.
pub(crate) fn stored_in_sqlite(db: &Path, run_id: &str) -> Result<(Value, u32), String> {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(|e| e.to_string())?;
    let state: String = conn
        .query_row(
            "SELECT state FROM checkpoints WHERE run_id = ?1 ORDER BY step DESC LIMIT 1",
            [run_id],
            |r| r.get(0),
        )
        .map_err(|e| format!("no checkpoint: {e}"))?;
    let receipts: u32 = conn
        .query_row(
            "SELECT COUNT(*) FROM receipts WHERE run_id = ?1",
            [run_id],
            |r| r.get(0),
        )
        .map_err(|e| e.to_string())?;
    Ok((
        serde_json::from_str(&state).map_err(|e| e.to_string())?,
        receipts,
    ))
}

/// Tool calls of the messages without exactly one result, and results without a call.
fn unanswered(messages: &[Value]) -> Vec<String> {
    let mut calls = Vec::new();
    let mut results: std::collections::HashMap<String, usize> = Default::default();
    for m in messages {
        if let Some(tc) = m["tool_calls"].as_array() {
            calls.extend(
                tc.iter()
                    .filter_map(|c| c["id"].as_str().map(str::to_owned)),
            );
        }
        if m["role"] == "tool" {
            if let Some(id) = m["tool_call_id"].as_str() {
                *results.entry(id.to_owned()).or_default() += 1;
            }
        }
    }
    let mut problems: Vec<String> = calls
        .iter()
        .filter(|c| results.get(*c).copied().unwrap_or(0) != 1)
        .map(|c| {
            format!(
                "call {c} has {} results",
                results.get(c).copied().unwrap_or(0)
            )
        })
        .collect();
    for id in results.keys() {
        if !calls.contains(id) {
            problems.push(format!("result {id} answers no call"));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_call_needs_exactly_one_result() {
        let ok = vec![
            json!({"role": "assistant", "tool_calls": [{"id": "a"}, {"id": "b"}]}),
            json!({"role": "tool", "tool_call_id": "a"}),
            json!({"role": "tool", "tool_call_id": "b"}),
        ];
        assert!(unanswered(&ok).is_empty());
        let twice = vec![
            json!({"role": "assistant", "tool_calls": [{"id": "a"}]}),
            json!({"role": "tool", "tool_call_id": "a"}),
            json!({"role": "tool", "tool_call_id": "a"}),
            json!({"role": "tool", "tool_call_id": "z"}),
        ];
        assert_eq!(
            unanswered(&twice),
            ["call a has 2 results", "result z answers no call"]
        );
    }
}
