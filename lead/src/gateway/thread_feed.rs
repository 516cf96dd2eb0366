//! A thread's feed as DeerFlow's run-event store shows it (spec A.1 "Reads"): each run's
//! own messages (its human input, the AI replies, the tool results) as `category:
//! "message"` rows (`llm.human.input`, `llm.ai.response`, `llm.tool.result`), numbered by
//! `seq` from 1 across the thread in run order, and the cursor windows of
//! `GET /messages`, `/messages/page` and a run's `/messages`. Antler keeps no store of
//! message events: a run's rows are read from its checkpoints (what its last checkpoint
//! holds beyond what the thread held before its input), so once a run ended its rows and
//! their `seq` are the same on every read. Pure: the route reads the checkpoints.

use std::collections::{HashMap, HashSet};

use serde_json::{json, Value};

use super::langgraph::messages;
use antler_engine::Message;

/// DeerFlow's event types of the message rows.
pub(super) const HUMAN_INPUT: &str = "llm.human.input";
pub(super) const AI_RESPONSE: &str = "llm.ai.response";
pub(super) const TOOL_RESULT: &str = "llm.tool.result";
/// The caller DeerFlow's journal stamps on the lead agent's messages.
const LEAD_AGENT: &str = "lead_agent";

/// One run of the thread as its checkpoints hold it.
pub(super) struct RunCheckpoints<'a> {
    pub thread_id: &'a str,
    pub run_id: &'a str,
    /// When the run started (ISO 8601): Antler keeps no time per message, so every row
    /// of the run carries the run's start.
    pub created_at: &'a str,
    /// The run's first checkpoint: the thread's messages before it, then its input.
    pub start: &'a [Message],
    /// The run's last checkpoint.
    pub latest: &'a [Message],
}

/// The indices in `latest` of the run's own messages: those after the thread's earlier
/// messages (`start` without its last, the run's input). When summarization rewrote the
/// earlier part during the run, the messages `start` did not hold before the input.
pub(super) fn own_indices(start: &[Message], latest: &[Message]) -> Vec<usize> {
    let before = match start.last() {
        Some(Message::Human { .. }) => &start[..start.len() - 1],
        _ => start,
    };
    if latest.starts_with(before) {
        return (before.len()..latest.len()).collect();
    }
    let earlier: HashSet<String> = before
        .iter()
        .filter_map(|m| serde_json::to_string(m).ok())
        .collect();
    latest
        .iter()
        .enumerate()
        .filter(|(_, m)| {
            serde_json::to_string(m)
                .map(|text| !earlier.contains(&text))
                .unwrap_or(true)
        })
        .map(|(i, _)| i)
        .collect()
}

/// The run's message rows, numbered from `first_seq` (system messages are not events).
pub(super) fn run_rows(run: &RunCheckpoints<'_>, first_seq: i64) -> Vec<Value> {
    let dicts = messages(run.latest);
    let mut seq = first_seq;
    let mut rows = Vec::new();
    for i in own_indices(run.start, run.latest) {
        let (event_type, metadata) = match &run.latest[i] {
            Message::Human { .. } => (HUMAN_INPUT, json!({"caller": LEAD_AGENT})),
            Message::Ai { .. } => (AI_RESPONSE, json!({"caller": LEAD_AGENT})),
            Message::Tool { .. } => (TOOL_RESULT, json!({})),
            Message::System { .. } => continue,
        };
        rows.push(json!({
            "thread_id": run.thread_id,
            "run_id": run.run_id,
            "event_type": event_type,
            "category": "message",
            "content": dicts[i],
            "metadata": metadata,
            "seq": seq,
            "created_at": run.created_at,
        }));
        seq += 1;
    }
    rows
}

fn seq_of(row: &Value) -> i64 {
    row["seq"].as_i64().unwrap_or(0)
}

