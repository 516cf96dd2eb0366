//! The sandbox-host's `RoleHandler`: turns `SandboxRequest`s into messages to the pool and
//! sandbox actors, and runs tool calls outside the actors so a long command never blocks
//! the pool. `CallOnce` acquires, calls and releases (what `antler tool call` does). A
//! call is bracketed by `BeginCall`/`EndCall` (its lease renewed, run once by call id);
//! the end is reported even when the call is cut off.

use actix::prelude::*;
use antler_protocol::{
    host::RoleHandler,
    messages::{
        Health, LeaseOwner, Principal, Reply, Request, SandboxError, SandboxReply, SandboxRequest,
        ThreadFileError, ThreadFileOp, ToolCall, ToolResult,
    },
    Call, RemoteError,
};
use futures::future::BoxFuture;

use crate::{
    pool::{
        Acquire, BeginCall, CallStart, ChaosStop, CountLive, DiscardThread, EndCall, Release,
        RenewLease, SandboxPool, Status,
    },
    recent_calls::{Ending, CALL_NOT_FINISHED},
    sandbox::Prepare,
    tools::{self, TOOL_NAMES},
};

/// Routes sandbox-host requests to the pool (and thread file operations to the thread
/// directories under `base_dir`).
pub struct SandboxService {
    pool: Addr<SandboxPool>,
    base_dir: std::path::PathBuf,
    acp: std::sync::Arc<crate::acp::AcpAgents>,
    /// The config's approval policy, checked again here (`approvals`).
    approvals: std::sync::Arc<antler_protocol::approvals::ApprovalPolicy>,
}

fn unavailable(e: MailboxError) -> RemoteError {
    RemoteError::Failed(format!("sandbox pool unavailable: {e}"))
}

impl SandboxService {
    pub fn new(
        pool: Addr<SandboxPool>,
        base_dir: std::path::PathBuf,
        acp: crate::acp::AcpAgents,
    ) -> Self {
        Self {
            pool,
            base_dir,
            acp: std::sync::Arc::new(acp),
            approvals: std::sync::Arc::default(),
        }
    }

    /// Checks every call against `policy` (the config's `approvals:`) before it runs.
    pub fn with_approvals(mut self, policy: antler_protocol::approvals::ApprovalPolicy) -> Self {
        self.approvals = std::sync::Arc::new(policy);
        self
    }
}

/// Tells the pool how a call ended; a call dropped before it ended was cut off.
struct CallEnd {
    pool: Addr<SandboxPool>,
    sandbox_id: String,
    owner: Option<LeaseOwner>,
    call_id: Option<String>,
    ending: Option<Ending>,
}

impl Drop for CallEnd {
    fn drop(&mut self) {
        self.pool.do_send(EndCall {
            sandbox_id: std::mem::take(&mut self.sandbox_id),
            owner: self.owner.take(),
            call_id: self.call_id.take(),
            ending: self.ending.take().unwrap_or(Ending::CutOff),
        });
    }
}

/// Runs a tool in the sandbox `id` for `owner` (renewing its lease); with a `call_id`,
/// a call that ran already is answered with its first result instead of running again.
pub async fn call_in(
    pool: &Addr<SandboxPool>,
    id: String,
    call: ToolCall,
    owner: Option<LeaseOwner>,
    call_id: Option<String>,
) -> Result<Result<ToolResult, SandboxError>, MailboxError> {
    if !TOOL_NAMES.contains(&call.tool.as_str()) {
        return Ok(Err(SandboxError::UnknownTool(call.tool)));
    }
    let begin = BeginCall {
        sandbox_id: id.clone(),
        owner: owner.clone(),
        call_id: call_id.clone(),
    };
    let sandbox = match pool.send(begin).await? {
        Ok(CallStart::Run(s)) => s,
        Ok(CallStart::Repeated(result)) => return Ok(Ok(result)),
        Ok(CallStart::Repeat(first)) => {
            return Ok(Ok(first
                .await
                .unwrap_or_else(|_| tools::result(CALL_NOT_FINISHED.to_owned()))))
        }
        Err(e) => return Ok(Err(e)),
    };
    let mut end = CallEnd {
        pool: pool.clone(),
        sandbox_id: id,
        owner,
        call_id,
        ending: None,
    };
    let ctx = match sandbox.send(Prepare).await? {
        Ok(c) => c,
        Err(e) => {
            end.ending = Some(Ending::NotRun);
            return Ok(Err(SandboxError::ProviderUnavailable(e)));
        }
    };
    let result = tools::call(ctx, call).await;
    end.ending = Some(Ending::Finished(result.clone()));
    Ok(Ok(result))
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
            owner: None,
        })
        .await?
    {
        Ok(a) => a,
        Err(e) => return Ok(Err(e)),
    };
    let result = call_in(pool, acquired.sandbox_id.clone(), call, None, None).await;
    let _ = pool
        .send(Release {
            sandbox_id: acquired.sandbox_id,
            owner: None,
        })
        .await;
    result
}

