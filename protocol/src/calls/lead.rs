//! The typed calls of the CLI (or an operator tool) to the lead that have a single
//! answer: the cluster's status, pings, forwarding to a host, runs and workers. Watching
//! a run streams its events.

use std::future::Future;
use std::time::Duration;

use super::{ask, reply_kind, Requester, Watch};
use crate::connection::{Connection, RpcError};
use crate::handshake::Role;
use crate::json::Json;
use crate::messages::{
    ElicitationAction, LeadReply, LeadRequest, PeerPing, ProcessStatus, Reply, Request,
    RunSubmission,
};

/// How a [`LeadRequest::CancelRun`] went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunCancelled {
    pub run_id: String,
    /// A live run was cancelled; otherwise `status` says why not.
    pub cancelled: bool,
    pub status: String,
}

/// One method per unary [`LeadRequest`], on any [`Requester`].
pub trait LeadCalls: Requester {
    /// [`LeadRequest::Status`]: every process of the cluster.
    fn status(
        &self,
        timeout: Duration,
    ) -> impl Future<Output = Result<Vec<ProcessStatus>, Self::Error>> + Send {
        ask(
            self,
            Request::Lead(LeadRequest::Status),
            timeout,
            |reply| match reply {
                Reply::Lead(LeadReply::Status(processes)) => Ok(processes),
                other => Err(reply_kind(&other)),
            },
        )
    }

    /// [`LeadRequest::PingPeers`].
    fn ping_peers(
        &self,
        role: Option<Role>,
        timeout: Duration,
    ) -> impl Future<Output = Result<Vec<PeerPing>, Self::Error>> + Send {
        ask(
            self,
            Request::Lead(LeadRequest::PingPeers { role }),
            timeout,
            |reply| match reply {
                Reply::Lead(LeadReply::PingPeers(pings)) => Ok(pings),
                other => Err(reply_kind(&other)),
            },
        )
    }

    /// [`LeadRequest::Forward`]: `request` to the peer of `role` through the lead, with
    /// `timeout` for the peer and `timeout + margin` for the lead's own answer. The
    /// forwarded reply is the peer's envelope: decode it with a typed call over a
    /// [`Forwarder`] rather than by hand.
    fn forward(
        &self,
        role: Role,
        index: u32,
        request: Request,
        timeout: Duration,
        margin: Duration,
    ) -> impl Future<Output = Result<Reply, Self::Error>> + Send {
        let forward = Request::Lead(LeadRequest::Forward {
            role,
            index,
            request: Box::new(request),
            timeout_ms: u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX),
        });
        ask(self, forward, timeout + margin, |reply| match reply {
            Reply::Lead(LeadReply::Forwarded(reply)) => Ok(*reply),
            other => Err(reply_kind(&other)),
        })
    }

    /// [`LeadRequest::SubmitRun`]: the new run's id.
    fn submit_run(
        &self,
        submission: RunSubmission,
        timeout: Duration,
    ) -> impl Future<Output = Result<String, Self::Error>> + Send {
        ask(
            self,
            Request::Lead(LeadRequest::SubmitRun(submission)),
            timeout,
            run_started,
        )
    }

    /// [`LeadRequest::ResumeRun`]: the run's id.
    fn resume_run(
        &self,
        run_id: String,
        answer: Option<String>,
        playbook: Option<String>,
        timeout: Duration,
    ) -> impl Future<Output = Result<String, Self::Error>> + Send {
        let request = LeadRequest::ResumeRun {
            run_id,
            answer,
            playbook,
        };
        ask(self, Request::Lead(request), timeout, run_started)
    }

    /// [`LeadRequest::GetRun`]: the run's view.
    fn get_run(
        &self,
        run_id: String,
        timeout: Duration,
    ) -> impl Future<Output = Result<Json, Self::Error>> + Send {
        ask(
            self,
            Request::Lead(LeadRequest::GetRun { run_id }),
            timeout,
            run_view,
        )
    }

    /// [`LeadRequest::CancelRun`].
    fn cancel_run(
        &self,
        run_id: String,
        timeout: Duration,
    ) -> impl Future<Output = Result<RunCancelled, Self::Error>> + Send {
        ask(
            self,
            Request::Lead(LeadRequest::CancelRun { run_id }),
            timeout,
            |reply| match reply {
                Reply::Lead(LeadReply::RunCancelled {
                    run_id,
                    cancelled,
                    status,
                }) => Ok(RunCancelled {
                    run_id,
                    cancelled,
                    status,
                }),
                other => Err(reply_kind(&other)),
            },
        )
    }

    /// [`LeadRequest::AnswerElicitation`]: `Err` says why the answer was not taken.
    fn answer_run_elicitation(
        &self,
        run_id: String,
        id: String,
        action: ElicitationAction,
        content: Option<Json>,
        timeout: Duration,
    ) -> impl Future<Output = Result<Result<(), String>, Self::Error>> + Send {
        let request = LeadRequest::AnswerElicitation {
            run_id,
            id,
            action,
            content,
        };
        ask(self, Request::Lead(request), timeout, |reply| match reply {
            Reply::Lead(LeadReply::ElicitationAnswered(answered)) => Ok(answered),
            other => Err(reply_kind(&other)),
        })
    }

    /// [`LeadRequest::AnswerApproval`]: the calls the run still waits on, or why the
    /// answer was not taken.
    fn answer_run_approval(
        &self,
        run_id: String,
        tool_call_id: String,
        decision: String,
        reason: Option<String>,
        timeout: Duration,
    ) -> impl Future<Output = Result<Result<Vec<String>, String>, Self::Error>> + Send {
        let request = LeadRequest::AnswerApproval {
            run_id,
            tool_call_id,
            decision,
            reason,
        };
        ask(self, Request::Lead(request), timeout, |reply| match reply {
            Reply::Lead(LeadReply::ApprovalAnswered(answered)) => Ok(answered),
            other => Err(reply_kind(&other)),
        })
    }

    /// [`LeadRequest::SetWorkers`]: the subagent workers after the change.
    fn set_workers(
        &self,
        workers: u32,
        timeout: Duration,
    ) -> impl Future<Output = Result<Vec<ProcessStatus>, Self::Error>> + Send {
        ask(
            self,
            Request::Lead(LeadRequest::SetWorkers { workers }),
            timeout,
            |reply| match reply {
                Reply::Lead(LeadReply::Workers(workers)) => Ok(workers),
                other => Err(reply_kind(&other)),
            },
        )
    }
}

