//! [`RunManager`]: the actor that owns every run of this lead. A submission is prepared
//! (see `prepare`) and driven by its own `RunActor`; the manager keeps each run's
//! [`EventLog`] for watchers and its view when a drive stops, answers a stopped run
//! (a clarification) by driving it again, and when the lead starts it resumes the runs a
//! crash left `running`. A run that ended frees its loop at once; the views and events of
//! the last [`KEEP_ENDED`] ended runs (at most [`KEEP_ENDED_BYTES`] of their text) stay
//! for watchers; every ended run's events are also kept in the checkpoint store, and an
//! older run's view and events are read from there. A run is cancelled through its
//! [`CancelFlag`] while it is driven
//! (its drive ends `error`); one waiting for an answer is ended without being driven.
//! The manager supervises the run actors: one that stops mid-drive (it crashed; chaos
//! mode's [`ChaosStopRun`]) is resumed from its last checkpoint, and the resumed run's
//! events say so ([`RUN_ACTOR_CRASHED`]).
//!
//! The actor and a run's life (launch, drive, what is kept after it ends) are here; its
//! messages sit beside it by concern: `submit`, `resume` (an answer, a crash, a restart),
//! `cancel`, `approvals` (answers to the calls a run waits on, their deadlines), `queries`
//! (views, events, lists, owners), `artifacts`, `client_runs` (runs an
//! MCP client drives, kept beside them), and `sink` (a run's events into its log and the
//! metrics). The runs store is reached only through its own
//! thread ([`CheckpointStore::call`](super::store::CheckpointStore::call), or the journal
//! for a cancel's status): no handler touches SQLite.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use actix::prelude::*;
use serde_json::Value;

use super::elicitations::PendingElicitations;
use super::event_journal::{Journaled, StoreJournal};
use super::events::{EventId, EventLog};
use super::metrics::Metrics;
use super::prepare::{PrepareError, Prepared, RunEnv};
use super::view;
use crate::runs::store::{RunRecord, RunStatus};
use antler_engine::catalog::Catalog;
use antler_engine::{CancelFlag, Drive, RunActor, RunEvent};

mod answer;
mod approvals;
mod artifacts;
mod branch_files;
mod cancel;
mod client_runs;
mod config;
mod leases;
mod queries;
mod resume;
mod sink;
mod subagent_approvals;
mod submit;
mod threads;

pub use answer::{answer, answer_through};
pub use approvals::{AnswerApproval, ApprovalError};
pub use artifacts::{read_artifact, ArtifactContent, RunArtifact, MAX_ARTIFACT_BYTES};
pub use branch_files::CopyThreadUserData;
pub use cancel::{CancelOutcome, CancelRun, ChaosStopRun};
pub use client_runs::{open_client_run, ClientRunEnded, HostClientRun, OpenClientRunError};
pub use config::CurrentConfig;
pub use queries::{
    CountRunning, GetElicitations, GetRun, HeldLog, ListRuns, RunCatalog, RunMessages, RunOwner,
    WatchRun,
};
pub use resume::ResumeRun;
use sink::{event_sink, source_label, Timing};
pub use submit::SubmitRun;
pub use threads::{RemoveThreadError, RemoveThreadFiles};

/// The warning a run resumed after its actor crashed carries in its events.
pub const RUN_ACTOR_CRASHED: &str =
    "the run's actor stopped unexpectedly (it crashed); the run was resumed from its last checkpoint";

/// Ended runs whose views and events the manager keeps in memory.
pub const KEEP_ENDED: usize = 1_000;
/// The text the kept ended runs may hold together: beyond it the oldest go (down to
/// [`KEEP_ENDED_AT_LEAST`]), so a lead that has run many runs holds about a MiB of them, not
/// whatever a thousand runs' events add up to (the store has them all).
pub const KEEP_ENDED_BYTES: usize = 1 << 20;
/// Ended runs kept whatever their size.
pub const KEEP_ENDED_AT_LEAST: usize = 16;

