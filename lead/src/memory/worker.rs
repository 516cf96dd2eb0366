//! [`MemoryWorker`]: the actor of a long-lived lead that turns queued updates into memory,
//! one model call at a time. The debounce is per user (DeerFlow has one global timer that
//! every run of every user resets, so steady traffic postpones everyone's update for
//! good): a user's updates are due `debounce_seconds` after that user's last finished run,
//! and never later than `max_delay_seconds` after the first of them; a failed one is tried
//! again after a backoff, and dropped after [`MAX_ATTEMPTS`]. The schedule is read from the
//! store, so updates queued before a restart (or by an ephemeral cluster) are picked up.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use antler_engine::{Message, ModelRequest};

use super::{filter, time, update};
use crate::runs::prepare::RunEnv;
use crate::runs::store::memory::{memory_now_ms, QueueKey, QueueTiming};

/// Attempts of one update before it is dropped.
pub const MAX_ATTEMPTS: i64 = 6;
/// The first retry's wait; each next one doubles, up to [`MAX_BACKOFF_MS`].
const FIRST_BACKOFF_MS: i64 = 30_000;
const MAX_BACKOFF_MS: i64 = 3_600_000;
/// How long one update call may take.
const UPDATE_DEADLINE: Duration = Duration::from_secs(300);
/// The pause before the schedule is read again after a batch.
const AFTER_BATCH_MS: i64 = 1_000;
/// Writes retried when the user's memory changed during the call (an API edit).
const WRITE_ATTEMPTS: usize = 3;

/// A run was queued: the schedule may have changed.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Nudge;

/// The worker; nobody else calls the memory model.
pub struct MemoryWorker {
    env: Arc<RunEnv>,
    /// An update batch is being processed (a nudge then waits for its end).
    busy: bool,
    /// A run was queued during the batch: the schedule is read again at its end.
    nudged: bool,
    /// The wake-up for the next due update.
    timer: Option<SpawnHandle>,
}

impl MemoryWorker {
    pub fn new(env: Arc<RunEnv>) -> MemoryWorker {
        MemoryWorker {
            env,
            busy: false,
            nudged: false,
            timer: None,
        }
    }

    /// Reads the schedule; processes what is due, or sleeps until the next one is.
    fn reschedule(&mut self, ctx: &mut Context<Self>) {
        if self.busy {
            return;
        }
        if let Some(timer) = self.timer.take() {
            ctx.cancel_future(timer);
        }
        self.busy = true;
        let env = Arc::clone(&self.env);
        ctx.spawn(
            async move {
                let app = env.load_config(None).await.ok()?;
                let memory = super::config(&app).ok()?;
                if memory.is_off() {
                    return None;
                }
                let timings = env
                    .store
                    .call(|store| store.memory_queue_timings())
                    .await
                    .ok()?;
                let s = &memory.deermem;
                let (due, next) = schedule(
                    &timings,
                    memory_now_ms(),
                    s.debounce_seconds as i64 * 1000,
                    s.max_delay_seconds as i64 * 1000,
                );
                let processed = !due.is_empty();
                for key in due {
                    process(&env, &app, &memory, &key).await;
                }
                // After a batch, read the schedule again soon: failed updates have their
                // next attempts now, and runs may have been queued meanwhile.
                match processed {
                    true => Some(memory_now_ms() + AFTER_BATCH_MS),
                    false => next,
                }
            }
            .into_actor(self)
            .map(|next, worker, ctx| {
                worker.busy = false;
                if std::mem::take(&mut worker.nudged) {
                    worker.reschedule(ctx);
                    return;
                }
                if let Some(at) = next {
                    let wait = Duration::from_millis((at - memory_now_ms()).max(0) as u64);
                    worker.timer = Some(ctx.run_later(wait, |worker, ctx| {
                        worker.timer = None;
                        worker.reschedule(ctx);
                    }));
                }
            }),
        );
    }
}

impl Actor for MemoryWorker {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.reschedule(ctx);
    }
}

impl Handler<Nudge> for MemoryWorker {
    type Result = ();

    fn handle(&mut self, _: Nudge, ctx: &mut Context<Self>) {
        if self.busy {
            // The batch's end reads the schedule again.
            self.nudged = true;
            return;
        }
        self.reschedule(ctx);
    }
}

/// The updates due at `now` (in key order), and when the next one is due. A user's
/// updates are due `debounce_ms` after the user's last queueing, at most `max_delay_ms`
/// after the user's first; a failed one not before its next attempt.
pub fn schedule(
    timings: &[QueueTiming],
    now: i64,
    debounce_ms: i64,
    max_delay_ms: i64,
) -> (Vec<QueueKey>, Option<i64>) {
    let mut users: HashMap<&str, (i64, i64)> = HashMap::new();
    for t in timings {
        let e = users
            .entry(t.key.user.as_str())
            .or_insert((t.first_ms, t.enqueued_ms));
        e.0 = e.0.min(t.first_ms);
        e.1 = e.1.max(t.enqueued_ms);
    }
    let mut due = Vec::new();
    let mut next: Option<i64> = None;
    for t in timings {
        let (first, last) = users[t.key.user.as_str()];
        let user_due = (last + debounce_ms).min(first + max_delay_ms);
        let at = user_due.max(t.next_attempt_ms);
        if at <= now {
            due.push(t.key.clone());
        } else {
            next = Some(next.map_or(at, |n| n.min(at)));
        }
    }
    due.sort();
    (due, next)
}

