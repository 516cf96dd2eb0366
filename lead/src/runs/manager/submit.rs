//! Submitting a run: a new run id (or, with an idempotency key, the same id for every
//! repeat of one user's submission, answered the stored run), the run prepared off the
//! actor and launched by it.

use actix::prelude::*;
use antler_protocol::messages::RunSubmission;

use super::RunManager;
use crate::runs::prepare::PrepareError;

/// Start a run; the reply (its id) comes once it is prepared and driven.
#[derive(Message)]
#[rtype(result = "Result<String, PrepareError>")]
pub struct SubmitRun(pub RunSubmission);

impl Handler<SubmitRun> for RunManager {
    type Result = ResponseActFuture<Self, Result<String, PrepareError>>;

    fn handle(&mut self, msg: SubmitRun, _: &mut Context<Self>) -> Self::Result {
        let Some(key) = &msg.0.idempotency_key else {
            let run_id = format!("run-{}", uuid::Uuid::new_v4().simple());
            return self.prepare_new(run_id, msg.0);
        };
        let run_id = idempotent_run_id(&msg.0.user, key);
        // A repeat of a submission (its reply was lost) is answered the first one's run
        // once it is stored; while the first is still being prepared, it is told to
        // retry (the first may yet fail, or die with this lead).
        if self.submitting.contains(&run_id) {
            return Box::pin(actix::fut::ready(Err(PrepareError::BeingSubmitted(run_id))));
        }
        // Whether it is stored is read on the store's thread; the answer comes back to
        // the actor, which looks again at what it holds before preparing the run.
        let id = run_id.clone();
        let stored = self.env.store.call(move |store| store.run(&id));
        Box::pin(stored.into_actor(self).then(move |stored, manager, _| {
            let ready = |r| -> SubmitReply { Box::pin(actix::fut::ready(r)) };
            if manager.submitting.contains(&run_id) {
                return ready(Err(PrepareError::BeingSubmitted(run_id)));
            }
            let known = manager.runs.contains_key(&run_id) || manager.resuming.contains(&run_id);
            match stored {
                Ok(Some(_)) => ready(Ok(run_id)),
                Ok(None) if known => ready(Ok(run_id)),
                Ok(None) => {
                    manager.submitting.insert(run_id.clone());
                    manager.prepare_new(run_id, msg.0)
                }
                Err(e) => ready(Err(e.into())),
            }
        }))
    }
}

/// What a submission answers.
type SubmitReply = ResponseActFuture<RunManager, Result<String, PrepareError>>;

impl RunManager {
    /// Prepares the new run `run_id` off the actor, then launches it here.
    fn prepare_new(&mut self, run_id: String, submission: RunSubmission) -> SubmitReply {
        let env = self.env.clone();
        let id = run_id.clone();
        // Under leases the run is held before its first step.
        let hold = self.hold(&run_id);
        Box::pin(
            async move {
                if !hold.await? {
                    // Another lead holds it: a repeat of a keyed submission it prepares.
                    return Err(PrepareError::BeingSubmitted(run_id));
                }
                env.start(&run_id, &submission).await
            }
            .into_actor(self)
            .map(move |prepared, manager, ctx| {
                manager.submitting.remove(&id);
                match prepared {
                    Ok(prepared) => Ok(manager.launch(prepared, true, ctx)),
                    Err(e) => {
                        manager.let_lapse(&id);
                        Err(e)
                    }
                }
            }),
        )
    }
}

/// The run of `user`'s submission with idempotency key `key`: the same run id for every
/// repeat of it, another for another user's same key.
pub fn idempotent_run_id(user: &str, key: &str) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(format!("{user}\0{key}").as_bytes());
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("run-{hex}")
}
