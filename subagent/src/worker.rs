//! `Worker`: owns this worker process's task slots (its advertised capacity), the task
//! graphs running here, and the results of finished tasks, kept for a while by (run,
//! tool call) so a lead that restarted collects them instead of running them again.
//! [`Handler`] answers the lead: an `AnswerApproval` goes to the held call of a running
//! task; a `RunTask` starts a graph (or re-attaches when that
//! task already runs or ran here: nothing runs twice) and streams its events and its
//! end (a re-attached lead is first told again of the calls the task holds); a task without a free slot is refused, never queued. The worker supervises its
//! graphs: one that stopped without a result (it crashed) ends its task `failed` with
//! [`GRAPH_CRASHED`], so the lead's run goes on instead of waiting for it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use antler_engine::{
    ApprovalChoice, ApprovalDecision, CancelFlag, TaskAsks, TaskEvent, TaskResult, TaskSpec,
};
use antler_protocol::{
    host::RoleHandler,
    messages::{
        ApprovalAnswer, ApprovalAnswerChoice, Health, Reply, Request, WorkerReply, WorkerRequest,
    },
    Call, RemoteError, TraceContext,
};
use futures::future::BoxFuture;
use tokio::sync::mpsc;

use crate::graph::{CancelTask, Crash, TaskGraph};
use crate::hosts::WorkerHosts;

/// A task's key: its parent run and the `task` call's id.
pub type TaskKey = (String, String);

/// The error of a task whose graph stopped without a result.
pub const GRAPH_CRASHED: &str =
    "the task's graph stopped unexpectedly (it crashed) before it had a result";

/// How often the worker looks for graphs that stopped without a result.
const GRAPH_CHECK: Duration = Duration::from_millis(200);

/// What a listener of a task receives.
#[derive(Debug)]
pub enum Update {
    Event(TaskEvent),
    Ended(TaskResult),
}

/// A listener's view of a task: live updates, or the result it already has.
pub enum Subscription {
    Live(mpsc::UnboundedReceiver<Update>),
    Done(TaskResult),
}

enum Entry {
    Running {
        graph: Addr<TaskGraph>,
        asks: Arc<TaskAsks>,
        listeners: Vec<mpsc::UnboundedSender<Update>>,
    },
    Finished {
        result: TaskResult,
        at: Instant,
    },
}

/// The worker actor.
pub struct Worker {
    node: String,
    slots: u32,
    tasks: HashMap<TaskKey, Entry>,
    hosts: Arc<WorkerHosts>,
    keep: Duration,
    draining: bool,
}

impl Worker {
    fn busy(&self) -> u32 {
        let running = self
            .tasks
            .values()
            .filter(|e| matches!(e, Entry::Running { .. }))
            .count();
        u32::try_from(running).unwrap_or(u32::MAX)
    }

    fn subscribe(&mut self, key: &TaskKey) -> Option<Subscription> {
        match self.tasks.get_mut(key)? {
            Entry::Running {
                listeners, asks, ..
            } => {
                let (tx, rx) = mpsc::unbounded_channel();
                // A lead that (re-)attaches is told again of every call the task holds:
                // it may have lost the first report (killed before it stored it); it
                // knows a call it was told of already.
                for event in asks.still_held(&key.1) {
                    let _ = tx.send(Update::Event(event));
                }
                listeners.push(tx);
                Some(Subscription::Live(rx))
            }
            Entry::Finished { result, .. } => Some(Subscription::Done(result.clone())),
        }
    }
}

impl Actor for Worker {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        // Kept results expire.
        ctx.run_interval(Duration::from_secs(5), |worker, _| {
            let keep = worker.keep;
            worker.tasks.retain(|_, entry| match entry {
                Entry::Finished { at, .. } => at.elapsed() < keep,
                Entry::Running { .. } => true,
            });
        });
        ctx.run_interval(GRAPH_CHECK, |worker, ctx| worker.reap_crashed(ctx));
    }
}

impl Worker {
    /// Ends `failed` every task whose graph stopped without reporting its end.
    fn reap_crashed(&mut self, ctx: &mut Context<Self>) {
        let crashed: Vec<TaskKey> = self
            .tasks
            .iter()
            .filter_map(|(key, entry)| match entry {
                Entry::Running { graph, .. } if !graph.connected() => Some(key.clone()),
                _ => None,
            })
            .collect();
        for key in crashed {
            tracing::warn!(run = %key.0, call = %key.1, "{GRAPH_CRASHED}; the task ends failed");
            let mut result = TaskResult::failed(GRAPH_CRASHED);
            result.worker = Some(self.node.clone());
            actix::Handler::handle(self, TaskFinished { key, result }, ctx);
        }
    }
}

