//! The LangGraph-compatible thread routes (spec A.1–A.2): create (idempotent; the
//! metadata's `owner_id`/`user_id` stripped), search by metadata, get, patch, delete
//! (refused while a run is in flight; the thread's files go with it), the state (get, and
//! a write that replaces the channels it names) and the history. Every route acts on the
//! caller's own threads.

use actix_web::{http::StatusCode, web, HttpResponse};
use serde_json::{json, Map, Value};

use super::caller::{Caller, OwnThread};
use super::langgraph::{
    check_thread_id, json_body, on_store, thread_json, thread_not_found, values, DELETE_IN_FLIGHT,
    STATE_IN_FLIGHT,
};
use super::{error, State};
use crate::runs::manager;
use crate::runs::store::{ThreadRefusal, ThreadRow};
use antler_engine::ThreadState;

/// The metadata keys a client may not set: the owner is the caller.
const OWNER_KEYS: [&str; 2] = ["owner_id", "user_id"];
/// The metadata patch that pins a thread in DeerFlow's sidebar (it does not move the
/// thread's `updated_at`).
const PINNED: &str = "deerflow_pinned";
/// The state channels `POST /state` may write.
const STATE_FIELDS: [&str; 8] = [
    "messages",
    "title",
    "artifacts",
    "promoted",
    "viewed_images",
    "delegations",
    "active_skills",
    "goal",
];

/// `POST /api/threads`'s body.
#[derive(serde::Deserialize, utoipa::ToSchema)]
pub(super) struct CreateBody {
    #[serde(default)]
    thread_id: Option<String>,
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
    /// `raise`: 409 when the thread exists; `do_nothing` (the default): answer it.
    #[serde(default)]
    if_exists: Option<String>,
    // Accepted and not used: the graph is always the lead agent, threads do not expire.
    #[serde(default)]
    #[allow(dead_code)]
    assistant_id: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    graph_id: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    ttl: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)]
    supersteps: Option<Value>,
}

/// `POST /api/threads`: creates the caller's thread (a new id unless one is given), or
/// answers the existing one.
pub(super) async fn create_thread(
    state: web::Data<State>,
    Caller(user): Caller,
    payload: web::Payload,
) -> HttpResponse {
    let body: CreateBody = match json_body(payload).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let thread = body
        .thread_id
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    if let Err(response) = check_thread_id(&thread) {
        return response.into();
    }
    let mut metadata = body.metadata.unwrap_or_default();
    for key in OWNER_KEYS {
        metadata.remove(key);
    }
    let id = thread.clone();
    let created = on_store(&state, move |store| {
        let (row, created) = store.create_thread(&user, &id, &metadata)?;
        let values = store.thread_state(&user, &id)?;
        Ok((row, created, values))
    })
    .await;
    match created {
        Ok((_, false, _)) if body.if_exists.as_deref() == Some("raise") => error(
            StatusCode::CONFLICT,
            format!("Thread {thread} already exists"),
        ),
        Ok((row, _, state)) => {
            HttpResponse::Ok().json(thread_json(&row, state.map_or(json!({}), |s| values(&s))))
        }
        Err(response) => response,
    }
}

/// `POST /api/threads/search`'s body.
#[derive(serde::Deserialize, utoipa::ToSchema)]
pub(super) struct SearchBody {
    #[serde(default)]
    metadata: Map<String, Value>,
    #[serde(default = "default_limit")]
    limit: i64,
    #[serde(default)]
    offset: i64,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    ids: Option<Vec<String>>,
    // Accepted and not used.
    #[serde(default)]
    #[allow(dead_code)]
    values: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)]
    sort_by: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    sort_order: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    select: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)]
    extract: Option<Value>,
}

fn default_limit() -> i64 {
    100
}

/// `POST /api/threads/search`: the caller's threads whose metadata holds every pair asked
/// (most recently updated first); each row's `values` is its title alone.
pub(super) async fn search_threads(
    state: web::Data<State>,
    Caller(user): Caller,
    payload: web::Payload,
) -> HttpResponse {
    let body: SearchBody = match json_body(payload).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    if !(1..=1000).contains(&body.limit) || body.offset < 0 {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "limit must be 1 to 1000 and offset 0 or more",
        );
    }
    let (limit, offset) = (body.limit as usize, body.offset as usize);
    let (metadata, status, ids) = (body.metadata, body.status, body.ids);
    let window = if ids.is_some() {
        usize::MAX
    } else {
        limit + offset
    };
    let found = on_store(&state, move |store| {
        store.search_threads(&user, &metadata, status.as_deref(), window, 0)
    })
    .await;
    match found {
        Ok(rows) => {
            let rows = rows
                .into_iter()
                .filter(|r| ids.as_ref().is_none_or(|ids| ids.contains(&r.thread_id)))
                .skip(offset)
                .take(limit)
                .map(|r| {
                    let title = r.title.clone();
                    thread_json(&r, json!({"title": title}))
                })
                .collect::<Vec<_>>();
            HttpResponse::Ok().json(rows)
        }
        Err(response) => response,
    }
}