struct LiveRun {
    record: RunRecord,
    log: Arc<EventLog>,
    /// The run's actor while it is driven or waits for an answer.
    actor: Option<Addr<RunActor>>,
    driving: bool,
    timing: Arc<Mutex<Timing>>,
    /// Cancels the drive of the run's loop.
    cancel: Arc<CancelFlag>,
    /// The catalog the run sees (shared by the runs of one catalog version).
    catalog: Arc<Catalog>,
    /// Tools authorization removed for the run's principal.
    denied: Vec<String>,
    /// The run's skills (the skill policy follows its active ones).
    skills: antler_engine::SkillStore,
    /// What the run's MCP calls are asking its user now.
    elicitations: Arc<PendingElicitations>,
    /// The fencing epoch this lead holds the run's lease at (`None`: no leases): what its
    /// calls carry to the hosts and workers (`RunContext::epoch`), and what the manager sends
    /// for the run beside its drive (a subagent's answer) carries too.
    pub epoch: Option<u64>,
}

/// The owner of this lead's runs.
pub struct RunManager {
    env: Arc<RunEnv>,
    metrics: Arc<Metrics>,
    runs: HashMap<String, LiveRun>,
    ended: VecDeque<String>,
    /// Runs being prepared for a resume (a second resume leaves them be).
    resuming: std::collections::HashSet<String>,
    /// Runs cancelled while they were being prepared for a resume: cancelled at launch.
    cancel_at_launch: std::collections::HashSet<String>,
    /// Submissions with an idempotency key being prepared (a repeat is answered their id).
    submitting: std::collections::HashSet<String>,
    resume_at_start: bool,
    /// Runs being resumed because their actor crashed, with the warning their events get.
    crashed: HashMap<String, String>,
    /// The subagents' calls the runs wait on for their user.
    subagent_asks: Arc<crate::runs::subagent_asks::SubagentAsks>,
    /// The run leases this lead drives its runs under (`antler.ha`; `None`: no leases).
    ownership: Option<Arc<crate::ha::Ownership>>,
    /// Runs whose lease was lost while driven: their drive's end writes nothing.
    lost: std::collections::HashSet<String>,
    /// Runs being taken over from another lead, with the event saying so.
    takeovers: HashMap<String, String>,
}

impl RunManager {
    /// `resume_at_start`: resume the store's `running` runs when the actor starts (a
    /// long-lived lead; an ephemeral cluster leaves them to `antler run --resume`).
    pub fn new(env: Arc<RunEnv>, metrics: Arc<Metrics>, resume_at_start: bool) -> RunManager {
        RunManager {
            env,
            metrics,
            runs: HashMap::new(),
            ended: VecDeque::new(),
            resuming: Default::default(),
            cancel_at_launch: Default::default(),
            submitting: Default::default(),
            resume_at_start,
            crashed: HashMap::new(),
            subagent_asks: Arc::default(),
            ownership: None,
            lost: Default::default(),
            takeovers: HashMap::new(),
        }
    }

    /// Installs the event sink and drives the prepared run.
    fn launch(&mut self, prepared: Prepared, new_run: bool, ctx: &mut Context<Self>) -> String {
        let Prepared {
            mut run,
            record,
            catalog,
            warnings,
            cancel,
            denied,
            skills,
            last_event,
        } = prepared;
        let run_id = record.run_id.clone();
        let epoch = self.epoch(&run_id).map(crate::ha::Epoch::wire);
        if self.ownership.is_some() && epoch.is_none() {
            // Its lease was lost while it was being prepared: another lead drives it.
            tracing::warn!(run = %run_id, "{}", leases::RUN_LOST);
            self.takeovers.remove(&run_id);
            return run_id;
        }
        if self.cancel_at_launch.remove(&record.run_id) {
            cancel.cancel();
        }
        let (log, timing, elicitations) = match self.runs.get(&run_id) {
            Some(live) => (
                live.log.clone(),
                live.timing.clone(),
                live.elicitations.clone(),
            ),
            None => (
                self.journaled_log(&run_id, epoch, last_event),
                Arc::default(),
                Arc::default(),
            ),
        };
        let sink = event_sink(
            log.clone(),
            self.metrics.clone(),
            catalog.clone(),
            timing.clone(),
            elicitations.clone(),
        );
        for message in warnings {
            sink(&RunEvent::Warning { message });
        }
        if let Some(message) = self.crashed.remove(&run_id) {
            sink(&RunEvent::Warning { message });
        }
        if let Some(takeover) = self.takeovers.remove(&run_id) {
            log.push(takeover);
        }
        let (asks, store, id) = (
            Arc::clone(&self.subagent_asks),
            self.env.store.clone(),
            run_id.clone(),
        );
        let dispatcher = self.env.dispatcher.clone();
        run.on_event(move |event: &RunEvent| {
            // A subagent's held call told again (its task re-attached) is not asked twice.
            if subagent_approvals::relayed(&id, &asks, &store, dispatcher.as_ref(), event) {
                sink(event);
            }
        });
        // Everything the run's drive sends to hosts and workers carries its lease's epoch,
        // and its writes to the store are fenced by it.
        run.context.epoch = epoch;
        if let Some(epoch) = epoch {
            self.env.store.fence_run(&run_id, epoch);
        }
        let actor = RunActor::new(run).start();
        self.ended.retain(|id| id != &run_id);
        self.runs.insert(
            run_id.clone(),
            LiveRun {
                record,
                log,
                actor: Some(actor),
                driving: false,
                timing,
                cancel,
                catalog,
                denied,
                skills,
                elicitations,
                epoch,
            },
        );
        self.drive(&run_id, new_run, ctx);
        run_id
    }

