//! Driving runs under leases (`antler.ha.leases_dsn`, docs/ha.md): a run is held before it
//! is driven ([`RunManager::hold`]); one task renews every held lease a third of a time to
//! live apart, and a run whose lease is lost stops at once ([`LeaseLost`]: its actor is
//! stopped where it is, and nothing is written for it, since its new owner owns the record);
//! a run that ends gives its lease up; and a long-lived lead takes over the runs whose
//! leases other leads let lapse ([`TakeOver`]), resuming each from its last checkpoint (a
//! call in flight gets the interrupted-call result, never sent again), with a
//! [`LEAD_TAKEOVER`] event in its events; the same look sweeps the released leases of
//! finished runs and dead leads' rows past their retention. Without a DSN none of this runs.

use std::sync::Arc;

use actix::prelude::*;
use antler_engine::Crash;
use serde_json::json;

use super::RunManager;
use crate::ha::{Epoch, ExpiredLease, Hold, Ownership};
use crate::runs::prepare::PrepareError;
use crate::runs::store::RunStatus;

/// The event a run taken over from another lead carries (its previous and new lead and
/// epoch).
pub const LEAD_TAKEOVER: &str = "lead_takeover";

/// What a run this lead lost shows its watchers here: it goes on under another lead.
pub const RUN_LOST: &str =
    "this lead lost the run's lease to another lead, which drives the run from here";

/// How long a lead waits for its hosts before taking runs over.
const HOSTS_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

impl RunManager {
    /// The manager follows `ownership`'s leases (`None`: one lead, no leases).
    pub fn with_ownership(mut self, ownership: Option<Arc<Ownership>>) -> Self {
        self.ownership = ownership;
        self
    }

    /// The epoch this lead holds `run_id` at (`None`: no leases, or not held).
    pub fn epoch(&self, run_id: &str) -> Option<Epoch> {
        self.ownership.as_ref().and_then(|o| o.epoch(run_id))
    }

    /// Starts renewing this lead's leases, and, in a long-lived lead, taking over lapsed
    /// ones (after a first pass over the runs left `running` that no lease covers).
    pub(super) fn start_leases(&mut self, takeover: bool, ctx: &mut Context<Self>) {
        let Some(ownership) = self.ownership.clone() else {
            return;
        };
        tracing::info!(lead = %ownership.lead(), ttl_ms = ownership.ttl().as_millis() as u64, "driving runs under leases");
        actix::spawn(renew(Arc::clone(&ownership), ctx.address()));
        if takeover {
            actix::spawn(take_over(ownership, Arc::clone(&self.env), ctx.address()));
        }
    }

    /// Holds `run_id` before it is driven: `Ok(true)` when this lead may drive it (no
    /// leases, or its lease is this lead's), `Ok(false)` while another lead holds it.
    pub(super) fn hold(
        &self,
        run_id: &str,
    ) -> impl std::future::Future<Output = Result<bool, PrepareError>> + 'static {
        let ownership = self.ownership.clone();
        let store = self.env.store.clone();
        let run_id = run_id.to_owned();
        async move {
            let Some(ownership) = ownership else {
                return Ok(true);
            };
            match ownership.hold(&run_id).await {
                Ok(Hold::Held(epoch)) => {
                    // Held (again): its writes go through at this epoch, though an earlier
                    // hold of it was refused for a newer one.
                    store.fence_run(&run_id, epoch.wire());
                    Ok(true)
                }
                Ok(Hold::Elsewhere) => Ok(false),
                Err(e) => Err(PrepareError::Leases(e.to_string())),
            }
        }
    }

    /// Gives `run_id`'s lease up (it ended), off the actor.
    pub(super) fn release(&self, run_id: &str) {
        self.env.store.unfence_run(run_id);
        if let Some(ownership) = self.ownership.clone() {
            let run_id = run_id.to_owned();
            actix::spawn(async move { ownership.release(&run_id).await });
        }
    }

    /// Stops holding a run whose drive could not start (its lease lapses; any lead, this
    /// one too, takes it over then).
    pub(super) fn let_lapse(&self, run_id: &str) {
        if let Some(ownership) = &self.ownership {
            ownership.drop_run(run_id);
        }
    }
}

/// Renews this lead's leases a third of a time to live apart; each lost run is told to
/// the manager.
async fn renew(ownership: Arc<Ownership>, manager: Addr<RunManager>) {
    let mut tick = tokio::time::interval(ownership.period());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if !manager.connected() {
            return;
        }
        for (run_id, epoch) in ownership.renew().await {
            manager.do_send(LeaseLost { run_id, epoch });
        }
        ownership.refresh_advertised().await;
    }
}

