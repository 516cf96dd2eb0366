//! The `RunManager`'s questions about runs: a run's events to watch, its view, the
//! elicitations it waits on, its catalog, its messages, its owner, the runs list and the
//! count of a user's running runs. A run in memory is answered from there; anything else
//! is read on the runs store's thread, which the handler awaits.

use std::sync::Arc;

use actix::prelude::*;
use serde_json::Value;

use super::{source_label, RunManager};
use crate::runs::elicitations::PendingElicitations;
use crate::runs::events::EventLog;
use crate::runs::prepare::PrepareError;
use crate::runs::store::RunStatus;
use antler_engine::catalog::ToolSource;

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
        let run_id = msg.0;
        let events = self.env.store.call(move |store| store.events(&run_id));
        Box::pin(async move {
            let events = events.await.ok().filter(|e| !e.is_empty())?;
            let view = view.await.ok()?;
            if view["status"] == "running" {
                return None;
            }
            let log = EventLog::default();
            for (id, event) in events {
                log.push_stored(id, event);
            }
            log.stop(view.to_string());
            Some(Arc::new(log))
        })
    }
}

/// The log of a run this lead holds in memory (driven, waiting, or ended a moment ago);
/// `None` otherwise. Never reads the store.
#[derive(Message)]
#[rtype(result = "Option<Arc<EventLog>>")]
pub struct HeldLog(pub String);

impl Handler<HeldLog> for RunManager {
    type Result = Option<Arc<EventLog>>;

    fn handle(&mut self, msg: HeldLog, _: &mut Context<Self>) -> Self::Result {
        self.runs.get(&msg.0).map(|live| live.log.clone())
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
        let (skills, run_id) = (live.skills.clone(), msg.0);
        // The skill policy in force follows the run's active skills, as its last
        // checkpoint holds them (read on the store's thread: a state is large).
        let policy = self.env.store.call(move |store| {
            let active = store
                .latest(&run_id)
                .ok()
                .flatten()
                .map(|(_, state)| state.active_skills)
                .unwrap_or_default();
            let policy = skills.policy(&active);
            Ok(serde_json::json!({
                "active_skills": active.iter().map(|s| s.name.clone()).collect::<Vec<_>>(),
                "allowed_tools": policy.allowed(),
            }))
        });
        Box::pin(async move {
            let policy = policy.await.unwrap_or(Value::Null);
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
        // Read on the store's thread: a long run's state is large.
        let run_id = msg.0;
        let read = self.env.store.call(move |store| {
            if store.run(&run_id)?.is_none() {
                return Ok(Err(PrepareError::UnknownRun(run_id)));
            }
            let messages = store
                .latest(&run_id)?
                .map(|(_, state)| serde_json::to_value(state.messages))
                .transpose()
                .map_err(|e| PrepareError::Config(format!("run messages: {e}")));
            Ok(messages.map(|m| m.unwrap_or(Value::Array(Vec::new()))))
        });
        Box::pin(async move { read.await? })
    }
}

/// The user a run belongs to (`None`: no such run), for the gateway's principal check.
#[derive(Message)]
#[rtype(result = "Result<Option<String>, PrepareError>")]
pub struct RunOwner(pub String);

impl Handler<RunOwner> for RunManager {
    type Result = ResponseFuture<Result<Option<String>, PrepareError>>;

    fn handle(&mut self, msg: RunOwner, _: &mut Context<Self>) -> Self::Result {
        if let Some(live) = self.runs.get(&msg.0) {
            let owner = live.record.user_id.clone();
            return Box::pin(async move { Ok(Some(owner)) });
        }
        let run_id = msg.0;
        let read = self.env.store.call(move |store| store.run(&run_id));
        Box::pin(async move { Ok(read.await?.map(|r| r.user_id)) })
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
        // The query runs on the store's thread: it reads every listed run's last
        // checkpoint, and a slow or stuck database must not stall the runs it drives.
        let read = self
            .env
            .store
            .call(move |store| store.list_summaries(msg.user.as_deref(), msg.status, msg.limit));
        Box::pin(async move { Ok(summaries_json(&read.await?)) })
    }
}

/// How many runs of one user are running (the gateway's per-user limit), off the actor's
/// thread like every store read. A run whose cancel was accepted is not counted: its place
/// is free from the cancel on, though its drive may take a moment to stop and record it.
#[derive(Message)]
#[rtype(result = "Result<usize, PrepareError>")]
pub struct CountRunning {
    pub user: String,
}

impl Handler<CountRunning> for RunManager {
    type Result = ResponseFuture<Result<usize, PrepareError>>;

    fn handle(&mut self, msg: CountRunning, _: &mut Context<Self>) -> Self::Result {
        let cancelled = self.cancelled_runs();
        let read = self.env.store.call(move |store| {
            let running = store.run_ids(&msg.user, RunStatus::Running)?;
            Ok(running.iter().filter(|id| !cancelled.contains(*id)).count())
        });
        Box::pin(async move { Ok(read.await?) })
    }
}

impl RunManager {
    /// The runs whose cancel this actor accepted: driven ones whose flag is set (the
    /// store says `running` until their drive stops) and ones to be cancelled at launch.
    fn cancelled_runs(&self) -> std::collections::HashSet<String> {
        let flagged = self
            .runs
            .iter()
            .filter(|(_, live)| live.cancel.is_cancelled())
            .map(|(id, _)| id.clone());
        flagged
            .chain(self.cancel_at_launch.iter().cloned())
            .collect()
    }
}

/// The runs list's rows as the gateway returns them.
fn summaries_json(runs: &[crate::runs::store::RunSummary]) -> Vec<Value> {
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
                "model": crate::runs::prepare::shown_model(&r.model),
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
