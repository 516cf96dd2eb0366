//! Resuming runs: a run stopped at a question, driven again with its answer; a run whose
//! actor crashed, from its last checkpoint; and at start, the runs a stopped lead left
//! `running` (listed on the store's thread before any submission of this actor writes).

use actix::prelude::*;

use super::{RunManager, RUN_ACTOR_CRASHED};
use crate::runs::prepare::PrepareError;

/// How long after a run actor's crash its resume starts, so the checkpoint writes the dead
/// drive had handed to the journal have landed.
const RESUME_AFTER_CRASH: std::time::Duration = std::time::Duration::from_millis(250);
/// How long the lead waits for its hosts before resuming runs.
const HOSTS_WAIT: std::time::Duration = std::time::Duration::from_secs(30);
/// Attempts to resume one run at start.
const RESUME_ATTEMPTS: u32 = 5;

/// Continue a stopped run (with an answer to its question), or leave a driven one be.
#[derive(Message)]
#[rtype(result = "Result<String, PrepareError>")]
pub struct ResumeRun {
    pub run_id: String,
    pub answer: Option<String>,
    pub playbook: Option<String>,
}

impl Handler<ResumeRun> for RunManager {
    type Result = ResponseActFuture<Self, Result<String, PrepareError>>;

    fn handle(&mut self, msg: ResumeRun, _: &mut Context<Self>) -> Self::Result {
        let run_id = msg.run_id.clone();
        let busy = self.runs.get(&run_id).is_some_and(|live| live.driving)
            || self.resuming.contains(&run_id);
        if busy && msg.answer.is_some() {
            // Driven now: it is not waiting for an answer, and this one must not be lost
            // silently.
            return Box::pin(actix::fut::ready(Err(PrepareError::NotWaiting {
                run_id,
                status: "running".to_owned(),
            })));
        }
        if busy {
            return Box::pin(actix::fut::ready(Ok(run_id)));
        }
        let answered = msg.answer.is_some();
        self.resuming.insert(run_id.clone());
        let env = self.env.clone();
        // Under leases the run is held before it is driven again.
        let hold = self.hold(&run_id);
        Box::pin(
            async move {
                if !hold.await? {
                    return Ok(None);
                }
                env.resume(&msg.run_id, msg.answer.as_deref(), msg.playbook.as_deref())
                    .await
                    .map(Some)
            }
            .into_actor(self)
            .map(move |prepared, manager, ctx| {
                manager.resuming.remove(&run_id);
                match prepared {
                    Ok(Some(prepared)) => Ok(manager.launch(prepared, false, ctx)),
                    // Another lead drives it.
                    Ok(None) if answered => Err(PrepareError::NotWaiting {
                        run_id,
                        status: "running".to_owned(),
                    }),
                    Ok(None) => Ok(run_id),
                    Err(e) => {
                        // A run this lead does not keep waiting is left to whoever takes
                        // it when its lease lapses.
                        if manager.runs.get(&run_id).is_none_or(|l| l.actor.is_none()) {
                            manager.let_lapse(&run_id);
                        }
                        Err(e)
                    }
                }
            }),
        )
    }
}

impl RunManager {
    /// Resumes a run whose actor crashed, from its last checkpoint.
    pub(super) fn resume_crashed(&mut self, run_id: String, ctx: &mut Context<Self>) {
        tracing::warn!(run = %run_id, "{RUN_ACTOR_CRASHED}");
        self.crashed
            .insert(run_id.clone(), RUN_ACTOR_CRASHED.to_owned());
        let me = ctx.address();
        actix::spawn(async move {
            tokio::time::sleep(RESUME_AFTER_CRASH).await;
            for attempt in 1..=RESUME_ATTEMPTS {
                let resume = ResumeRun {
                    run_id: run_id.clone(),
                    answer: None,
                    playbook: None,
                };
                match me.send(resume).await {
                    Ok(Ok(_)) => return,
                    Ok(Err(e)) if attempt < RESUME_ATTEMPTS => {
                        tracing::warn!(run = %run_id, attempt, "cannot resume the run yet: {e}");
                        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    }
                    Ok(Err(e)) => {
                        tracing::error!(run = %run_id, "cannot resume the run after its actor crashed: {e}; antler run --resume {run_id} retries");
                    }
                    Err(_) => return,
                }
            }
        });
    }
}

impl RunManager {
    /// Resumes the runs the store holds `running` (a stopped lead left them so), once the
    /// hosts answer. The list is asked of the store's thread now, from `started`: it is
    /// answered before any write of a run submitted to this actor, so it never holds one.
    pub(super) fn resume_left_running(&mut self, ctx: &mut Context<Self>) {
        let pending = self.env.store.call(|store| store.in_progress());
        let env = self.env.clone();
        let me = ctx.address();
        actix::spawn(async move {
            let pending = match pending.await {
                Ok(pending) => pending,
                Err(e) => {
                    tracing::error!("cannot list the runs to resume: {e}");
                    return;
                }
            };
            if pending.is_empty() {
                return;
            }
            // The hosts start with the lead: resume once they answer.
            env.wait_for_hosts(HOSTS_WAIT).await;
            for record in pending {
                let run_id = record.run_id;
                tracing::info!(run = %run_id, "resuming a run the lead was driving when it stopped");
                for attempt in 1..=RESUME_ATTEMPTS {
                    let resume = ResumeRun {
                        run_id: run_id.clone(),
                        answer: None,
                        playbook: None,
                    };
                    match me.send(resume).await {
                        Ok(Ok(_)) => break,
                        Ok(Err(e)) if attempt < RESUME_ATTEMPTS => {
                            tracing::warn!(run = %run_id, attempt, "cannot resume the run yet: {e}");
                            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                        }
                        Ok(Err(e)) => {
                            tracing::error!(run = %run_id, "cannot resume the run: {e}; antler run --resume {run_id} retries");
                        }
                        Err(_) => return,
                    }
                }
            }
        });
    }
}
