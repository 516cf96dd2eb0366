//! The LangGraph-compatible API's shared parts (spec A.1–A.8): DeerFlow's texts, the
//! caller's user, thread ids, and how Antler's threads, runs and messages look to a
//! `langgraph-sdk` client (LangChain message dicts, ISO times, LangGraph's statuses).
//! The routes are in `langgraph_threads` (threads, state, history, assistants),
//! `langgraph_runs` (runs), `langgraph_reads` (DeerFlow's reads: messages, a run's
//! events, token usage; the rows from `thread_feed`), `langgraph_branches` (branches),
//! `langgraph_regenerate` (regenerate and edit) and `goal` (a thread's goal); checkpoint
//! ids in `langgraph_checkpoints`, a thread's turns in `langgraph_turns`; the SSE frames in
//! `langgraph_stream` (the `tasks`/`checkpoints`/`debug` payloads from `langgraph_debug`).
//! A thread is its user's: another user's is the same 404 as a missing one.

use actix_web::{http::StatusCode, web, HttpResponse};
use serde_json::{json, Map, Value};

use super::{body, error, runs_api::principal_of, Refusal, State};
use crate::runs::store::{CheckpointError, RunRecord, RunStatus, ThreadRow};
use antler_engine::{Message, ThreadState, ToolStatus};

/// The assistant DeerFlow's frontend talks to: Antler's lead agent.
pub(super) const ASSISTANT_ID: &str = "lead_agent";
/// DeerFlow's text for a thread id it refuses (spec A.1).
pub(super) const INVALID_THREAD_ID: &str =
    "Invalid thread_id: expected 1-64 ASCII letters, digits, hyphens, or underscores";
/// DeerFlow's refusal to delete a thread with a run in flight (spec A.2).
pub(super) const DELETE_IN_FLIGHT: &str =
    "Thread has work in flight. Delete it after the work finishes.";
/// DeerFlow's refusal to write a thread's state during a run (spec A.2).
pub(super) const STATE_IN_FLIGHT: &str =
    "Thread has a run in flight. Update state after the run finishes.";
/// The error a run cancelled with `action=rollback` ends with (spec A.4).
pub(super) const ROLLED_BACK: &str = "Rolled back by user";
/// The largest request body of these routes.
pub(super) const MAX_BODY: usize = 1 << 20;

/// A refusal from a check that is not a route (boxed: a response is large).
pub(super) struct Refused(Box<HttpResponse>);

impl From<HttpResponse> for Refused {
    fn from(response: HttpResponse) -> Refused {
        Refused(Box::new(response))
    }
}

impl From<Refused> for HttpResponse {
    fn from(refused: Refused) -> HttpResponse {
        *refused.0
    }
}

/// `Thread {tid} not found`.
pub(super) fn thread_not_found(thread: &str) -> HttpResponse {
    error(StatusCode::NOT_FOUND, format!("Thread {thread} not found"))
}

/// `Run {rid} not found`.
pub(super) fn run_not_found(run_id: &str) -> HttpResponse {
    error(StatusCode::NOT_FOUND, format!("Run {run_id} not found"))
}

/// The user the caller acts as: a member its own, the operator `default`.
pub(super) fn user_of(req: &actix_web::HttpRequest) -> Result<String, Refused> {
    let principal =
        principal_of(req).ok_or_else(|| Refused::from(Refusal::Credential.response()))?;
    Ok(principal
        .user
        .unwrap_or_else(|| antler_protocol::config::OPERATOR_USER.to_owned()))
}

/// A thread id DeerFlow accepts: `^[A-Za-z0-9_-]{1,64}$`; otherwise its 422.
pub(super) fn check_thread_id(thread: &str) -> Result<(), Refused> {
    let ok = (1..=64).contains(&thread.len())
        && thread
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(error(StatusCode::UNPROCESSABLE_ENTITY, INVALID_THREAD_ID).into())
    }
}

/// A request's JSON body (an empty body is `{}`), within [`MAX_BODY`].
pub(super) async fn json_body<T: serde::de::DeserializeOwned>(
    payload: web::Payload,
) -> Result<T, HttpResponse> {
    json_body_as_sent(payload).await.map(|(_, body)| body)
}

/// [`json_body`], with the bytes as sent (to forward them to another lead).
pub(super) async fn json_body_as_sent<T: serde::de::DeserializeOwned>(
    payload: web::Payload,
) -> Result<(web::Bytes, T), HttpResponse> {
    let sent = body::read_body(payload, MAX_BODY).await?;
    let bytes: &[u8] = if sent.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        &sent
    };
    let body = serde_json::from_slice(bytes)
        .map_err(|e| error(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()))?;
    Ok((sent, body))
}

