//! `SandboxPool`: owns the live and warm sandboxes of this host (none until the sandbox
//! issue lands acquisition) and answers sandbox-host requests.

use actix::prelude::*;
use antler_protocol::{
    host::{HostArgs, RoleHandler},
    messages::{Health, Reply, Request, SandboxReply, SandboxRequest},
    Call, RemoteError,
};
use futures::future::BoxFuture;

/// The pool actor.
#[derive(Debug, Default)]
pub struct SandboxPool {
    live: u32,
}

impl Actor for SandboxPool {
    type Context = Context<Self>;
}

/// How many sandboxes are live.
#[derive(Debug, Message)]
#[rtype(result = "u32")]
pub struct CountLive;

impl actix::Handler<CountLive> for SandboxPool {
    type Result = u32;

    fn handle(&mut self, _: CountLive, _: &mut Context<Self>) -> u32 {
        self.live
    }
}

/// Routes sandbox-host requests to the pool actor.
pub struct Handler {
    pool: Addr<SandboxPool>,
}

impl Handler {
    pub fn start(_: &HostArgs) -> Self {
        Self {
            pool: SandboxPool::default().start(),
        }
    }
}

impl RoleHandler for Handler {
    fn handle(&self, request: Request, _: Call, health: Health) -> BoxFuture<'static, Result<Reply, RemoteError>> {
        let pool = self.pool.clone();
        Box::pin(async move {
            match request {
                Request::Sandbox(SandboxRequest::Health) => {
                    let live_sandboxes = pool
                        .send(CountLive)
                        .await
                        .map_err(|e| RemoteError::Failed(format!("pool unavailable: {e}")))?;
                    Ok(Reply::Sandbox(SandboxReply::Health {
                        health,
                        live_sandboxes,
                    }))
                }
                other => Err(RemoteError::Unsupported(format!(
                    "sandbox-host does not handle {} requests",
                    other.kind()
                ))),
            }
        })
    }
}
