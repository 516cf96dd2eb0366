//! The runs store's memory tables (DeerFlow spec C.6): a user's profile sections
//! (`user.workContext` … `history.longTermBackground`, each `{summary, updatedAt}`), its
//! facts per agent (`__default__` for the lead without a custom agent), one revision per
//! user that every write bumps (a write against an older revision is refused, so a
//! concurrent edit is never lost), the pending updates (one per user, agent and thread,
//! surviving a restart; a thread's later messages are appended to its pending update,
//! never put in its place, so what a summary flushed stays until it is learned) and the
//! watermark of what each thread already gave.

use serde::{Deserialize, Serialize};

use super::db::{args, Dialect};
use super::{now_ms, CheckpointError, CheckpointStore};

/// The tables, run by `CheckpointStore::open`.
pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS memory_profiles (
    user_id      TEXT PRIMARY KEY,
    revision     INTEGER NOT NULL,
    last_updated TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS memory_sections (
    user_id    TEXT NOT NULL,
    section    TEXT NOT NULL,
    summary    TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (user_id, section)
);
CREATE TABLE IF NOT EXISTS memory_facts (
    user_id    TEXT NOT NULL,
    agent      TEXT NOT NULL,
    fact_id    TEXT NOT NULL,
    fact       TEXT NOT NULL,
    confidence REAL NOT NULL,
    PRIMARY KEY (user_id, agent, fact_id)
);
CREATE TABLE IF NOT EXISTS memory_queue (
    user_id         TEXT NOT NULL,
    agent           TEXT NOT NULL,
    thread_id       TEXT NOT NULL,
    messages        TEXT NOT NULL,
    last_identity   TEXT NOT NULL,
    signal          INTEGER NOT NULL DEFAULT 0,
    first_ms        INTEGER NOT NULL,
    enqueued_ms     INTEGER NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_ms INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (user_id, agent, thread_id)
);
CREATE TABLE IF NOT EXISTS memory_watermarks (
    user_id   TEXT NOT NULL,
    agent     TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    identity  TEXT NOT NULL,
    PRIMARY KEY (user_id, agent, thread_id)
);
";

/// The agent whose facts a run without a custom agent reads and writes.
pub const DEFAULT_AGENT: &str = "__default__";

/// The profile sections, as `group.key` (DeerFlow's `memory.json` order).
pub const SECTIONS: [(&str, &str); 6] = [
    ("user", "workContext"),
    ("user", "personalContext"),
    ("user", "topOfMind"),
    ("history", "recentMonths"),
    ("history", "earlierContext"),
    ("history", "longTermBackground"),
];

/// One profile section.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Section {
    #[serde(default)]
    pub summary: String,
    #[serde(default, rename = "updatedAt")]
    pub updated_at: String,
}

/// One fact, as the API shows it (DeerFlow's field names).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fact {
    pub id: String,
    pub content: String,
    #[serde(default = "default_category")]
    pub category: String,
    #[serde(default = "default_confidence")]
    pub confidence: f64,
    #[serde(default, rename = "createdAt")]
    pub created_at: String,
    #[serde(default, rename = "updatedAt", skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
    /// The thread it was learned in (`manual`, `import` for others).
    #[serde(default = "default_source")]
    pub source: String,
    #[serde(
        default,
        rename = "sourceError",
        skip_serializing_if = "Option::is_none"
    )]
    pub source_error: Option<String>,
    /// Days after `createdAt` (or `lastConfirmedAt`) the fact is due for review.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_valid_days: Option<u64>,
    #[serde(
        default,
        rename = "lastConfirmedAt",
        skip_serializing_if = "Option::is_none"
    )]
    pub last_confirmed_at: Option<String>,
}

fn default_category() -> String {
    "context".to_owned()
}
fn default_confidence() -> f64 {
    0.5
}
fn default_source() -> String {
    "unknown".to_owned()
}

/// A user's memory as one agent sees it: the user's sections and the agent's facts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemoryDoc {
    /// Bumped by every write of the user's memory (0: never written).
    pub revision: i64,
    pub last_updated: String,
    /// By [`SECTIONS`] index.
    pub sections: [Section; 6],
    pub facts: Vec<Fact>,
}