    /// A new log for a run this lead takes up: journaled to the store, after the last event
    /// the store keeps of it, in a generation above that event's (the lease's epoch when it
    /// is higher), fenced by the lease's epoch.
    fn journaled_log(
        &self,
        run_id: &str,
        epoch: Option<u64>,
        last_event: Option<EventId>,
    ) -> Arc<EventLog> {
        let origin = EventId {
            gen: last_event.map_or(1, |e| e.gen + 1).max(epoch.unwrap_or(0)),
            seq: last_event.map_or(0, |e| e.seq + 1),
        };
        let journal = StoreJournal::new(self.env.store.clone(), run_id.to_owned(), epoch);
        Arc::new(EventLog::journaled(origin, Arc::new(Journaled(journal))))
    }

    fn drive(&mut self, run_id: &str, new_run: bool, ctx: &mut Context<Self>) {
        let Some(live) = self.runs.get_mut(run_id) else {
            return;
        };
        let Some(actor) = live.actor.clone() else {
            return;
        };
        live.driving = true;
        live.log.driving();
        self.metrics.drive_started(new_run);
        let run_id = run_id.to_owned();
        ctx.spawn(
            actor
                .send(Drive)
                .into_actor(self)
                .map(move |result, manager, ctx| {
                    // Lost: its lease went to another lead, or the store refused one of
                    // its writes for a newer epoch.
                    let fenced_out = manager.env.store.is_lost(&run_id);
                    if manager.lost.remove(&run_id) || fenced_out {
                        // Its lease was lost: the new owner owns the record; nothing of
                        // this drive is written.
                        manager
                            .metrics
                            .drive_stopped(RunStatus::Interrupted.as_str());
                        manager.ended.retain(|id| id != &run_id);
                        manager.runs.remove(&run_id);
                        return;
                    }
                    let Some(live) = manager.runs.get_mut(&run_id) else {
                        return;
                    };
                    if result.is_err() && !live.cancel.is_cancelled() {
                        // The actor is gone mid-drive: it crashed. Its state is the last
                        // checkpoint's; resume from there.
                        live.driving = false;
                        live.actor = None;
                        manager
                            .metrics
                            .drive_stopped(RunStatus::Interrupted.as_str());
                        manager.resume_crashed(run_id, ctx);
                        return;
                    }
                    let mut waiting = Vec::new();
                    let (view, status) = match result {
                        Ok(Ok(outcome)) => {
                            waiting = outcome.approvals.clone();
                            (view::from_outcome(&live.record, &outcome), outcome.status)
                        }
                        Ok(Err(e)) => (failed_view(&live.record, &e.to_string()), RunStatus::Error),
                        Err(e) => (failed_view(&live.record, &e.to_string()), RunStatus::Error),
                    };
                    if let Some(took) = live
                        .timing
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .step_started
                        .take()
                        .map(|t| t.elapsed())
                    {
                        manager.metrics.step(took);
                    }
                    manager.metrics.drive_stopped(status.as_str());
                    live.driving = false;
                    // The drive's tasks ended with it: none of their calls waits any more.
                    subagent_approvals::drive_ended(
                        &manager.subagent_asks,
                        &manager.env.store,
                        &run_id,
                    );
                    live.log.stop(view.to_string());
                    if status == RunStatus::Interrupted && !waiting.is_empty() {
                        RunManager::expire_later(&run_id, &waiting, ctx);
                    }
                    if status != RunStatus::Interrupted {
                        // The run ended: its loop and state go; its view and events stay a
                        // while, and its events are kept in the store for later watchers.
                        // Its events are in the store already (journaled as they came).
                        live.actor = None;
                        if status == RunStatus::Success {
                            // Memory learns from the run off its critical path (C.6).
                            actix::spawn(crate::memory::run_ended(
                                Arc::clone(&manager.env),
                                live.record.clone(),
                            ));
                        }
                        manager.release(&run_id);
                        manager.ended.push_back(run_id.clone());
                        manager.forget_old_ended();
                    }
                }),
        );
    }
}

