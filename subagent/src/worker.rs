//! `Worker`: owns this worker process's task slots (its advertised capacity) and answers
//! the lead's worker requests.

use actix::prelude::*;
use antler_protocol::{
    host::{HostArgs, RoleHandler},
    messages::{Health, Reply, Request, WorkerReply, WorkerRequest},
    Call, RemoteError,
};
use futures::future::BoxFuture;

/// The worker actor.
#[derive(Debug)]
pub struct Worker {
    slots: u32,
    busy: u32,
}

impl Actor for Worker {
    type Context = Context<Self>;
}

/// Total and busy task slots.
#[derive(Debug, Message)]
#[rtype(result = "(u32, u32)")]
pub struct Slots;

impl actix::Handler<Slots> for Worker {
    type Result = MessageResult<Slots>;

    fn handle(&mut self, _: Slots, _: &mut Context<Self>) -> Self::Result {
        MessageResult((self.slots, self.busy))
    }
}

/// Routes worker requests to the worker actor.
pub struct Handler {
    worker: Addr<Worker>,
}

impl Handler {
    pub fn start(args: &HostArgs) -> Self {
        Self {
            worker: Worker {
                slots: args.capacity,
                busy: 0,
            }
            .start(),
        }
    }
}

impl RoleHandler for Handler {
    fn handle(
        &self,
        request: Request,
        _: Call,
        health: Health,
    ) -> BoxFuture<'static, Result<Reply, RemoteError>> {
        let worker = self.worker.clone();
        Box::pin(async move {
            match request {
                Request::Worker(WorkerRequest::Capacity) => {
                    let (slots, busy) = worker
                        .send(Slots)
                        .await
                        .map_err(|e| RemoteError::Failed(format!("worker unavailable: {e}")))?;
                    Ok(Reply::Worker(WorkerReply::Capacity {
                        health,
                        slots,
                        busy,
                    }))
                }
                other => Err(RemoteError::Unsupported(format!(
                    "the subagent worker does not handle {} requests",
                    other.kind()
                ))),
            }
        })
    }
}