/// A store answer as the routes use it: 503 when the store failed.
pub(super) async fn on_store<T: Send + 'static>(
    state: &State,
    request: impl FnOnce(&crate::runs::store::CheckpointStore) -> Result<T, CheckpointError>
        + Send
        + 'static,
) -> Result<T, HttpResponse> {
    state
        .runs
        .store
        .call(request)
        .await
        .map_err(|e| error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))
}

/// Unix milliseconds as ISO 8601 (UTC), as LangGraph writes times.
pub(super) fn iso(ms: i64) -> String {
    let at = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    at.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// A run's status in LangGraph's words: a cancelled run is `interrupted` (spec A.4's
/// default cancel), a rolled-back one `error`.
pub(super) fn run_status(record: &RunRecord) -> &'static str {
    let cancelled = antler_engine::RunError::Cancelled.to_string();
    match record.status {
        RunStatus::Error if record.detail.as_deref() == Some(cancelled.as_str()) => "interrupted",
        RunStatus::Running => "running",
        RunStatus::Success => "success",
        RunStatus::Error => "error",
        RunStatus::Interrupted => "interrupted",
    }
}

/// A run as LangGraph's `Run`.
pub(super) fn run_json(record: &RunRecord, times: (Option<i64>, Option<i64>)) -> Value {
    let created = times.0.unwrap_or(0);
    json!({
        "run_id": record.run_id,
        "thread_id": record.thread_id,
        "assistant_id": record.agent.clone().unwrap_or_else(|| ASSISTANT_ID.to_owned()),
        "created_at": iso(created),
        "updated_at": iso(times.1.unwrap_or(created)),
        "status": run_status(record),
        "metadata": {},
        "kwargs": {},
        "multitask_strategy": "reject",
        "error": record.detail.clone().filter(|_| record.status == RunStatus::Error),
    })
}

/// A thread as LangGraph's `Thread`, with `values` (the whole state, or for a search
/// row just its title).
pub(super) fn thread_json(row: &ThreadRow, values: Value) -> Value {
    json!({
        "thread_id": row.thread_id,
        "created_at": iso(row.created_ms),
        "updated_at": iso(row.updated_ms),
        "metadata": row.metadata,
        "status": row.status,
        "values": values,
        "interrupts": {},
        "config": {},
    })
}

/// The state as LangGraph's `values`: every field of the thread's state, its messages
/// as LangChain dicts (the run loop's own counters left out).
pub(super) fn values(state: &ThreadState) -> Value {
    let mut values = serde_json::to_value(state).unwrap_or_else(|_| json!({}));
    if let Some(object) = values.as_object_mut() {
        object.remove("turns_before");
        object.insert("messages".into(), Value::Array(messages(&state.messages)));
    }
    values
}

/// Every message as a LangChain dict, each with an id stable across reads.
pub(super) fn messages(messages: &[Message]) -> Vec<Value> {
    let mut seen: std::collections::HashMap<String, usize> = Default::default();
    messages
        .iter()
        .map(|m| {
            let id = message_id(m, &mut seen);
            message_json(m, id)
        })
        .collect()
}

/// The id a message has on the API: an AI message its own; a tool message
/// `tool-{tool_call_id}`; a human or system message a hash of its text with the count of
/// earlier messages of the same kind and text (stable while the thread's earlier
/// messages are kept).
fn message_id(message: &Message, seen: &mut std::collections::HashMap<String, usize>) -> String {
    use sha2::Digest as _;
    let (kind, text) = match message {
        Message::Ai { id, .. } => return id.clone(),
        Message::Tool { tool_call_id, .. } => return format!("tool-{tool_call_id}"),
        Message::Human { content, .. } => ("human", content),
        Message::System { content } => ("system", content),
    };
    let digest = sha2::Sha256::digest(format!("{kind}\0{text}").as_bytes());
    let short: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    let key = format!("{kind}-{short}");
    let n = seen.entry(key.clone()).or_insert(0);
    *n += 1;
    format!("{key}-{n}")
}