/// Chaos mode: stop the graphs of the tasks with this id (a `task` call id) as if they
/// crashed; how many were running.
#[derive(Message)]
#[rtype(result = "u32")]
pub struct ChaosStop {
    pub task_id: String,
}

impl actix::Handler<ChaosStop> for Worker {
    type Result = u32;

    fn handle(&mut self, msg: ChaosStop, _: &mut Context<Self>) -> u32 {
        let mut stopped = 0;
        for ((_, call), entry) in &self.tasks {
            if let (true, Entry::Running { graph, .. }) = (*call == msg.task_id, entry) {
                graph.do_send(Crash);
                stopped += 1;
            }
        }
        stopped
    }
}

/// Why a task was not started.
#[derive(Debug)]
pub enum StartError {
    NoSlot { slots: u32 },
    Draining,
}

/// Starts the task of `spec` (or re-attaches to it).
#[derive(Message)]
#[rtype(result = "Result<Subscription, StartError>")]
pub struct Start(pub TaskSpec, pub antler_protocol::TraceContext);

impl actix::Handler<Start> for Worker {
    type Result = Result<Subscription, StartError>;

    fn handle(&mut self, Start(spec, trace): Start, ctx: &mut Context<Self>) -> Self::Result {
        let key = (spec.run_id.clone(), spec.tool_call_id.clone());
        if let Some(existing) = self.subscribe(&key) {
            return Ok(existing);
        }
        if self.draining {
            return Err(StartError::Draining);
        }
        if self.busy() >= self.slots {
            return Err(StartError::NoSlot { slots: self.slots });
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(Update::Event(TaskEvent::TaskStarted {
            task_id: spec.tool_call_id.clone(),
            description: spec.description.clone(),
            model_name: Some(spec.model.name().to_owned()),
            worker: Some(self.node.clone()),
        }));
        tracing::info!(run = %spec.run_id, call = %spec.tool_call_id, subagent = %spec.subagent_type, "task started");
        let asks = Arc::new(TaskAsks::default());
        let graph = TaskGraph {
            key: key.clone(),
            spec: Some(spec),
            hosts: Arc::clone(&self.hosts),
            cancel: Arc::new(CancelFlag::default()),
            asks: Arc::clone(&asks),
            worker: ctx.address(),
            node: self.node.clone(),
            trace,
        }
        .start();
        self.tasks.insert(
            key,
            Entry::Running {
                graph,
                asks,
                listeners: vec![tx],
            },
        );
        Ok(Subscription::Live(rx))
    }
}

/// Re-attaches to a task that runs or ran here.
#[derive(Message)]
#[rtype(result = "Option<Subscription>")]
pub struct Attach(pub TaskKey);

impl actix::Handler<Attach> for Worker {
    type Result = Option<Subscription>;

    fn handle(&mut self, Attach(key): Attach, _: &mut Context<Self>) -> Self::Result {
        self.subscribe(&key)
    }
}

/// Cancels a task, or every task of a run; how many it reached.
#[derive(Message)]
#[rtype(result = "u32")]
pub struct Cancel {
    pub run_id: String,
    pub tool_call_id: Option<String>,
}

impl actix::Handler<Cancel> for Worker {
    type Result = u32;

    fn handle(&mut self, msg: Cancel, _: &mut Context<Self>) -> u32 {
        let mut reached = 0;
        for ((run, call), entry) in &self.tasks {
            let matches =
                *run == msg.run_id && msg.tool_call_id.as_ref().is_none_or(|id| id == call);
            if let (true, Entry::Running { graph, .. }) = (matches, entry) {
                graph.do_send(CancelTask);
                reached += 1;
            }
        }
        reached
    }
}

/// The parent run's user answered a held call of a running task; whether it took it.
#[derive(Message)]
#[rtype(result = "bool")]
pub struct AnswerApproval(pub ApprovalAnswer);

impl actix::Handler<AnswerApproval> for Worker {
    type Result = bool;

