//! Answering a subagent's held call (issue 37): the parent run's user answers it through
//! the parent's own routes ([`AnswerApproval`] of the parent run and the parent's name of
//! the call). The answer is kept in the runs store as the parent's calls' are, then handed
//! to the worker running the task, whose held call runs or becomes the denial its model
//! reads; the worker's `approval_decided` event follows on the parent's stream. The held
//! calls are read back from the store when the lead starts, with the answers kept for
//! them; a held call the worker reports again (its task re-attached) that was answered
//! already gets its kept answer again ([`relayed`]). When both hand-downs race (the
//! answer's own, and the one the call's report again starts), the worker takes one and
//! refuses the other; the answer stands when the decision that came back was its own
//! ([`SubagentAsks::handed`](crate::runs::subagent_asks::SubagentAsks::handed)).

use std::time::Duration;

use actix::prelude::*;
use antler_engine::{ApprovalChoice, ApprovalDecision};
use antler_protocol::calls::WorkerCalls;
use antler_protocol::messages::{ApprovalAnswer, ApprovalAnswerChoice};

use super::approvals::{AnswerApproval, ApprovalAnswered, ApprovalError};
use super::RunManager;
use crate::runs::store::{Recorded, SubagentAsk};
use crate::runs::subagent_asks::Handed;
use crate::subagents::dispatcher::Connections;

/// Deadline of handing an answer to one worker.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an answer waits for a first worker link (a lead that just started).
const LINKS_WAIT: Duration = Duration::from_secs(5);

impl RunManager {
    /// `Some` when `msg` answers a subagent's held call of its run: the answer's future.
    pub(super) fn answer_subagent(
        &mut self,
        msg: &AnswerApproval,
    ) -> Option<ResponseFuture<Result<ApprovalAnswered, ApprovalError>>> {
        let ask = self.subagent_asks.get(&msg.run_id, &msg.tool_call_id)?;
        let live = self.runs.get(&msg.run_id);
        let owner = live.map(|live| live.record.user_id.clone());
        // Handed down under the run's lease epoch: a worker refuses a stale lead's answer.
        let trace = antler_protocol::TraceContext::current()
            .fenced(&msg.run_id, live.and_then(|live| live.epoch));
        let store = self.env.store.clone();
        let dispatcher = self.env.dispatcher.clone();
        let asks = std::sync::Arc::clone(&self.subagent_asks);
        let (choice, reason, by) = (msg.choice, msg.reason.clone(), msg.by.clone());
        Some(Box::pin(async move {
            let run_id = ask.run_id.clone();
            let call = ask.pending.tool_call_id.clone();
            let owner = match owner {
                Some(owner) => owner,
                None => {
                    let id = run_id.clone();
                    store
                        .call(move |store| store.run(&id))
                        .await?
                        .ok_or_else(|| ApprovalError::UnknownRun(run_id.clone()))?
                        .user_id
                }
            };
            let decision = ApprovalDecision {
                choice,
                by: Some(by.unwrap_or(owner)),
                at: antler_protocol::sys::unix_ms(),
                reason: reason.filter(|r| !r.trim().is_empty()),
            };
            // Kept before anything else; the first answer stands.
            let (id, pending, kept) = (run_id.clone(), ask.pending.clone(), decision.clone());
            let recorded = store
                .call(move |store| store.record_approval(&id, &pending, &kept))
                .await?;
            if let Recorded::AlreadyDecided(choice) = recorded {
                return Err(ApprovalError::AlreadyDecided {
                    run_id,
                    call,
                    choice: choice.as_str(),
                });
            }
            asks.answering(&run_id, &call, decision.clone());
            let handed = hand_down(dispatcher, &ask, &decision);
            let taken = antler_protocol::telemetry::within(trace, handed).await;
            let handed = asks.handed(&run_id, &call, taken);
            if handed == Handed::Kept {
                // No worker took it now: the call waits on a task that has not re-attached
                // yet (this lead just started, or its links are still dialling); the answer
                // goes down when the worker tells of the call again.
                tracing::info!(run = %run_id, call = %call, "answer kept until the held call's task re-attaches");
            }
            if handed != Handed::Void {
                return Ok(ApprovalAnswered {
                    waiting: Vec::new(),
                });
            }
            // It ended meanwhile (expired, its task cancelled).
            let (id, unrecord) = (run_id.clone(), call.clone());
            store
                .call(move |store| store.unrecord_approval(&id, &unrecord))
                .await?;
            Err(ApprovalError::NotPending { run_id, call })
        }))
    }

