//! [`RunActor`]: the actor that owns one [`RunLoop`] and drives it on request, with its
//! messages: [`Drive`] (to the run's end), [`Answer`] (a clarification's answer to an
//! interrupted run) and [`Crash`] (chaos mode: the actor stops mid-drive). The loop is
//! taken out while a drive or an answer runs; a second request meanwhile is `Busy`.

use actix::prelude::*;

use crate::run::run_loop::{RunError, RunLoop, RunOutcome};

/// The actor that owns one [`RunLoop`].
pub struct RunActor {
    run: Option<RunLoop>,
}

impl RunActor {
    pub fn new(run: RunLoop) -> RunActor {
        RunActor { run: Some(run) }
    }
}

impl Actor for RunActor {
    type Context = Context<Self>;
}

/// Drives the run to its end (a final answer, an interrupt or an error).
#[derive(Message)]
#[rtype(result = "Result<RunOutcome, RunError>")]
pub struct Drive;

impl Handler<Drive> for RunActor {
    type Result = ResponseActFuture<Self, Result<RunOutcome, RunError>>;

    fn handle(&mut self, _: Drive, _: &mut Context<Self>) -> Self::Result {
        let Some(mut run) = self.run.take() else {
            return Box::pin(actix::fut::ready(Err(RunError::Busy)));
        };
        Box::pin(
            async move {
                let outcome = run.drive().await;
                (run, outcome)
            }
            .into_actor(self)
            .map(|(run, outcome), actor, _| {
                actor.run = Some(run);
                Ok(outcome)
            }),
        )
    }
}

/// Chaos mode: the actor stops as if it crashed, mid-drive: the drive is dropped where it
/// is and its caller sees the actor gone (the run manager resumes the run from its last
/// checkpoint).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Crash;

impl Handler<Crash> for RunActor {
    type Result = ();

    fn handle(&mut self, _: Crash, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

/// Adds the user's answer to the interrupted run (a clarification).
#[derive(Message)]
#[rtype(result = "Result<(), RunError>")]
pub struct Answer(pub String);

impl Handler<Answer> for RunActor {
    type Result = ResponseActFuture<Self, Result<(), RunError>>;

    fn handle(&mut self, answer: Answer, _: &mut Context<Self>) -> Self::Result {
        let Some(mut run) = self.run.take() else {
            return Box::pin(actix::fut::ready(Err(RunError::Busy)));
        };
        Box::pin(
            async move {
                let result = run.answer(&answer.0).await;
                (run, result)
            }
            .into_actor(self)
            .map(|(run, result), actor, _| {
                actor.run = Some(run);
                result
            }),
        )
    }
}
