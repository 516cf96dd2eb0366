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

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use actix::prelude::*;
use antler_protocol::messages::{FileContent, RunSubmission, ThreadFileError};

use antler_engine::ThreadFiles;
use serde_json::Value;

use super::elicitations::{PendingElicitation, PendingElicitations};
use super::events::EventLog;
use super::metrics::Metrics;
use super::prepare::{PrepareError, Prepared, RunEnv};
use super::view;
use crate::checkpoint::{RunRecord, RunStatus};
use antler_engine::{
    catalog::{Catalog, ToolSource},
    CancelFlag, Crash, Drive, Journal, RunActor, RunError, RunEvent, ToolState,
};

/// The warning a run resumed after its actor crashed carries in its events.
pub const RUN_ACTOR_CRASHED: &str =
    "the run's actor stopped unexpectedly (it crashed); the run was resumed from its last checkpoint";

/// How long after a run actor's crash its resume starts, so the checkpoint writes the dead
/// drive had handed to the journal have landed.
const RESUME_AFTER_CRASH: std::time::Duration = std::time::Duration::from_millis(250);

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
        } = prepared;
        if self.cancel_at_launch.remove(&record.run_id) {
            cancel.cancel();
        }
        let run_id = record.run_id.clone();
        let (log, timing, elicitations) = match self.runs.get(&run_id) {
            Some(live) => (
                live.log.clone(),
                live.timing.clone(),
                live.elicitations.clone(),
            ),
            None => (Arc::default(), Arc::default(), Arc::default()),
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
        run.on_event(sink);
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
            },
        );
        self.drive(&run_id, new_run, ctx);
        run_id
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
                    let (view, status) = match result {
                        Ok(Ok(outcome)) => {
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
                    live.log.stop(view.to_string());
                    if status != RunStatus::Interrupted {
                        // The run ended: its loop and state go; its view and events stay a
                        // while, and its events are kept in the store for later watchers.
                        live.actor = None;
                        let events = live.log.since(0).events;
                        let (store, id) = (manager.env.store.clone(), run_id.clone());
                        tokio::task::spawn_blocking(move || {
                            if let Err(e) = store.append_events(&id, &events) {
                                tracing::warn!(run = %id, "cannot keep the run's events: {e}");
                            }
                        });
                        manager.ended.push_back(run_id.clone());
                        manager.forget_old_ended();
                    }
                }),
        );
    }
}

impl RunManager {
    /// Resumes a run whose actor crashed, from its last checkpoint.
    fn resume_crashed(&mut self, run_id: String, ctx: &mut Context<Self>) {
        tracing::warn!(run = %run_id, "{RUN_ACTOR_CRASHED}");
        self.crashed
            .insert(run_id.clone(), RUN_ACTOR_CRASHED.to_owned());
        let me = ctx.address();
        actix::spawn(async move {
            tokio::time::sleep(RESUME_AFTER_CRASH).await;
            for attempt in 1..=RESUME_ATTEMPTS {
                let resume = ResumeRun {
                    run_id: run_id.clone(),
                    answer: None,
                    playbook: None,
                };
                match me.send(resume).await {
                    Ok(Ok(_)) => return,
                    Ok(Err(e)) if attempt < RESUME_ATTEMPTS => {
                        tracing::warn!(run = %run_id, attempt, "cannot resume the run yet: {e}");
                        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    }
                    Ok(Err(e)) => {
                        tracing::error!(run = %run_id, "cannot resume the run after its actor crashed: {e}; antler run --resume {run_id} retries");
                    }
                    Err(_) => return,
                }
            }
        });
    }

