//! The sandbox-host's `RoleHandler`: turns `SandboxRequest`s into messages to the pool and
//! sandbox actors, and runs tool calls outside the actors so a long command never blocks
//! the pool. `CallOnce` acquires, calls and releases (what `antler tool call` does).

use actix::prelude::*;
use antler_protocol::{
    host::RoleHandler,
    messages::{
        Health, Principal, Reply, Request, SandboxError, SandboxReply, SandboxRequest, ToolCall,
        ToolResult,
    },
    Call, RemoteError,
};
use futures::future::BoxFuture;

use crate::{
    pool::{Acquire, CountLive, Release, Resolve, SandboxPool, Status},
    sandbox::Prepare,
    tools::{self, TOOL_NAMES},
};

/// Routes sandbox-host requests to the pool.
pub struct SandboxService {
    pool: Addr<SandboxPool>,
}

fn unavailable(e: MailboxError) -> RemoteError {
    RemoteError::Failed(format!("sandbox pool unavailable: {e}"))
}

impl SandboxService {
    pub fn new(pool: Addr<SandboxPool>) -> Self {
        Self { pool }
    }
}

/// Runs a tool in the sandbox `id`.
pub async fn call_in(
    pool: &Addr<SandboxPool>,
    id: String,
    call: ToolCall,
) -> Result<Result<ToolResult, SandboxError>, MailboxError> {
    if !TOOL_NAMES.contains(&call.tool.as_str()) {
        return Ok(Err(SandboxError::UnknownTool(call.tool)));
    }
    let sandbox = match pool.send(Resolve(id)).await? {
        Ok(s) => s,
        Err(e) => return Ok(Err(e)),
    };
    let ctx = match sandbox.send(Prepare).await? {
        Ok(c) => c,
        Err(e) => return Ok(Err(SandboxError::ProviderUnavailable(e))),
    };
    Ok(Ok(tools::call(ctx, call).await))
}

/// Acquires the principal's sandbox, runs the tool, releases the sandbox.
pub async fn call_once(
    pool: &Addr<SandboxPool>,
    principal: Principal,
    call: ToolCall,
) -> Result<Result<ToolResult, SandboxError>, MailboxError> {
    if !TOOL_NAMES.contains(&call.tool.as_str()) {
        return Ok(Err(SandboxError::UnknownTool(call.tool)));
    }
    let acquired = match pool
        .send(Acquire {
            principal,
            known_id: None,
        })
        .await?
    {
        Ok(a) => a,
        Err(e) => return Ok(Err(e)),
    };
    let result = call_in(pool, acquired.sandbox_id.clone(), call).await;
    let _ = pool.send(Release(acquired.sandbox_id)).await;
    result
}

impl RoleHandler for SandboxService {
    fn handle(
        &self,
        request: Request,
        _: Call,
        health: Health,
    ) -> BoxFuture<'static, Result<Reply, RemoteError>> {
        let pool = self.pool.clone();
        Box::pin(async move {
            let reply = match request {
                Request::Sandbox(SandboxRequest::Health) => SandboxReply::Health {
                    health,
                    live_sandboxes: pool.send(CountLive).await.map_err(unavailable)?,
                },
                Request::Sandbox(SandboxRequest::Acquire {
                    principal,
                    known_id,
                }) => SandboxReply::Acquired(
                    pool.send(Acquire {
                        principal,
                        known_id,
                    })
                    .await
                    .map_err(unavailable)?,
                ),
                Request::Sandbox(SandboxRequest::Release { sandbox_id }) => SandboxReply::Released(
                    pool.send(Release(sandbox_id)).await.map_err(unavailable)?,
                ),
                Request::Sandbox(SandboxRequest::Call { sandbox_id, call }) => {
                    SandboxReply::ToolResult(
                        call_in(&pool, sandbox_id, call)
                            .await
                            .map_err(unavailable)?,
                    )
                }
                Request::Sandbox(SandboxRequest::CallOnce { principal, call }) => {
                    SandboxReply::ToolResult(
                        call_once(&pool, principal, call)
                            .await
                            .map_err(unavailable)?,
                    )
                }
                Request::Sandbox(SandboxRequest::Status) => {
                    SandboxReply::Status(pool.send(Status).await.map_err(unavailable)?)
                }
                other => {
                    return Err(RemoteError::Unsupported(format!(
                        "sandbox-host does not handle {} requests",
                        other.kind()
                    )))
                }
            };
            Ok(Reply::Sandbox(reply))
        })
    }
}