/// One message as LangChain's `model_dump()` of it.
pub(super) fn message_json(message: &Message, id: String) -> Value {
    match message {
        Message::Human {
            content,
            name,
            hide_from_ui,
            additional_kwargs,
        } => {
            let mut kwargs = additional_kwargs
                .as_deref()
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            if *hide_from_ui {
                kwargs.insert("hide_from_ui".into(), Value::Bool(true));
            }
            json!({"type": "human", "id": id, "content": content, "name": name,
                   "additional_kwargs": kwargs, "response_metadata": {}, "example": false})
        }
        Message::System { content } => json!({"type": "system", "id": id, "content": content,
            "name": null, "additional_kwargs": {}, "response_metadata": {}}),
        Message::Ai {
            content,
            tool_calls,
            reasoning,
            ..
        } => {
            let mut kwargs = Map::new();
            if let Some(text) = reasoning
                .as_ref()
                .map(|r| &r.text)
                .filter(|t| !t.is_empty())
            {
                kwargs.insert("reasoning_content".into(), Value::String(text.clone()));
            }
            let calls: Vec<Value> = tool_calls
                .iter()
                .map(|c| json!({"id": c.id, "name": c.name, "args": c.args, "type": "tool_call"}))
                .collect();
            json!({"type": "ai", "id": id, "content": content, "name": null,
                   "tool_calls": calls, "invalid_tool_calls": [],
                   "additional_kwargs": kwargs, "response_metadata": {},
                   "usage_metadata": null, "example": false})
        }
        Message::Tool {
            tool_call_id,
            name,
            content,
            status,
            additional_kwargs,
        } => json!({"type": "tool", "id": id, "tool_call_id": tool_call_id, "name": name,
            "content": content,
            "status": if *status == ToolStatus::Error { "error" } else { "success" },
            "additional_kwargs": additional_kwargs.as_deref().cloned().unwrap_or_else(|| json!({})),
            "response_metadata": {}, "artifact": null}),
    }
}

/// `GET /api/assistants/{id}`: the one assistant (DeerFlow's `lead_agent`, read-only).
pub(super) async fn get_assistant(path: web::Path<String>) -> HttpResponse {
    let id = path.into_inner();
    if id != ASSISTANT_ID {
        return error(StatusCode::NOT_FOUND, format!("Assistant {id} not found"));
    }
    HttpResponse::Ok().json(assistant())
}

/// `POST /api/assistants/search`: the one assistant.
pub(super) async fn search_assistants() -> HttpResponse {
    HttpResponse::Ok().json(json!([assistant()]))
}

fn assistant() -> Value {
    json!({
        "assistant_id": ASSISTANT_ID,
        "graph_id": ASSISTANT_ID,
        "name": ASSISTANT_ID,
        "description": "Antler's lead agent",
        "config": {},
        "context": {},
        "metadata": {},
        "version": 1,
        "created_at": iso(0),
        "updated_at": iso(0),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use antler_engine::ToolCall;

    #[test]
    fn messages_are_langchain_dicts_with_ids_stable_across_reads() {
        let state = vec![
            Message::human("hello"),
            Message::Ai {
                id: "ai-1".into(),
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: "call-1".into(),
                    name: "ls".into(),
                    args: json!({"path": "/"}),
                }],
                reasoning: None,
            },
            Message::tool("call-1", "ls", "a b", ToolStatus::Error),
            Message::human("hello"),
        ];
        let dicts = messages(&state);
        assert_eq!(dicts[0]["type"], "human");
        assert_eq!(dicts[1]["id"], "ai-1");
        assert_eq!(
            dicts[1]["tool_calls"][0],
            json!({"id": "call-1", "name": "ls", "args": {"path": "/"}, "type": "tool_call"})
        );
        assert_eq!(dicts[2]["id"], "tool-call-1");
        assert_eq!(dicts[2]["status"], "error");
        // The same text twice: two ids, the same on every read.
        assert_ne!(dicts[0]["id"], dicts[3]["id"]);
        assert_eq!(messages(&state), dicts);
        // A message added later leaves the earlier ids as they were.
        let mut longer = state.clone();
        longer.push(Message::human("more"));
        assert_eq!(messages(&longer)[..4], dicts[..]);
    }

    #[test]
    fn thread_ids_follow_deerflow_and_times_are_iso() {
        assert!(check_thread_id("conv-1_A").is_ok());
        for bad in ["", "a b", "../x", &"x".repeat(65)] {
            assert!(check_thread_id(bad).is_err(), "{bad}");
        }
        assert_eq!(iso(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso(1_733_000_000_123), "2024-11-30T20:53:20.123Z");
    }
}