    /// Ends `run_id`, stopped at a question (in memory or only in the store), as
    /// cancelled without driving it: recorded `error`, its view and watchers told.
    fn end_cancelled(
        &mut self,
        run_id: String,
    ) -> ResponseActFuture<Self, Result<CancelOutcome, PrepareError>> {
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
            tracing::info!(run = %run_id, "run cancelled while it waited for an answer");
            Ok(CancelOutcome::Cancelled)
        }))
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
        if !self.resume_at_start {
            return;
        }
        let pending = match self.env.store.in_progress() {
            Ok(pending) => pending,
            Err(e) => {
                tracing::error!("cannot list the runs to resume: {e}");
                return;
            }
        };
        if pending.is_empty() {
            return;
        }
        let env = self.env.clone();
        let me = ctx.address();
        actix::spawn(async move {
            // The hosts start with the lead: resume once they answer.
            env.wait_for_hosts(HOSTS_WAIT).await;
            for record in pending {
                let run_id = record.run_id;
                tracing::info!(run = %run_id, "resuming a run the lead was driving when it stopped");
                for attempt in 1..=RESUME_ATTEMPTS {
                    let resume = ResumeRun {
                        run_id: run_id.clone(),
                        answer: None,
                        playbook: None,
                    };
                    match me.send(resume).await {
                        Ok(Ok(_)) => break,
                        Ok(Err(e)) if attempt < RESUME_ATTEMPTS => {
                            tracing::warn!(run = %run_id, attempt, "cannot resume the run yet: {e}");
                            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                        }
                        Ok(Err(e)) => {
                            tracing::error!(run = %run_id, "cannot resume the run: {e}; antler run --resume {run_id} retries");
                        }
                        Err(_) => return,
                    }
                }
            }
        });
    }
}

/// How long the lead waits for its hosts before resuming runs.
const HOSTS_WAIT: std::time::Duration = std::time::Duration::from_secs(30);
/// Attempts to resume one run at start.
const RESUME_ATTEMPTS: u32 = 5;

/// Start a run; the reply (its id) comes once it is prepared and driven.
#[derive(Message)]
#[rtype(result = "Result<String, PrepareError>")]
pub struct SubmitRun(pub RunSubmission);

impl Handler<SubmitRun> for RunManager {
    type Result = ResponseActFuture<Self, Result<String, PrepareError>>;

    fn handle(&mut self, msg: SubmitRun, _: &mut Context<Self>) -> Self::Result {
        let env = self.env.clone();
        let keyed = msg.0.idempotency_key.is_some();
        let run_id = match &msg.0.idempotency_key {
            Some(key) => idempotent_run_id(&msg.0.user, key),
            None => format!("run-{}", uuid::Uuid::new_v4().simple()),
        };
        if keyed {
            // A repeat of a submission (its reply was lost) is answered the first one's run
            // once it is stored; while the first is still being prepared, it is told to
            // retry (the first may yet fail, or die with this lead).
            if self.submitting.contains(&run_id) {
                return Box::pin(actix::fut::ready(Err(PrepareError::BeingSubmitted(run_id))));
            }
            let known = self.runs.contains_key(&run_id) || self.resuming.contains(&run_id);
            match env.store.run(&run_id) {
                Ok(Some(_)) => return Box::pin(actix::fut::ready(Ok(run_id))),
                Ok(None) if known => return Box::pin(actix::fut::ready(Ok(run_id))),
                Ok(None) => {}
                Err(e) => return Box::pin(actix::fut::ready(Err(e.into()))),
            }
            self.submitting.insert(run_id.clone());
        }
        let id = run_id.clone();
        Box::pin(
            async move { env.start(&run_id, &msg.0).await }
                .into_actor(self)
                .map(move |prepared, manager, ctx| {
                    manager.submitting.remove(&id);
                    Ok(manager.launch(prepared?, true, ctx))
                }),
        )
    }
}

/// The run of `user`'s submission with idempotency key `key`: the same run id for every
/// repeat of it, another for another user's same key.
pub fn idempotent_run_id(user: &str, key: &str) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(format!("{user}\0{key}").as_bytes());
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("run-{hex}")
}

/// Continue a stopped run (with an answer to its question), or leave a driven one be.
#[derive(Message)]
#[rtype(result = "Result<String, PrepareError>")]
pub struct ResumeRun {
    pub run_id: String,
    pub answer: Option<String>,
    pub playbook: Option<String>,
}

impl Handler<ResumeRun> for RunManager {
    type Result = ResponseActFuture<Self, Result<String, PrepareError>>;

