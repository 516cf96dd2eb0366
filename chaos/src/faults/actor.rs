//! Actor faults (local mode, where the cluster runs with `--chaos`): one actor stopped as
//! if it crashed (`antler chaos stop`'s request), chosen among those alive now, and
//! measured until the cluster serves again. What shows it: the MCP reconnect for a
//! server's connection, else the lead's log of the stop with its reason.

use std::time::{Duration, Instant};

use antler_protocol::messages::ActorRef;
use serde_json::Value;

use super::observe::{log_clock, reconnects};
use super::recovery::{evidence_within, recovered, served_again};
use super::{FaultKind, FaultOutcome, Target, AIM_WAIT};
use crate::cluster::ChaosCluster;
use crate::plan;

/// Stops one actor as if it crashed (`antler chaos stop`), chosen among those alive now,
/// and measures until the cluster serves again. What shows it: the MCP reconnect for a
/// server's connection, else the lead's log of the stop with its reason, and what the
/// actor's supervisor logged after it.
pub(super) async fn crash(
    cluster: &ChaosCluster,
    kind: FaultKind,
    before: &Value,
    started: Instant,
    pick: usize,
) -> FaultOutcome {
    let mut outcome = FaultOutcome::begun(kind, started);
    // Something alive to stop, waiting up to `AIM_WAIT` for one to come.
    let until = Instant::now() + AIM_WAIT;
    let mut before = before.clone();
    loop {
        if let Some(actor) = crash_candidate(cluster, kind, &before, pick).await {
            let since = log_clock();
            let reconnects_before = reconnects(&before);
            let name = actor.to_string();
            outcome.at_s = started.elapsed().as_secs_f64();
            outcome.hit = Instant::now();
            // Nothing of that name alive any more (a task that ended meanwhile): try
            // another.
            if crate::lead::stop_actor(&cluster.runtime(), actor)
                .await
                .is_ok()
            {
                return crashed(cluster, kind, outcome, since, reconnects_before, name).await;
            }
        }
        if Instant::now() >= until {
            return outcome;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
        if let Some(view) = cluster.view().await {
            before = view;
        }
    }
}

/// An actor of `kind` alive now, chosen by `pick`.
async fn crash_candidate(
    cluster: &ChaosCluster,
    kind: FaultKind,
    before: &Value,
    pick: usize,
) -> Option<ActorRef> {
    let running: Vec<String> = match kind.target {
        Target::TaskGraph | Target::Run => cluster
            .get("/api/runs?status=running")
            .await
            .and_then(|v| v["runs"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|r| {
                let thread = r["thread"].as_str()?;
                let i: usize = thread.strip_prefix("chaos-")?.parse().ok()?;
                match kind.target {
                    // Delegate runs: their tasks' `task` call ids.
                    Target::TaskGraph => (i % 3 == 2).then(|| {
                        plan::task_call_id(i, if pick.is_multiple_of(2) { "a" } else { "b" })
                    }),
                    _ => r["run_id"].as_str().map(str::to_owned),
                }
            })
            .collect(),
        _ => Vec::new(),
    };
    let one = |list: &[String]| list.get(pick % list.len().max(1)).cloned();
    let actor = match kind.target {
        Target::McpServer => Some(ActorRef::McpServer {
            name: "everything".into(),
        }),
        Target::Sandbox => {
            let active: Vec<String> = before["sandboxes"]["sandboxes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|s| s["state"] == "active")
                .filter_map(|s| {
                    Some(format!(
                        "{}:{}",
                        s["user_id"].as_str()?,
                        s["thread_id"].as_str()?
                    ))
                })
                .collect();
            one(&active).and_then(|n| ActorRef::parse("sandbox", Some(&n)).ok())
        }
        Target::TaskGraph => one(&running).map(|task_id| ActorRef::TaskGraph { task_id }),
        Target::Run => one(&running).map(|run_id| ActorRef::Run { run_id }),
        Target::Catalog => Some(ActorRef::Catalog),
        Target::PeerLink => {
            let links = ["mcp-host-0".to_owned(), "sandbox-host-0".to_owned()]
                .into_iter()
                .chain((0..cluster.workers).map(|w| format!("subagent-{w}")))
                .collect::<Vec<_>>();
            one(&links).and_then(|n| ActorRef::parse("peer-link", Some(&n)).ok())
        }
        _ => None,
    };
    actor
}

/// Measures a stopped actor until the cluster serves again, and finds what shows it.
async fn crashed(
    cluster: &ChaosCluster,
    kind: FaultKind,
    mut outcome: FaultOutcome,
    since: String,
    reconnects_before: u64,
    name: String,
) -> FaultOutcome {
    outcome.pid = cluster.lead_pid();
    outcome.recovery = recovered(cluster, Instant::now(), |view| {
        view.is_some_and(|v| served_again(cluster, kind, v, "lead", 0, 0))
    })
    .await;
    outcome.evidence = evidence_within(cluster, |view| {
        let now = view.map_or(0, reconnects);
        if kind.target == Target::McpServer && now > reconnects_before {
            Some(format!(
                "mcp-host reconnected {name} ({reconnects_before} -> {now} reconnects)"
            ))
        } else {
            cluster
                .lead_log_matching(&["chaos: stopping", "as if it crashed"], &since)
                .map(|l| format!("the lead: {l}"))
        }
    })
    .await;
    outcome
}