/// DeerFlow's `list_messages` window: with `before`, the last `limit` rows below it;
/// with `after`, the first `limit` rows above it (and below `before` when both are
/// given); with neither, the last `limit`. Rows are in `seq` order.
pub(super) fn window(
    rows: &[Value],
    limit: usize,
    before: Option<i64>,
    after: Option<i64>,
) -> Vec<Value> {
    let below = |r: &&Value| before.is_none_or(|b| seq_of(r) < b);
    match after {
        Some(after) => rows
            .iter()
            .filter(|r| seq_of(r) > after)
            .take_while(below)
            .take(limit)
            .cloned()
            .collect(),
        None => {
            let kept: Vec<&Value> = rows.iter().filter(below).collect();
            kept[kept.len().saturating_sub(limit)..]
                .iter()
                .map(|r| (*r).clone())
                .collect()
        }
    }
}

/// A run's page (DeerFlow's `trim_run_message_page`): `limit + 1` rows are read; with
/// more than `limit`, a forward page (`after`) keeps the first `limit`, any other the
/// last `limit`.
pub(super) fn run_page(
    rows: &[Value],
    limit: usize,
    before: Option<i64>,
    after: Option<i64>,
) -> (Vec<Value>, bool) {
    let mut read = window(rows, limit + 1, before, after);
    if read.len() <= limit {
        return (read, false);
    }
    if after.is_some() {
        read.truncate(limit);
    } else {
        read.drain(..read.len() - limit);
    }
    (read, true)
}

/// `GET /messages/page`: the newest `limit` rows below `before`, whether there are older
/// ones, and the cursor to them (the first row's `seq`).
pub(super) fn backward_page(
    rows: &[Value],
    limit: usize,
    before: Option<i64>,
) -> (Vec<Value>, bool, Option<i64>) {
    let mut read = window(rows, limit + 1, before, None);
    let has_more = read.len() > limit;
    if has_more {
        read.remove(0);
    }
    let next = has_more.then(|| read.first().map(seq_of)).flatten();
    (read, has_more, next)
}

/// DeerFlow's `stamp_turn_duration_on_last_ai`: each run's wall-clock seconds on its
/// last AI row (`content.additional_kwargs.turn_duration`).
pub(super) fn stamp_turn_duration(rows: &mut [Value], durations: &HashMap<String, i64>) {
    let mut stamped: HashSet<String> = HashSet::new();
    for row in rows.iter_mut().rev() {
        let Some(run_id) = row["run_id"].as_str().map(str::to_owned) else {
            continue;
        };
        let Some(seconds) = durations.get(&run_id) else {
            continue;
        };
        if stamped.contains(&run_id) || row["content"]["type"] != "ai" {
            continue;
        }
        if let Some(content) = row["content"].as_object_mut() {
            let kwargs = content
                .entry("additional_kwargs")
                .or_insert_with(|| json!({}));
            if let Some(kwargs) = kwargs.as_object_mut() {
                kwargs.insert("turn_duration".into(), json!(seconds));
            }
        }
        stamped.insert(run_id);
    }
}

