//! The runs of a multi-lead schedule, each driven from its submission to its end: submitted
//! round robin through the leads' gateways (run i through lead i mod N; again with the same
//! idempotency key through the next lead when a reply is lost, as a client behind a
//! Service would), read through any lead that answers, and a clarification answered through
//! another lead than the one it was submitted to (the write goes to the run's owner).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::leads::Leads;
use crate::plan::PlannedRun;
use crate::runs::{submission, RunOutcome};

/// Submits the run at its time and follows it to its end, riding out leads that are away.
pub async fn drive(
    leads: Arc<Leads>,
    run: PlannedRun,
    started: Instant,
    deadline: Instant,
) -> RunOutcome {
    tokio::time::sleep_until((started + run.at).into()).await;
    let n = leads.slots.len();
    let mut outcome = RunOutcome {
        planned: run.clone(),
        run_id: None,
        view: Value::Null,
        answered: false,
        ended_at: None,
    };
    let (body, key) = submission(&run);
    let mut attempt = 0;
    while Instant::now() < deadline {
        let slot = (run.index + attempt) % n;
        match leads.post(slot, "/api/runs", &body, Some(&key)).await {
            Ok((201, reply)) => {
                outcome.run_id = reply["run_id"].as_str().map(str::to_owned);
                break;
            }
            _ => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
    let Some(id) = outcome.run_id.clone() else {
        return outcome;
    };
    let mut poll = 0;
    while Instant::now() < deadline {
        poll += 1;
        if let Some(view) = leads
            .get_any(run.index + poll, &format!("/api/runs/{id}"))
            .await
        {
            let status = view["status"].as_str().unwrap_or_default().to_owned();
            outcome.view = view;
            match status.as_str() {
                "success" | "error" => {
                    outcome.ended_at = Some(started.elapsed());
                    return outcome;
                }
                "interrupted" => {
                    // Through another lead than the one it was submitted to.
                    let slot = (run.index + 1 + poll) % n;
                    if let Ok((code, _)) = leads
                        .post(
                            slot,
                            &format!("/api/runs/{id}/answer"),
                            &json!({"answer": "Chaos"}),
                            None,
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