    fn handle(&mut self, msg: ResumeRun, _: &mut Context<Self>) -> Self::Result {
        let run_id = msg.run_id.clone();
        let busy = self.runs.get(&run_id).is_some_and(|live| live.driving)
            || self.resuming.contains(&run_id);
        if busy && msg.answer.is_some() {
            // Driven now: it is not waiting for an answer, and this one must not be lost
            // silently.
            return Box::pin(actix::fut::ready(Err(PrepareError::NotWaiting {
                run_id,
                status: "running".to_owned(),
            })));
        }
        if busy {
            return Box::pin(actix::fut::ready(Ok(run_id)));
        }
        self.resuming.insert(run_id.clone());
        let env = self.env.clone();
        Box::pin(
            async move {
                env.resume(&msg.run_id, msg.answer.as_deref(), msg.playbook.as_deref())
                    .await
            }
            .into_actor(self)
            .map(move |prepared, manager, ctx| {
                manager.resuming.remove(&run_id);
                Ok(manager.launch(prepared?, false, ctx))
            }),
        )
    }
}

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
        let ready = |r| Box::pin(actix::fut::ready(r));
        if let Some(live) = self.runs.get(&run_id) {
            if live.driving {
                tracing::info!(run = %run_id, "cancelling the run");
                live.cancel.cancel();
                return ready(Ok(CancelOutcome::Cancelled));
            }
            if live.actor.is_some() {
                return self.end_cancelled(run_id);
            }
        }
        if self.resuming.contains(&run_id) {
            self.cancel_at_launch.insert(run_id);
            return ready(Ok(CancelOutcome::Cancelled));
        }
        let record = match self.env.store.run(&run_id) {
            Ok(Some(record)) => record,
            Ok(None) => return ready(Err(PrepareError::UnknownRun(run_id))),
            Err(e) => return ready(Err(e.into())),
        };
        match record.status {
            // Waiting for an answer, or left `running` by a lead that stopped: nobody
            // drives it now.
            RunStatus::Interrupted | RunStatus::Running => self.end_cancelled(run_id),
            status => ready(Err(PrepareError::NotRunning {
                run_id,
                status: status.as_str().to_owned(),
            })),
        }
    }
}

/// The events of a run: those this lead holds, or for a run that ended and is no longer
/// in memory (or ended under an earlier lead) a stopped log of its kept events and its
/// view. `None`: neither (the store's view is all there is, or the run is not over).
#[derive(Message)]
#[rtype(result = "Option<Arc<EventLog>>")]
pub struct WatchRun(pub String);

impl Handler<WatchRun> for RunManager {
    type Result = ResponseFuture<Option<Arc<EventLog>>>;

    fn handle(&mut self, msg: WatchRun, _: &mut Context<Self>) -> Self::Result {
        if let Some(live) = self.runs.get(&msg.0) {
            let log = live.log.clone();
            return Box::pin(async move { Some(log) });
        }
        let view = self.view(&msg.0);
        let store = self.env.store.clone();
        let run_id = msg.0;
        Box::pin(async move {
            let events = tokio::task::spawn_blocking(move || store.events(&run_id))
                .await
                .ok()?
                .ok()
                .filter(|e| !e.is_empty())?;
            let view = view.await.ok()?;
            if view["status"] == "running" {
                return None;
            }
            let log = EventLog::default();
            for event in events {
                log.push(event);
            }
            log.stop(view.to_string());
            Some(Arc::new(log))
        })
    }
}

/// A run's view now.
#[derive(Message)]
#[rtype(result = "Result<Value, PrepareError>")]
pub struct GetRun(pub String);

impl Handler<GetRun> for RunManager {
    type Result = ResponseFuture<Result<Value, PrepareError>>;

