//! The lead's control socket service: answers ping and health like every peer, the lead
//! requests of the CLI (`Status`, `PingPeers`, `Forward`) by asking the supervisor and the
//! links, and the run requests (`SubmitRun`, `ResumeRun`, `WatchRun`, `GetRun`) by asking
//! the run manager; `WatchRun` streams the run's events as they happen. `CancelRun` asks
//! the run manager too; `SetWorkers` changes the workers through [`WorkerScaling`], and
//! `Status` shows each worker's slots from the dispatcher. In chaos mode a `ChaosStop`
//! goes to [`ChaosActors`] (refused otherwise).

use std::{
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use actix::Addr;
use antler_protocol::{
    calls::{ControlCalls, LinkError, Linked},
    envelope::TraceContext,
    handshake::Role,
    link::Call as LinkCall,
    messages::{
        ControlReply, ControlRequest, Health, LeadReply, LeadRequest, PeerPing, ProcessStatus,
        Reply, Request,
    },
    Call, InFlight, Json, RemoteError, Service,
};
use futures::future::BoxFuture;

use crate::cluster::chaos_actors::ChaosActors;
use crate::cluster::scaling::{self, WorkerScaling};
use crate::cluster::supervisor::{GetLinks, GetStatus, LinkEntry, LinkTable, Supervisor};
use crate::runs::hosts;
use crate::runs::manager::{self, RunManager};
use crate::runs::prepare::PrepareError;
use crate::subagents::dispatcher::SubagentDispatcher;

/// The replica of `role` that `key` (a sandbox id) is pinned to: the one a run's own calls
/// pick ([`hosts::pinned_by`]).
fn pinned(links: &LinkTable, role: Role, key: &str) -> Option<LinkEntry> {
    let replicas = crate::cluster::supervisor::table_replicas(links, role);
    hosts::pinned_by(&replicas, |e| e.address.as_str(), key).cloned()
}

/// How long a peer ping through a link may take.
const PEER_PING_TIMEOUT: Duration = Duration::from_secs(2);

/// The service behind `lead.sock`.
pub struct LeadService {
    supervisor: Addr<Supervisor>,
    /// The supervisor's links, read by forwards on the I/O thread.
    links: LinkTable,
    runs: Addr<RunManager>,
    address: PathBuf,
    started: Instant,
    in_flight: Arc<InFlight>,
    scaling: WorkerScaling,
    chaos: ChaosActors,
}

impl LeadService {
    pub fn new(
        supervisor: Addr<Supervisor>,
        links: LinkTable,
        runs: Addr<RunManager>,
        address: PathBuf,
        in_flight: Arc<InFlight>,
        scaling: WorkerScaling,
        chaos: ChaosActors,
    ) -> Self {
        Self {
            supervisor,
            links,
            runs,
            address,
            started: Instant::now(),
            in_flight,
            scaling,
            chaos,
        }
    }

    fn health(&self) -> Health {
        Health {
            role: Role::Lead,
            node_id: "lead".into(),
            pid: std::process::id(),
            uptime_ms: self.started.elapsed().as_millis() as u64,
            in_flight: self.in_flight.current().saturating_sub(1) as u32,
            accepting: !self.in_flight.is_draining(),
        }
    }

    fn lead_status(&self) -> ProcessStatus {
        // The lead is unhealthy while its runs database cannot be written.
        let unwritable = crate::runs::store::unwritable();
        ProcessStatus {
            role: Role::Lead,
            index: 0,
            pid: Some(std::process::id()),
            address: format!("unix:{}", self.address.display()),
            healthy: unwritable.is_none(),
            restarts: 0,
            uptime_s: self.started.elapsed().as_secs_f64(),
            last_heartbeat_ms: Some(0),
            state: "running".into(),
            // Why the runs database cannot be written, else in chaos mode the last actor
            // stopped on purpose, and what it did.
            reason: unwritable.or_else(|| self.chaos.last_stop()),
            slots: None,
            in_use: None,
        }
    }
}

fn runs_gone(e: impl std::fmt::Display) -> RemoteError {
    RemoteError::Failed(format!("the run manager is gone: {e}"))
}

async fn run_view(runs: &Addr<RunManager>, run_id: String) -> Result<Reply, RemoteError> {
    let view = runs
        .send(manager::GetRun(run_id))
        .await
        .map_err(runs_gone)?
        .map_err(|e| RemoteError::Failed(e.to_string()))?;
    Ok(Reply::Lead(LeadReply::Run { view: view.into() }))
}

/// An event or view of a run's log, which keeps them as the JSON text the gateway streams;
/// text that does not read as JSON (the lead wrote it, so never) travels as a string.
fn logged_json(text: &str) -> Json {
    Json::parse(text).unwrap_or_else(|_| Json::String(text.to_owned()))
}

fn unavailable(e: impl std::fmt::Display) -> RemoteError {
    RemoteError::Failed(format!("supervisor unavailable: {e}"))
}

impl Service for LeadService {
    /// A ping is answered on the I/O thread: a busy lead still shows it is alive.
    fn answers_now(&self, request: &Request) -> bool {
        matches!(request, Request::Control(ControlRequest::Ping { .. }))
    }

    /// A forward to a host only relays: it runs on the I/O thread, with the links read
    /// from the table, so it crosses no other thread of the lead.
    fn relays(&self, request: &Request) -> bool {
        matches!(request, Request::Lead(LeadRequest::Forward { request, .. })
            if !matches!(**request, Request::Control(ControlRequest::ChaosStop { .. })))
    }

    fn call(&self, request: Request, call: Call) -> BoxFuture<'static, Result<Reply, RemoteError>> {
        match request {
            Request::Control(ControlRequest::Ping { payload }) => {
                Box::pin(async move { Ok(Reply::Control(ControlReply::Pong { payload })) })
            }
            Request::Control(ControlRequest::Health) => {
                let h = self.health();
                Box::pin(async move { Ok(Reply::Control(ControlReply::Health(h))) })
            }
            Request::Control(ControlRequest::ChaosStop { actor }) => {
                let chaos = self.chaos.clone();
                let trace = call.trace.clone();
                Box::pin(async move { Ok(Reply::Control(chaos.stop(actor, trace).await?)) })
            }
            Request::Lead(LeadRequest::Status) => Box::pin(status(
                self.lead_status(),
                self.supervisor.clone(),
                self.scaling.dispatcher().clone(),
            )),
            Request::Lead(LeadRequest::PingPeers { role }) => {
                Box::pin(ping_peers(self.supervisor.clone(), role, call))
            }
            Request::Lead(LeadRequest::Forward {
                role,
                index,
                request,
                timeout_ms,
            }) => Box::pin(forward(
                self.links.clone(),
                role,
                index,
                request,
                Duration::from_millis(timeout_ms as u64),
                call,
            )),
            Request::Lead(LeadRequest::SubmitRun(submission)) => {
                Box::pin(submit_run(self.runs.clone(), submission))
            }
            Request::Lead(LeadRequest::ResumeRun {
                run_id,
                answer,
                playbook,
            }) => Box::pin(resume_run(
                self.runs.clone(),
                manager::ResumeRun {
                    run_id,
                    answer,
                    playbook,
                },
            )),
            Request::Lead(LeadRequest::GetRun { run_id }) => {
                let runs = self.runs.clone();
                Box::pin(async move { run_view(&runs, run_id).await })
            }
            Request::Lead(LeadRequest::WatchRun { run_id }) => {
                Box::pin(watch_run(self.runs.clone(), run_id, call))
            }
            Request::Lead(LeadRequest::CancelRun { run_id }) => {
                Box::pin(cancel_run(self.runs.clone(), run_id))
            }
            Request::Lead(LeadRequest::AnswerElicitation {
                run_id,
                id,
                action,
                content,
            }) => {
                let (runs, supervisor) = (self.runs.clone(), self.supervisor.clone());
                Box::pin(async move {
                    let answered = crate::runs::manager::answer(
                        &runs,
                        &supervisor,
                        &run_id,
                        &id,
                        action,
                        content,
                    )
                    .await;
                    Ok(Reply::Lead(LeadReply::ElicitationAnswered(
                        answered.map_err(|e| e.to_string()),
                    )))
                })
            }
            Request::Lead(LeadRequest::AnswerApproval {
                run_id,
                tool_call_id,
                decision,
                reason,
            }) => {
                let runs = self.runs.clone();
                Box::pin(async move {
                    let Some(choice) = antler_engine::ApprovalChoice::parse(&decision) else {
                        return Ok(Reply::Lead(LeadReply::ApprovalAnswered(Err(format!(
                            "{decision:?}: expected approve, approve_for_thread or deny"
                        )))));
                    };
                    let asked = manager::AnswerApproval {
                        run_id,
                        tool_call_id,
                        choice,
                        reason,
                        by: None,
                    };
                    let answered = runs
                        .send(asked)
                        .await
                        .map_err(|e| RemoteError::Failed(e.to_string()))?;
                    Ok(Reply::Lead(LeadReply::ApprovalAnswered(
                        answered.map(|a| a.waiting).map_err(|e| e.to_string()),
                    )))
                })
            }
            Request::Lead(LeadRequest::SetWorkers { workers }) => {
                let scaling = self.scaling.clone();
                Box::pin(async move {
                    let list = scaling
                        .set(workers)
                        .await
                        .map_err(|e| RemoteError::Failed(e.to_string()))?;
                    Ok(Reply::Lead(LeadReply::Workers(list)))
                })
            }
            other => Box::pin(async move {
                Err(RemoteError::Unsupported(format!(
                    "the lead does not handle {} requests",
                    other.kind()
                )))
            }),
        }
    }
}

