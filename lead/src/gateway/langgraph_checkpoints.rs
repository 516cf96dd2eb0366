//! Checkpoint ids on the LangGraph-compatible API, and a run started from one (spec A.6:
//! "resuming from an older `checkpoint_id` forks the thread"). A checkpoint is a state
//! the runs store keeps: `{run_id}` the state a run ended with (what `GET /state` names),
//! `{run_id}:{step}` the state after one of its steps, `{run_id}:before` the state before
//! its user message (its first checkpoint without that message: where regenerate and
//! edit replay from). An id resolves only against the caller's own thread.

use actix_web::{http::StatusCode, HttpResponse};
use serde_json::{json, Value};

use super::langgraph::{on_store, thread_not_found};
use super::{error, State};
use crate::runs::store::ThreadRefusal;
use antler_engine::ThreadState;

/// The suffix of a checkpoint before a run's user message.
const BEFORE: &str = "before";

/// A state the runs store keeps, as a checkpoint id names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Checkpoint {
    /// The state the run ended with (its last checkpoint).
    Run(String),
    /// The state after one step of the run.
    Step(String, i64),
    /// The state before the run's user message.
    Before(String),
}

impl Checkpoint {
    /// The checkpoint `id` names (`None`: not an id of Antler's).
    pub(super) fn parse(id: &str) -> Option<Checkpoint> {
        let (run, rest) = match id.rsplit_once(':') {
            None => return (!id.is_empty()).then(|| Checkpoint::Run(id.to_owned())),
            Some(split) => split,
        };
        if run.is_empty() {
            return None;
        }
        if rest == BEFORE {
            return Some(Checkpoint::Before(run.to_owned()));
        }
        rest.parse()
            .ok()
            .filter(|step: &i64| *step >= 0)
            .map(|step| Checkpoint::Step(run.to_owned(), step))
    }

    /// The id on the API.
    pub(super) fn id(&self) -> String {
        match self {
            Checkpoint::Run(run) => run.clone(),
            Checkpoint::Step(run, step) => format!("{run}:{step}"),
            Checkpoint::Before(run) => format!("{run}:{BEFORE}"),
        }
    }

    fn run_id(&self) -> &str {
        match self {
            Checkpoint::Run(run) | Checkpoint::Step(run, _) | Checkpoint::Before(run) => run,
        }
    }

    /// LangGraph's `checkpoint` object for it.
    pub(super) fn json(&self) -> Value {
        json!({"checkpoint_ns": "", "checkpoint_id": self.id(), "checkpoint_map": null})
    }
}

/// The checkpoint id a run body names: its `checkpoint.checkpoint_id`, else its
/// `checkpoint_id` (`None`: neither is set).
pub(super) fn requested(
    checkpoint: Option<&Value>,
    checkpoint_id: Option<&Value>,
) -> Option<String> {
    let from_object = checkpoint
        .and_then(|c| c.get("checkpoint_id"))
        .and_then(Value::as_str);
    from_object
        .or_else(|| checkpoint_id.and_then(Value::as_str))
        .map(str::to_owned)
}

/// `Checkpoint {id} not found` (also for another thread's or user's checkpoint).
fn checkpoint_not_found(id: &str) -> HttpResponse {
    error(StatusCode::NOT_FOUND, format!("Checkpoint {id} not found"))
}

/// The state checkpoint `id` of `user`'s thread `thread` holds; 404 unless it is one of
/// that thread's.
pub(super) async fn resolve(
    state: &State,
    user: &str,
    thread: &str,
    id: &str,
) -> Result<ThreadState, HttpResponse> {
    let Some(checkpoint) = Checkpoint::parse(id) else {
        return Err(checkpoint_not_found(id));
    };
    let (u, t, c) = (user.to_owned(), thread.to_owned(), checkpoint.clone());
    let found = on_store(state, move |store| {
        let Some(run) = store.run(c.run_id())? else {
            return Ok(None);
        };
        if run.user_id != u || run.thread_id != t {
            return Ok(None);
        }
        Ok(match &c {
            Checkpoint::Run(run) => store.latest(run)?.map(|(_, s)| s),
            Checkpoint::Step(run, step) => store.checkpoint_at(run, *step)?,
            Checkpoint::Before(run) => store.checkpoint_at(run, 0)?.map(before_message),
        })
    })
    .await?;
    found.ok_or_else(|| checkpoint_not_found(id))
}

/// A run's first checkpoint without the user message it was started with (the last
/// one, `ThreadState::continued`'s).
fn before_message(mut first: ThreadState) -> ThreadState {
    first.messages.pop();
    first
}

/// Forks `user`'s thread `thread` at checkpoint `id`: the thread's state becomes the
/// checkpoint's (with `title`, when given, as its title), so the run about to start on
/// it continues from there; the state it held before is answered (for [`unfork`]). 409
/// while a run is active on the thread.
pub(super) async fn fork(
    state: &State,
    user: &str,
    thread: &str,
    id: &str,
    title: Option<String>,
) -> Result<Option<ThreadState>, HttpResponse> {
    let mut forked = resolve(state, user, thread, id).await?;
    if title.is_some() {
        forked.title.clone_from(&title);
    }
    let (u, t) = (user.to_owned(), thread.to_owned());
    let written = on_store(state, move |store| {
        let before = store.thread_state(&u, &t)?;
        Ok(store
            .put_thread_state(&u, &t, &forked, title.as_deref())?
            .map(|_| before))
    })
    .await?;
    match written {
        Ok(before) => Ok(before),
        Err(ThreadRefusal::NotFound(_)) => Err(thread_not_found(thread)),
        Err(e @ ThreadRefusal::Busy { .. }) => Err(error(StatusCode::CONFLICT, e.to_string())),
    }
}

/// Gives the thread back the state (and title) it held before a fork whose run did not
/// start. Best effort: a failure is logged, the run's own refusal is what the client sees.
pub(super) async fn unfork(
    state: &State,
    user: &str,
    thread: &str,
    before: ThreadState,
    title: Option<String>,
) {
    let (u, t) = (user.to_owned(), thread.to_owned());
    let restored = on_store(state, move |store| {
        store.put_thread_state(&u, &t, &before, title.as_deref())
    })
    .await;
    if !matches!(restored, Ok(Ok(_))) {
        tracing::warn!(%thread, "a fork whose run did not start was not undone");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_garbage_is_none() {
        for checkpoint in [
            Checkpoint::Run("run-1".into()),
            Checkpoint::Step("run-1".into(), 3),
            Checkpoint::Before("run-1".into()),
        ] {
            assert_eq!(Checkpoint::parse(&checkpoint.id()), Some(checkpoint));
        }
        assert_eq!(Checkpoint::parse("run-1:-1"), None);
        assert_eq!(Checkpoint::parse("run-1:x"), None);
        assert_eq!(Checkpoint::parse(":before"), None);
        assert_eq!(Checkpoint::parse(""), None);
    }

    #[test]
    fn the_object_wins_over_the_bare_id() {
        let object = json!({"checkpoint_id": "a:before", "checkpoint_ns": ""});
        assert_eq!(
            requested(Some(&object), Some(&json!("b"))),
            Some("a:before".into())
        );
        assert_eq!(requested(None, Some(&json!("b"))), Some("b".into()));
        assert_eq!(requested(Some(&Value::Null), None), None);
    }

    #[test]
    fn before_drops_the_runs_own_message() {
        let mut first = ThreadState::new("earlier");
        first
            .messages
            .push(antler_engine::Message::human("the run's"));
        assert_eq!(before_message(first).messages.len(), 1);
    }
}
