//! `POST /api/threads/{tid}/compact` (spec C.4): a manual compaction of the caller's own
//! thread: the same summarization as before a model call, without its trigger, written to
//! the thread's state; DeerFlow's response fields and texts (409 while a run is active or
//! when compaction is off, 500 when the summary fails, its reasons only in the log).

use actix_web::{http::StatusCode, web, HttpResponse};
use antler_protocol::config::ContextSize;
use serde_json::json;

use super::caller::OwnThread;
use super::langgraph::{json_body, on_store, thread_not_found};
use super::{error, State};
use crate::runs::prepare::context::CompactThreadError;
use crate::runs::store::ThreadRefusal;
use antler_engine::{CompactError, ThreadState};

/// DeerFlow's 409 while a run is active on the thread.
pub const COMPACT_IN_FLIGHT: &str =
    "Thread has a run in flight. Compact its context after the run finishes.";

/// DeerFlow's 500 (as [`CompactError::SummaryFailed`] says it).
const COMPACT_FAILED: &str = "Failed to compact thread context.";

/// The route's body (`force` is accepted: a manual compaction never checks the trigger).
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CompactBody {
    #[serde(default)]
    #[allow(dead_code)]
    force: Option<bool>,
    /// How much to keep: `{type: tokens|messages|fraction, value}`.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    keep: Option<ContextSize>,
    #[serde(default)]
    #[allow(dead_code)]
    agent_name: Option<String>,
    #[serde(default)]
    model_name: Option<String>,
}

/// `POST /api/threads/{tid}/compact`.
pub(super) async fn compact_thread(
    state: web::Data<State>,
    own: OwnThread,
    payload: web::Payload,
) -> HttpResponse {
    let body: CompactBody = match json_body(payload).await {
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
        return error(StatusCode::CONFLICT, COMPACT_IN_FLIGHT);
    }
    let mut values: ThreadState = current.unwrap_or_default();
    let outcome = match state
        .runs
        .env
        .compact_thread(&values, body.model_name.as_deref(), body.keep)
        .await
    {
        Ok(outcome) => outcome,
        Err(CompactThreadError::Compact(e @ CompactError::Disabled)) => {
            return error(StatusCode::CONFLICT, e.to_string())
        }
        Err(CompactThreadError::Compact(e)) => {
            return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
        }
        Err(CompactThreadError::Config(e)) => {
            return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
        }
    };
    let mut checkpoint_id = row.last_run_id.clone();
    if outcome.compacted {
        if let Err(e) = values.apply(outcome.update.clone()) {
            tracing::warn!("a manual compaction does not apply: {e}");
            return error(StatusCode::INTERNAL_SERVER_ERROR, COMPACT_FAILED);
        }
        let (owner, id) = (user.clone(), thread.clone());
        let written = on_store(&state, move |store| {
            store.put_thread_state(&owner, &id, &values, None)
        })
        .await;
        match written {
            Ok(Ok(row)) => checkpoint_id = row.last_run_id,
            Ok(Err(ThreadRefusal::Busy { .. })) => {
                return error(StatusCode::CONFLICT, COMPACT_IN_FLIGHT)
            }
            Ok(Err(ThreadRefusal::NotFound(_))) => return thread_not_found(&thread),
            Err(response) => return response,
        }
    }
    HttpResponse::Ok().json(json!({
        "thread_id": thread,
        "compacted": outcome.compacted,
        "reason": outcome.reason,
        "removed_message_count": outcome.removed_message_count,
        "preserved_message_count": outcome.preserved_message_count,
        "summary_updated": outcome.summary_updated,
        "checkpoint_id": checkpoint_id,
        "total_tokens": outcome.total_tokens,
    }))
}