impl MemoryDoc {
    /// The section `group.key`.
    pub fn section(&self, group: &str, key: &str) -> &Section {
        let at = SECTIONS
            .iter()
            .position(|(g, k)| *g == group && *k == key)
            .unwrap_or(0);
        &self.sections[at]
    }

    /// DeerFlow's `MemoryResponse`: `{version, revision, lastUpdated, user, history, facts}`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut user = serde_json::Map::new();
        let mut history = serde_json::Map::new();
        for ((group, key), section) in SECTIONS.iter().zip(&self.sections) {
            let value = serde_json::to_value(section).unwrap_or_default();
            match *group {
                "user" => user.insert((*key).to_owned(), value),
                _ => history.insert((*key).to_owned(), value),
            };
        }
        serde_json::json!({
            "version": "1.0",
            "revision": self.revision,
            "lastUpdated": self.last_updated,
            "user": user,
            "history": history,
            "facts": self.facts,
        })
    }
}

/// Which thread's update: a user, an agent, a thread.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueueKey {
    pub user: String,
    pub agent: String,
    pub thread: String,
}

/// One message an update reads (a user turn or a final answer).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryMessage {
    /// `human` or `ai`.
    pub role: String,
    pub content: String,
}

/// A pending update.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueItem {
    pub key: QueueKey,
    pub messages: Vec<MemoryMessage>,
    /// The identity of the last message, the thread's watermark once it is processed.
    pub last_identity: String,
    /// A signal (correction, preference, ...) was seen: admitted beyond the depth cap.
    pub signal: bool,
    /// When the first of the messages appended to it was queued (the max delay counts
    /// from it).
    pub first_ms: i64,
    /// When it was last queued (the debounce counts from it).
    pub enqueued_ms: i64,
    pub attempts: i64,
    pub next_attempt_ms: i64,
}

/// What the queue holds, for the worker's schedule (no messages).
#[derive(Debug, Clone, PartialEq)]
pub struct QueueTiming {
    pub key: QueueKey,
    pub first_ms: i64,
    pub enqueued_ms: i64,
    pub next_attempt_ms: i64,
}

/// Whether an update was queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    Queued,
    /// The queue holds `queue_max_depth` updates and this one has no signal.
    Full,
}

impl CheckpointStore {
    /// `user`'s memory as `agent` sees it.
    pub fn memory(&self, user: &str, agent: &str) -> Result<MemoryDoc, CheckpointError> {
        let mut db = self.db();
        let mut doc = MemoryDoc::default();
        if let Some(row) = db.query_opt(
            "SELECT revision, last_updated FROM memory_profiles WHERE user_id = ?1",
            args![user],
        )? {
            doc.revision = row.i64(0)?;
            doc.last_updated = row.str(1)?;
        }
        let rows = db.query(
            "SELECT section, summary, updated_at FROM memory_sections WHERE user_id = ?1",
            args![user],
        )?;
        for row in rows {
            let name = row.str(0)?;
            if let Some(at) = SECTIONS
                .iter()
                .position(|(g, k)| format!("{g}.{k}") == name)
            {
                doc.sections[at] = Section {
                    summary: row.str(1)?,
                    updated_at: row.str(2)?,
                };
            }
        }
        let rows = db.query(
            "SELECT fact FROM memory_facts WHERE user_id = ?1 AND agent = ?2
             ORDER BY confidence DESC, fact_id",
            args![user, agent],
        )?;
        for row in rows {
            // A row that does not decode is skipped, never the whole memory.
            if let Ok(fact) = serde_json::from_str::<Fact>(&row.str(0)?) {
                doc.facts.push(fact);
            }
        }
        Ok(doc)
    }

