//! The thread reads DeerFlow serves beside the LangGraph API (spec A.1 "Reads"): the
//! thread's messages (`GET /messages`, `/messages/page`, paged by `seq`, `thread_feed`),
//! a run's messages, events and workspace changes, and the thread's token usage with its
//! `context_usage`. Every route reads the caller's own thread: another user's is the same
//! 404 as a missing one. A run's events are Antler's run events (each under its own name,
//! `seq` counted within the run); its workspace changes are what its `write_file` and
//! `str_replace` calls wrote (`workspace_changes`: a file `bash` wrote is not seen).

use std::collections::HashMap;

use actix_web::{http::StatusCode, web, HttpResponse};
use serde_json::{json, Map, Value};

use super::caller::OwnThread;
use super::langgraph::{iso, on_store, run_status, Refused};
use super::thread_feed::{self, RunCheckpoints};
use super::workspace_changes::{file_changes, no_workspace_changes, workspace_changes_json};
use super::{error, State};
use crate::runs::manager;
use crate::runs::store::RunRecord;
use antler_engine::Message;

/// DeerFlow's 422 when `/messages/page` is asked to page forward.
pub(super) const PAGE_IS_BACKWARD: &str =
    "after_seq is not supported by this backward-only endpoint";

type Query = web::Query<HashMap<String, String>>;

/// An integer query parameter within `min..=max` (`default` when absent), or FastAPI's
/// 422 naming it.
fn int_param(
    query: &HashMap<String, String>,
    name: &str,
    default: Option<i64>,
    min: i64,
    max: i64,
) -> Result<Option<i64>, Refused> {
    let Some(raw) = query.get(name) else {
        return Ok(default);
    };
    let n: i64 = raw.trim().parse().map_err(|_| {
        Refused::from(error(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("{name}: Input should be a valid integer"),
        ))
    })?;
    if n < min {
        return Err(error(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("{name}: Input should be greater than or equal to {min}"),
        )
        .into());
    }
    if n > max {
        return Err(error(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("{name}: Input should be less than or equal to {max}"),
        )
        .into());
    }
    Ok(Some(n))
}

/// A boolean query parameter (`default` when absent), or FastAPI's 422.
fn bool_param(query: &HashMap<String, String>, name: &str, default: bool) -> Result<bool, Refused> {
    match query.get(name).map(|v| v.trim().to_ascii_lowercase()) {
        None => Ok(default),
        Some(v) if matches!(v.as_str(), "true" | "1" | "yes" | "on") => Ok(true),
        Some(v) if matches!(v.as_str(), "false" | "0" | "no" | "off") => Ok(false),
        Some(_) => Err(error(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("{name}: Input should be a valid boolean"),
        )
        .into()),
    }
}

/// `limit` (1 to `max`), `before_seq` and `after_seq` (1 or more).
struct Cursor {
    limit: usize,
    before: Option<i64>,
    after: Option<i64>,
}

fn cursor(query: &HashMap<String, String>, default: i64, max: i64) -> Result<Cursor, Refused> {
    let limit = int_param(query, "limit", Some(default), 1, max)?.unwrap_or(default);
    Ok(Cursor {
        limit: usize::try_from(limit).unwrap_or(1),
        before: int_param(query, "before_seq", None, 1, i64::MAX)?,
        after: int_param(query, "after_seq", None, 1, i64::MAX)?,
    })
}