/// `feedback: null` on every row (Antler keeps no feedback).
pub(super) fn without_feedback(rows: &mut [Value]) {
    for row in rows {
        if let Some(row) = row.as_object_mut() {
            row.insert("feedback".into(), Value::Null);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use antler_engine::{ToolCall, ToolStatus};

    fn ai(id: &str, text: &str) -> Message {
        Message::Ai {
            id: id.into(),
            content: text.into(),
            tool_calls: vec![],
            reasoning: None,
        }
    }

    fn two_runs() -> Vec<Value> {
        let first_start = vec![Message::human("one")];
        let first_latest = vec![
            Message::human("one"),
            Message::Ai {
                id: "ai-1".into(),
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: "c1".into(),
                    name: "ls".into(),
                    args: json!({}),
                }],
                reasoning: None,
            },
            Message::tool("c1", "ls", "a", ToolStatus::Success),
            ai("ai-2", "first"),
        ];
        let mut second_start = first_latest.clone();
        second_start.push(Message::human("two"));
        let mut second_latest = second_start.clone();
        second_latest.push(ai("ai-3", "second"));
        let mut rows = run_rows(
            &RunCheckpoints {
                thread_id: "t",
                run_id: "r1",
                created_at: "2026-01-01T00:00:00Z",
                start: &first_start,
                latest: &first_latest,
            },
            1,
        );
        let next = rows.len() as i64 + 1;
        rows.extend(run_rows(
            &RunCheckpoints {
                thread_id: "t",
                run_id: "r2",
                created_at: "2026-01-01T00:01:00Z",
                start: &second_start,
                latest: &second_latest,
            },
            next,
        ));
        rows
    }

    #[test]
    fn a_runs_rows_are_its_own_messages_numbered_across_the_thread() {
        let rows = two_runs();
        let kinds: Vec<(&str, &str, i64)> = rows
            .iter()
            .map(|r| {
                (
                    r["run_id"].as_str().unwrap(),
                    r["event_type"].as_str().unwrap(),
                    r["seq"].as_i64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("r1", HUMAN_INPUT, 1),
                ("r1", AI_RESPONSE, 2),
                ("r1", TOOL_RESULT, 3),
                ("r1", AI_RESPONSE, 4),
                ("r2", HUMAN_INPUT, 5),
                ("r2", AI_RESPONSE, 6),
            ]
        );
        assert_eq!(rows[5]["content"]["content"], "second");
        assert_eq!(rows[5]["metadata"], json!({"caller": "lead_agent"}));
        assert_eq!(rows[2]["content"]["tool_call_id"], "c1");
        assert_eq!(rows[0]["category"], "message");
    }

    #[test]
    fn a_summarized_run_keeps_only_what_the_thread_did_not_hold() {
        let start = vec![
            Message::human("old"),
            ai("ai-1", "old answer"),
            Message::human("new"),
        ];
        // Summarization dropped the first exchange during the run.
        let latest = vec![Message::human("new"), ai("ai-2", "new answer")];
        assert_eq!(own_indices(&start, &latest), [0, 1]);
        assert_eq!(own_indices(&start, &start), [2]);
    }

    #[test]
    fn windows_and_pages_follow_deerflows_cursors() {
        let rows = two_runs();
        let seqs = |rows: &[Value]| rows.iter().map(seq_of).collect::<Vec<_>>();
        assert_eq!(seqs(&window(&rows, 2, None, None)), [5, 6]);
        assert_eq!(seqs(&window(&rows, 2, Some(5), None)), [3, 4]);
        assert_eq!(seqs(&window(&rows, 2, None, Some(1))), [2, 3]);
        assert_eq!(seqs(&window(&rows, 9, Some(4), Some(1))), [2, 3]);
        let (page, more, next) = backward_page(&rows, 4, None);
        assert_eq!((seqs(&page), more, next), (vec![3, 4, 5, 6], true, Some(3)));
        let (page, more, next) = backward_page(&rows, 4, Some(3));
        assert_eq!((seqs(&page), more, next), (vec![1, 2], false, None));
        let (page, more) = run_page(&rows[..4], 3, None, None);
        assert_eq!((seqs(&page), more), (vec![2, 3, 4], true));
        let (page, more) = run_page(&rows[..4], 3, None, Some(0));
        assert_eq!((seqs(&page), more), (vec![1, 2, 3], true));
    }

    #[test]
    fn the_turn_duration_goes_on_each_runs_last_ai_row() {
        let mut rows = two_runs();
        let durations = HashMap::from([("r1".to_owned(), 7), ("r2".to_owned(), 3)]);
        stamp_turn_duration(&mut rows, &durations);
        let stamped: Vec<i64> = rows
            .iter()
            .filter_map(|r| r["content"]["additional_kwargs"]["turn_duration"].as_i64())
            .collect();
        assert_eq!(stamped, [7, 3]);
        assert!(rows[1]["content"]["additional_kwargs"]
            .get("turn_duration")
            .is_none());
        assert_eq!(rows[3]["content"]["additional_kwargs"]["turn_duration"], 7);
    }
}