    fn handle(&mut self, msg: GetRun, _: &mut Context<Self>) -> Self::Result {
        self.view(&msg.0)
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
        let with_pending = move |mut view: Value| {
            if let Some(object) = view.as_object_mut() {
                object.insert("elicitations".into(), pending);
            }
            view
        };
        if let Some(stopped) = live.and_then(|l| l.log.stopped().filter(|_| !l.driving)) {
            let view = serde_json::from_str(&stopped)
                .map(with_pending)
                .map_err(|e| PrepareError::Config(format!("run view: {e}")));
            return Box::pin(actix::fut::ready(view));
        }
        let store = self.env.store.clone();
        let run_id = run_id.to_owned();
        Box::pin(async move {
            let read = tokio::task::spawn_blocking(move || {
                let record = store
                    .run(&run_id)?
                    .ok_or_else(|| PrepareError::UnknownRun(run_id.clone()))?;
                Ok::<_, PrepareError>(view::from_store(&store, &record)?)
            });
            let view = read
                .await
                .map_err(|e| PrepareError::Config(format!("run view: {e}")))??;
            Ok(with_pending(view))
        })
    }
}

/// The elicitations a run this lead holds waits on, with its user and thread (`None`:
/// the lead does not hold the run).
#[derive(Message)]
#[rtype(result = "Option<RunElicitations>")]
pub struct GetElicitations(pub String);

/// What [`GetElicitations`] answers.
pub struct RunElicitations {
    pub user: String,
    pub thread: String,
    pub pending: Arc<PendingElicitations>,
}

impl Handler<GetElicitations> for RunManager {
    type Result = Option<RunElicitations>;

    fn handle(&mut self, msg: GetElicitations, _: &mut Context<Self>) -> Self::Result {
        self.runs.get(&msg.0).map(|live| RunElicitations {
            user: live.record.user_id.clone(),
            thread: live.record.thread_id.clone(),
            pending: live.elicitations.clone(),
        })
    }
}

/// The catalog a run this lead holds sees: `{hash, tools: [{name, source, server?,
/// deferred}]}` (`None`: the run is not in memory; its catalog was not kept).
#[derive(Message)]
#[rtype(result = "Option<Value>")]
pub struct RunCatalog(pub String);

impl Handler<RunCatalog> for RunManager {
    type Result = ResponseFuture<Option<Value>>;

    fn handle(&mut self, msg: RunCatalog, _: &mut Context<Self>) -> Self::Result {
        let Some(live) = self.runs.get(&msg.0) else {
            return Box::pin(async { None });
        };
        let catalog = &live.catalog;
        let tools: Vec<Value> = catalog
            .tools()
            .iter()
            .map(|t| {
                let server = match &t.source {
                    ToolSource::Mcp { server, .. } => server.as_deref(),
                    _ => None,
                };
                serde_json::json!({
                    "name": t.name,
                    "source": source_label(catalog, &t.name),
                    "server": server,
                    "deferred": catalog.is_deferred(&t.name),
                })
            })
            .collect();
        let mut view = serde_json::json!({
            "hash": catalog.hash().map(|h| h.as_str().to_owned()),
            "tools": tools,
            "authorization": {"denied": live.denied},
        });
        let (store, skills, run_id) = (self.env.store.clone(), live.skills.clone(), msg.0);
        // The skill policy in force follows the run's active skills, as its last
        // checkpoint holds them (read off the actor's thread: a state is large).
        Box::pin(async move {
            let policy = tokio::task::spawn_blocking(move || {
                let active = store
                    .latest(&run_id)
                    .ok()
                    .flatten()
                    .map(|(_, state)| state.active_skills)
                    .unwrap_or_default();
                let policy = skills.policy(&active);
                serde_json::json!({
                    "active_skills": active.iter().map(|s| s.name.clone()).collect::<Vec<_>>(),
                    "allowed_tools": policy.allowed(),
                })
            })
            .await
            .unwrap_or(Value::Null);
            view["skill_policy"] = policy;
            Some(view)
        })
    }
}

/// A run's messages as its last checkpoint holds them (JSON, spec 1's message shapes).
#[derive(Message)]
#[rtype(result = "Result<Value, PrepareError>")]
pub struct RunMessages(pub String);

impl Handler<RunMessages> for RunManager {
    type Result = ResponseFuture<Result<Value, PrepareError>>;