/// Takes over the runs whose leases lapsed, a third of a time to live apart, once the
/// hosts answer; first resumes the runs left `running` that no lease covers (left by a lead
/// without leases, or released). The same look removes old lease and lead rows now and then
/// ([`Ownership::sweep`]).
async fn take_over(
    ownership: Arc<Ownership>,
    env: Arc<crate::runs::prepare::RunEnv>,
    manager: Addr<RunManager>,
) {
    let pending = env.store.call(|store| store.in_progress()).await;
    env.wait_for_hosts(HOSTS_WAIT).await;
    match pending {
        Ok(pending) => {
            for record in pending {
                let unleased = match ownership.lease(&record.run_id).await {
                    Ok(lease) => lease.is_none_or(|lease| lease.owner.is_none()),
                    Err(e) => {
                        tracing::warn!(run = %record.run_id, "cannot read the run's lease: {e}");
                        false
                    }
                };
                if unleased {
                    tracing::info!(run = %record.run_id, "resuming a run left running that no lead holds");
                    let resume = super::ResumeRun {
                        run_id: record.run_id,
                        answer: None,
                        playbook: None,
                    };
                    if manager.send(resume).await.is_err() {
                        return;
                    }
                }
            }
        }
        Err(e) => tracing::error!("cannot list the runs to resume: {e}"),
    }
    let mut tick = tokio::time::interval(ownership.period());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if crate::teardown::tearing_down() {
            return;
        }
        let lapsed = match ownership.takeable().await {
            Ok(lapsed) => lapsed,
            Err(e) => {
                tracing::warn!("cannot read the lapsed run leases: {e}");
                continue;
            }
        };
        for lease in lapsed {
            if manager.send(TakeOver(lease)).await.is_err() {
                return;
            }
        }
        // Rate-limited: at most once a minute, after the takeovers.
        ownership.sweep().await;
    }
}

/// This lead lost `run_id`'s lease (held at `epoch`): the run stops at once, writing
/// nothing (no status, no cancel, no settlement).
#[derive(Message)]
#[rtype(result = "()")]
pub struct LeaseLost {
    pub run_id: String,
    pub epoch: Epoch,
}

impl Handler<LeaseLost> for RunManager {
    type Result = ();

    fn handle(&mut self, LeaseLost { run_id, epoch }: LeaseLost, _: &mut Context<Self>) {
        tracing::warn!(run = %run_id, %epoch, "{RUN_LOST}");
        self.cancel_at_launch.remove(&run_id);
        // A run held again since, at a newer epoch, is not the one lost.
        let Some(live) = self
            .runs
            .get_mut(&run_id)
            .filter(|live| live.epoch == Some(epoch.wire()))
        else {
            return;
        };
        let Some(actor) = live.actor.take() else {
            return;
        };
        // Nothing more of this lead's goes to the store for it, events neither.
        self.env.store.lose_run(&run_id);
        live.log.close_journal();
        live.log.stop(lost_view(&live.record).to_string());
        if live.driving {
            // Stopped where it is; its drive's end sees it lost and leaves the run be.
            self.lost.insert(run_id);
            actor.do_send(Crash);
        } else {
            // Waiting for an answer: its actor goes with its address.
            drop(actor);
            self.ended.retain(|id| id != &run_id);
            self.runs.remove(&run_id);
        }
    }
}

/// What a lost run's watchers on this lead are told.
fn lost_view(record: &crate::runs::store::RunRecord) -> serde_json::Value {
    let mut view = super::failed_view(record, RUN_LOST);
    view["status"] = json!(RunStatus::Running);
    view
}

/// Take over the run of a lease another lead let lapse.
#[derive(Message)]
#[rtype(result = "()")]
pub struct TakeOver(pub ExpiredLease);

impl Handler<TakeOver> for RunManager {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, TakeOver(lease): TakeOver, _: &mut Context<Self>) -> Self::Result {
        let run_id = lease.run_id.clone();
        let busy = self.runs.get(&run_id).is_some_and(|live| live.driving)
            || self.resuming.contains(&run_id);
        let Some(ownership) = self.ownership.clone().filter(|_| !busy) else {
            return Box::pin(actix::fut::ready(()));
        };
        self.resuming.insert(run_id.clone());
        let env = Arc::clone(&self.env);
        Box::pin(
            async move {
                let epoch = match ownership.take(&lease).await {
                    Ok(Some(epoch)) => {
                        env.store.fence_run(&lease.run_id, epoch.wire());
                        epoch
                    }
                    Ok(None) => return None,
                    Err(e) => {
                        tracing::warn!(run = %lease.run_id, "cannot take the run over: {e}");
                        return None;
                    }
                };
                let id = lease.run_id.clone();
                let record = env.store.call(move |store| store.run(&id)).await;
                match record {
                    Ok(Some(record)) if record.status == RunStatus::Running => {}
                    Ok(_) => {
                        // Ended, waiting for an answer, or never stored: nothing to drive;
                        // the run is free for whoever answers it.
                        env.store.unfence_run(&lease.run_id);
                        ownership.release(&lease.run_id).await;
                        return None;
                    }
                    Err(e) => {
                        tracing::warn!(run = %lease.run_id, "cannot read the run to take over: {e}");
                        ownership.drop_run(&lease.run_id);
                        return None;
                    }
                }
                tracing::info!(run = %lease.run_id, from = %lease.owner, %epoch, "taking the run over");
                let prepared = env.resume(&lease.run_id, None, None).await;
                let event = json!({
                    "event": LEAD_TAKEOVER,
                    "from_lead": lease.owner.as_str(),
                    "from_epoch": lease.epoch.get(),
                    "lead": ownership.lead().as_str(),
                    "epoch": epoch.get(),
                    "at_ms": antler_protocol::sys::unix_ms(),
                });
                Some((prepared, event))
            }
            .into_actor(self)
            .map(move |taken, manager, ctx| {
                manager.resuming.remove(&run_id);
                match taken {
                    Some((Ok(prepared), event)) => {
                        manager.takeovers.insert(run_id, event.to_string());
                        manager.launch(prepared, false, ctx);
                    }
                    Some((Err(e), _)) => {
                        tracing::warn!(run = %run_id, "cannot resume the run taken over: {e}");
                        manager.let_lapse(&run_id);
                    }
                    None => {}
                }
            }),
        )
    }
}