/// `GET /api/threads/{tid}`: the thread with its whole state.
pub(super) async fn get_thread(state: web::Data<State>, thread: OwnThread) -> HttpResponse {
    match thread.state(&state).await {
        Ok(now) => HttpResponse::Ok().json(thread_json(
            &thread.row,
            now.map_or(json!({}), |s| values(&s)),
        )),
        Err(response) => response,
    }
}

/// `PATCH /api/threads/{tid}`'s body.
#[derive(serde::Deserialize, utoipa::ToSchema)]
pub(super) struct PatchBody {
    #[serde(default)]
    metadata: Map<String, Value>,
}

/// `PATCH /api/threads/{tid}`: merges the metadata (a pin alone keeps `updated_at`).
pub(super) async fn patch_thread(
    state: web::Data<State>,
    Caller(user): Caller,
    path: web::Path<String>,
    payload: web::Payload,
) -> HttpResponse {
    let thread = path.into_inner();
    if let Err(response) = check_thread_id(&thread) {
        return response.into();
    }
    let body: PatchBody = match json_body(payload).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let mut metadata = body.metadata;
    for key in OWNER_KEYS {
        metadata.remove(key);
    }
    let pin_only = metadata.len() == 1 && metadata.get(PINNED).is_some_and(Value::is_boolean);
    let id = thread.clone();
    let patched = on_store(&state, move |store| {
        let row = store.patch_thread(&user, &id, &metadata, !pin_only)?;
        let values = store.thread_state(&user, &id)?;
        Ok(row.map(|row| (row, values)))
    })
    .await;
    match patched {
        Ok(Ok((row, state))) => {
            HttpResponse::Ok().json(thread_json(&row, state.map_or(json!({}), |s| values(&s))))
        }
        Ok(Err(_)) => thread_not_found(&thread),
        Err(response) => response,
    }
}

/// `DELETE /api/threads/{tid}`: 409 while a run is in flight; otherwise the thread's
/// files (`users/{uid}/threads/{tid}`) and its row go; its runs stay as records.
pub(super) async fn delete_thread(state: web::Data<State>, own: OwnThread) -> HttpResponse {
    let OwnThread {
        user,
        id: thread,
        row,
    } = own;
    if row.active_run_id.is_some() {
        return error(StatusCode::CONFLICT, DELETE_IN_FLIGHT);
    }
    let removed = state
        .runs
        .manager
        .send(manager::RemoveThreadFiles {
            user: user.clone(),
            thread: thread.clone(),
        })
        .await;
    match removed {
        Ok(Ok(())) => {}
        Ok(Err(manager::RemoveThreadError::InUse)) => {
            return error(StatusCode::CONFLICT, DELETE_IN_FLIGHT)
        }
        Ok(Err(e)) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
    let id = thread.clone();
    match on_store(&state, move |store| store.delete_thread(&user, &id)).await {
        Ok(Ok(())) => HttpResponse::NoContent().finish(),
        Ok(Err(ThreadRefusal::Busy { .. })) => error(StatusCode::CONFLICT, DELETE_IN_FLIGHT),
        Ok(Err(ThreadRefusal::NotFound(_))) => thread_not_found(&thread),
        Err(response) => response,
    }
}

/// The thread's state as LangGraph's `StateSnapshot`.
fn snapshot(row: &ThreadRow, state: Option<&ThreadState>) -> Value {
    let checkpoint_id = row.last_run_id.clone().unwrap_or_default();
    // A run waiting on approvals is LangGraph's interrupted `tools` step.
    let interrupt =
        state.and_then(|s| super::langgraph_approvals::interrupt(&checkpoint_id, &s.approvals));
    let (next, tasks, interrupts) = match interrupt {
        Some(interrupt) => (
            json!(["tools"]),
            json!([{"id": format!("{checkpoint_id}:tools"), "name": "tools", "path": ["__pregel_pull", "tools"],
                    "error": null, "interrupts": [interrupt.clone()], "checkpoint": null, "state": null, "result": null}]),
            json!([interrupt]),
        ),
        None => (json!([]), json!([]), json!([])),
    };
    json!({
        "values": state.map_or(json!({}), values),
        "next": next,
        "tasks": tasks,
        "metadata": {"thread_id": row.thread_id, "run_id": row.last_run_id},
        "created_at": super::langgraph::iso(row.updated_ms),
        "checkpoint": {"thread_id": row.thread_id, "checkpoint_ns": "", "checkpoint_id": checkpoint_id},
        "checkpoint_id": checkpoint_id,
        "parent_checkpoint": null,
        "parent_checkpoint_id": null,
        "interrupts": interrupts,
    })
}

/// `GET /api/threads/{tid}/state` (and the checkpoint form `POST …/state/checkpoint`):
/// the thread's latest state.
pub(super) async fn get_state(state: web::Data<State>, thread: OwnThread) -> HttpResponse {
    match thread.state(&state).await {
        Ok(now) => HttpResponse::Ok().json(snapshot(&thread.row, now.as_ref())),
        Err(response) => response,
    }
}

/// `POST /api/threads/{tid}/state`'s body.
#[derive(serde::Deserialize, utoipa::ToSchema)]
pub(super) struct StateBody {
    #[serde(default)]
    values: Option<Map<String, Value>>,
    #[serde(default)]
    #[allow(dead_code)]
    checkpoint_id: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    checkpoint: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)]
    as_node: Option<String>,
}

