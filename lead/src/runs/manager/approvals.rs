//! Answering the calls a run waits on for approval (issue 37): an answer (`approve`,
//! `approve_for_thread`, `deny` with a reason) is kept in the runs store first, then, once
//! every call the run waits on is answered, the run is resumed and applies them. An ask
//! nobody answers by its deadline is answered `expired` (a denial) by a timer of this
//! actor, set when the run stops and again when the lead starts, so a restart keeps it.

use actix::prelude::*;

use super::resume::ResumeRun;
use super::RunManager;
use crate::runs::prepare::PrepareError;
use crate::runs::store::{CheckpointError, Recorded, RunStatus};
use antler_engine::{ApprovalChoice, ApprovalDecision, PendingApproval};

/// Answer the call `tool_call_id` of the interrupted run `run_id`.
#[derive(Message)]
#[rtype(result = "Result<ApprovalAnswered, ApprovalError>")]
pub struct AnswerApproval {
    pub run_id: String,
    pub tool_call_id: String,
    pub choice: ApprovalChoice,
    pub reason: Option<String>,
    /// Who answers (`None`: the run's own user, as the local operator answers for it).
    pub by: Option<String>,
}

/// An answer was kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalAnswered {
    /// The calls the run still waits on (empty: it was resumed).
    pub waiting: Vec<String>,
}