/// `Status`: the lead's own row, then every child's from the supervisor, with each
/// worker's slots from the dispatcher.
async fn status(
    lead: ProcessStatus,
    supervisor: Addr<Supervisor>,
    dispatcher: Addr<SubagentDispatcher>,
) -> Result<Reply, RemoteError> {
    let mut all = vec![lead];
    all.extend(supervisor.send(GetStatus).await.map_err(unavailable)?);
    scaling::with_slots(&mut all, &dispatcher).await;
    Ok(Reply::Lead(LeadReply::Status(all)))
}

/// `PingPeers`: a ping through each link (of `role`, or all), each with its round trip or
/// why it failed.
async fn ping_peers(
    supervisor: Addr<Supervisor>,
    role: Option<Role>,
    call: Call,
) -> Result<Reply, RemoteError> {
    let links = supervisor.send(GetLinks).await.map_err(unavailable)?;
    let pings = links
        .into_iter()
        .filter(|(r, ..)| role.is_none_or(|want| want == *r))
        .map(|(role, index, address, link)| {
            let trace = TraceContext {
                run_id: call.trace.run_id.clone(),
                trace_id: call.trace.trace_id,
                parent_span_id: call.trace.parent_span_id,
                epoch: call.trace.epoch,
            };
            async move {
                let t = Instant::now();
                let result = Linked { link: &link, trace }
                    .ping(b"ping".to_vec(), PEER_PING_TIMEOUT)
                    .await;
                let result = match result {
                    Ok(payload) if payload == b"ping" => Ok(t.elapsed().as_micros() as u64),
                    Ok(_) => Err("unexpected reply Control::Pong with another payload".to_owned()),
                    Err(LinkError::Rpc(e)) => Err(e.to_string()),
                    Err(LinkError::Gone(e)) => Err(format!("link unavailable: {e}")),
                };
                PeerPing {
                    role,
                    index,
                    address,
                    result,
                }
            }
        });
    Ok(Reply::Lead(LeadReply::PingPeers(
        futures::future::join_all(pings).await,
    )))
}

