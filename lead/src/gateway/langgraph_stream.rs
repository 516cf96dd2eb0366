//! A run as LangGraph's server-sent events (spec A.5): `metadata` first, then per mode
//! `values` (the state), `messages` (`messages-tuple`: token chunks from `model_delta`
//! events and whole messages), `updates`, `custom` (`task_*`, `llm_retry`), `tasks`,
//! `checkpoints` and `debug` (LangGraph's payloads, `langgraph_debug`: a model turn and
//! each tool call a task, each checkpoint the run writes a checkpoint), `error` when the
//! run failed, and `end`. Frames come from the run's events (the live log, or
//! the store's kept events once it ended: a replay never needs the `gap` a memory window
//! would) and its checkpoints. An empty comment goes out after each second of silence (a
//! client that went away is noticed by the write), `: heartbeat` after 15 s. A frame's id is the pair of cursors `{events}-{steps}` (the
//! run's events and checkpoint steps consumed), so `Last-Event-ID` resumes exactly after
//! it, whichever replica answers; an id whose events are no longer kept gets `gap`.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use actix_web::{web, HttpResponse};
use serde_json::{json, Value};

use super::langgraph::{messages, values};
use super::langgraph_debug::{self as debug, MODEL_NODE, TOOLS_NODE};
use super::State;
use crate::runs::events::EventLog;
use crate::runs::manager;

/// The stream modes DeerFlow accepts (spec A.5); `messages` and `events` are refused.
pub(super) const ACCEPTED_MODES: [&str; 7] = [
    "values",
    "messages-tuple",
    "updates",
    "debug",
    "tasks",
    "checkpoints",
    "custom",
];
/// A comment sent after this long without a frame, so proxies keep the stream open.
const HEARTBEAT: Duration = Duration::from_secs(15);
/// An empty comment after this long without a frame: writing is how a client that went
/// away is noticed (and its run cancelled, with `on_disconnect: cancel`).
const PROBE: Duration = Duration::from_secs(1);
/// How long a stream waits for this lead to take up a run a lead before it left running.
const RESUME_WAIT: Duration = Duration::from_secs(60);

/// The modes a stream serves.
#[derive(Clone, Debug, Default)]
pub(super) struct Modes {
    values: bool,
    messages: bool,
    updates: bool,
    custom: bool,
    debug: bool,
    tasks: bool,
    checkpoints: bool,
}

impl Modes {
    /// The modes asked for (a string, a list, or nothing: `values`); DeerFlow's 422 text
    /// for any it does not accept.
    pub(super) fn parse(raw: Option<&Value>) -> Result<Modes, String> {
        let asked: Vec<String> = match raw {
            None | Some(Value::Null) => vec!["values".to_owned()],
            Some(Value::String(mode)) => vec![mode.clone()],
            Some(Value::Array(list)) if list.is_empty() => vec!["values".to_owned()],
            Some(Value::Array(list)) => list
                .iter()
                .map(|m| m.as_str().map_or_else(|| m.to_string(), str::to_owned))
                .collect(),
            Some(other) => vec![other.to_string()],
        };
        let mut refused: Vec<&str> = Vec::new();
        for mode in &asked {
            if !ACCEPTED_MODES.contains(&mode.as_str()) && !refused.contains(&mode.as_str()) {
                refused.push(mode);
            }
        }
        if !refused.is_empty() {
            return Err(format!(
                "Unsupported stream mode(s): {}",
                refused.join(", ")
            ));
        }
        let has = |m: &str| asked.iter().any(|a| a == m);
        Ok(Modes {
            values: has("values"),
            messages: has("messages-tuple"),
            updates: has("updates"),
            custom: has("custom"),
            debug: has("debug"),
            tasks: has("tasks"),
            checkpoints: has("checkpoints"),
        })
    }

    fn reads_state(&self) -> bool {
        self.values || self.messages || self.updates || self.follows_tasks() || self.checkpoints
    }

    /// Tasks are sent (as `tasks`, or inside `debug`).
    fn follows_tasks(&self) -> bool {
        self.tasks || self.debug
    }
}

/// Where a stream is: the run's events consumed and the checkpoint steps sent (one past
/// the last sent step).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Cursor {
    pub events: usize,
    pub steps: i64,
}

impl Cursor {
    pub(super) fn id(self) -> String {
        format!("{}-{}", self.events, self.steps)
    }