/// The thread's message rows (every run's, oldest run first) and each ended run's
/// wall-clock seconds.
async fn feed(
    state: &State,
    user: &str,
    thread: &str,
) -> Result<(Vec<Value>, HashMap<String, i64>), HttpResponse> {
    let (user, id) = (user.to_owned(), thread.to_owned());
    on_store(state, move |store| {
        let mut runs = store.thread_runs(&user, &id, usize::MAX, 0)?;
        runs.reverse();
        let mut rows: Vec<Value> = Vec::new();
        let mut durations = HashMap::new();
        for run in runs {
            let (started, ended) = store.run_times(&run.run_id)?;
            let Some(start) = store.checkpoint_at(&run.run_id, 0)? else {
                continue;
            };
            let Some((_, latest)) = store.latest(&run.run_id)? else {
                continue;
            };
            let created_at = iso(started.unwrap_or(0));
            let first = i64::try_from(rows.len()).unwrap_or(i64::MAX - 1) + 1;
            rows.extend(thread_feed::run_rows(
                &RunCheckpoints {
                    thread_id: &id,
                    run_id: &run.run_id,
                    created_at: &created_at,
                    start: &start.messages,
                    latest: &latest.messages,
                },
                first,
            ));
            if let (Some(started), Some(ended)) = (started, ended) {
                durations.insert(run.run_id.clone(), (ended - started).max(0) / 1000);
            }
        }
        Ok((rows, durations))
    })
    .await
}

/// `GET /api/threads/{tid}/messages?limit=&before_seq=&after_seq=`: the thread's message
/// rows in the window asked (default the newest 50), each with `feedback: null`, the
/// last AI row of each run with its `turn_duration`.
pub(super) async fn thread_messages(
    state: web::Data<State>,
    own: OwnThread,
    query: Query,
) -> HttpResponse {
    let (user, thread) = (own.user.clone(), own.id.clone());
    let at = match cursor(&query, 50, 200) {
        Ok(at) => at,
        Err(response) => return response.into(),
    };
    let (rows, durations) = match feed(&state, &user, &thread).await {
        Ok(feed) => feed,
        Err(response) => return response,
    };
    let mut data = thread_feed::window(&rows, at.limit, at.before, at.after);
    thread_feed::without_feedback(&mut data);
    thread_feed::stamp_turn_duration(&mut data, &durations);
    HttpResponse::Ok().json(data)
}

/// `GET /api/threads/{tid}/messages/page?limit=&before_seq=`: a backward page,
/// `{data, has_more, next_before_seq}`; `after_seq` is DeerFlow's 422.
pub(super) async fn thread_messages_page(
    state: web::Data<State>,
    own: OwnThread,
    query: Query,
) -> HttpResponse {
    let (user, thread) = (own.user.clone(), own.id.clone());
    if query.contains_key("after_seq") {
        return error(StatusCode::UNPROCESSABLE_ENTITY, PAGE_IS_BACKWARD);
    }
    let at = match cursor(&query, 50, 200) {
        Ok(at) => at,
        Err(response) => return response.into(),
    };
    let (rows, durations) = match feed(&state, &user, &thread).await {
        Ok(feed) => feed,
        Err(response) => return response,
    };
    let (mut data, has_more, next) = thread_feed::backward_page(&rows, at.limit, at.before);
    thread_feed::without_feedback(&mut data);
    thread_feed::stamp_turn_duration(&mut data, &durations);
    HttpResponse::Ok().json(json!({"data": data, "has_more": has_more, "next_before_seq": next}))
}

/// `GET /api/threads/{tid}/runs/{rid}/messages?limit=&before_seq=&after_seq=`: the run's
/// rows, `{data, has_more}` (none for a run not on the thread, as DeerFlow's store).
pub(super) async fn run_messages(
    state: web::Data<State>,
    own: OwnThread,
    path: web::Path<(String, String)>,
    query: Query,
) -> HttpResponse {
    let (user, thread) = (own.user.clone(), own.id.clone());
    let run_id = path.into_inner().1;
    let at = match cursor(&query, 50, 200) {
        Ok(at) => at,
        Err(response) => return response.into(),
    };
    let (rows, durations) = match feed(&state, &user, &thread).await {
        Ok(feed) => feed,
        Err(response) => return response,
    };
    let own: Vec<Value> = rows
        .into_iter()
        .filter(|r| r["run_id"] == run_id.as_str())
        .collect();
    let (mut data, has_more) = thread_feed::run_page(&own, at.limit, at.before, at.after);
    thread_feed::stamp_turn_duration(&mut data, &durations);
    HttpResponse::Ok().json(json!({"data": data, "has_more": has_more}))
}