    /// At start: the subagents' calls still held when the lead stopped (their tasks go on
    /// on their workers; the resumed parent re-attaches to them).
    pub(super) fn load_subagent_asks(&mut self, ctx: &mut Context<Self>) {
        let asks = std::sync::Arc::clone(&self.subagent_asks);
        let held = self
            .env
            .store
            .call(|store| Ok((store.subagent_asks()?, store.answered_subagent_asks()?)));
        // The mailbox waits for them: an answer that comes first must find its call.
        ctx.wait(held.into_actor(self).map(move |held, _, _| match held {
            Ok((held, answered)) => {
                held.into_iter().for_each(|ask| asks.asked(ask));
                for (run_id, call, decision) in answered {
                    asks.answered(&run_id, &call, decision);
                }
            }
            Err(e) => tracing::error!("cannot read the subagents' held calls: {e}"),
        }));
    }
}

/// [`relay`](crate::runs::subagent_asks::relay) of the parent run `run_id`'s `event`;
/// whether the event goes out on the parent's stream. A held call told again that was
/// answered already gets its kept answer again, on its worker.
pub(super) fn relayed(
    run_id: &str,
    asks: &crate::runs::subagent_asks::SubagentAsks,
    store: &crate::runs::store::CheckpointStore,
    dispatcher: Option<&Addr<crate::subagents::dispatcher::SubagentDispatcher>>,
    event: &antler_engine::RunEvent,
) -> bool {
    use crate::runs::subagent_asks::{relay, Relayed};
    match relay(run_id, asks, store, event) {
        Relayed::Forward => true,
        Relayed::Known => false,
        Relayed::Answered(ask, decision) => {
            let dispatcher = dispatcher.cloned();
            // Told during the run's drive: handed down under its (fenced) trace.
            let trace = antler_protocol::TraceContext::current();
            actix::spawn(async move {
                let handed = hand_down(dispatcher, &ask, &decision);
                if !antler_protocol::telemetry::within(trace, handed).await {
                    tracing::warn!(run = %ask.run_id, call = %ask.pending.tool_call_id, "the kept answer of a held call reported again was not taken");
                }
            });
            false
        }
    }
}

/// Hands `decision` to the worker holding `ask`'s call; whether one took it.
async fn hand_down(
    dispatcher: Option<Addr<crate::subagents::dispatcher::SubagentDispatcher>>,
    ask: &SubagentAsk,
    decision: &ApprovalDecision,
) -> bool {
    let Some(dispatcher) = dispatcher else {
        return false;
    };
    let choice = match decision.choice {
        ApprovalChoice::Approve => ApprovalAnswerChoice::Approve,
        ApprovalChoice::ApproveForThread => ApprovalAnswerChoice::ApproveForThread,
        ApprovalChoice::Deny | ApprovalChoice::Expired => ApprovalAnswerChoice::Deny,
    };
    let answer = ApprovalAnswer {
        run_id: ask.run_id.clone(),
        tool_call_id: ask.subagent.task_call_id.clone(),
        call_id: ask.subagent.call_id.clone(),
        choice,
        by: decision.by.clone(),
        at: decision.at,
        reason: decision.reason.clone(),
    };
    // The task runs on one worker; the others do not know it and say so. The links of a
    // lead that just started may still be dialling: wait a little for one.
    let until = tokio::time::Instant::now() + LINKS_WAIT;
    loop {
        let workers = dispatcher.send(Connections).await.unwrap_or_default();
        if !workers.is_empty() || tokio::time::Instant::now() >= until {
            for (_, node, connection) in workers {
                match connection
                    .answer_approval(answer.clone(), ANSWER_TIMEOUT)
                    .await
                {
                    Ok(true) => return true,
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(worker = %node, run = %ask.run_id, "answer not delivered: {e}")
                    }
                }
            }
            return false;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The run's drive ended (its tasks with it): its subagents' calls wait no more.
pub(super) fn drive_ended(
    asks: &crate::runs::subagent_asks::SubagentAsks,
    store: &crate::runs::store::CheckpointStore,
    run_id: &str,
) {
    if asks.run_ended(run_id) {
        let id = run_id.to_owned();
        drop(store.call(move |store| store.forget_subagent_asks(&id)));
    }
}