    fn handle(&mut self, msg: RunMessages, _: &mut Context<Self>) -> Self::Result {
        // The read leaves the actor's thread: a long run's state is large.
        let store = self.env.store.clone();
        Box::pin(async move {
            let run_id = msg.0;
            let read = tokio::task::spawn_blocking(move || {
                if store.run(&run_id)?.is_none() {
                    return Err(PrepareError::UnknownRun(run_id));
                }
                let messages = store
                    .latest(&run_id)?
                    .map(|(_, state)| serde_json::to_value(state.messages))
                    .transpose()
                    .map_err(|e| PrepareError::Config(format!("run messages: {e}")))?;
                Ok(messages.unwrap_or(Value::Array(Vec::new())))
            });
            read.await
                .map_err(|e| PrepareError::Config(format!("run messages: {e}")))?
        })
    }
}

/// Where the sandbox shows a thread's outputs.
const OUTPUTS_PREFIX: &str = "/mnt/user-data/outputs/";

/// The largest artifact the gateway sends.
pub const MAX_ARTIFACT_BYTES: u64 = 64 << 20;

/// A presented file's content, or why it is not sent.
#[derive(Debug)]
pub enum ArtifactContent {
    Bytes(Vec<u8>),
    /// Larger than [`MAX_ARTIFACT_BYTES`].
    TooLarge,
}

/// The content of a file run `run_id` presented (`path` as its artifacts list it,
/// `/mnt/user-data/outputs/...`), read through the run's thread files (this disk, or the
/// sandbox-host replica that owns the thread): only a presented file, only a regular file
/// inside the thread's outputs once links are resolved.
#[derive(Message)]
#[rtype(result = "Result<ArtifactContent, PrepareError>")]
pub struct RunArtifact {
    pub run_id: String,
    pub path: String,
}

impl Handler<RunArtifact> for RunManager {
    type Result = ResponseFuture<Result<ArtifactContent, PrepareError>>;

    fn handle(&mut self, msg: RunArtifact, _: &mut Context<Self>) -> Self::Result {
        let env = self.env.clone();
        let view = self.view(&msg.run_id);
        Box::pin(async move {
            let missing = || PrepareError::NoArtifact {
                run_id: msg.run_id.clone(),
                path: msg.path.clone(),
            };
            let view = view.await?;
            let presented = view["artifacts"]
                .as_array()
                .is_some_and(|a| a.iter().any(|p| p.as_str() == Some(msg.path.as_str())));
            let user = view["user"].as_str().unwrap_or_default().to_owned();
            let thread = view["thread"].as_str().unwrap_or_default().to_owned();
            if !presented || !msg.path.starts_with(OUTPUTS_PREFIX) {
                return Err(missing());
            }
            let paths = antler_engine::ThreadPaths::new(&env.base_dir().await?, &user, &thread);
            let files = env.thread_files(&paths, &user, &thread);
            match read_artifact(&*files, &msg.path).await {
                Ok(Some(content)) => Ok(content),
                Ok(None) => Err(missing()),
                Err(e) => Err(PrepareError::FilesUnavailable(e)),
            }
        })
    }
}

/// The content of the presented file `path` (`/mnt/user-data/outputs/...`) of a thread:
/// `None` unless it is a regular file inside the thread's outputs once links are resolved
/// (a link out is simply not there); `Err` when the thread's files cannot be had now.
pub async fn read_artifact(
    files: &dyn ThreadFiles,
    path: &str,
) -> Result<Option<ArtifactContent>, String> {
    if !path.starts_with(OUTPUTS_PREFIX) {
        return Ok(None);
    }
    let read = match files.read(path, MAX_ARTIFACT_BYTES).await {
        Ok(read) => read,
        Err(ThreadFileError::Unavailable(e)) => return Err(e),
        Err(_) => return Ok(None),
    };
    let inside = std::path::Path::new(&read.resolved)
        .strip_prefix("outputs")
        .is_ok_and(|rest| !rest.as_os_str().is_empty());
    Ok(match read.content {
        FileContent::Bytes(bytes) if inside && read.is_file => Some(ArtifactContent::Bytes(bytes)),
        FileContent::TooLarge if inside => Some(ArtifactContent::TooLarge),
        _ => None,
    })
}