    /// Replaces `user`'s sections and `agent`'s facts with `doc`'s, when the user's
    /// revision is still `doc.revision`; the new revision, or `None` when another write
    /// came first (read again and retry).
    pub fn write_memory(
        &self,
        user: &str,
        agent: &str,
        doc: &MemoryDoc,
        now: &str,
    ) -> Result<Option<i64>, CheckpointError> {
        self.db().transaction(|tx| {
            let current = tx
                .query_opt(
                    "SELECT revision FROM memory_profiles WHERE user_id = ?1",
                    args![user],
                )?
                .map(|row| row.i64(0))
                .transpose()?
                .unwrap_or(0);
            if current != doc.revision {
                return Ok(None);
            }
            let revision = current + 1;
            tx.execute(
                "INSERT INTO memory_profiles (user_id, revision, last_updated) VALUES (?1, ?2, ?3)
                 ON CONFLICT(user_id) DO UPDATE SET revision = excluded.revision,
                                                    last_updated = excluded.last_updated",
                args![user, revision, now],
            )?;
            tx.execute(
                "DELETE FROM memory_sections WHERE user_id = ?1",
                args![user],
            )?;
            for ((group, key), section) in SECTIONS.iter().zip(&doc.sections) {
                if section.summary.is_empty() {
                    continue;
                }
                tx.execute(
                    "INSERT INTO memory_sections (user_id, section, summary, updated_at)
                     VALUES (?1, ?2, ?3, ?4)",
                    args![
                        user,
                        format!("{group}.{key}"),
                        &section.summary,
                        &section.updated_at
                    ],
                )?;
            }
            tx.execute(
                "DELETE FROM memory_facts WHERE user_id = ?1 AND agent = ?2",
                args![user, agent],
            )?;
            for fact in &doc.facts {
                // A fact id given twice: the later fact stands.
                tx.execute(
                    "INSERT INTO memory_facts (user_id, agent, fact_id, fact, confidence)
                     VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (user_id, agent, fact_id) DO UPDATE SET
                         fact = excluded.fact, confidence = excluded.confidence",
                    args![
                        user,
                        agent,
                        &fact.id,
                        serde_json::to_string(fact)?,
                        fact.confidence
                    ],
                )?;
            }
            Ok(Some(revision))
        })
    }

    /// Forgets everything of `user`: sections, every agent's facts, and its pending
    /// updates (their messages are marked as given, so they are not learned again).
    pub fn clear_memory(&self, user: &str, now: &str) -> Result<(), CheckpointError> {
        self.db().transaction(|tx| {
            tx.execute(
                "INSERT INTO memory_profiles (user_id, revision, last_updated) VALUES (?1, 1, ?2)
                 ON CONFLICT(user_id) DO UPDATE SET revision = memory_profiles.revision + 1,
                                                    last_updated = excluded.last_updated",
                args![user, now],
            )?;
            tx.execute(
                "DELETE FROM memory_sections WHERE user_id = ?1",
                args![user],
            )?;
            tx.execute("DELETE FROM memory_facts WHERE user_id = ?1", args![user])?;
            tx.execute(
                "INSERT INTO memory_watermarks (user_id, agent, thread_id, identity)
                 SELECT user_id, agent, thread_id, last_identity FROM memory_queue WHERE user_id = ?1
                 ON CONFLICT (user_id, agent, thread_id) DO UPDATE SET identity = excluded.identity",
                args![user],
            )?;
            tx.execute("DELETE FROM memory_queue WHERE user_id = ?1", args![user])?;
            Ok(())
        })
    }