    fn handle(&mut self, AnswerApproval(answer): AnswerApproval, _: &mut Context<Self>) -> bool {
        let key = (answer.run_id.clone(), answer.tool_call_id.clone());
        let Some(Entry::Running { asks, .. }) = self.tasks.get(&key) else {
            return false;
        };
        let choice = match answer.choice {
            ApprovalAnswerChoice::Approve => ApprovalChoice::Approve,
            ApprovalAnswerChoice::ApproveForThread => ApprovalChoice::ApproveForThread,
            ApprovalAnswerChoice::Deny => ApprovalChoice::Deny,
        };
        asks.answer(
            &answer.call_id,
            ApprovalDecision {
                choice,
                by: answer.by,
                at: answer.at,
                reason: answer.reason,
            },
        )
    }
}

/// Total and busy task slots.
#[derive(Debug, Message)]
#[rtype(result = "(u32, u32)")]
pub struct Slots;

impl actix::Handler<Slots> for Worker {
    type Result = MessageResult<Slots>;

    fn handle(&mut self, _: Slots, _: &mut Context<Self>) -> Self::Result {
        MessageResult((self.slots, self.busy()))
    }
}

/// Takes no new task from now on.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Drain;

impl actix::Handler<Drain> for Worker {
    type Result = ();

    fn handle(&mut self, _: Drain, _: &mut Context<Self>) {
        tracing::info!(running = self.busy(), "draining: no new tasks");
        self.draining = true;
    }
}

/// An event of a running task (from its graph).
#[derive(Message)]
#[rtype(result = "()")]
pub struct TaskEventOf {
    pub key: TaskKey,
    pub event: TaskEvent,
}

impl actix::Handler<TaskEventOf> for Worker {
    type Result = ();

    fn handle(&mut self, msg: TaskEventOf, _: &mut Context<Self>) {
        if let Some(Entry::Running { listeners, .. }) = self.tasks.get_mut(&msg.key) {
            listeners.retain(|l| l.send(Update::Event(msg.event.clone())).is_ok());
        }
    }
}

/// A task ended (from its graph): its listeners get the result, which is kept.
#[derive(Message)]
#[rtype(result = "()")]
pub struct TaskFinished {
    pub key: TaskKey,
    pub result: TaskResult,
}

impl actix::Handler<TaskFinished> for Worker {
    type Result = ();

    fn handle(&mut self, msg: TaskFinished, _: &mut Context<Self>) {
        tracing::info!(run = %msg.key.0, call = %msg.key.1, status = msg.result.status.as_str(), "task ended");
        let finished = Entry::Finished {
            result: msg.result.clone(),
            at: Instant::now(),
        };
        if let Some(Entry::Running { listeners, .. }) = self.tasks.insert(msg.key, finished) {
            for listener in listeners {
                let _ = listener.send(Update::Ended(msg.result.clone()));
            }
        }
    }
}

/// Routes worker requests to the worker actor.
pub struct Handler {
    worker: Addr<Worker>,
}

impl Handler {
    pub fn start(node: String, slots: u32, hosts: Arc<WorkerHosts>, keep: Duration) -> Self {
        Self {
            worker: Worker {
                node,
                slots: slots.max(1),
                tasks: HashMap::new(),
                hosts,
                keep,
                draining: false,
            }
            .start(),
        }
    }
}

fn gone(e: MailboxError) -> RemoteError {
    RemoteError::Failed(format!("worker unavailable: {e}"))
}

/// Streams a subscription to the requester: events as items, then the end.
async fn stream(subscription: Subscription, call: Call) -> Result<Reply, RemoteError> {
    let mut updates = match subscription {
        Subscription::Done(result) => {
            return Ok(Reply::Worker(WorkerReply::TaskEnded {
                result: result.into(),
            }))
        }
        Subscription::Live(updates) => updates,
    };
    while let Some(update) = updates.recv().await {
        match update {
            Update::Event(event) => {
                let item = Reply::Worker(WorkerReply::TaskEvent {
                    event: event.into(),
                });
                if call.send_item(item).await.is_err() {
                    // The lead is gone; the task goes on and its result is kept.
                    return Err(RemoteError::Failed("the requester left".into()));
                }
            }
            Update::Ended(result) => {
                return Ok(Reply::Worker(WorkerReply::TaskEnded {
                    result: result.into(),
                }))
            }
        }
    }
    Err(RemoteError::Failed(
        "the task's graph stopped without a result".into(),
    ))
}

impl RoleHandler for Handler {
    /// Chaos mode: stops a task's graph as if it crashed.
    fn chaos_stop(
        &self,
        actor: antler_protocol::messages::ActorRef,
    ) -> BoxFuture<'static, Result<antler_protocol::messages::ControlReply, RemoteError>> {
        use antler_protocol::messages::{ActorRef, ControlReply};
        let worker = self.worker.clone();
        Box::pin(async move {
            let ActorRef::TaskGraph { task_id } = actor else {
                return Ok(ControlReply::ChaosStopped {
                    stopped: 0,
                    detail: format!("a subagent worker owns no {} actor", actor.kind()),
                });
            };
            let stopped = worker
                .send(ChaosStop {
                    task_id: task_id.clone(),
                })
                .await
                .map_err(gone)?;
            Ok(ControlReply::ChaosStopped {
                stopped,
                detail: if stopped > 0 {
                    format!("stopped the graph of task '{task_id}': the task ends failed")
                } else {
                    format!("no running task '{task_id}' on this worker")
                },
            })
        })
    }