/// The user a run belongs to (`None`: no such run), for the gateway's principal check.
#[derive(Message)]
#[rtype(result = "Result<Option<String>, PrepareError>")]
pub struct RunOwner(pub String);

impl Handler<RunOwner> for RunManager {
    type Result = Result<Option<String>, PrepareError>;

    fn handle(&mut self, msg: RunOwner, _: &mut Context<Self>) -> Self::Result {
        if let Some(live) = self.runs.get(&msg.0) {
            return Ok(Some(live.record.user_id.clone()));
        }
        Ok(self.env.store.run(&msg.0)?.map(|r| r.user_id))
    }
}

/// The newest runs, of one user (`None`: every user's), at most `limit`, newest first:
/// each `{run_id, status, user, thread, task, started}`.
#[derive(Message)]
#[rtype(result = "Result<Vec<Value>, PrepareError>")]
pub struct ListRuns {
    pub user: Option<String>,
    pub status: Option<RunStatus>,
    pub limit: usize,
}

impl Handler<ListRuns> for RunManager {
    type Result = ResponseFuture<Result<Vec<Value>, PrepareError>>;

    fn handle(&mut self, msg: ListRuns, _: &mut Context<Self>) -> Self::Result {
        // The query leaves the actor's thread: it reads every listed run's last
        // checkpoint, and a slow or stuck database must not stall the runs it drives.
        let store = self.env.store.clone();
        Box::pin(async move {
            let read = tokio::task::spawn_blocking(move || {
                store.list_summaries(msg.user.as_deref(), msg.status, msg.limit)
            });
            let runs = read
                .await
                .map_err(|e| PrepareError::Config(format!("runs list: {e}")))??;
            Ok(summaries_json(&runs))
        })
    }
}

/// How many runs of one user are running (the gateway's per-user limit), off the actor's
/// thread like every store read.
#[derive(Message)]
#[rtype(result = "Result<usize, PrepareError>")]
pub struct CountRunning {
    pub user: String,
}

impl Handler<CountRunning> for RunManager {
    type Result = ResponseFuture<Result<usize, PrepareError>>;

    fn handle(&mut self, msg: CountRunning, _: &mut Context<Self>) -> Self::Result {
        let store = self.env.store.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || store.count_runs(&msg.user, RunStatus::Running))
                .await
                .map_err(|e| PrepareError::Config(format!("runs count: {e}")))?
                .map_err(PrepareError::from)
        })
    }
}

/// The runs list's rows as the gateway returns them.
fn summaries_json(runs: &[crate::checkpoint::RunSummary]) -> Vec<Value> {
    runs.iter()
        .map(|s| {
            let r = &s.record;
            let delivery = s.delivery.as_ref().map(|d| {
                serde_json::json!({
                    "presented": d.presented,
                    "stage": d.stage,
                    "satisfied": d.satisfied,
                })
            });
            serde_json::json!({
                "run_id": r.run_id,
                "status": r.status,
                "user": r.user_id,
                "thread": r.thread_id,
                "task": r.task,
                "agent": r.agent,
                // A playbook sent inline is recorded in the label (a resume reads it);
                // the list says what it is rather than quoting it.
                "model": crate::run_manager::prepare::shown_model(&r.model),
                "started_ms": s.started_ms,
                "ended_ms": s.ended_ms,
                "duration_ms": s.started_ms.map(|from| {
                    s.ended_ms
                        .unwrap_or_else(|| antler_protocol::sys::unix_ms() as i64)
                        - from
                }),
                "total_tokens": s.total_tokens,
                "tool_calls": s.tool_calls,
                "delivery": delivery,
            })
        })
        .collect()
}

/// Per-run timing for the latency metrics.
#[derive(Default)]
struct Timing {
    step_started: Option<Instant>,
    calls: HashMap<String, (Instant, bool)>,
}