/// The record of `run_id` when it is a run of the caller's `thread`.
async fn thread_run(
    state: &State,
    user: &str,
    thread: &str,
    run_id: &str,
) -> Result<Option<RunRecord>, HttpResponse> {
    let id = run_id.to_owned();
    let record = on_store(state, move |store| store.run(&id)).await?;
    Ok(record.filter(|r| r.user_id == user && r.thread_id == thread))
}

/// One of Antler's run events as a DeerFlow event row (`seq` from 1 within the run,
/// `created_at` the event's `at_ms`).
pub(super) fn event_row(thread: &str, run_id: &str, seq: i64, event: &str) -> Value {
    let mut content = match serde_json::from_str::<Value>(event) {
        Ok(Value::Object(object)) => object,
        _ => Map::new(),
    };
    let event_type = content
        .remove("event")
        .and_then(|e| e.as_str().map(str::to_owned))
        .unwrap_or_default();
    let category = match event_type.as_str() {
        "task" | "acp_activity" => "subagent",
        "warning" => "error",
        _ => "trace",
    };
    let mut metadata = Map::new();
    if let Some(task_id) = content.get("task_id").filter(|t| t.is_string()) {
        metadata.insert("task_id".into(), task_id.clone());
    }
    let created_at = content.get("at_ms").and_then(Value::as_i64).map(iso);
    json!({
        "thread_id": thread,
        "run_id": run_id,
        "event_type": event_type,
        "category": category,
        "content": content,
        "metadata": metadata,
        "seq": seq,
        "created_at": created_at,
    })
}

/// `GET /api/threads/{tid}/runs/{rid}/events?event_types=&task_id=&limit=&after_seq=`:
/// the run's kept events (not the streamed token deltas), oldest first.
pub(super) async fn run_events(
    state: web::Data<State>,
    own: OwnThread,
    path: web::Path<(String, String)>,
    query: Query,
) -> HttpResponse {
    let (user, thread) = (own.user.clone(), own.id.clone());
    let run_id = path.into_inner().1;
    let limit = match int_param(&query, "limit", Some(500), 1, 2000) {
        Ok(limit) => usize::try_from(limit.unwrap_or(500)).unwrap_or(500),
        Err(response) => return response.into(),
    };
    let after = match int_param(&query, "after_seq", None, 1, i64::MAX) {
        Ok(after) => after.unwrap_or(0),
        Err(response) => return response.into(),
    };
    let types: Option<Vec<String>> = query
        .get("event_types")
        .filter(|t| !t.is_empty())
        .map(|t| t.split(',').map(str::to_owned).collect());
    let task_id = query.get("task_id").cloned();
    match thread_run(&state, &user, &thread, &run_id).await {
        Ok(Some(_)) => {}
        Ok(None) => return HttpResponse::Ok().json(json!([])),
        Err(response) => return response,
    }
    let log = state
        .runs
        .manager
        .send(manager::WatchRun(run_id.clone()))
        .await
        .ok()
        .flatten();
    let events = log.map(|log| log.kept()).unwrap_or_default();
    let rows: Vec<Value> = events
        .iter()
        .enumerate()
        .map(|(i, e)| event_row(&thread, &run_id, i as i64 + 1, e))
        .filter(|r| r["seq"].as_i64().unwrap_or(0) > after)
        .filter(|r| {
            types.as_ref().is_none_or(|types| {
                types
                    .iter()
                    .any(|t| r["event_type"].as_str() == Some(t.as_str()))
            })
        })
        .filter(|r| {
            task_id
                .as_deref()
                .is_none_or(|id| r["metadata"]["task_id"].as_str() == Some(id))
        })
        .take(limit)
        .collect();
    HttpResponse::Ok().json(rows)
}