    /// A `Last-Event-ID` this API wrote; any other id replays the whole run (spec A.5).
    pub(super) fn parse(id: &str) -> Option<Cursor> {
        let (events, steps) = id.trim().split_once('-')?;
        Some(Cursor {
            events: events.parse().ok()?,
            steps: steps.parse().ok()?,
        })
    }
}

/// One stream of one run.
pub(super) struct RunStream {
    pub state: web::Data<State>,
    pub run_id: String,
    pub thread_id: String,
    pub modes: Modes,
    /// Resume after this frame (`Last-Event-ID`), else from the start.
    pub resume: Option<Cursor>,
    /// Start at this event of the run's log (a resumed run's new drive).
    pub from_event: usize,
    /// The run is cancelled when the client goes away (`on_disconnect: cancel`).
    pub cancel_on_disconnect: bool,
}

/// The SSE response of `stream`, with DeerFlow's headers (and `Content-Location` when
/// given: the SDK reads the run id from it).
pub(super) fn response(stream: RunStream, content_location: Option<String>) -> HttpResponse {
    let (tx, rx) = tokio::sync::mpsc::channel::<web::Bytes>(64);
    actix_rt::spawn(async move { Producer::new(stream, tx).run().await });
    let body = futures::stream::unfold(
        (rx, tokio::time::Instant::now()),
        |(mut rx, mut last)| async move {
            match tokio::time::timeout(PROBE, rx.recv()).await {
                Ok(Some(bytes)) => Some((
                    Ok::<_, actix_web::Error>(bytes),
                    (rx, tokio::time::Instant::now()),
                )),
                Ok(None) => None,
                Err(_) if last.elapsed() >= HEARTBEAT => {
                    last = tokio::time::Instant::now();
                    Some((Ok(web::Bytes::from_static(b": heartbeat\n\n")), (rx, last)))
                }
                Err(_) => Some((Ok(web::Bytes::from_static(b":\n\n")), (rx, last))),
            }
        },
    );
    let mut response = HttpResponse::Ok();
    response
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"));
    if let Some(location) = content_location {
        response.insert_header(("Content-Location", location));
    }
    response.streaming(body)
}

/// One SSE frame: `event`, `data` (JSON), `id` when given, a blank line.
fn frame(event: &str, data: &Value, id: Option<&str>) -> web::Bytes {
    let mut text = format!("event: {event}\ndata: {data}\n");
    if let Some(id) = id {
        text.push_str(&format!("id: {id}\n"));
    }
    text.push('\n');
    web::Bytes::from(text)
}

/// A `model_delta` event (`{turn, message_id, text?, reasoning?}`) as LangChain's
/// `AIMessageChunk`: the text as `content`, the reasoning as
/// `additional_kwargs.reasoning_content`, the id the AI message will have.
fn delta_chunk(event: &serde_json::Map<String, Value>) -> Value {
    let mut kwargs = serde_json::Map::new();
    if let Some(reasoning) = event.get("reasoning").filter(|r| r.is_string()) {
        kwargs.insert("reasoning_content".into(), reasoning.clone());
    }
    json!({
        "type": "AIMessageChunk",
        "id": event.get("message_id").cloned().unwrap_or(Value::Null),
        "content": event.get("text").cloned().unwrap_or(json!("")),
        "additional_kwargs": kwargs, "response_metadata": {},
        "tool_calls": [], "invalid_tool_calls": [], "tool_call_chunks": [],
        "usage_metadata": null, "name": null, "example": false,
    })
}

/// Turns a run's events and checkpoints into frames, in order, onto one channel.
struct Producer {
    s: RunStream,
    tx: tokio::sync::mpsc::Sender<web::Bytes>,
    cursor: Cursor,
    /// The state's messages already told (`None` until the first checkpoint is read).
    told: Option<usize>,
    /// AI messages streamed as token chunks (not sent whole again).
    streamed: HashSet<String>,
    /// The model task started last (its id).
    model_task: Option<String>,
    /// The model tasks by the id of the AI message they write (from `model_finished`).
    model_tasks: std::collections::HashMap<String, String>,
    /// The tool calls of the AI messages told, by id (a tools task's input).
    calls: std::collections::HashMap<String, Value>,
}

/// The client went away.
struct Gone;

impl Producer {
    fn new(s: RunStream, tx: tokio::sync::mpsc::Sender<web::Bytes>) -> Producer {
        let cursor = s.resume.unwrap_or(Cursor {
            events: s.from_event,
            steps: 0,
        });
        Producer {
            s,
            tx,
            cursor,
            told: None,
            streamed: HashSet::new(),
            model_task: None,
            model_tasks: Default::default(),
            calls: Default::default(),
        }
    }

