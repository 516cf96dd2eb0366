//! The runs of a schedule, each driven from its submission to its end: submitted through
//! the gateway at its time (again with the same idempotency key when a reply was lost),
//! its events followed, its clarification answered, its last view kept.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::cluster::ChaosCluster;
use crate::events;
use crate::plan::{self, PlannedRun};

/// What became of one run of the schedule.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub planned: PlannedRun,
    pub run_id: Option<String>,
    /// The last view seen.
    pub view: Value,
    pub answered: bool,
    pub ended_at: Option<Duration>,
}

/// The run's submission (`POST /api/runs`) and its `Idempotency-Key`: a submission whose
/// reply was lost (the lead killed or paused) is repeated with the same key, and the lead
/// answers the first one's run instead of starting a second.
pub fn submission(run: &PlannedRun) -> (Value, String) {
    let body = json!({
        "task": format!("chaos run {} ({})", run.index, run.kind.as_str()),
        "thread": format!("chaos-{}", run.index),
        "playbook_yaml": plan::playbook(run),
        "subagents": run.kind == plan::RunKind::Delegate,
    });
    (body, format!("chaos-run-{}", run.index))
}

/// Submits the run at its time and follows it to its end (answering its clarification),
/// riding out a lead that is away.
pub async fn drive(
    cluster: Arc<ChaosCluster>,
    run: PlannedRun,
    started: Instant,
    deadline: Instant,
) -> RunOutcome {
    tokio::time::sleep_until((started + run.at).into()).await;
    let mut outcome = RunOutcome {
        planned: run.clone(),
        run_id: None,
        view: Value::Null,
        answered: false,
        ended_at: None,
    };
    let (body, key) = submission(&run);
    while Instant::now() < deadline {
        match cluster
            .post_keyed("/api/runs", body.clone(), Some(&key))
            .await
        {
            Ok((201, reply)) => {
                outcome.run_id = reply["run_id"].as_str().map(str::to_owned);
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
    let Some(id) = outcome.run_id.clone() else {
        return outcome;
    };
    tokio::spawn(events::follow(
        cluster.clone(),
        run.index,
        id.clone(),
        deadline,
    ));
    while Instant::now() < deadline {
        if let Some(view) = cluster.get(&format!("/api/runs/{id}")).await {
            let status = view["status"].as_str().unwrap_or_default().to_owned();
            outcome.view = view;
            match status.as_str() {
                "success" | "error" => {
                    outcome.ended_at = Some(started.elapsed());
                    return outcome;
                }
                "interrupted" if !outcome.view["question"].is_null() => {
                    if let Ok((code, _)) = cluster
                        .post(
                            &format!("/api/runs/{id}/answer"),
                            json!({"answer": "Chaos"}),
                        )
                        .await
                    {
                        outcome.answered |= code < 300;
                    }
                }
                _ => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    outcome
}
