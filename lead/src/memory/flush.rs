//! The memory flush of a summary (DeerFlow's `memory_flush_hook`, spec C.6): the messages
//! a summary removes mid-run are queued for the run's user, agent and thread before they
//! leave the state, appended to the thread's pending update (past what the thread already
//! gave), so a long run's early turns are learned though its end no longer holds them.
//! The flush bypasses the queue's depth cap, as DeerFlow's `add_nowait` does, and keeps
//! the debounce: the worker is only nudged. The hook runs on the run's thread: the store
//! work is spawned.

use std::sync::Arc;

use antler_engine::{BeforeSummarization, Message};

use super::{filter, worker};
use crate::runs::prepare::RunEnv;
use crate::runs::store::memory::{memory_now_ms, Enqueued, QueueItem, QueueKey};
use crate::runs::store::{CheckpointError, CheckpointStore};

/// The hook that flushes `key`'s removed messages into the memory queue.
pub fn hook(env: Arc<RunEnv>, key: QueueKey) -> BeforeSummarization {
    Arc::new(move |removed: &[Message], kept: &[Message]| {
        if removed.is_empty() {
            return;
        }
        let (env, key) = (Arc::clone(&env), key.clone());
        let (removed, kept) = (removed.to_vec(), kept.to_vec());
        tokio::spawn(flush(env, key, removed, kept));
    })
}

/// Queues what memory reads of `removed` past what `key`'s thread already gave.
async fn flush(env: Arc<RunEnv>, key: QueueKey, removed: Vec<Message>, kept: Vec<Message>) {
    let thread = key.thread.clone();
    let queued = env
        .store
        .call(move |store| queue_removed(store, key, &removed, &kept))
        .await;
    match queued {
        Ok(Some(Enqueued::Queued)) => {
            if let Some(worker) = env.memory_worker.get() {
                worker.do_send(worker::Nudge);
            }
        }
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(%thread, "cannot queue the summarized messages for memory: {e}")
        }
    }
}

/// Appends what memory reads of `removed` (in the conversation `kept` ends), past what
/// `key`'s thread already gave, to the thread's pending update; `None`: nothing new.
pub fn queue_removed(
    store: &CheckpointStore,
    key: QueueKey,
    removed: &[Message],
    kept: &[Message],
) -> Result<Option<Enqueued>, CheckpointError> {
    let given = store.memory_given(&key)?;
    let fresh = filter::removed_for_memory(removed, kept, given.as_deref());
    let Some(last) = fresh.last() else {
        return Ok(None);
    };
    let messages: Vec<_> = fresh.iter().map(|k| k.message.clone()).collect();
    let now = memory_now_ms();
    let item = QueueItem {
        key,
        signal: !filter::signals(&messages).is_empty(),
        messages,
        last_identity: last.identity.clone(),
        first_ms: now,
        enqueued_ms: now,
        attempts: 0,
        next_attempt_ms: 0,
    };
    // No depth cap: these messages are about to leave the state for good.
    store.enqueue_memory(&item, 0).map(Some)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn removed_messages_join_the_threads_pending_update_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(&dir.path().join("runs.sqlite")).unwrap();
        let key = QueueKey {
            user: "alice".into(),
            agent: crate::runs::store::memory::DEFAULT_AGENT.into(),
            thread: "t1".into(),
        };
        let ai = |text: &str| Message::Ai {
            id: format!("ai-{text}"),
            content: text.into(),
            tool_calls: Vec::new(),
            reasoning: None,
        };
        // The first run's end queued its turns; a later summary removes them and the
        // second run's first exchange, keeping the tail.
        let first = [Message::human("I like tea"), ai("Tea it is.")];
        let kept_first = filter::for_memory(&first);
        let messages = kept_first.iter().map(|k| k.message.clone()).collect();
        let item = QueueItem {
            key: key.clone(),
            messages,
            last_identity: kept_first[1].identity.clone(),
            signal: false,
            first_ms: 1,
            enqueued_ms: 1,
            attempts: 0,
            next_attempt_ms: 0,
        };
        store.enqueue_memory(&item, 0).unwrap();
        let removed = [
            first[0].clone(),
            first[1].clone(),
            Message::human("I moved to Lyon"),
            ai("Bonjour."),
        ];
        let kept = [Message::human("And Paris?"), ai("Also nice.")];
        assert_eq!(
            queue_removed(&store, key.clone(), &removed, &kept).unwrap(),
            Some(Enqueued::Queued)
        );
        let pending = store.memory_queue_item(&key).unwrap().unwrap();
        let contents: Vec<&str> = pending
            .messages
            .iter()
            .map(|m| m.content.as_str())
            .collect();
        assert_eq!(
            contents,
            ["I like tea", "Tea it is.", "I moved to Lyon", "Bonjour."]
        );
        assert_eq!(pending.first_ms, 1);
        // The same messages removed again (a retried summary) add nothing.
        assert_eq!(
            queue_removed(&store, key.clone(), &removed, &kept).unwrap(),
            None
        );
        assert_eq!(
            store
                .memory_queue_item(&key)
                .unwrap()
                .unwrap()
                .messages
                .len(),
            4
        );
    }
}
