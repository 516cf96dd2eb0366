//! Cancelling a run: a driven one through its [`CancelFlag`](antler_engine::CancelFlag),
//! one stopped at a question (in memory or only in the store) ended at once without a
//! drive, one being prepared for a resume cancelled at its launch; and chaos mode's stop
//! of a run actor mid-drive (the manager resumes it).

use actix::prelude::*;

use super::{failed_view, LiveRun, RunManager};
use crate::runs::prepare::PrepareError;
use crate::runs::store::RunStatus;
use antler_engine::Journal;
use antler_engine::{Crash, RunError};

/// Chaos mode: stop the actor of a run being driven as if it crashed; the manager then
/// resumes the run from its last checkpoint. The reply says what happens, or why not.
#[derive(Message)]
#[rtype(result = "Result<String, String>")]
pub struct ChaosStopRun(pub String);

impl Handler<ChaosStopRun> for RunManager {
    type Result = Result<String, String>;

    fn handle(
        &mut self,
        ChaosStopRun(run_id): ChaosStopRun,
        _: &mut Context<Self>,
    ) -> Self::Result {
        match self.runs.get(&run_id) {
            Some(LiveRun {
                actor: Some(actor),
                driving: true,
                ..
            }) => {
                actor.do_send(Crash);
                Ok(format!(
                    "stopped the actor of run '{run_id}' mid-drive; it is resumed from its last checkpoint"
                ))
            }
            Some(_) => Err(format!(
                "run '{run_id}' is not being driven (ended, or waiting for an answer): its actor cannot be stopped mid-drive"
            )),
            None => Err(format!("no run '{run_id}' is live on this lead")),
        }
    }
}

/// How a [`CancelRun`] went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The run was live (driven, waiting for an answer, or about to be resumed) and is
    /// cancelled: it ends `error` with "the run was cancelled".
    Cancelled,
}

/// Cancel a run: a driven one through its flag (its drive ends, its subagent tasks are
/// cancelled), one stopped at a question at once. An ended run is `NotRunning`, an
/// unknown one `UnknownRun`.
#[derive(Message)]
#[rtype(result = "Result<CancelOutcome, PrepareError>")]
pub struct CancelRun(pub String);

impl Handler<CancelRun> for RunManager {
    type Result = ResponseActFuture<Self, Result<CancelOutcome, PrepareError>>;

    fn handle(&mut self, CancelRun(run_id): CancelRun, _: &mut Context<Self>) -> Self::Result {
        if let Some(cancelled) = self.cancel_held(&run_id) {
            return cancelled;
        }
        // Not held here: the store says whether anyone could still drive it. Its answer
        // comes back to the actor, which looks again at what it holds (a resume may have
        // begun meanwhile).
        let id = run_id.clone();
        let read = self.env.store.call(move |store| store.run(&id));
        Box::pin(read.into_actor(self).then(move |record, manager, _| {
            let ready = |r| Box::pin(actix::fut::ready(r));
            if let Some(cancelled) = manager.cancel_held(&run_id) {
                return cancelled;
            }
            let record = match record {
                Ok(Some(record)) => record,
                Ok(None) => return ready(Err(PrepareError::UnknownRun(run_id))),
                Err(e) => return ready(Err(e.into())),
            };
            match record.status {
                // Waiting for an answer, or left `running` by a lead that stopped: nobody
                // drives it now.
                RunStatus::Interrupted | RunStatus::Running => manager.end_cancelled(run_id),
                status => ready(Err(PrepareError::NotRunning {
                    run_id,
                    status: status.as_str().to_owned(),
                })),
            }
        }))
    }
}

/// What a cancel answers.
type CancelReply = ResponseActFuture<RunManager, Result<CancelOutcome, PrepareError>>;

impl RunManager {
    /// Cancels `run_id` if this actor holds it (driven, waiting for an answer, or being
    /// prepared for a resume); `None`: it does not.
    fn cancel_held(&mut self, run_id: &str) -> Option<CancelReply> {
        let ready = |r| -> CancelReply { Box::pin(actix::fut::ready(r)) };
        if let Some(live) = self.runs.get(run_id) {
            if live.driving {
                tracing::info!(run = %run_id, "cancelling the run");
                live.cancel.cancel();
                return Some(ready(Ok(CancelOutcome::Cancelled)));
            }
            if live.actor.is_some() {
                return Some(self.end_cancelled(run_id.to_owned()));
            }
        }
        if self.resuming.contains(run_id) {
            self.cancel_at_launch.insert(run_id.to_owned());
            return Some(ready(Ok(CancelOutcome::Cancelled)));
        }
        None
    }

    /// Ends `run_id`, stopped at a question (in memory or only in the store), as
    /// cancelled without driving it: recorded `error`, its view and watchers told.
    pub(super) fn end_cancelled(&mut self, run_id: String) -> CancelReply {
        let error = RunError::Cancelled.to_string();
        // Through the journal: the write leaves the actor's thread.
        let write = Journal::set_status(
            &self.env.store,
            &run_id,
            RunStatus::Error,
            Some(error.clone()),
        );
        if let Some(live) = self.runs.get_mut(&run_id) {
            // Taken now, so an answer arriving meanwhile does not drive it.
            live.actor = None;
            live.driving = false;
        }
        Box::pin(write.into_actor(self).map(move |written, manager, _| {
            written.map_err(|e| PrepareError::Config(format!("cannot record the cancel: {e}")))?;
            if let Some(live) = manager.runs.get_mut(&run_id) {
                live.log.stop(failed_view(&live.record, &error).to_string());
                manager.ended.retain(|id| id != &run_id);
                manager.ended.push_back(run_id.clone());
            }
            manager.release(&run_id);
            tracing::info!(run = %run_id, "run cancelled while it waited for an answer");
            Ok(CancelOutcome::Cancelled)
        }))
    }
}