/// One update: the memory model asked about `key`'s pending messages, its reply gated and
/// written; a failure logged and the update put back with a backoff.
async fn process(
    env: &Arc<RunEnv>,
    app: &antler_protocol::config::AppConfig,
    memory: &antler_protocol::config::MemoryConfig,
    key: &QueueKey,
) {
    let k = key.clone();
    let Ok(Some(item)) = env
        .store
        .call(move |store| store.memory_queue_item(&k))
        .await
    else {
        return;
    };
    match update_once(env, app, memory, &item.key, &item.messages).await {
        Ok(applied) => {
            tracing::info!(
                user = %key.user, agent = %key.agent, thread = %key.thread,
                added = applied.facts_added, removed = applied.facts_removed,
                sections = applied.sections_updated, rejected = applied.rejected,
                "memory updated"
            );
            let (k, at, identity) = (key.clone(), item.enqueued_ms, item.last_identity.clone());
            let learned = item.messages.len();
            if let Err(e) = env
                .store
                .call(move |store| store.memory_update_done(&k, at, &identity, learned))
                .await
            {
                tracing::warn!("cannot mark the memory update done: {e}");
            }
        }
        Err(reason) => {
            let backoff = (FIRST_BACKOFF_MS << item.attempts.clamp(0, 20)).min(MAX_BACKOFF_MS);
            let k = key.clone();
            let next = memory_now_ms() + backoff;
            let dropped = env
                .store
                .call(move |store| store.memory_update_failed(&k, next, MAX_ATTEMPTS))
                .await
                .unwrap_or(false);
            tracing::warn!(
                user = %key.user, agent = %key.agent, thread = %key.thread,
                attempt = item.attempts + 1,
                "memory update failed: {reason}{}",
                if dropped { "; dropped after its last attempt" } else { "; it is tried again later" }
            );
        }
    }
}

/// Asks the memory model and writes what passes the gate.
async fn update_once(
    env: &Arc<RunEnv>,
    app: &antler_protocol::config::AppConfig,
    memory: &antler_protocol::config::MemoryConfig,
    key: &QueueKey,
    messages: &[crate::runs::store::memory::MemoryMessage],
) -> Result<update::Applied, String> {
    let s = &memory.deermem;
    let (user, agent) = (key.user.clone(), key.agent.clone());
    let read = move |env: &Arc<RunEnv>| {
        let (user, agent) = (user.clone(), agent.clone());
        env.store.call(move |store| store.memory(&user, &agent))
    };
    let doc = read(env).await.map_err(|e| e.to_string())?;
    let now = time::now_iso();
    let signals = filter::signals(messages);
    let prompt = update::user_prompt(
        &doc,
        messages,
        &signals,
        &update::staleness_section(&doc, s, &now),
    );
    let model = super::model(app, memory).map_err(|e| e.to_string())?;
    let request_messages = [
        Message::System {
            content: update::SYSTEM.to_owned(),
        },
        Message::human(prompt),
    ];
    let request = ModelRequest {
        thinking: false,
        ..ModelRequest::new(&request_messages, &[], &[])
    };
    let reply = tokio::time::timeout(UPDATE_DEADLINE, model.complete(request))
        .await
        .map_err(|_| {
            format!(
                "the memory model did not answer within {}s",
                UPDATE_DEADLINE.as_secs()
            )
        })?
        .map_err(|e| e.to_string())?;
    let parsed = update::parse_reply(&reply.content).map_err(|e| e.to_string())?;
    let seed = format!("{}/{}", key.user, key.agent);
    let mut doc = doc;
    for _ in 0..WRITE_ATTEMPTS {
        let (next, applied) = update::apply(&doc, &parsed, s, &signals, &key.thread, &seed, &now)
            .map_err(|e| e.to_string())?;
        let (user, agent, stamp) = (key.user.clone(), key.agent.clone(), now.clone());
        let written = env
            .store
            .call(move |store| store.write_memory(&user, &agent, &next, &stamp))
            .await
            .map_err(|e| e.to_string())?;
        if written.is_some() {
            return Ok(applied);
        }
        // The user's memory changed during the call: apply the reply to what is there now.
        doc = read(env).await.map_err(|e| e.to_string())?;
    }
    Err("the user's memory kept changing during the update".to_owned())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn timing(user: &str, thread: &str, first: i64, last: i64, next: i64) -> QueueTiming {
        QueueTiming {
            key: QueueKey {
                user: user.into(),
                agent: "__default__".into(),
                thread: thread.into(),
            },
            first_ms: first,
            enqueued_ms: last,
            next_attempt_ms: next,
        }
    }

    #[test]
    fn a_users_debounce_is_its_own() {
        // Bob runs all the time; Alice finished once at 0. Alice's update is due at 30 s
        // whatever Bob does.
        let timings = [
            timing("alice", "a1", 0, 0, 0),
            timing("bob", "b1", 10_000, 29_000, 0),
        ];
        let (due, next) = schedule(&timings, 30_000, 30_000, 300_000);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].user, "alice");
        assert_eq!(next, Some(59_000));
    }

    #[test]
    fn a_busy_user_waits_at_most_the_max_delay() {
        // Alice's threads keep ending; her first pending update is from 0.
        let timings = [
            timing("alice", "a1", 0, 0, 0),
            timing("alice", "a2", 200_000, 299_000, 0),
        ];
        let (due, _) = schedule(&timings, 299_500, 30_000, 300_000);
        assert!(due.is_empty());
        let (due, _) = schedule(&timings, 300_000, 30_000, 300_000);
        assert_eq!(due.len(), 2);
    }

    #[test]
    fn a_failed_update_waits_for_its_next_attempt() {
        let timings = [timing("alice", "a1", 0, 0, 90_000)];
        assert_eq!(
            schedule(&timings, 60_000, 30_000, 300_000),
            (vec![], Some(90_000))
        );
        assert_eq!(schedule(&timings, 90_000, 30_000, 300_000).0.len(), 1);
    }
}