fn failed_view(record: &RunRecord, error: &str) -> Value {
    serde_json::json!({
        "run_id": record.run_id,
        "status": RunStatus::Error,
        "user": record.user_id,
        "thread": record.thread_id,
        "task": record.task,
        "final_answer": null,
        "question": null,
        "error": error,
        "artifacts": [],
        "delivery": null,
        "stop_reason": null,
        "token_usage": null,
    })
}

impl Actor for RunManager {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if crate::teardown::tearing_down() {
            return;
        }
        // Approvals' deadlines hold across a restart, an ephemeral cluster's runs too.
        self.expire_left_waiting(ctx);
        self.load_subagent_asks(ctx);
        if self.ownership.is_some() {
            // Under leases the runs left `running` are taken over only when their lease
            // lapsed or no lead holds them.
            self.start_leases(self.resume_at_start, ctx);
            return;
        }
        if !self.resume_at_start {
            return;
        }
        self.resume_left_running(ctx);
    }
}

impl RunManager {
    /// Drops the oldest ended runs beyond [`KEEP_ENDED`], or beyond [`KEEP_ENDED_BYTES`]
    /// of kept text (their views and events are read from the store then).
    fn forget_old_ended(&mut self) {
        let size = |m: &Self, id: &String| m.runs.get(id).map_or(0, |l| l.log.bytes());
        let mut bytes: usize = self.ended.iter().map(|id| size(self, id)).sum();
        while self.ended.len() > KEEP_ENDED
            || (self.ended.len() > KEEP_ENDED_AT_LEAST && bytes > KEEP_ENDED_BYTES)
        {
            let Some(old) = self.ended.pop_front() else {
                break;
            };
            bytes = bytes.saturating_sub(size(self, &old));
            self.runs.remove(&old);
        }
    }

    /// A run's view now: a stopped drive's, else the store's (read off the actor's
    /// thread: a long run's state is large, and a slow database must not stall the runs
    /// this actor drives); with the elicitations its calls wait on.
    fn view(&self, run_id: &str) -> ResponseFuture<Result<Value, PrepareError>> {
        let live = self.runs.get(run_id);
        let pending = live.map_or(Value::Array(Vec::new()), |l| l.elicitations.view());
        // The subagents' calls waiting for the run's user are among its approvals.
        let held = self.subagent_asks.view(run_id);
        let with_pending = move |mut view: Value| {
            if let Some(object) = view.as_object_mut() {
                object.insert("elicitations".into(), pending);
                if !held.is_empty() {
                    let approvals = object
                        .entry("approvals")
                        .or_insert_with(|| Value::Array(Vec::new()));
                    if !approvals.is_array() {
                        *approvals = Value::Array(Vec::new());
                    }
                    if let Some(list) = approvals.as_array_mut() {
                        list.extend(held);
                    }
                }
            }
            view
        };
        if let Some(stopped) = live.and_then(|l| l.log.stopped().filter(|_| !l.driving)) {
            let view = serde_json::from_str(&stopped)
                .map(with_pending)
                .map_err(|e| PrepareError::Config(format!("run view: {e}")));
            return Box::pin(actix::fut::ready(view));
        }
        let run_id = run_id.to_owned();
        let read = self.env.store.call(move |store| {
            let record = store.run(&run_id)?;
            record
                .map(|record| view::from_store(store, &record))
                .transpose()
                .map(|view| view.ok_or(run_id))
        });
        Box::pin(async move {
            let view = read.await?.map_err(PrepareError::UnknownRun)?;
            Ok(with_pending(view))
        })
    }
}