/// `Forward`: `request` to the host of `role` and `index` (or, for a request pinned to a
/// thread, to the replica holding the thread), its reply relayed.
async fn forward(
    links: LinkTable,
    role: Role,
    index: u32,
    request: Box<Request>,
    timeout: Duration,
    call: Call,
) -> Result<Reply, RemoteError> {
    if matches!(*request, Request::Control(ControlRequest::ChaosStop { .. })) {
        return Err(RemoteError::Failed(
            "a ChaosStop goes to the lead itself (antler chaos stop), which routes it".into(),
        ));
    }
    // A request pinned to a thread goes to the replica holding the thread, whatever index
    // the caller named (it cannot know the replica set).
    let entry = match antler_protocol::placement::route(&request) {
        antler_protocol::placement::Route::Pinned(key) => pinned(&links, role, &key),
        _ => links.get(&(role, index)).map(|e| e.value().clone()),
    };
    let Some(entry) = entry else {
        return Err(RemoteError::Failed(format!(
            "no {role} with index {index} in this cluster"
        )));
    };
    let reply = match entry.connection() {
        Some(conn) => conn.request(*request, call.trace.clone(), timeout).await,
        // Down: the link says why.
        None => entry
            .link
            .send(LinkCall {
                request: *request,
                trace: call.trace.clone(),
                timeout,
            })
            .await
            .map_err(|e| RemoteError::Failed(format!("link unavailable: {e}")))?,
    }
    .map_err(|e| match e {
        antler_protocol::RpcError::Remote(r) => r,
        other => RemoteError::Failed(format!("{role}: {other}")),
    })?;
    Ok(Reply::Lead(LeadReply::Forwarded(Box::new(reply))))
}

