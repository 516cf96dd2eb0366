//! The typed calls to a subagent worker that have a single answer: its capacity,
//! cancelling tasks, draining. A task's run and re-attach stream their events.

use std::future::Future;
use std::time::Duration;

use super::{ask, reply_kind, Requester};
use crate::messages::{Health, Reply, Request, WorkerReply, WorkerRequest};

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