    async fn send(&self, frames: Vec<(&str, Value)>) -> Result<(), Gone> {
        let id = self.cursor.id();
        let last = frames.len().saturating_sub(1);
        for (i, (event, data)) in frames.into_iter().enumerate() {
            let bytes = frame(event, &data, (i == last).then_some(id.as_str()));
            self.tx.send(bytes).await.map_err(|_| Gone)?;
        }
        Ok(())
    }

    async fn run(mut self) {
        if self.drive().await.is_err() && self.s.cancel_on_disconnect {
            tracing::info!(run = %self.s.run_id, "the stream's client went away: cancelling the run (on_disconnect: cancel)");
            self.s
                .state
                .runs
                .manager
                .do_send(manager::CancelRun(self.s.run_id.clone()));
        }
    }

    async fn drive(&mut self) -> Result<(), Gone> {
        if self.s.resume.is_none() {
            let metadata = json!({"run_id": self.s.run_id, "thread_id": self.s.thread_id});
            self.send(vec![("metadata", metadata)]).await?;
        }
        let Some(log) = self.log().await? else {
            // Not held and nothing kept: what the store has, then the end.
            self.checkpoint_frames().await?;
            return self.send(vec![("end", Value::Null)]).await;
        };
        let mut changes = log.subscribe();
        loop {
            changes.borrow_and_update();
            let batch = log.since(self.cursor.events);
            let first = batch.next - batch.events.len();
            if first > self.cursor.events {
                return self.gap(first, batch.next).await;
            }
            for (i, event) in batch.events.iter().enumerate() {
                self.cursor.events = first + i + 1;
                self.event_frames(event).await?;
            }
            if let Some(view) = batch.stopped {
                return self.finish(&view).await;
            }
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { return Ok(()) },
                () = self.tx.closed() => return Err(Gone),
            }
        }
    }

    /// The run's log: this lead's (live, or rebuilt from the store's kept events once it
    /// ended); a run a lead before this one left running is waited for.
    async fn log(&self) -> Result<Option<Arc<EventLog>>, Gone> {
        let until = std::time::Instant::now() + RESUME_WAIT;
        loop {
            let held = self
                .s
                .state
                .runs
                .manager
                .send(manager::WatchRun(self.s.run_id.clone()))
                .await
                .ok()
                .flatten();
            if held.is_some() {
                return Ok(held);
            }
            let id = self.s.run_id.clone();
            let running = self
                .s
                .state
                .runs
                .store
                .call(move |store| store.run(&id))
                .await
                .ok()
                .flatten()
                .is_some_and(|r| r.status == crate::runs::store::RunStatus::Running);
            if !running || std::time::Instant::now() > until {
                return Ok(None);
            }
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(300)) => {}
                () = self.tx.closed() => return Err(Gone),
            }
        }
    }

    /// The frames of one run event (and of the checkpoints it follows).
    async fn event_frames(&mut self, event: &str) -> Result<(), Gone> {
        let Ok(Value::Object(mut event)) = serde_json::from_str::<Value>(event) else {
            return Ok(());
        };
        let kind = event
            .remove("event")
            .and_then(|k| k.as_str().map(str::to_owned))
            .unwrap_or_default();
        match kind.as_str() {
            "model_delta" if self.s.modes.messages => {
                let chunk = delta_chunk(&event);
                if let Some(id) = chunk["id"].as_str() {
                    self.streamed.insert(id.to_owned());
                }
                let metadata = self.metadata("model", event["turn"].as_i64().unwrap_or(0));
                self.send(vec![("messages", json!([chunk, metadata]))])
                    .await
            }
            "task" | "llm_retry" if self.s.modes.custom => {
                if kind == "llm_retry" {
                    event.insert("type".into(), json!("llm_retry"));
                }
                self.send(vec![("custom", Value::Object(event))]).await
            }
            "model_started" if self.s.modes.follows_tasks() => {
                let turn = event
                    .get("turn")
                    .and_then(Value::as_u64)
                    .unwrap_or(0)
                    .to_string();
                let id = debug::task_id(&self.s.run_id, MODEL_NODE, &turn);
                self.model_task = Some(id.clone());
                let start = debug::task_start(&id, MODEL_NODE, Value::Null, &["branch:to:model"]);
                let frames = self.task_frames("task", self.cursor.steps.max(1), start);
                self.send(frames).await
            }
            "tool_started" if self.s.modes.follows_tasks() => {
                let call_id = event
                    .get("tool_call_id")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let input = self.calls.get(call_id).cloned().unwrap_or_else(
                    || json!({"id": call_id, "name": event.get("name"), "type": "tool_call"}),
                );
                let id = debug::task_id(&self.s.run_id, TOOLS_NODE, call_id);
                let start = debug::task_start(&id, TOOLS_NODE, input, &["branch:to:tools"]);
                let frames = self.task_frames("task", self.cursor.steps.max(1), start);
                self.send(frames).await
            }
            "model_finished" | "tool_finished" | "assistant_message" => {
                if let Some(message) = event.get("message_id").and_then(Value::as_str) {
                    if let Some(task) = self.model_task.take() {
                        self.model_tasks.insert(message.to_owned(), task);
                    }
                }
                self.checkpoint_frames().await
            }
            _ => Ok(()),
        }
    }

    /// A task's frames: `tasks` (its payload) and `debug` (wrapped, `kind` `task` or
    /// `task_result`), as asked; the step is the checkpoint the task writes (a task that
    /// starts: the step after the last sent, at least 1, the first after the input).
    fn task_frames(&self, kind: &str, step: i64, payload: Value) -> Vec<(&'static str, Value)> {
        let mut frames = Vec::new();
        if self.s.modes.debug {
            frames.push(("debug", debug::debug(kind, step, payload.clone())));
        }
        if self.s.modes.tasks {
            frames.push(("tasks", payload));
        }
        frames
    }

    /// The result of the task that wrote `message`: the model task of an AI message, the
    /// tools task of a tool result (none for another message).
    fn task_result_frames(&mut self, message: &Value, step: i64) -> Vec<(&'static str, Value)> {
        if !self.s.modes.follows_tasks() {
            return Vec::new();
        }
        let (id, node) = match message["type"].as_str() {
            Some("ai") => {
                for call in message["tool_calls"].as_array().into_iter().flatten() {
                    if let Some(call_id) = call["id"].as_str() {
                        self.calls.insert(call_id.to_owned(), call.clone());
                    }
                }
                let key = message["id"].as_str().unwrap_or_default();
                let id = self
                    .model_tasks
                    .remove(key)
                    .or_else(|| self.model_task.take())
                    .unwrap_or_else(|| debug::task_id(&self.s.run_id, MODEL_NODE, key));
                (id, MODEL_NODE)
            }
            Some("tool") => {
                let call_id = message["tool_call_id"].as_str().unwrap_or_default();
                (
                    debug::task_id(&self.s.run_id, TOOLS_NODE, call_id),
                    TOOLS_NODE,
                )
            }
            _ => return Vec::new(),
        };
        let result = debug::task_result(&id, node, vec![("messages", json!([message]))]);
        self.task_frames("task_result", step, result)
    }

    /// LangGraph's metadata of a `messages` frame.
    fn metadata(&self, node: &str, step: i64) -> Value {
        json!({
            "langgraph_node": node,
            "langgraph_step": step,
            "run_id": self.s.run_id,
            "thread_id": self.s.thread_id,
        })
    }

    /// The frames of the run's newest checkpoint, if it was not sent: the state
    /// (`values`), its new messages (`updates`, and `messages` for those not streamed).
    async fn checkpoint_frames(&mut self) -> Result<(), Gone> {
        if !self.s.modes.reads_state() {
            return Ok(());
        }
        let (id, before) = (self.s.run_id.clone(), (self.cursor.steps - 1).max(0));
        let need_told = self.told.is_none();
        let read = self
            .s
            .state
            .runs
            .store
            .call(move |store| {
                let told = if need_told {
                    store.checkpoint_at(&id, before)?.map(|s| s.messages.len())
                } else {
                    None
                };
                Ok((told, store.latest(&id)?))
            })
            .await;
        let Ok((told, Some((step, state)))) = read else {
            return Ok(());
        };
        if let Some(told) = told {
            self.told = Some(told);
        }
        if step < self.cursor.steps {
            return Ok(());
        }
        self.cursor.steps = step + 1;
        let all = messages(&state.messages);
        let from = self.told.unwrap_or(0).min(all.len());
        self.told = Some(all.len());
        let mut frames: Vec<(&str, Value)> = Vec::new();
        for message in &all[from..] {
            frames.extend(self.task_result_frames(message, step));
            let node = if message["type"] == "tool" {
                "tools"
            } else {
                "model"
            };
            if self.s.modes.updates {
                frames.push(("updates", json!({node: {"messages": [message]}})));
            }
            let streamed = message["id"]
                .as_str()
                .is_some_and(|id| self.streamed.contains(id));
            if self.s.modes.messages && !streamed && message["type"] != "human" {
                frames.push(("messages", json!([message, self.metadata(node, step)])));
            }
        }
        if self.s.modes.values {
            frames.push(("values", values(&state)));
        }
        if self.s.modes.checkpoints || self.s.modes.debug {
            let payload =
                debug::checkpoint(&self.s.thread_id, &self.s.run_id, step, values(&state));
            if self.s.modes.debug {
                frames.push(("debug", debug::debug("checkpoint", step, payload.clone())));
            }
            if self.s.modes.checkpoints {
                frames.push(("checkpoints", payload));
            }
        }
        self.send(frames).await
    }

    /// The run's drive stopped: its last checkpoint, `error` if it failed (not when it was
    /// cancelled), then `end`.
    async fn finish(&mut self, view: &str) -> Result<(), Gone> {
        self.checkpoint_frames().await?;
        let view: Value = serde_json::from_str(view).unwrap_or_default();
        let cancelled = antler_engine::RunError::Cancelled.to_string();
        if view["status"] == "error" && view["error"].as_str() != Some(cancelled.as_str()) {
            let message = view["error"].as_str().unwrap_or("the run failed");
            self.send(vec![(
                "error",
                json!({"message": message, "name": "RunError"}),
            )])
            .await?;
        }
        self.send(vec![("end", Value::Null)]).await
    }

    /// The events after the client's id are no longer kept: `gap`, and the stream ends
    /// without `end` (the client reloads the thread's state).
    async fn gap(&mut self, earliest: usize, next: usize) -> Result<(), Gone> {
        let data = json!({
            "code": "stream_replay_gap",
            "run_id": self.s.run_id,
            "requested_event_id": self.cursor.id(),
            "earliest_available_event_id": Cursor { events: earliest, steps: self.cursor.steps }.id(),
            "latest_available_event_id": Cursor { events: next, steps: self.cursor.steps }.id(),
            "recovery": "reload_durable_state",
        });
        self.tx
            .send(frame("gap", &data, None))
            .await
            .map_err(|_| Gone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_those_deerflow_accepts() {
        assert!(Modes::parse(None).is_ok_and(|m| m.values && !m.messages));
        let m = Modes::parse(Some(&json!(["messages-tuple", "custom", "updates"])));
        assert!(m.is_ok_and(|m| m.messages && m.custom && m.updates && !m.values));
        assert_eq!(
            Modes::parse(Some(&json!(["values", "messages", "events", "messages"]))).err(),
            Some("Unsupported stream mode(s): messages, events".to_owned())
        );
        assert_eq!(
            Modes::parse(Some(&json!("messages"))).err(),
            Some("Unsupported stream mode(s): messages".to_owned())
        );
    }

    #[test]
    fn a_model_delta_is_an_ai_message_chunk_of_the_message_to_come() {
        let event = json!({"turn": 2, "message_id": "ai-2", "text": "Hel"});
        let chunk = delta_chunk(event.as_object().unwrap());
        assert_eq!(chunk["type"], "AIMessageChunk");
        assert_eq!(
            (chunk["id"].as_str(), chunk["content"].as_str()),
            (Some("ai-2"), Some("Hel"))
        );
        assert_eq!(chunk["additional_kwargs"], json!({}));
        let event = json!({"turn": 1, "message_id": "ai-1", "reasoning": "Let me think"});
        let chunk = delta_chunk(event.as_object().unwrap());
        assert_eq!(chunk["content"], "");
        assert_eq!(
            chunk["additional_kwargs"]["reasoning_content"],
            "Let me think"
        );
        assert_eq!(
            frame("messages", &json!([1]), Some("3-1")),
            web::Bytes::from("event: messages\ndata: [1]\nid: 3-1\n\n")
        );
    }

    #[test]
    fn an_id_is_both_cursors() {
        let c = Cursor {
            events: 12,
            steps: 3,
        };
        assert_eq!(Cursor::parse(&c.id()), Some(c));
        assert_eq!(
            Cursor::parse("1733-5"),
            Some(Cursor {
                events: 1733,
                steps: 5
            })
        );
        assert_eq!(Cursor::parse("nope"), None);
    }
}