    fn handle(
        &self,
        request: Request,
        call: Call,
        health: Health,
    ) -> BoxFuture<'static, Result<Reply, RemoteError>> {
        let worker = self.worker.clone();
        Box::pin(async move {
            let Request::Worker(request) = request else {
                return Err(RemoteError::Unsupported(format!(
                    "the subagent worker does not handle {} requests",
                    request.kind()
                )));
            };
            match request {
                WorkerRequest::Capacity => {
                    let (slots, busy) = worker.send(Slots).await.map_err(gone)?;
                    Ok(Reply::Worker(WorkerReply::Capacity {
                        health,
                        slots,
                        busy,
                    }))
                }
                WorkerRequest::RunTask(assignment) => {
                    // A decoding error names its kind, never what (the text is the user's).
                    let spec = TaskSpec::from_wire(*assignment.spec).map_err(|e| {
                        RemoteError::Failed(format!("the task does not decode: {e}"))
                    })?;
                    if (spec.run_id.as_str(), spec.tool_call_id.as_str())
                        != (assignment.run_id.as_str(), assignment.tool_call_id.as_str())
                    {
                        return Err(RemoteError::Failed(
                            "the task's ids do not match its assignment".into(),
                        ));
                    }
                    // The task's own calls to the hosts carry no epoch: the worker is fenced
                    // at its door (this request passed it), and a task a newer lead adopts
                    // (`Attach`) must go on acting for it (docs/ha.md, fencing).
                    let trace = TraceContext {
                        epoch: None,
                        ..call.trace.clone()
                    };
                    let subscription = match worker.send(Start(spec, trace)).await.map_err(gone)? {
                        Ok(subscription) => subscription,
                        Err(StartError::NoSlot { slots }) => {
                            return Err(RemoteError::Overloaded(format!(
                                "all {slots} task slots of this worker are busy"
                            )))
                        }
                        Err(StartError::Draining) => return Err(RemoteError::ShuttingDown),
                    };
                    stream(subscription, call).await
                }
                WorkerRequest::Attach {
                    run_id,
                    tool_call_id,
                } => match worker
                    .send(Attach((run_id, tool_call_id)))
                    .await
                    .map_err(gone)?
                {
                    Some(subscription) => stream(subscription, call).await,
                    None => Ok(Reply::Worker(WorkerReply::UnknownTask)),
                },
                WorkerRequest::Cancel {
                    run_id,
                    tool_call_id,
                } => {
                    let tasks = worker
                        .send(Cancel {
                            run_id,
                            tool_call_id,
                        })
                        .await
                        .map_err(gone)?;
                    Ok(Reply::Worker(WorkerReply::Cancelled { tasks }))
                }
                WorkerRequest::AnswerApproval(answer) => {
                    let taken = worker.send(AnswerApproval(answer)).await.map_err(gone)?;
                    Ok(Reply::Worker(WorkerReply::ApprovalTaken { taken }))
                }
                WorkerRequest::Drain => {
                    worker.send(Drain).await.map_err(gone)?;
                    Ok(Reply::Worker(WorkerReply::Draining))
                }
            }
        })
    }
}