/// Why an answer was not taken.
#[derive(Debug, thiserror::Error)]
pub enum ApprovalError {
    #[error("run {run_id} does not wait for an approval of call {call}")]
    NotPending { run_id: String, call: String },
    #[error("call {call} of run {run_id} was answered already ({choice})")]
    AlreadyDecided {
        run_id: String,
        call: String,
        choice: &'static str,
    },
    #[error("no run {0}")]
    UnknownRun(String),
    #[error("checkpoint store: {0}")]
    Store(#[from] CheckpointError),
    #[error(transparent)]
    Resume(#[from] PrepareError),
}

/// Deny, as `expired`, the calls of `run_id` whose deadline passed unanswered.
#[derive(Message)]
#[rtype(result = "()")]
struct ExpireApprovals {
    run_id: String,
}

impl Handler<AnswerApproval> for RunManager {
    type Result = ResponseFuture<Result<ApprovalAnswered, ApprovalError>>;

    fn handle(&mut self, msg: AnswerApproval, ctx: &mut Context<Self>) -> Self::Result {
        // A subagent's held call is answered while its parent runs.
        if let Some(answering) = self.answer_subagent(&msg) {
            return answering;
        }
        let busy = self.runs.get(&msg.run_id).is_some_and(|live| live.driving)
            || self.resuming.contains(&msg.run_id);
        if busy {
            return Box::pin(futures::future::ready(Err(ApprovalError::NotPending {
                run_id: msg.run_id,
                call: msg.tool_call_id,
            })));
        }
        let store = self.env.store.clone();
        let me = ctx.address();
        Box::pin(async move {
            let (run_id, call) = (msg.run_id.clone(), msg.tool_call_id.clone());
            let not_pending = || ApprovalError::NotPending {
                run_id: run_id.clone(),
                call: call.clone(),
            };
            let id = run_id.clone();
            let (record, state) = store
                .call(move |store| {
                    let record = store.run(&id)?;
                    let state = store.latest(&id)?.map(|(_, state)| state);
                    Ok((record, state))
                })
                .await?;
            let record = record.ok_or_else(|| ApprovalError::UnknownRun(run_id.clone()))?;
            let state = state.ok_or_else(not_pending)?;
            if record.status != RunStatus::Interrupted {
                return Err(not_pending());
            }
            let pending = state
                .approvals
                .pending_call(&call)
                .cloned()
                .ok_or_else(not_pending)?;
            let decision = ApprovalDecision {
                choice: msg.choice,
                by: Some(msg.by.unwrap_or(record.user_id)),
                at: antler_protocol::sys::unix_ms(),
                reason: msg.reason.filter(|r| !r.trim().is_empty()),
            };
            let waiting = decide(
                &store,
                &run_id,
                &state.approvals.pending,
                &pending,
                decision,
            )
            .await?
            .map_err(|choice| ApprovalError::AlreadyDecided {
                run_id: run_id.clone(),
                call: call.clone(),
                choice: choice.as_str(),
            })?;
            if waiting.is_empty() {
                resume(&me, run_id).await?;
            }
            Ok(ApprovalAnswered { waiting })
        })
    }
}

/// Resumes a run whose every pending call is answered.
async fn resume(me: &Addr<RunManager>, run_id: String) -> Result<String, PrepareError> {
    me.send(ResumeRun {
        run_id,
        answer: None,
        playbook: None,
    })
    .await
    .map_err(|e| PrepareError::Config(format!("the run manager is gone: {e}")))?
}

/// Keeps `decision` for `call`; `Ok(waiting)`: the calls of `all` still unanswered after
/// it; `Err`: the call had an answer already (the first stands).
async fn decide(
    store: &crate::runs::store::CheckpointStore,
    run_id: &str,
    all: &[PendingApproval],
    call: &PendingApproval,
    decision: ApprovalDecision,
) -> Result<Result<Vec<String>, ApprovalChoice>, ApprovalError> {
    let (id, call, all) = (run_id.to_owned(), call.clone(), all.to_vec());
    let result = store
        .call(move |store| {
            let recorded = store.record_approval(&id, &call, &decision)?;
            let decided = store.approval_decisions(&id)?;
            Ok((recorded, waiting_calls(&all, &decided)))
        })
        .await?;
    Ok(match result {
        (Recorded::New, waiting) => Ok(waiting),
        (Recorded::AlreadyDecided(choice), _) => Err(choice),
    })
}

/// The calls of `all` with no answer in `decided`.
fn waiting_calls(all: &[PendingApproval], decided: &[(String, ApprovalDecision)]) -> Vec<String> {
    all.iter()
        .filter(|p| !decided.iter().any(|(call, _)| *call == p.tool_call_id))
        .map(|p| p.tool_call_id.clone())
        .collect()
}

impl RunManager {
    /// Sets the timer of the run's earliest unanswered deadline among `pending`.
    pub(super) fn expire_later(run_id: &str, pending: &[PendingApproval], ctx: &mut Context<Self>) {
        let Some(deadline) = pending.iter().map(|p| p.deadline_at).min() else {
            return;
        };
        let wait = deadline.saturating_sub(antler_protocol::sys::unix_ms());
        let run_id = run_id.to_owned();
        // A little after the deadline, so the expiry finds it passed.
        ctx.run_later(
            std::time::Duration::from_millis(wait.saturating_add(50)),
            move |_, ctx| {
                ctx.address().do_send(ExpireApprovals { run_id });
            },
        );
    }

    /// At start: the deadlines of the interrupted runs that wait on approvals.
    pub(super) fn expire_left_waiting(&mut self, ctx: &mut Context<Self>) {
        let store = self.env.store.clone();
        let waiting = store.call(|store| {
            let mut waiting = Vec::new();
            for record in store.interrupted()? {
                if let Some((_, state)) = store.latest(&record.run_id)? {
                    if !state.approvals.pending.is_empty() {
                        waiting.push((record.run_id, state.approvals.pending));
                    }
                }
            }
            Ok(waiting)
        });
        ctx.spawn(
            waiting
                .into_actor(self)
                .map(|waiting, _, ctx| match waiting {
                    Ok(waiting) => {
                        for (run_id, pending) in waiting {
                            RunManager::expire_later(&run_id, &pending, ctx);
                        }
                    }
                    Err(e) => tracing::error!("cannot list the runs waiting on approvals: {e}"),
                }),
        );
    }
}

impl Handler<ExpireApprovals> for RunManager {
    type Result = ();

    fn handle(&mut self, msg: ExpireApprovals, ctx: &mut Context<Self>) {
        let busy = self.runs.get(&msg.run_id).is_some_and(|live| live.driving)
            || self.resuming.contains(&msg.run_id);
        if busy {
            return;
        }
        let store = self.env.store.clone();
        let run_id = msg.run_id;
        let id = run_id.clone();
        let expired = store.call(move |store| {
            let Some(record) = store.run(&id)? else {
                return Ok(None);
            };
            let Some((_, state)) = store.latest(&id)? else {
                return Ok(None);
            };
            if record.status != RunStatus::Interrupted || state.approvals.pending.is_empty() {
                return Ok(None);
            }
            let now = antler_protocol::sys::unix_ms();
            let decided = store.approval_decisions(&id)?;
            for pending in waiting_calls(&state.approvals.pending, &decided)
                .iter()
                .filter_map(|call| state.approvals.pending_call(call))
                .filter(|p| p.deadline_at <= now)
            {
                let decision = ApprovalDecision {
                    choice: ApprovalChoice::Expired,
                    by: None,
                    at: now,
                    reason: None,
                };
                store.record_approval(&id, pending, &decision)?;
            }
            let decided = store.approval_decisions(&id)?;
            let waiting = waiting_calls(&state.approvals.pending, &decided);
            Ok(Some((state.approvals.pending, waiting)))
        });
        ctx.spawn(expired.into_actor(self).map(move |expired, _, ctx| {
            match expired {
                Ok(Some((_, waiting))) if waiting.is_empty() => {
                    tracing::info!(run = %run_id, "approvals expired: the run goes on with their denial");
                    let me = ctx.address();
                    actix::spawn(async move {
                        if let Err(e) = resume(&me, run_id.clone()).await {
                            tracing::error!(run = %run_id, "cannot resume the run after its approvals expired: {e}");
                        }
                    });
                }
                Ok(Some((pending, waiting))) => {
                    let rest: Vec<PendingApproval> = pending
                        .into_iter()
                        .filter(|p| waiting.contains(&p.tool_call_id))
                        .collect();
                    RunManager::expire_later(&run_id, &rest, ctx);
                }
                Ok(None) => {}
                Err(e) => tracing::error!(run = %run_id, "cannot expire the run's approvals: {e}"),
            }
        }));
    }
}