/// `GET /api/threads/{tid}/runs/{rid}/workspace-changes?include_files=&include_diff=`:
/// the files the run's `write_file` and `str_replace` calls changed (see the module
/// doc); `available: false` for a run not on the thread or without checkpoints.
pub(super) async fn run_workspace_changes(
    state: web::Data<State>,
    own: OwnThread,
    path: web::Path<(String, String)>,
    query: Query,
) -> HttpResponse {
    let (user, thread) = (own.user.clone(), own.id.clone());
    let run_id = path.into_inner().1;
    let include_files = match bool_param(&query, "include_files", true) {
        Ok(v) => v,
        Err(response) => return response.into(),
    };
    // Accepted: no diff is kept, so every file's `diff` is empty either way.
    if let Err(response) = bool_param(&query, "include_diff", true) {
        return response.into();
    }
    match thread_run(&state, &user, &thread, &run_id).await {
        Ok(Some(_)) => {}
        Ok(None) => return HttpResponse::Ok().json(no_workspace_changes()),
        Err(response) => return response,
    }
    let id = run_id.clone();
    let read = on_store(&state, move |store| {
        let start = store.checkpoint_at(&id, 0)?;
        let latest = store.latest(&id)?;
        let outputs = store.outputs_snapshot(&id)?;
        Ok((start, latest, outputs))
    })
    .await;
    let (start, latest, outputs) = match read {
        Ok((Some(start), Some((_, latest)), outputs)) => (start, latest, outputs),
        Ok(_) => return HttpResponse::Ok().json(no_workspace_changes()),
        Err(response) => return response,
    };
    let own: Vec<Message> = thread_feed::own_indices(&start.messages, &latest.messages)
        .into_iter()
        .filter_map(|i| latest.messages.get(i).cloned())
        .collect();
    let changes = file_changes(&own, outputs.as_ref());
    HttpResponse::Ok().json(workspace_changes_json(&changes, include_files))
}

/// DeerFlow's `build_context_usage_payload`: the percentage to one decimal, none
/// without a window.
pub(super) fn context_usage(token_count: u64, max_context_tokens: Option<u64>) -> Value {
    let percentage = max_context_tokens
        .filter(|m| *m > 0)
        .map(|m| (token_count as f64 / m as f64 * 1000.0).round() / 10.0);
    json!({
        "token_count": token_count,
        "max_context_tokens": max_context_tokens,
        "percentage": percentage,
    })
}

