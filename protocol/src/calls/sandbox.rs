//! The typed calls to sandbox-host: acquire, release and renew leases, run a sandbox
//! tool, reach a thread's files, invoke an ACP agent, and read the pool's state. A
//! failure sandbox-host reports on purpose ([`SandboxError`], [`ThreadFileError`]) stays
//! the inner `Result`; the outer one is the requester's own error.

use std::future::Future;
use std::time::Duration;

use super::{ask, ask_items, reply_kind, Requester};
use crate::json::Json;
use crate::messages::{
    AcpInvocation, AcpOutcome, Acquired, Health, LeaseOwner, PoolStatus, Principal, Reply, Request,
    SandboxError, SandboxReply, SandboxRequest, ThreadFileError, ThreadFileOp, ThreadFileReply,
    ToolCall, ToolResult,
};

/// One method per [`SandboxRequest`], on any [`Requester`].
pub trait SandboxCalls: Requester {
    /// [`SandboxRequest::Health`]: the host's health and how many sandboxes are live.
    fn sandbox_health(
        &self,
        timeout: Duration,
    ) -> impl Future<Output = Result<(Health, u32), Self::Error>> + Send {
        ask(
            self,
            Request::Sandbox(SandboxRequest::Health),
            timeout,
            |reply| match reply {
                Reply::Sandbox(SandboxReply::Health {
                    health,
                    live_sandboxes,
                }) => Ok((health, live_sandboxes)),
                other => Err(reply_kind(&other)),
            },
        )
    }

    /// [`SandboxRequest::Acquire`].
    fn acquire(
        &self,
        principal: Principal,
        known_id: Option<String>,
        owner: Option<LeaseOwner>,
        timeout: Duration,
    ) -> impl Future<Output = Result<Result<Acquired, SandboxError>, Self::Error>> + Send {
        let request = SandboxRequest::Acquire {
            principal,
            known_id,
            owner,
        };
        ask(
            self,
            Request::Sandbox(request),
            timeout,
            |reply| match reply {
                Reply::Sandbox(SandboxReply::Acquired(acquired)) => Ok(acquired),
                other => Err(reply_kind(&other)),
            },
        )
    }

    /// [`SandboxRequest::Release`].
    fn release(
        &self,
        sandbox_id: String,
        owner: Option<LeaseOwner>,
        timeout: Duration,
    ) -> impl Future<Output = Result<Result<(), SandboxError>, Self::Error>> + Send {
        let request = SandboxRequest::Release { sandbox_id, owner };
        ask(
            self,
            Request::Sandbox(request),
            timeout,
            |reply| match reply {
                Reply::Sandbox(SandboxReply::Released(released)) => Ok(released),
                other => Err(reply_kind(&other)),
            },
        )
    }

    /// [`SandboxRequest::Call`]: runs one tool in an acquired sandbox.
    fn call(
        &self,
        sandbox_id: String,
        call: ToolCall,
        owner: Option<LeaseOwner>,
        call_id: Option<String>,
        timeout: Duration,
    ) -> impl Future<Output = Result<Result<ToolResult, SandboxError>, Self::Error>> + Send {
        let request = SandboxRequest::Call {
            sandbox_id,
            call,
            owner,
            call_id,
        };
        ask(self, Request::Sandbox(request), timeout, tool_result)
    }

    /// [`SandboxRequest::RenewLease`]: how many leases were renewed.
    fn renew_lease(
        &self,
        owner: LeaseOwner,
        timeout: Duration,
    ) -> impl Future<Output = Result<u32, Self::Error>> + Send {
        let request = SandboxRequest::RenewLease { owner };
        ask(
            self,
            Request::Sandbox(request),
            timeout,
            |reply| match reply {
                Reply::Sandbox(SandboxReply::Renewed(renewed)) => Ok(renewed),
                other => Err(reply_kind(&other)),
            },
        )
    }

    /// [`SandboxRequest::CallOnce`]: acquire, run one tool, release.
    fn call_once(
        &self,
        principal: Principal,
        call: ToolCall,
        timeout: Duration,
    ) -> impl Future<Output = Result<Result<ToolResult, SandboxError>, Self::Error>> + Send {
        let request = SandboxRequest::CallOnce { principal, call };
        ask(self, Request::Sandbox(request), timeout, tool_result)
    }

    /// [`SandboxRequest::Status`]: the pool and every sandbox in it.
    fn sandbox_status(
        &self,
        timeout: Duration,
    ) -> impl Future<Output = Result<PoolStatus, Self::Error>> + Send {
        ask(
            self,
            Request::Sandbox(SandboxRequest::Status),
            timeout,
            |reply| match reply {
                Reply::Sandbox(SandboxReply::Status(status)) => Ok(status),
                other => Err(reply_kind(&other)),
            },
        )
    }

    /// [`SandboxRequest::ThreadFiles`]: one operation on the principal's thread files.
    fn thread_files(
        &self,
        principal: Principal,
        op: ThreadFileOp,
        timeout: Duration,
    ) -> impl Future<Output = Result<Result<ThreadFileReply, ThreadFileError>, Self::Error>> + Send
    {
        let request = SandboxRequest::ThreadFiles { principal, op };
        ask(
            self,
            Request::Sandbox(request),
            timeout,
            |reply| match reply {
                Reply::Sandbox(SandboxReply::ThreadFiles(files)) => Ok(files),
                other => Err(reply_kind(&other)),
            },
        )
    }

    /// [`SandboxRequest::UploadsUsage`]: the bytes `user_id` keeps in its threads'
    /// uploads on the replica asked (on every replica, through a router that sends it to
    /// each).
    fn uploads_usage(
        &self,
        user_id: String,
        timeout: Duration,
    ) -> impl Future<Output = Result<Result<u64, ThreadFileError>, Self::Error>> + Send {
        ask(
            self,
            Request::Sandbox(SandboxRequest::UploadsUsage { user_id }),
            timeout,
            |reply| match reply {
                Reply::Sandbox(SandboxReply::UploadsUsage(usage)) => Ok(usage),
                other => Err(reply_kind(&other)),
            },
        )
    }

    /// [`SandboxRequest::InvokeAcp`]: each activity of the agent (ACP's `session/update`)
    /// goes to `activity` as it happens; the outcome is the final reply,
    /// or why no sandbox could be had for it.
    fn invoke_acp(
        &self,
        invocation: AcpInvocation,
        timeout: Duration,
        activity: &(dyn Fn(Json) + Send + Sync),
    ) -> impl Future<Output = Result<Result<AcpOutcome, SandboxError>, Self::Error>> + Send {
        let items = move |item: Reply| {
            if let Reply::Sandbox(SandboxReply::AcpActivity { update }) = item {
                activity(update);
            }
        };
        async move {
            let request = Request::Sandbox(SandboxRequest::InvokeAcp(invocation));
            ask_items(self, request, timeout, &items, |reply| match reply {
                Reply::Sandbox(SandboxReply::AcpEnded(outcome)) => Ok(Ok(outcome)),
                Reply::Sandbox(SandboxReply::Acquired(Err(e))) => Ok(Err(e)),
                other => Err(reply_kind(&other)),
            })
            .await
        }
    }
}

impl<R: Requester + ?Sized> SandboxCalls for R {}

/// The answer to a tool call, once or in an acquired sandbox.
fn tool_result(reply: Reply) -> Result<Result<ToolResult, SandboxError>, &'static str> {
    match reply {
        Reply::Sandbox(SandboxReply::ToolResult(result)) => Ok(result),
        other => Err(reply_kind(&other)),
    }
}
