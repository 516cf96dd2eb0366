//! Elicitations asked of a run's user (policy `ask`). A `tools/call` made for a run
//! registers an [`AskingCall`] on its session while it runs; a form `elicitation/create`
//! arriving on that session is held in [`Elicitations`] (a oneshot keyed by a new id) and
//! told to the caller as a stream item of the call's own reply. Hosts never dial the lead
//! and the call's reply is already a channel open to it, so streaming needs no poll, no
//! second route to the right replica, and nothing outlives the call. [`Elicitations::answer`]
//! completes one once, for the call's own user and run, with content that fits the
//! requested schema (a bad answer leaves it pending); one not answered by its deadline (at
//! most [`ASK_DEADLINE`], never past the call's own) is declined.

use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc, Mutex,
};
use std::time::Duration;

use antler_protocol::messages::{ElicitationAction, ElicitationRefusal, McpElicitationAnswer};
use dashmap::DashMap;
use rmcp::model::{ElicitResult, ElicitationAction as McpAction};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::elicitation;

/// The longest an elicitation waits for its answer.
pub const ASK_DEADLINE: Duration = Duration::from_secs(600);

/// One elicitation told to the caller of the call it belongs to.
#[derive(Debug, Clone, PartialEq)]
pub struct Asked {
    pub id: String,
    pub server: String,
    pub message: String,
    pub requested_schema: Value,
}

/// A tool call made for a run, while it runs: who may answer its elicitations and where
/// they are told.
#[derive(Clone)]
pub struct AskingCall {
    pub user: String,
    pub run_id: String,
    /// The call gives up then (set by the session's call from its own timeout).
    pub deadline: Instant,
    pub items: mpsc::UnboundedSender<Asked>,
    pub elicitations: Arc<Elicitations>,
}

/// The calls for runs in flight on one session.
#[derive(Default)]
pub struct AskingCalls {
    calls: Mutex<Vec<(u64, AskingCall)>>,
    next: AtomicU64,
}

impl std::fmt::Debug for AskingCalls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AskingCalls({})", self.lock().len())
    }
}

/// Removes its call from the session's asking calls when the call ends.
pub struct Entered<'a> {
    calls: &'a AskingCalls,
    key: u64,
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        self.calls.lock().retain(|(k, _)| *k != self.key);
    }
}

impl AskingCalls {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(u64, AskingCall)>> {
        // Nothing panics while holding it; the list stays usable.
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers `call` until the returned guard drops.
    pub fn enter(&self, call: AskingCall) -> Entered<'_> {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().push((key, call));
        Entered { calls: self, key }
    }

    /// The call an elicitation arriving now belongs to: the latest one, when every call
    /// in flight is of the same user and run (the protocol does not say which call a
    /// server's request is for; across users it would be a guess, so there is none).
    pub fn current(&self) -> Option<AskingCall> {
        let calls = self.lock();
        let (_, last) = calls.last()?;
        calls
            .iter()
            .all(|(_, c)| c.user == last.user && c.run_id == last.run_id)
            .then(|| last.clone())
    }
}

struct Pending {
    user: String,
    run_id: String,
    schema: Value,
    answer: oneshot::Sender<ElicitResult>,
}

/// Every elicitation waiting for its answer on this host, by id.
#[derive(Default)]
pub struct Elicitations {
    pending: DashMap<String, Pending>,
    next: AtomicU64,
}

/// Forgets a pending elicitation however its wait ends (answered, expired, cancelled).
struct Forget<'a>(&'a Elicitations, String);

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.0.pending.remove(&self.1);
    }
}

impl Elicitations {
    /// Asks `call`'s user and waits for the answer; declined when no one answers in time
    /// or the caller is gone.
    pub async fn ask(
        &self,
        call: &AskingCall,
        server: &str,
        message: String,
        requested_schema: Value,
    ) -> ElicitResult {
        let id = format!("e{}", self.next.fetch_add(1, Ordering::Relaxed) + 1);
        let (tx, rx) = oneshot::channel();
        self.pending.insert(
            id.clone(),
            Pending {
                user: call.user.clone(),
                run_id: call.run_id.clone(),
                schema: requested_schema.clone(),
                answer: tx,
            },
        );
        let _forget = Forget(self, id.clone());
        let asked = Asked {
            id: id.clone(),
            server: server.to_owned(),
            message,
            requested_schema,
        };
        if call.items.send(asked).is_err() {
            return ElicitResult::new(McpAction::Decline);
        }
        let until = call.deadline.min(Instant::now() + ASK_DEADLINE);
        match tokio::time::timeout_at(until, rx).await {
            Ok(Ok(result)) => result,
            _ => {
                tracing::info!(%id, server, "elicitation not answered in time: declined");
                ElicitResult::new(McpAction::Decline)
            }
        }
    }

