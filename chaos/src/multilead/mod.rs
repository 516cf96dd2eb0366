//! `antler chaos --mode multi-lead` (issue 38's chaos): several `antler up` leads share one
//! PostgreSQL (a throwaway cluster of this command's own, or `--pg-dsn`) for their runs
//! store and leases, each with its own runtime directory, gateway and hosts, and each
//! dialing the database through a forwarder this command owns. Runs are submitted round
//! robin through the gateways while the leads are killed, paused past their lease's time
//! to live, and cut from the database ([`faults`]); this command is their orchestrator.
//! Then, beside the invariants of the other modes that apply (every run ended, no artifact
//! lost, one receipt, every call answered once, no task or sandbox call run twice), the
//! database's audit ([`audit`]) shows that at most one epoch acted for each run and that
//! every takeover is in the run's events ([`epochs`]), and each lead fault is timed to its
//! runs' new epochs.

mod audit;
mod epochs;
mod faults;
mod gateway;
mod leads;
mod runs;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::json;

use crate::checks::{self, Invariant};
use crate::command::{antler_beside, everything, ChaosArgs};
use crate::faults::FaultOutcome;
use crate::plan::{self, Plan};
use crate::postgres::Database;
use crate::report::{self, Report};
use crate::runs::RunOutcome;
use faults::LeadFault;
use leads::Leads;

/// Runs the multi-lead schedule in `dir`: its report, once the leads and the throwaway
/// database have stopped.
pub fn run(args: &ChaosArgs, plan: Plan, dir: &Path) -> anyhow::Result<Report> {
    let ttl = Duration::from_millis(args.lease_ttl_ms);
    std::fs::write(
        dir.join("extensions_config.json"),
        plan::extensions_json(&everything()?),
    )?;
    std::fs::write(
        dir.join("config.yaml"),
        plan::config_yaml(
            args.workers,
            Some(format!(
                "  workers: {}\n  ha:\n    lease_ttl_ms: {}\n",
                args.workers, args.lease_ttl_ms
            )),
        ),
    )?;
    let exe = antler_beside()?;
    // Started from this thread, which lives as long as the command: the postmaster's
    // parent-death signal follows the thread that forked it.
    let database = Arc::new(match &args.pg_dsn {
        Some(dsn) => Database::given(dsn)?,
        None => Database::throwaway()?,
    });
    let pg_dir = database.server_dir();
    let leads = Arc::new(Leads::new(
        dir.to_path_buf(),
        exe,
        Arc::clone(&database),
        args.leads,
        args.workers,
    )?);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let played = runtime.block_on(schedule(
        Arc::clone(&leads),
        Arc::clone(&database),
        &plan,
        ttl,
    ));
    leads.stop();
    drop(runtime);
    database.stop(&dir.join("postgres.log"));
    let mut played = played?;
    played.invariants.push(checks::nothing_left(dir, None));
    if let Some(pg_dir) = &pg_dir {
        played.invariants.push(postgres_gone(pg_dir));
    }
    let outcomes: Vec<FaultOutcome> = played.faults.iter().map(|f| f.outcome.clone()).collect();
    let mut report = report::build(
        &plan,
        args.mode,
        args.workers,
        &played.runs,
        &outcomes,
        played.invariants,
        played.elapsed,
        played.figures,
    );
    report.json["leads"] = json!(args.leads);
    report.json["lease_ttl_ms"] = json!(args.lease_ttl_ms);
    report.json["postgres"] = json!(if args.pg_dsn.is_some() {
        "given"
    } else {
        "throwaway"
    });
    report.json["postgres_dir"] = json!(pg_dir.map(|d| d.display().to_string()));
    report.json["lead_faults"] = played.lead_faults;
    report.table = format!(
        "{} leads on one PostgreSQL, lease time to live {} ms\n{}",
        args.leads, args.lease_ttl_ms, report.table
    );
    Ok(report)
}

/// What a schedule came to, before the leads stopped.
struct Played {
    runs: Vec<RunOutcome>,
    faults: Vec<LeadFault>,
    invariants: Vec<Invariant>,
    elapsed: Duration,
    figures: report::Figures,
    /// Per lead fault: the lead, the runs it held and how long each took to be taken over.
    lead_faults: serde_json::Value,
}