    /// Queues `item`'s messages for `item.key`: appended to its pending update when there
    /// is one (keeping that one's first queue time, its messages before these; the debounce
    /// counts from now), else a new one; refused when `max_depth` (0: no cap) pending
    /// updates of other keys are waiting and it carries no signal. The caller gives only
    /// messages after [`CheckpointStore::memory_given`].
    pub fn enqueue_memory(
        &self,
        item: &QueueItem,
        max_depth: u64,
    ) -> Result<Enqueued, CheckpointError> {
        let mut db = self.db();
        let greatest = match db.dialect() {
            Dialect::Sqlite => "MAX",
            Dialect::Postgres => "GREATEST",
        };
        db.transaction(|tx| {
            let k = &item.key;
            let pending = tx
                .query_opt(
                    "SELECT first_ms, messages FROM memory_queue
                     WHERE user_id = ?1 AND agent = ?2 AND thread_id = ?3",
                    args![&k.user, &k.agent, &k.thread],
                )?
                .map(|row| Ok::<_, CheckpointError>((row.i64(0)?, row.str(1)?)))
                .transpose()?;
            let mut messages: Vec<MemoryMessage> = match &pending {
                Some((_, earlier)) => serde_json::from_str(earlier)?,
                None => Vec::new(),
            };
            messages.extend(item.messages.iter().cloned());
            let pending = pending.map(|(first_ms, _)| first_ms);
            if pending.is_none() && max_depth > 0 && !item.signal {
                let depth = tx
                    .query_one("SELECT COUNT(*) FROM memory_queue", args![])?
                    .i64(0)?;
                if depth as u64 >= max_depth {
                    return Ok(Enqueued::Full);
                }
            }
            tx.execute(
                &format!(
                    "INSERT INTO memory_queue (user_id, agent, thread_id, messages, last_identity,
                                               signal, first_ms, enqueued_ms, attempts,
                                               next_attempt_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 0, 0)
                     ON CONFLICT(user_id, agent, thread_id) DO UPDATE SET
                         messages = excluded.messages, last_identity = excluded.last_identity,
                         signal = {greatest}(memory_queue.signal, excluded.signal),
                         enqueued_ms = excluded.enqueued_ms, attempts = 0, next_attempt_ms = 0"
                ),
                args![
                    &k.user,
                    &k.agent,
                    &k.thread,
                    serde_json::to_string(&messages)?,
                    &item.last_identity,
                    item.signal,
                    pending.unwrap_or(item.first_ms),
                    item.enqueued_ms
                ],
            )?;
            Ok(Enqueued::Queued)
        })
    }

    /// The pending updates' times, for the schedule.
    pub fn memory_queue_timings(&self) -> Result<Vec<QueueTiming>, CheckpointError> {
        self.db()
            .query(
                "SELECT user_id, agent, thread_id, first_ms, enqueued_ms, next_attempt_ms
                 FROM memory_queue ORDER BY user_id, agent, thread_id",
                args![],
            )?
            .iter()
            .map(|r| {
                Ok(QueueTiming {
                    key: QueueKey {
                        user: r.str(0)?,
                        agent: r.str(1)?,
                        thread: r.str(2)?,
                    },
                    first_ms: r.i64(3)?,
                    enqueued_ms: r.i64(4)?,
                    next_attempt_ms: r.i64(5)?,
                })
            })
            .collect()
    }

    /// The pending update of `key`, if any.
    pub fn memory_queue_item(&self, key: &QueueKey) -> Result<Option<QueueItem>, CheckpointError> {
        let row = self.db().query_opt(
            "SELECT messages, last_identity, signal, first_ms, enqueued_ms, attempts,
                    next_attempt_ms
             FROM memory_queue WHERE user_id = ?1 AND agent = ?2 AND thread_id = ?3",
            args![&key.user, &key.agent, &key.thread],
        )?;
        let Some(row) = row else {
            return Ok(None);
        };
        Ok(Some(QueueItem {
            key: key.clone(),
            messages: serde_json::from_str(&row.str(0)?)?,
            last_identity: row.str(1)?,
            signal: row.bool(2)?,
            first_ms: row.i64(3)?,
            enqueued_ms: row.i64(4)?,
            attempts: row.i64(5)?,
            next_attempt_ms: row.i64(6)?,
        }))
    }

    /// The update of `key` queued at `enqueued_ms`, whose first `learned` messages were
    /// learned, is done: the thread's watermark moves to `identity` (the last of them) and
    /// the item goes; when messages were appended meanwhile, only those stay pending.
    pub fn memory_update_done(
        &self,
        key: &QueueKey,
        enqueued_ms: i64,
        identity: &str,
        learned: usize,
    ) -> Result<(), CheckpointError> {
        self.db().transaction(|tx| {
            tx.execute(
                "INSERT INTO memory_watermarks (user_id, agent, thread_id, identity)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (user_id, agent, thread_id) DO UPDATE SET identity = excluded.identity",
                args![&key.user, &key.agent, &key.thread, identity],
            )?;
            let gone = tx.execute(
                "DELETE FROM memory_queue
                 WHERE user_id = ?1 AND agent = ?2 AND thread_id = ?3 AND enqueued_ms = ?4",
                args![&key.user, &key.agent, &key.thread, enqueued_ms],
            )?;
            if gone == 0 {
                let appended = tx
                    .query_opt(
                        "SELECT messages FROM memory_queue
                         WHERE user_id = ?1 AND agent = ?2 AND thread_id = ?3",
                        args![&key.user, &key.agent, &key.thread],
                    )?
                    .map(|row| row.str(0))
                    .transpose()?;
                if let Some(messages) = appended {
                    let messages: Vec<MemoryMessage> = serde_json::from_str(&messages)?;
                    let rest = messages.get(learned..).unwrap_or_default();
                    tx.execute(
                        "UPDATE memory_queue SET messages = ?4, first_ms = enqueued_ms
                         WHERE user_id = ?1 AND agent = ?2 AND thread_id = ?3",
                        args![
                            &key.user,
                            &key.agent,
                            &key.thread,
                            serde_json::to_string(rest)?
                        ],
                    )?;
                }
            }
            Ok(())
        })
    }

    /// The identity of the last message `key`'s thread gave to memory: its pending
    /// update's last message, else its watermark (what was learned).
    pub fn memory_given(&self, key: &QueueKey) -> Result<Option<String>, CheckpointError> {
        let pending = self
            .db()
            .query_opt(
                "SELECT last_identity FROM memory_queue
                 WHERE user_id = ?1 AND agent = ?2 AND thread_id = ?3",
                args![&key.user, &key.agent, &key.thread],
            )?
            .map(|row| row.str(0))
            .transpose()?;
        match pending {
            Some(identity) => Ok(Some(identity)),
            None => self.memory_watermark(key),
        }
    }

    /// The update of `key` failed: tried again at `next_attempt_ms`, or dropped after
    /// `max_attempts`. Whether it was dropped.
    pub fn memory_update_failed(
        &self,
        key: &QueueKey,
        next_attempt_ms: i64,
        max_attempts: i64,
    ) -> Result<bool, CheckpointError> {
        let mut db = self.db();
        let dropped = db.execute(
            "DELETE FROM memory_queue WHERE user_id = ?1 AND agent = ?2 AND thread_id = ?3
             AND attempts + 1 >= ?4",
            args![&key.user, &key.agent, &key.thread, max_attempts],
        )?;
        if dropped == 0 {
            db.execute(
                "UPDATE memory_queue SET attempts = attempts + 1, next_attempt_ms = ?4
                 WHERE user_id = ?1 AND agent = ?2 AND thread_id = ?3",
                args![&key.user, &key.agent, &key.thread, next_attempt_ms],
            )?;
        }
        Ok(dropped > 0)
    }

    /// The identity of the last message `key`'s thread gave to memory.
    pub fn memory_watermark(&self, key: &QueueKey) -> Result<Option<String>, CheckpointError> {
        self.db()
            .query_opt(
                "SELECT identity FROM memory_watermarks
                 WHERE user_id = ?1 AND agent = ?2 AND thread_id = ?3",
                args![&key.user, &key.agent, &key.thread],
            )?
            .map(|row| row.str(0))
            .transpose()
    }

    /// How many updates of `user` are pending (for `GET /api/memory/status`).
    pub fn memory_pending(&self, user: &str) -> Result<i64, CheckpointError> {
        self.db()
            .query_one(
                "SELECT COUNT(*) FROM memory_queue WHERE user_id = ?1",
                args![user],
            )?
            .i64(0)
    }
}