fn source_label(catalog: &Catalog, tool: &str) -> &'static str {
    match catalog.get(tool).map(|t| &t.source) {
        Some(ToolSource::Builtin) => "builtin",
        Some(ToolSource::Config { .. }) => "config",
        Some(ToolSource::Mcp { .. }) => "mcp",
        Some(ToolSource::Acp) => "acp",
        None => "unknown",
    }
}

fn state_label(state: ToolState) -> &'static str {
    match state {
        ToolState::Available => "available",
        ToolState::Authorized => "authorized",
        ToolState::Visible => "visible",
        ToolState::Executed => "executed",
        ToolState::Returned => "returned",
        ToolState::Delivered => "delivered",
    }
}

/// The run's events go to its log as JSON and into the metrics.
fn event_sink(
    log: Arc<EventLog>,
    metrics: Arc<Metrics>,
    catalog: Arc<Catalog>,
    timing: Arc<Mutex<Timing>>,
    elicitations: Arc<PendingElicitations>,
) -> impl Fn(&RunEvent) + Send + 'static {
    move |event| {
        // Each event carries when the lead saw it (Unix ms), for timelines.
        match serde_json::to_value(event) {
            Ok(mut json) => {
                if let Some(object) = json.as_object_mut() {
                    let at = antler_protocol::sys::unix_ms();
                    object.insert("at_ms".into(), at.into());
                }
                log.push(json.to_string());
            }
            Err(e) => tracing::warn!("run event does not encode: {e}"),
        }
        let mut timing = timing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match event {
            RunEvent::ModelStarted { .. } => {
                if let Some(started) = timing.step_started.replace(Instant::now()) {
                    metrics.step(started.elapsed());
                }
            }
            RunEvent::ModelFinished {
                usage: Some(usage), ..
            } => metrics.tokens(*usage),
            RunEvent::ModelFinished { .. }
            | RunEvent::AssistantMessage { .. }
            | RunEvent::AcpActivity { .. } => {}
            // A subagent's MCP call asks the parent run's user.
            RunEvent::Task {
                tool_call_id,
                task:
                    antler_engine::TaskEvent::TaskElicitation {
                        run_id,
                        id,
                        server,
                        message,
                        requested_schema,
                        ..
                    },
            } => elicitations.asked(PendingElicitation {
                id: id.clone(),
                server: server.clone(),
                message: message.clone(),
                requested_schema: requested_schema.clone(),
                tool_call_id: tool_call_id.clone(),
                mcp_run_id: Some(run_id.clone()),
            }),
            RunEvent::Task { .. } => {}
            RunEvent::Elicitation {
                tool_call_id,
                id,
                server,
                message,
                requested_schema,
            } => elicitations.asked(PendingElicitation {
                id: id.clone(),
                server: server.clone(),
                message: message.clone(),
                requested_schema: requested_schema.clone(),
                tool_call_id: tool_call_id.clone(),
                mcp_run_id: None,
            }),
            RunEvent::ToolStarted { tool_call_id, .. } => {
                timing
                    .calls
                    .insert(tool_call_id.clone(), (Instant::now(), false));
            }
            RunEvent::Lifecycle {
                state,
                tool,
                tool_call_id,
            } => {
                metrics.tool_state(source_label(&catalog, tool), state_label(*state));
                if let (ToolState::Executed, Some(id)) = (state, tool_call_id) {
                    if let Some(call) = timing.calls.get_mut(id) {
                        call.1 = true;
                    }
                }
            }
            RunEvent::ToolFinished {
                name,
                tool_call_id,
                error,
                ..
            } => {
                elicitations.call_ended(tool_call_id);
                if let Some((started, executed)) = timing.calls.remove(tool_call_id) {
                    let outcome = match (executed, error) {
                        (false, _) => "refused",
                        (true, true) => "error",
                        (true, false) => "ok",
                    };
                    metrics.tool_call(source_label(&catalog, name), outcome, started.elapsed());
                }
            }
            // Logged where the set-up noticed it.
            RunEvent::Warning { .. } => {}
        }
    }
}