/// The leads started, the audit installed, the runs driven while the faults fire, the
/// invariants checked once every run has ended.
async fn schedule(
    leads: Arc<Leads>,
    database: Arc<Database>,
    plan: &Plan,
    ttl: Duration,
) -> anyhow::Result<Played> {
    for k in 0..leads.slots.len() {
        leads.start(k, None)?;
    }
    for k in 0..leads.slots.len() {
        if leads
            .wait_healthy(k, Duration::from_secs(120))
            .await
            .is_none()
        {
            anyhow::bail!(
                "lead {k} did not come up; see {}",
                leads.current_log(k).display()
            );
        }
    }
    let pg = Arc::new(database.connect().await?);
    audit::install(&pg)
        .await
        .context("cannot install the audit in the leads' database")?;
    tokio::spawn(Leads::watch(Arc::clone(&leads)));
    let started = Instant::now();
    let (faults, runs) = play(&leads, &pg, plan, ttl, started).await;
    let elapsed = started.elapsed();
    let mut serving = Vec::new();
    for k in 0..leads.slots.len() {
        if leads
            .wait_healthy(k, Duration::from_secs(60))
            .await
            .is_none()
        {
            serving.push(format!("lead {k} does not serve after the schedule"));
        }
    }
    let ids: Vec<String> = runs.iter().filter_map(|r| r.run_id.clone()).collect();
    let evidence = audit::read(&pg, &ids).await?;
    let stored = audit::stored(&pg, &ids).await?;
    let mut invariants = vec![checks::every_run_ended(&runs)];
    let lookup = |id: &str| {
        stored
            .get(id)
            .cloned()
            .ok_or_else(|| "no checkpoint".to_owned())
    };
    invariants.extend(checks::what_the_runs_left(
        &runs,
        &[leads.dir.join("base")],
        &lookup,
    ));
    let ([alone, visible], acquisitions) = epochs::invariants(&evidence, &ids);
    invariants.push(alone);
    invariants.push(visible);
    invariants.push(checks::invariant(
        "every lead serves again",
        serving,
        format!("all {} leads healthy with their hosts", leads.slots.len()),
    ));
    let outcomes: Vec<FaultOutcome> = faults.iter().map(|f| f.outcome.clone()).collect();
    invariants.extend(checks::faults_seen_and_recovered(&outcomes));
    let mut figures = report::Figures::from(&outcomes, &[], |_| String::new());
    let mut lead_faults = Vec::new();
    for f in &faults {
        let took = f
            .db_hit
            .map(|hit| epochs::taken_over_after(&acquisitions, &f.held, hit))
            .unwrap_or_default();
        figures.taken_over.extend(took.iter().copied());
        if f.outcome.pid.is_some() {
            lead_faults.push(json!({
                "kind": f.outcome.kind.name(),
                "lead": f.outcome.replica,
                "at_s": (f.outcome.at_s * 10.0).round() / 10.0,
                "held": f.held.iter().map(|(run, epoch)| json!({"run": run, "epoch": epoch})).collect::<Vec<_>>(),
                "taken_over_ms": took.iter().map(|d| d.as_millis() as u64).collect::<Vec<_>>(),
            }));
        }
    }
    Ok(Played {
        runs,
        faults,
        invariants,
        elapsed,
        figures,
        lead_faults: json!(lead_faults),
    })
}

/// The schedule's runs driven and its faults fired, each at its time after `started`.
/// A pause or a partition lasts longer than the lease's time to live (by half of it at
/// least), so the lead's leases lapse.
async fn play(
    leads: &Arc<Leads>,
    pg: &Arc<tokio_postgres::Client>,
    plan: &Plan,
    ttl: Duration,
    started: Instant,
) -> (Vec<LeadFault>, Vec<RunOutcome>) {
    let deadline = started + plan.duration + Duration::from_secs(180);
    let drivers: Vec<_> = plan
        .runs
        .iter()
        .cloned()
        .map(|run| tokio::spawn(runs::drive(Arc::clone(leads), run, started, deadline)))
        .collect();
    let fired: Vec<_> = plan
        .faults
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, fault)| {
            let (leads, pg) = (Arc::clone(leads), Arc::clone(pg));
            let pick = (plan.seed as usize).wrapping_add(i * 7919);
            let pause = fault.pause.max(ttl + ttl / 2);
            tokio::spawn(async move {
                tokio::time::sleep_until((started + fault.at).into()).await;
                faults::inject(&leads, &pg, fault.kind, pause, started, pick).await
            })
        })
        .collect();
    let mut faults = Vec::new();
    for f in fired {
        if let Ok(f) = f.await {
            faults.push(f);
        }
    }
    let mut runs = Vec::new();
    for d in drivers {
        if let Ok(o) = d.await {
            runs.push(o);
        }
    }
    (faults, runs)
}

/// The throwaway PostgreSQL is gone: its directory removed and no process naming it.
fn postgres_gone(pg_dir: &Path) -> Invariant {
    let mut left = Vec::new();
    if pg_dir.exists() {
        left.push(format!("{} is still there", pg_dir.display()));
    }
    let processes = checks::nothing_left(pg_dir, None);
    if !processes.held {
        left.push(processes.detail);
    }
    checks::invariant(
        "no PostgreSQL left once the schedule ends",
        left,
        format!(
            "the throwaway cluster stopped and {} removed",
            pg_dir.display()
        ),
    )
}