impl<R: Requester + ?Sized> LeadCalls for R {}

fn run_started(reply: Reply) -> Result<String, &'static str> {
    match reply {
        Reply::Lead(LeadReply::RunStarted { run_id }) => Ok(run_id),
        other => Err(reply_kind(&other)),
    }
}

fn run_view(reply: Reply) -> Result<Json, &'static str> {
    match reply {
        Reply::Lead(LeadReply::Run { view }) => Ok(view),
        other => Err(reply_kind(&other)),
    }
}

/// Requests to the peer of `role` (worker `index` for subagents), forwarded by the lead
/// on `lead`: the lead's own answer gets `margin` more than the peer's deadline.
pub struct Forwarder<'a, R: ?Sized> {
    pub lead: &'a R,
    pub role: Role,
    pub index: u32,
    pub margin: Duration,
}

impl<'a, R: Requester + ?Sized> Forwarder<'a, R> {
    pub fn new(lead: &'a R, role: Role, index: u32, margin: Duration) -> Self {
        Forwarder {
            lead,
            role,
            index,
            margin,
        }
    }
}

impl<R: Requester + ?Sized> Requester for Forwarder<'_, R> {
    type Error = R::Error;

    fn send(
        &self,
        request: Request,
        timeout: Duration,
    ) -> impl Future<Output = Result<Reply, Self::Error>> + Send {
        self.lead
            .forward(self.role, self.index, request, timeout, self.margin)
    }
}

/// One item of a watched run ([`LeadRequest::WatchRun`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunWatchItem {
    /// One run event.
    Event(Json),
    /// The final reply: the run's view.
    Ended(Json),
}

/// [`LeadRequest::WatchRun`] of `run_id` on the lead's connection: its events, then its
/// view; the whole watch bounded by `timeout`. Dropping the watch cancels it at the lead
/// (the run goes on).
pub async fn watch_run(
    lead: &Connection,
    run_id: String,
    timeout: Duration,
) -> Result<Watch<RunWatchItem>, RpcError> {
    let request = Request::Lead(LeadRequest::WatchRun { run_id });
    Watch::start(lead, request, timeout, |reply| match reply {
        Reply::Lead(LeadReply::RunEvent { event }) => Ok(RunWatchItem::Event(event)),
        Reply::Lead(LeadReply::Run { view }) => Ok(RunWatchItem::Ended(view)),
        other => Err(reply_kind(&other)),
    })
    .await
}
