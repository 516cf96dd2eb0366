//! The typed calls to a subagent worker: its capacity, cancelling tasks, answering a
//! task's held call, draining, and
//! the streams of a task's run and of a re-attach to it.

use std::future::Future;
use std::time::Duration;

use super::{ask, reply_kind, Requester, Watch};
use crate::connection::{Connection, RpcError};
use crate::messages::{
    ApprovalAnswer, Health, Reply, Request, TaskAssignment, TaskEvent, TaskResult, WorkerReply,
    WorkerRequest,
};

/// A worker's health and task slots ([`WorkerRequest::Capacity`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerCapacity {
    pub health: Health,
    pub slots: u32,
    pub busy: u32,
}

/// One method per unary [`WorkerRequest`], on any [`Requester`].
pub trait WorkerCalls: Requester {
    /// [`WorkerRequest::Capacity`].
    fn capacity(
        &self,
        timeout: Duration,
    ) -> impl Future<Output = Result<WorkerCapacity, Self::Error>> + Send {
        ask(
            self,
            Request::Worker(WorkerRequest::Capacity),
            timeout,
            |reply| match reply {
                Reply::Worker(WorkerReply::Capacity {
                    health,
                    slots,
                    busy,
                }) => Ok(WorkerCapacity {
                    health,
                    slots,
                    busy,
                }),
                other => Err(reply_kind(&other)),
            },
        )
    }

    /// [`WorkerRequest::Cancel`]: how many tasks the cancel reached.
    fn cancel_tasks(
        &self,
        run_id: String,
        tool_call_id: Option<String>,
        timeout: Duration,
    ) -> impl Future<Output = Result<u32, Self::Error>> + Send {
        let request = WorkerRequest::Cancel {
            run_id,
            tool_call_id,
        };
        ask(
            self,
            Request::Worker(request),
            timeout,
            |reply| match reply {
                Reply::Worker(WorkerReply::Cancelled { tasks }) => Ok(tasks),
                other => Err(reply_kind(&other)),
            },
        )
    }

    /// [`WorkerRequest::AnswerApproval`]: whether a held call of the task took it.
    fn answer_approval(
        &self,
        answer: ApprovalAnswer,
        timeout: Duration,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send {
        ask(
            self,
            Request::Worker(WorkerRequest::AnswerApproval(answer)),
            timeout,
            |reply| match reply {
                Reply::Worker(WorkerReply::ApprovalTaken { taken }) => Ok(taken),
                other => Err(reply_kind(&other)),
            },
        )
    }

    /// [`WorkerRequest::Drain`]: the worker takes no new tasks.
    fn drain(&self, timeout: Duration) -> impl Future<Output = Result<(), Self::Error>> + Send {
        ask(
            self,
            Request::Worker(WorkerRequest::Drain),
            timeout,
            |reply| match reply {
                Reply::Worker(WorkerReply::Draining) => Ok(()),
                other => Err(reply_kind(&other)),
            },
        )
    }
}

impl<R: Requester + ?Sized> WorkerCalls for R {}

/// One item of a task's stream ([`WorkerRequest::RunTask`], [`WorkerRequest::Attach`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskItem {
    /// One of the task's events.
    Event(TaskEvent),
    /// The final reply: how the task ended.
    Ended(TaskResult),
    /// The final reply: no task of that run and call is running or kept there.
    Unknown,
}

/// [`WorkerRequest::RunTask`] on a connection to a worker: the task's events, then its
/// end, all within `timeout`. Dropping the stream leaves the task running on the worker
/// (its result is kept for [`attach_task`]).
pub async fn run_task(
    worker: &Connection,
    assignment: TaskAssignment,
    timeout: Duration,
) -> Result<Watch<TaskItem>, RpcError> {
    let request = Request::Worker(WorkerRequest::RunTask(assignment));
    Watch::start(worker, request, timeout, task_item).await
}

/// [`WorkerRequest::Attach`] to the task (`run_id`, `tool_call_id`) on a connection to a
/// worker: its events from now on and its end, or its kept result.
pub async fn attach_task(
    worker: &Connection,
    run_id: String,
    tool_call_id: String,
    timeout: Duration,
) -> Result<Watch<TaskItem>, RpcError> {
    let request = Request::Worker(WorkerRequest::Attach {
        run_id,
        tool_call_id,
    });
    Watch::start(worker, request, timeout, task_item).await
}

fn task_item(reply: Reply) -> Result<TaskItem, &'static str> {
    match reply {
        Reply::Worker(WorkerReply::TaskEvent { event }) => Ok(TaskItem::Event(event)),
        Reply::Worker(WorkerReply::TaskEnded { result }) => Ok(TaskItem::Ended(result)),
        Reply::Worker(WorkerReply::UnknownTask) => Ok(TaskItem::Unknown),
        other => Err(reply_kind(&other)),
    }
}
