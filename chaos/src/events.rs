//! What the runs of a chaos schedule report as they go, followed through the gateway's
//! server-sent events (`GET /api/runs/{id}/events`), each event stamped when it arrives,
//! for the recovery figures no cluster view shows: how long after the lead is back a
//! resumed run continues, and how long a lost worker's task takes to be reported failed.
//! A stream that breaks (the lead killed or paused) is opened again; the events replayed
//! on a new stream that were seen before are not counted again.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use std::time::{Duration, Instant};

use futures::StreamExt as _;
use serde_json::Value;

use crate::cluster::ChaosCluster;

/// One event of a run, as it arrived.
#[derive(Debug, Clone)]
pub struct Observed {
    pub run: usize,
    pub at: Instant,
    pub event: Value,
}

/// The events so far, and each (run, event) once.
type Seen = (Vec<Observed>, HashSet<(usize, String)>);

/// Every run's events, in arrival order.
#[derive(Debug, Default)]
pub struct Events {
    seen: Mutex<Seen>,
}

impl Events {
    fn record(&self, run: usize, event: Value) {
        let key = (run, event.to_string());
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        // An `end` that is not final (a run stopped at a question, or not resumed yet)
        // may come again: only the final one matters.
        if seen.1.insert(key) {
            seen.0.push(Observed {
                run,
                at: Instant::now(),
                event,
            });
        }
    }

    /// Everything observed so far.
    pub fn all(&self) -> Vec<Observed> {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clone()
    }
}

/// Follows run `run_id` (the schedule's run `run`) until it ends or `deadline`.
pub async fn follow(cluster: Arc<ChaosCluster>, run: usize, run_id: String, deadline: Instant) {
    let url = format!("http://{}/api/runs/{run_id}/events", cluster.gateway);
    while Instant::now() < deadline {
        let reply = cluster
            .http
            .get(&url)
            .bearer_auth(&cluster.token)
            .timeout(deadline.saturating_duration_since(Instant::now()))
            .send()
            .await;
        let Ok(reply) = reply.map_err(drop).and_then(|r| {
            if r.status().is_success() {
                Ok(r)
            } else {
                Err(())
            }
        }) else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let mut stream = reply.bytes_stream();
        let mut buffer = String::new();
        loop {
            // A paused lead sends nothing: the stream is opened again after a while.
            let next = tokio::time::timeout(Duration::from_secs(4), stream.next()).await;
            let Ok(Some(Ok(chunk))) = next else { break };
            buffer.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buffer.find("\n\n") {
                let block: String = buffer.drain(..end + 2).collect();
                let mut name = "";
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(n) = line.strip_prefix("event:") {
                        name = n.trim();
                    } else if let Some(d) = line.strip_prefix("data:") {
                        data.push_str(d.trim_start());
                    }
                }
                match name {
                    "run" => {
                        if let Ok(event) = serde_json::from_str::<Value>(&data) {
                            cluster.events.record(run, event);
                        }
                    }
                    "end" => {
                        let status = serde_json::from_str::<Value>(&data)
                            .ok()
                            .and_then(|v| v["status"].as_str().map(str::to_owned));
                        cluster
                            .events
                            .record(run, serde_json::json!({"event": "end", "status": status}));
                        // Ended for good. Stopped at a question it goes on once answered; a
                        // lead that has not resumed it yet says `running`: follow again.
                        if matches!(status.as_deref(), Some("success" | "error")) {
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(300)).await;
                    }
                    _ => {}
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How long after `back` (the lead answering again) each run that was running at `hit`
/// reported its first new event: the resumed run continuing.
pub fn continued_after(events: &[Observed], hit: Instant, back: Instant) -> Vec<Duration> {
    // Runs with events before the fault that had not ended (a run stopped at a question
    // goes on once answered, so it counts).
    let running: HashSet<usize> = events
        .iter()
        .filter(|o| o.at < hit)
        .map(|o| o.run)
        .filter(|run| {
            !events.iter().any(|o| {
                o.run == *run
                    && o.at < hit
                    && o.event["event"] == "end"
                    && (o.event["status"] == "success" || o.event["status"] == "error")
            })
        })
        .collect();
    running
        .into_iter()
        .filter_map(|run| {
            events
                .iter()
                .find(|o| o.run == run && o.at >= back)
                .map(|o| o.at - back)
        })
        .collect()
}

/// The tasks on worker `node` running at `hit` (started, not yet ended), and how long
/// after `hit` each was reported failed.
pub fn lost_tasks_failed(events: &[Observed], node: &str, hit: Instant) -> Vec<Duration> {
    let task = |o: &Observed| o.event["task_id"].as_str().map(|t| (o.run, t.to_owned()));
    let kind = |o: &Observed| o.event["type"].as_str().unwrap_or_default().to_owned();
    let on_node: HashSet<(usize, String)> = events
        .iter()
        .filter(|o| o.at < hit && kind(o) == "task_started" && o.event["worker"] == node)
        .filter_map(task)
        .collect();
    on_node
        .into_iter()
        .filter(|t| {
            !events.iter().any(|o| {
                o.at < hit
                    && task(o).as_ref() == Some(t)
                    && matches!(
                        kind(o).as_str(),
                        "task_completed" | "task_failed" | "task_cancelled" | "task_timed_out"
                    )
            })
        })
        .filter_map(|t| {
            events
                .iter()
                .find(|o| o.at >= hit && task(o).as_ref() == Some(&t) && kind(o) == "task_failed")
                .map(|o| o.at - hit)
        })
        .collect()
}