/// `POST /api/threads/{tid}/state`: overwrites the channels the values name (spec A.2:
/// reducers are not applied), a title included; 422 for a channel the state has not, 409
/// during a run.
pub(super) async fn post_state(
    state: web::Data<State>,
    own: OwnThread,
    payload: web::Payload,
) -> HttpResponse {
    let body: StateBody = match json_body(payload).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let current = match own.state(&state).await {
        Ok(current) => current,
        Err(response) => return response,
    };
    let OwnThread {
        user,
        id: thread,
        row,
    } = own;
    if row.active_run_id.is_some() {
        return error(StatusCode::CONFLICT, STATE_IN_FLIGHT);
    }
    let update = body.values.unwrap_or_default();
    let unknown: Vec<&str> = update
        .keys()
        .map(String::as_str)
        .filter(|k| !STATE_FIELDS.contains(k))
        .collect();
    if !unknown.is_empty() {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("Unknown thread-state field(s): {}", unknown.join(", ")),
        );
    }
    let mut merged = serde_json::to_value(current.unwrap_or_default()).unwrap_or_default();
    let mut title = None;
    for (key, value) in update {
        let value = if key == "messages" {
            match super::langgraph_runs::state_messages(&value) {
                Ok(messages) => messages,
                Err(detail) => return error(StatusCode::UNPROCESSABLE_ENTITY, detail),
            }
        } else {
            value
        };
        if key == "title" {
            title = value.as_str().map(str::to_owned);
        }
        merged[key] = value;
    }
    let new_state: ThreadState = match serde_json::from_value(merged) {
        Ok(s) => s,
        Err(e) => return error(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()),
    };
    let id = thread.clone();
    let written = on_store(&state, move |store| {
        store.put_thread_state(&user, &id, &new_state, title.as_deref())
    })
    .await;
    match written {
        Ok(Ok(row)) => HttpResponse::Ok().json(json!({
            "checkpoint": {"thread_id": row.thread_id, "checkpoint_ns": "", "checkpoint_id": row.last_run_id},
        })),
        Ok(Err(ThreadRefusal::Busy { .. })) => error(StatusCode::CONFLICT, STATE_IN_FLIGHT),
        Ok(Err(ThreadRefusal::NotFound(_))) => thread_not_found(&thread),
        Err(response) => response,
    }
}

/// `POST /api/threads/{tid}/history`'s body.
#[derive(serde::Deserialize, utoipa::ToSchema)]
pub(super) struct HistoryBody {
    #[serde(default = "default_history")]
    limit: i64,
    #[serde(default)]
    #[allow(dead_code)]
    before: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)]
    metadata: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)]
    checkpoint: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)]
    select: Option<Value>,
}

fn default_history() -> i64 {
    10
}

/// `POST /api/threads/{tid}/history`: one entry per run, newest first (at most `limit`,
/// 1 to 100); the newest holds the thread's messages, the others only the title.
pub(super) async fn history(
    state: web::Data<State>,
    own: OwnThread,
    payload: web::Payload,
) -> HttpResponse {
    let body: HistoryBody = match json_body(payload).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    if !(1..=100).contains(&body.limit) {
        return error(StatusCode::UNPROCESSABLE_ENTITY, "limit must be 1 to 100");
    }
    let current = match own.state(&state).await {
        Ok(current) => current,
        Err(response) => return response,
    };
    let OwnThread {
        user,
        id: thread,
        row,
    } = own;
    let limit = body.limit as usize;
    let (u, id) = (user.clone(), thread.clone());
    let runs = match on_store(&state, move |store| {
        let runs = store.thread_runs(&u, &id, limit, 0)?;
        runs.into_iter()
            .map(|r| {
                let times = store.run_times(&r.run_id)?;
                Ok((r, times))
            })
            .collect::<Result<Vec<_>, _>>()
    })
    .await
    {
        Ok(runs) => runs,
        Err(response) => return response,
    };
    let title = row.title.clone();
    let mut entries = Vec::new();
    for (i, (run, times)) in runs.iter().enumerate() {
        let values = match (i, &current) {
            (0, Some(state)) => {
                let mut v = values(state);
                v["title"] = json!(title);
                v
            }
            _ => json!({"title": title}),
        };
        entries.push(json!({
            "values": values,
            "next": [],
            "tasks": [],
            "metadata": {"thread_id": thread, "run_id": run.run_id},
            "created_at": super::langgraph::iso(times.1.or(times.0).unwrap_or(0)),
            "checkpoint": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": run.run_id},
            "checkpoint_id": run.run_id,
            "parent_checkpoint": null,
            "interrupts": [],
        }));
    }
    if entries.is_empty() {
        entries.push(snapshot(&row, current.as_ref()));
    }
    HttpResponse::Ok().json(entries)
}