    /// Completes a pending elicitation with `answer`, or says why not (it then stays as it
    /// was).
    pub fn answer(&self, answer: &McpElicitationAnswer) -> Result<(), ElicitationRefusal> {
        let unknown = || ElicitationRefusal::Unknown(answer.id.clone());
        let result = {
            let pending = self.pending.get(&answer.id).ok_or_else(unknown)?;
            if pending.user != answer.user || pending.run_id != answer.run_id {
                return Err(unknown());
            }
            match answer.action {
                ElicitationAction::Accept => {
                    let content = answer
                        .content
                        .as_ref()
                        .map_or_else(|| Value::Object(Default::default()), Value::from);
                    elicitation::validate(&pending.schema, &content)
                        .map_err(ElicitationRefusal::Invalid)?;
                    ElicitResult::new(McpAction::Accept).with_content(content)
                }
                ElicitationAction::Decline => ElicitResult::new(McpAction::Decline),
                ElicitationAction::Cancel => ElicitResult::new(McpAction::Cancel),
            }
        };
        let (_, pending) = self.pending.remove(&answer.id).ok_or_else(unknown)?;
        pending.answer.send(result).map_err(|_| unknown())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(user: &str, run: &str) -> (AskingCall, mpsc::UnboundedReceiver<Asked>) {
        let (items, rx) = mpsc::unbounded_channel();
        let call = AskingCall {
            user: user.into(),
            run_id: run.into(),
            deadline: Instant::now() + Duration::from_secs(5),
            items,
            elicitations: Arc::default(),
        };
        (call, rx)
    }

    fn answer(
        id: &str,
        user: &str,
        action: ElicitationAction,
        content: &str,
    ) -> McpElicitationAnswer {
        McpElicitationAnswer {
            id: id.into(),
            user: user.into(),
            thread: "t".into(),
            run_id: "r".into(),
            action,
            content: Some(antler_protocol::Json::parse(content).unwrap()),
        }
    }

    #[tokio::test]
    async fn only_the_calls_user_answers_and_a_bad_answer_stays_pending() {
        let (call, mut rx) = call("alice", "r");
        let elicitations = call.elicitations.clone();
        let schema =
            json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
        let waiting = {
            let call = call.clone();
            let e = elicitations.clone();
            tokio::spawn(async move { e.ask(&call, "s", "how many?".into(), schema).await })
        };
        let asked = rx.recv().await.unwrap();
        assert_eq!(asked.message, "how many?");
        let accept = ElicitationAction::Accept;
        assert_eq!(
            elicitations.answer(&answer(&asked.id, "mallory", accept, r#"{"n": 1}"#)),
            Err(ElicitationRefusal::Unknown(asked.id.clone()))
        );
        assert!(matches!(
            elicitations.answer(&answer(&asked.id, "alice", accept, r#"{"n": "x"}"#)),
            Err(ElicitationRefusal::Invalid(why)) if why.contains("`n`: not a number")
        ));
        elicitations
            .answer(&answer(&asked.id, "alice", accept, r#"{"n": 3}"#))
            .unwrap();
        let result = waiting.await.unwrap();
        assert_eq!(result.action, McpAction::Accept);
        assert_eq!(result.content, Some(json!({"n": 3})));
        assert!(elicitations
            .answer(&answer(&asked.id, "alice", accept, r#"{"n": 3}"#))
            .is_err());
    }

    #[tokio::test]
    async fn an_unanswered_elicitation_is_declined_at_the_calls_deadline() {
        let (mut call, _rx) = call("alice", "r");
        call.deadline = Instant::now() + Duration::from_millis(50);
        let result = call
            .elicitations
            .ask(
                &call,
                "s",
                "?".into(),
                json!({"type": "object", "properties": {}}),
            )
            .await;
        assert_eq!(result.action, McpAction::Decline);
        assert!(call.elicitations.pending.is_empty());
    }

    #[test]
    fn calls_of_two_users_have_no_current_call() {
        let calls = AskingCalls::default();
        let (a, _ra) = call("alice", "r");
        let (b, _rb) = call("bob", "r2");
        let _a = calls.enter(a);
        assert_eq!(calls.current().unwrap().user, "alice");
        {
            let _b = calls.enter(b);
            assert!(calls.current().is_none());
        }
        assert_eq!(calls.current().unwrap().user, "alice");
    }
}