/// Runs an `invoke_acp_agent` call in a task of its own, its activity sent as stream
/// items. A caller that goes away (the stream dropped, this future with it) cancels it:
/// the task then sends `session/cancel` and stops the agent.
async fn invoke_acp(
    agents: std::sync::Arc<crate::acp::AcpAgents>,
    base_dir: std::path::PathBuf,
    invocation: antler_protocol::messages::AcpInvocation,
    call: &Call,
) -> Result<SandboxReply, RemoteError> {
    let cancel = tokio_util::sync::CancellationToken::new();
    let _cancel_on_drop = cancel.clone().drop_guard();
    let (activity, mut told) = tokio::sync::mpsc::unbounded_channel();
    let job = tokio::spawn(async move {
        crate::acp::invoke(&agents, &base_dir, invocation, activity, cancel).await
    });
    tokio::pin!(job);
    loop {
        tokio::select! {
            ended = &mut job => {
                let outcome = ended
                    .map_err(|e| RemoteError::Failed(format!("the ACP call failed: {e}")))?
                    .map_err(|e| RemoteError::Failed(e.to_string()))?;
                return Ok(SandboxReply::AcpEnded(outcome));
            }
            Some(update) = told.recv() => {
                let item = Reply::Sandbox(SandboxReply::AcpActivity { update });
                if let Err(e) = call.send_item(item).await {
                    tracing::debug!("an ACP agent's activity could not be told: {e}");
                }
            }
        }
    }
}

impl RoleHandler for SandboxService {
    /// Chaos mode: stops a thread's sandbox actor as if it crashed.
    fn chaos_stop(
        &self,
        actor: antler_protocol::messages::ActorRef,
    ) -> BoxFuture<'static, Result<antler_protocol::messages::ControlReply, RemoteError>> {
        use antler_protocol::messages::{ActorRef, ControlReply};
        let pool = self.pool.clone();
        Box::pin(async move {
            let ActorRef::Sandbox { user, thread } = actor else {
                return Ok(ControlReply::ChaosStopped {
                    stopped: 0,
                    detail: format!("sandbox-host owns no {} actor", actor.kind()),
                });
            };
            let stopped = pool
                .send(ChaosStop {
                    user_id: user.clone(),
                    thread_id: thread.clone(),
                })
                .await
                .map_err(unavailable)?;
            Ok(ControlReply::ChaosStopped {
                stopped: u32::from(stopped),
                detail: if stopped {
                    format!(
                        "stopped the sandbox of {user}/{thread}: calls in flight in it fail, the \
                         next call gets a fresh sandbox over the same files"
                    )
                } else {
                    format!("no sandbox of {user}/{thread} on this host")
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
        let pool = self.pool.clone();
        let base_dir = self.base_dir.clone();
        let acp = std::sync::Arc::clone(&self.acp);
        let approvals = std::sync::Arc::clone(&self.approvals);
        // The second layer of approvals: a call the policy denies, or asks about without a
        // person's approval of that rule, never runs here.
        let refusal = match &request {
            Request::Sandbox(
                SandboxRequest::Call { call, .. } | SandboxRequest::CallOnce { call, .. },
            ) => crate::approvals::refused(&approvals, call),
            _ => None,
        };
        Box::pin(async move {
            let reply = match request {
                _ if refusal.is_some() => {
                    let content = refusal.unwrap_or_default();
                    tracing::warn!("{content}");
                    SandboxReply::ToolResult(Ok(ToolResult {
                        content,
                        is_error: true,
                    }))
                }
                Request::Sandbox(SandboxRequest::Health) => SandboxReply::Health {
                    health,
                    live_sandboxes: pool.send(CountLive).await.map_err(unavailable)?,
                },
                Request::Sandbox(SandboxRequest::Acquire {
                    principal,
                    known_id,
                    owner,
                }) => SandboxReply::Acquired(
                    pool.send(Acquire {
                        principal,
                        known_id,
                        owner,
                    })
                    .await
                    .map_err(unavailable)?,
                ),
                Request::Sandbox(SandboxRequest::Release { sandbox_id, owner }) => {
                    SandboxReply::Released(
                        pool.send(Release { sandbox_id, owner })
                            .await
                            .map_err(unavailable)?,
                    )
                }
                Request::Sandbox(SandboxRequest::RenewLease { owner }) => {
                    SandboxReply::Renewed(pool.send(RenewLease(owner)).await.map_err(unavailable)?)
                }
                Request::Sandbox(SandboxRequest::Call {
                    sandbox_id,
                    call,
                    owner,
                    call_id,
                }) => SandboxReply::ToolResult(
                    call_in(&pool, sandbox_id, call, owner, call_id)
                        .await
                        .map_err(unavailable)?,
                ),
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
                Request::Sandbox(SandboxRequest::ThreadFiles { principal, op }) => {
                    // A deleted thread's sandbox goes before its files.
                    let discarded = match op {
                        ThreadFileOp::RemoveThread => pool
                            .send(DiscardThread {
                                user_id: principal.user_id.clone(),
                                thread_id: principal.thread_id.clone(),
                            })
                            .await
                            .map_err(unavailable)?
                            .map_err(|_| ThreadFileError::InUse),
                        _ => Ok(()),
                    };
                    SandboxReply::ThreadFiles(match discarded {
                        Ok(()) => crate::thread_files::serve(&base_dir, principal, op).await,
                        Err(e) => Err(e),
                    })
                }
                Request::Sandbox(SandboxRequest::UploadsUsage { user_id }) => {
                    SandboxReply::UploadsUsage(
                        crate::thread_files::uploads_usage(&base_dir, user_id).await,
                    )
                }
                Request::Sandbox(SandboxRequest::InvokeAcp(invocation)) => {
                    invoke_acp(acp, base_dir, invocation, &call).await?
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