/// Now, in Unix milliseconds (for queue times).
pub fn memory_now_ms() -> i64 {
    now_ms()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn fact(id: &str, content: &str, confidence: f64) -> Fact {
        Fact {
            id: id.into(),
            content: content.into(),
            category: "preference".into(),
            confidence,
            created_at: "2026-01-01T00:00:00Z".into(),
            updated_at: None,
            source: "t1".into(),
            source_error: None,
            expected_valid_days: None,
            last_confirmed_at: None,
        }
    }

    fn item(user: &str, thread: &str, at: i64) -> QueueItem {
        QueueItem {
            key: QueueKey {
                user: user.into(),
                agent: DEFAULT_AGENT.into(),
                thread: thread.into(),
            },
            messages: vec![MemoryMessage {
                role: "human".into(),
                content: "hi".into(),
            }],
            last_identity: "id-1".into(),
            signal: false,
            first_ms: at,
            enqueued_ms: at,
            attempts: 0,
            next_attempt_ms: 0,
        }
    }

    #[test]
    fn memory_is_per_user_and_agent_and_a_stale_write_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(&dir.path().join("runs.sqlite")).unwrap();
        let mut doc = store.memory("alice", DEFAULT_AGENT).unwrap();
        assert_eq!(doc.revision, 0);
        doc.facts.push(fact("fact_1", "likes tabs", 0.9));
        doc.sections[0].summary = "Rust developer".into();
        assert_eq!(
            store
                .write_memory("alice", DEFAULT_AGENT, &doc, "now")
                .unwrap(),
            Some(1)
        );
        // The same revision again: another write came first.
        assert_eq!(
            store
                .write_memory("alice", DEFAULT_AGENT, &doc, "now")
                .unwrap(),
            None
        );
        let read = store.memory("alice", DEFAULT_AGENT).unwrap();
        assert_eq!(read.facts.len(), 1);
        assert_eq!(
            read.section("user", "workContext").summary,
            "Rust developer"
        );
        assert!(store.memory("bob", DEFAULT_AGENT).unwrap().facts.is_empty());
        assert!(store.memory("alice", "writer").unwrap().facts.is_empty());
        store.clear_memory("alice", "later").unwrap();
        let cleared = store.memory("alice", DEFAULT_AGENT).unwrap();
        assert!(cleared.facts.is_empty() && cleared.sections[0].summary.is_empty());
        assert_eq!(cleared.revision, 2);
    }

    #[test]
    fn a_threads_later_messages_are_appended_to_its_pending_update() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(&dir.path().join("runs.sqlite")).unwrap();
        let mut flushed = item("alice", "t1", 100);
        flushed.messages[0].content = "I like tea".into();
        flushed.last_identity = "id-tea".into();
        let key = flushed.key.clone();
        assert_eq!(store.memory_given(&key).unwrap(), None);
        store.enqueue_memory(&flushed, 0).unwrap();
        assert_eq!(store.memory_given(&key).unwrap().as_deref(), Some("id-tea"));
        let mut ended = item("alice", "t1", 400);
        ended.messages[0].content = "I moved to Lyon".into();
        ended.last_identity = "id-lyon".into();
        ended.signal = true;
        store.enqueue_memory(&ended, 0).unwrap();
        let pending = store.memory_queue_item(&key).unwrap().unwrap();
        let contents: Vec<&str> = pending
            .messages
            .iter()
            .map(|m| m.content.as_str())
            .collect();
        assert_eq!(contents, ["I like tea", "I moved to Lyon"]);
        assert_eq!(pending.last_identity, "id-lyon");
        // The debounce counts from the last queueing, the max delay from the first.
        assert_eq!((pending.first_ms, pending.enqueued_ms), (100, 400));
        assert!(pending.signal);
        store.memory_update_done(&key, 400, "id-lyon", 2).unwrap();
        assert!(store.memory_queue_item(&key).unwrap().is_none());
        assert_eq!(
            store.memory_given(&key).unwrap().as_deref(),
            Some("id-lyon")
        );
    }

    #[test]
    fn the_queue_survives_a_reopen_and_keeps_its_first_time_when_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.sqlite");
        {
            let store = CheckpointStore::open(&path).unwrap();
            store.enqueue_memory(&item("alice", "t1", 100), 0).unwrap();
            store.enqueue_memory(&item("alice", "t1", 200), 0).unwrap();
            assert_eq!(
                store.enqueue_memory(&item("bob", "t2", 300), 1).unwrap(),
                Enqueued::Full
            );
        }
        let store = CheckpointStore::open(&path).unwrap();
        let timings = store.memory_queue_timings().unwrap();
        assert_eq!(timings.len(), 1);
        assert_eq!((timings[0].first_ms, timings[0].enqueued_ms), (100, 200));
        let key = timings[0].key.clone();
        assert!(!store.memory_update_failed(&key, 5_000, 3).unwrap());
        assert_eq!(store.memory_queue_item(&key).unwrap().unwrap().attempts, 1);
        // Done with an older queueing: what was appended since stays, the watermark moves.
        store.memory_update_done(&key, 100, "id-1", 1).unwrap();
        let rest = store.memory_queue_item(&key).unwrap().unwrap();
        assert_eq!(rest.messages.len(), 1);
        assert_eq!(rest.first_ms, 200);
        store.memory_update_done(&key, 200, "id-1", 1).unwrap();
        assert!(store.memory_queue_item(&key).unwrap().is_none());
        assert_eq!(
            store.memory_watermark(&key).unwrap().as_deref(),
            Some("id-1")
        );
    }
}
