//! `TaskGraph`: one actor per task, thrown away when the task ends. It owns the task's
//! cancellation and drives the engine's task run (`antler_engine::run_task`): no
//! checkpoint, no `task` tool, its budgets and timeout, and its calls held for the parent
//! run's user (answered through the worker). Its events and its end go to the
//! [`Worker`](crate::worker::Worker), which streams them to whoever listens; the first
//! terminal state is the only one (the actor stops after it). A graph that stops without
//! one (it crashed, or chaos mode's [`Crash`]) is reported `failed` by the worker.

use std::sync::Arc;

use actix::prelude::*;
use antler_engine::{run_task_asking, CancelFlag, TaskAsks, TaskEvent, TaskSpec};

use crate::hosts::WorkerHosts;
use crate::worker::{TaskEventOf, TaskFinished, TaskKey, Worker};

/// One task's actor.
pub struct TaskGraph {
    pub key: TaskKey,
    pub spec: Option<TaskSpec>,
    pub hosts: Arc<WorkerHosts>,
    pub cancel: Arc<CancelFlag>,
    /// The task's calls held for the parent run's user, answered through the worker.
    pub asks: Arc<TaskAsks>,
    pub worker: Addr<Worker>,
    pub node: String,
    /// The trace of the `RunTask` request: the task's spans are its children.
    pub trace: antler_protocol::TraceContext,
}

impl Actor for TaskGraph {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let Some(spec) = self.spec.take() else {
            ctx.stop();
            return;
        };
        let worker = self.worker.clone();
        let key = self.key.clone();
        let events = Arc::new(move |event: TaskEvent| {
            worker.do_send(TaskEventOf {
                key: key.clone(),
                event,
            })
        });
        let hosts: Arc<dyn antler_engine::ToolHosts> = Arc::new(
            self.hosts
                .for_task(spec.sandbox_host.as_deref(), spec.mcp_host.as_deref()),
        );
        let cancel = Arc::clone(&self.cancel);
        let asks = Arc::clone(&self.asks);
        let trace = self.trace.clone();
        antler_protocol::telemetry::within(trace, async move {
            run_task_asking(&spec, hosts, cancel, events, asks).await
        })
        .into_actor(self)
        .map(|mut result, act, ctx| {
            result.worker = Some(act.node.clone());
            act.worker.do_send(TaskFinished {
                key: act.key.clone(),
                result,
            });
            ctx.stop();
        })
        .spawn(ctx);
    }
}

/// Asks the task to stop (between its steps, or while it waits on its model or a tool).
#[derive(Message)]
#[rtype(result = "()")]
pub struct CancelTask;

impl Handler<CancelTask> for TaskGraph {
    type Result = ();

    fn handle(&mut self, _: CancelTask, _: &mut Context<Self>) {
        self.cancel.cancel();
    }
}

/// Chaos mode: the graph stops as if it crashed, mid-step, with no result; its worker
/// reports the task failed.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Crash;

impl Handler<Crash> for TaskGraph {
    type Result = ();

    fn handle(&mut self, _: Crash, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}
