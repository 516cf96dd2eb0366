//! `GET /api/runs/{id}/events`: a run's events as server-sent events (`event: run`, each
//! kept one with its `id`), then `event: end` with its view when its drive stops.
//!
//! Any lead follows any run: the run's log when this lead holds it; otherwise the events
//! its owner journals to the runs store, read as they land, until this lead takes the run
//! up (a takeover, an answer) or the store says its drive stopped: on PostgreSQL woken by
//! the run's notices (`runs::store::notices`), on SQLite every 200 ms. A client that
//! reconnects with `Last-Event-ID` (an id this stream sent, `{gen}-{seq}`) gets the events
//! after it, from whichever lead it reaches: none lost, none repeated.

use std::sync::Arc;

use actix_web::{web, HttpResponse};

use super::runs_api::{over_limit, principal_of, view_of, VisibleRun};
use super::{error, State};
use crate::runs::events::{EventId, EventLog};
use crate::runs::manager;
use crate::runs::store::notices::{self, TAIL_EVERY};
use crate::runs::RunStatus;

/// Events read from the store in one go.
const TAIL_BATCH: u64 = 500;

/// One server-sent event, with its id when it has one.
pub(super) fn sse_with_id(event: &str, id: Option<EventId>, data: &str) -> web::Bytes {
    // `data` is one line of JSON (serde_json never writes a raw newline).
    match id {
        Some(id) => web::Bytes::from(format!("event: {event}\nid: {id}\ndata: {data}\n\n")),
        None => web::Bytes::from(format!("event: {event}\ndata: {data}\n\n")),
    }
}

pub(super) fn sse(event: &str, data: &str) -> web::Bytes {
    sse_with_id(event, None, data)
}

/// Sends a held run's events after `after` (the store's first, for what came before this
/// lead's log), then `end` with its view when its drive stops.
pub(super) async fn follow_log(
    state: web::Data<State>,
    run_id: String,
    log: Arc<EventLog>,
    mut after: Option<EventId>,
    tx: tokio::sync::mpsc::Sender<web::Bytes>,
) {
    // Events before this lead's log (another lead's, an earlier incarnation's) are in the
    // store; a log that starts the run's history has none before it.
    let origin = log.origin();
    if origin.seq > 0 && after.is_none_or(|a| a < origin) {
        loop {
            let (id, from) = (run_id.clone(), after);
            let rows = state
                .runs
                .store
                .call(move |s| s.events_after(&id, from, TAIL_BATCH))
                .await
                .unwrap_or_default();
            let earlier: Vec<_> = rows.into_iter().filter(|(id, _)| *id < origin).collect();
            if earlier.is_empty() {
                break;
            }
            for (id, event) in earlier {
                if tx.send(sse_with_id("run", Some(id), &event)).await.is_err() {
                    return;
                }
                after = Some(id);
            }
        }
    }
    let view = log
        .follow_after(after, |id, event| {
            let tx = tx.clone();
            async move { tx.send(sse_with_id("run", id, &event)).await.is_ok() }
        })
        .await;
    if let Some(view) = view {
        let _ = tx.send(sse("end", &view)).await;
    }
}

/// Follows a run this lead does not hold through the store: its events after `after` as
/// they land, until this lead holds it (then its log) or its drive stopped (then `end`
/// with the stored view).
async fn tail_store(
    state: web::Data<State>,
    run_id: String,
    mut after: Option<EventId>,
    tx: tokio::sync::mpsc::Sender<web::Bytes>,
) {
    // Subscribed before the first read: a write that lands after it wakes this stream.
    let mut news = state.runs.store.notices().map(|n| n.subscribe());
    let poll = notices::poll_while_listening();
    loop {
        if let Ok(Some(log)) = state
            .runs
            .manager
            .send(manager::HeldLog(run_id.clone()))
            .await
        {
            return follow_log(state, run_id, log, after, tx).await;
        }
        // The status first: a drive that stopped before it was read journaled every event
        // before its status, so the events read next hold them all.
        let (id, from) = (run_id.clone(), after);
        let read = state
            .runs
            .store
            .call(move |s| {
                let status = s.run(&id)?.map(|r| r.status);
                Ok((status, s.events_after(&id, from, TAIL_BATCH)?))
            })
            .await;
        let Ok((status, events)) = read else {
            // The store cannot be read now: try again, unless the client left.
            if tx.is_closed() {
                return;
            }
            tokio::time::sleep(TAIL_EVERY).await;
            continue;
        };
        let full = events.len() as u64 == TAIL_BATCH;
        for (id, event) in events {
            if tx.send(sse_with_id("run", Some(id), &event)).await.is_err() {
                return;
            }
            after = Some(id);
        }
        if full {
            continue;
        }
        if status.is_none_or(|s| s != RunStatus::Running) {
            let response = view_of(&state, run_id).await;
            let body = actix_web::body::to_bytes(response.into_body())
                .await
                .unwrap_or_default();
            let _ = tx.send(sse("end", &String::from_utf8_lossy(&body))).await;
            return;
        }
        let next = async {
            match news.as_mut() {
                Some(news) => news.news(&run_id, poll).await,
                None => tokio::time::sleep(TAIL_EVERY).await,
            }
        };
        tokio::select! {
            () = next => {}
            () = tx.closed() => return,
        }
    }
}

/// The client's `Last-Event-ID` (or `?last_event_id=`), when it is one of ours.
fn last_event_id(req: &actix_web::HttpRequest) -> Option<EventId> {
    if let Some(id) = req
        .headers()
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
    {
        return id.parse().ok();
    }
    web::Query::<std::collections::HashMap<String, String>>::from_query(req.query_string())
        .ok()
        .and_then(|q| q.get("last_event_id").and_then(|id| id.parse().ok()))
}

/// `GET /api/runs/{id}/events`: the run's events as server-sent events (`event: run`,
/// the events so far first, or those after `Last-Event-ID`), then `event: end` with the
/// run's view when its drive stops.
pub(super) async fn run_events(
    state: web::Data<State>,
    req: actix_web::HttpRequest,
    VisibleRun(run_id): VisibleRun,
) -> HttpResponse {
    let user = principal_of(&req)
        .filter(|p| !p.operator)
        .and_then(|p| p.user);
    // Held by the stream until it ends, however it ends.
    let slot = match state.quotas.open_stream(user.as_deref()) {
        Ok(slot) => slot,
        Err(over) => return over_limit(&over),
    };
    let after = last_event_id(&req);
    let log = match state
        .runs
        .manager
        .send(manager::WatchRun(run_id.clone()))
        .await
    {
        Ok(log) => log,
        Err(e) => {
            return error(
                actix_web::http::StatusCode::SERVICE_UNAVAILABLE,
                e.to_string(),
            )
        }
    };
    if log.is_none() {
        // Neither held here nor ended with events kept: the run must exist to be followed.
        let response = view_of(&state, run_id.clone()).await;
        if !response.status().is_success() {
            return response;
        }
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<web::Bytes>(64);
    let state = state.clone();
    match log {
        Some(log) => actix_rt::spawn(follow_log(state, run_id, log, after, tx)),
        None => actix_rt::spawn(tail_store(state, run_id, after, tx)),
    };
    let stream = futures::stream::unfold((rx, slot), |(mut rx, slot)| async move {
        rx.recv()
            .await
            .map(|bytes| (Ok::<_, actix_web::Error>(bytes), (rx, slot)))
    });
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-cache"))
        .streaming(stream)
}