/// `GET /api/threads/{tid}/token-usage?include_active=`: the tokens of the thread's ended
/// runs (`success` and `error`; `running` too with `include_active`) by model and caller
/// (every token is the lead agent's), and `context_usage`: the thread's messages as
/// summarization counts them against the window of the model of its latest run (else
/// the first of `models:`); `null` when config.yaml cannot be read.
pub(super) async fn token_usage(
    state: web::Data<State>,
    own: OwnThread,
    query: Query,
) -> HttpResponse {
    let (user, thread) = (own.user.clone(), own.id.clone());
    let include_active = match bool_param(&query, "include_active", false) {
        Ok(v) => v,
        Err(response) => return response.into(),
    };
    let values = match own.state(&state).await {
        Ok(values) => values,
        Err(response) => return response,
    };
    let (u, id) = (user.clone(), thread.clone());
    let runs = on_store(&state, move |store| {
        let runs = store.thread_runs(&u, &id, usize::MAX, 0)?;
        runs.into_iter()
            .map(|r| {
                let usage = store.latest(&r.run_id)?.map(|(_, s)| s.token_usage);
                Ok((r, usage.unwrap_or_default()))
            })
            .collect::<Result<Vec<_>, _>>()
    })
    .await;
    let runs = match runs {
        Ok(runs) => runs,
        Err(response) => return response,
    };
    let app = state.runs.env.load_config(None).await.ok();
    let model_name = |label: &str| -> String {
        app.as_deref()
            .and_then(|app| crate::runs::prepare::context::run_entry(app, label))
            .map(|entry| entry.name.clone())
            .unwrap_or_else(|| {
                label
                    .strip_prefix(crate::runs::prepare::MODEL_PREFIX)
                    .unwrap_or(label)
                    .to_owned()
            })
    };
    let counted: Vec<_> = runs
        .iter()
        .filter(|(r, _)| {
            matches!(run_status(r), "success" | "error")
                || (include_active && run_status(r) == "running")
        })
        .collect();
    let mut by_model: Map<String, Value> = Map::new();
    for (record, usage) in &counted {
        let entry = by_model
            .entry(model_name(&record.model))
            .or_insert_with(|| json!({"tokens": 0, "runs": 0}));
        entry["tokens"] = json!(entry["tokens"].as_u64().unwrap_or(0) + usage.total_tokens);
        entry["runs"] = json!(entry["runs"].as_u64().unwrap_or(0) + 1);
    }
    let total: u64 = counted.iter().map(|(_, u)| u.total_tokens).sum();
    let context = app.as_deref().map(|app| {
        let label = runs
            .first()
            .map_or(crate::runs::prepare::MODEL_PREFIX, |(r, _)| {
                r.model.as_str()
            });
        let entry = crate::runs::prepare::context::run_entry(app, label).or(app.models.first());
        let counter = entry.map_or_else(
            antler_engine::TokenCounter::default,
            antler_engine::TokenCounter::for_entry,
        );
        let messages = values.as_ref().map_or(&[][..], |s| &s.messages[..]);
        context_usage(
            counter.messages(messages),
            entry.and_then(antler_engine::window_of),
        )
    });
    HttpResponse::Ok().json(json!({
        "thread_id": thread,
        "total_tokens": total,
        "total_input_tokens": counted.iter().map(|(_, u)| u.input_tokens).sum::<u64>(),
        "total_output_tokens": counted.iter().map(|(_, u)| u.output_tokens).sum::<u64>(),
        "total_runs": counted.len(),
        "by_model": by_model,
        "by_caller": {"lead_agent": total, "subagent": 0, "middleware": 0},
        "context_usage": context,
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn context_usage_is_deerflows_payload() {
        assert_eq!(
            context_usage(1234, Some(8192)),
            json!({"token_count": 1234, "max_context_tokens": 8192, "percentage": 15.1})
        );
        assert_eq!(
            context_usage(10, None),
            json!({"token_count": 10, "max_context_tokens": null, "percentage": null})
        );
    }

    #[test]
    fn query_limits_are_checked_with_their_names() {
        let q = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<HashMap<_, _>>()
        };
        assert_eq!(
            int_param(&q(&[]), "limit", Some(50), 1, 200).ok(),
            Some(Some(50))
        );
        assert!(int_param(&q(&[("limit", "0")]), "limit", Some(50), 1, 200).is_err());
        assert!(int_param(&q(&[("limit", "201")]), "limit", Some(50), 1, 200).is_err());
        assert!(int_param(&q(&[("limit", "x")]), "limit", Some(50), 1, 200).is_err());
        assert_eq!(
            int_param(&q(&[("before_seq", "3")]), "before_seq", None, 1, i64::MAX).ok(),
            Some(Some(3))
        );
        assert_eq!(
            bool_param(&q(&[("x", "false")]), "x", true).ok(),
            Some(false)
        );
    }

    #[test]
    fn an_event_row_names_the_event_and_keeps_its_fields() {
        let row = event_row(
            "t",
            "r",
            2,
            r#"{"event":"tool_finished","name":"ls","tool_call_id":"c1","error":false,"at_ms":0}"#,
        );
        assert_eq!(row["event_type"], "tool_finished");
        assert_eq!(row["category"], "trace");
        assert_eq!(row["seq"], 2);
        assert_eq!(
            row["content"],
            json!({"name": "ls", "tool_call_id": "c1", "error": false, "at_ms": 0})
        );
        assert_eq!(row["created_at"], "1970-01-01T00:00:00Z");
        let task = event_row(
            "t",
            "r",
            3,
            r#"{"event":"task","type":"task_started","task_id":"k"}"#,
        );
        assert_eq!(
            (
                task["category"].as_str(),
                task["metadata"]["task_id"].as_str()
            ),
            (Some("subagent"), Some("k"))
        );
    }
}