/// `SubmitRun`: the run manager starts the run; its id.
async fn submit_run(
    runs: Addr<RunManager>,
    submission: antler_protocol::messages::RunSubmission,
) -> Result<Reply, RemoteError> {
    let run_id = runs
        .send(manager::SubmitRun(submission))
        .await
        .map_err(runs_gone)?
        .map_err(|e| RemoteError::Failed(e.to_string()))?;
    Ok(Reply::Lead(LeadReply::RunStarted { run_id }))
}

/// `ResumeRun`: the run manager drives the run again (with an answer); its id.
async fn resume_run(
    runs: Addr<RunManager>,
    resume: manager::ResumeRun,
) -> Result<Reply, RemoteError> {
    let run_id = runs
        .send(resume)
        .await
        .map_err(runs_gone)?
        .map_err(|e| RemoteError::Failed(e.to_string()))?;
    Ok(Reply::Lead(LeadReply::RunStarted { run_id }))
}

/// `WatchRun`: the run's events streamed as items while it is driven, then its view; a
/// run with no events here is answered its view at once.
async fn watch_run(
    runs: Addr<RunManager>,
    run_id: String,
    call: Call,
) -> Result<Reply, RemoteError> {
    let log = runs
        .send(manager::WatchRun(run_id.clone()))
        .await
        .map_err(runs_gone)?;
    let Some(log) = log else {
        return run_view(&runs, run_id).await;
    };
    let call = &call;
    let view = log
        .follow(|event| async move {
            call.send_item(Reply::Lead(LeadReply::RunEvent {
                event: logged_json(&event),
            }))
            .await
            .is_ok()
        })
        .await;
    match view {
        Some(view) => Ok(Reply::Lead(LeadReply::Run {
            view: logged_json(&view),
        })),
        None => Err(RemoteError::Failed("the watcher went away".into())),
    }
}

/// `CancelRun`: whether the run was cancelled, and its status (`error` once cancelled).
async fn cancel_run(runs: Addr<RunManager>, run_id: String) -> Result<Reply, RemoteError> {
    let outcome = runs
        .send(manager::CancelRun(run_id.clone()))
        .await
        .map_err(runs_gone)?;
    let (cancelled, status) = match outcome {
        Ok(manager::CancelOutcome::Cancelled) => (true, "error".to_owned()),
        Err(PrepareError::NotRunning { status, .. }) => (false, status),
        Err(e) => return Err(RemoteError::Failed(e.to_string())),
    };
    Ok(Reply::Lead(LeadReply::RunCancelled {
        run_id,
        cancelled,
        status,
    }))
}
