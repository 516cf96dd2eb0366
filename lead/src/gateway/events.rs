//! `GET /api/runs/{id}/events`: a run's events as server-sent events (`event: run`, the
//! events so far first), then `event: end` with its view when its drive stops; a run a
//! stopped lead left `running` is followed once this lead resumes it.

use std::time::Duration;

use actix_web::{web, HttpResponse};
use serde_json::Value;

use super::runs_api::{over_limit, principal_of, view_of, VisibleRun};
use super::{error, State};
use crate::runs::manager;

/// One server-sent event.
/// How long a run's event stream waits for this lead to resume a run a lead before it
/// left `running`.
pub(super) const RESUME_FOLLOW_WAIT: Duration = Duration::from_secs(60);

/// Sends a held run's events, then `end` with its view when its drive stops.
pub(super) async fn follow_log(
    log: std::sync::Arc<crate::runs::events::EventLog>,
    tx: tokio::sync::mpsc::Sender<web::Bytes>,
) {
    let view = log
        .follow(|event| {
            let tx = tx.clone();
            async move { tx.send(sse("run", &event)).await.is_ok() }
        })
        .await;
    if let Some(view) = view {
        let _ = tx.send(sse("end", &view)).await;
    }
}

pub(super) fn sse(event: &str, data: &str) -> web::Bytes {
    // `data` is one line of JSON (serde_json never writes a raw newline).
    web::Bytes::from(format!("event: {event}\ndata: {data}\n\n"))
}

/// `GET /api/runs/{id}/events`: the run's events as server-sent events (`event: run`,
/// the events so far first), then `event: end` with the run's view when its drive stops.
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
    let (tx, rx) = tokio::sync::mpsc::channel::<web::Bytes>(64);
    match log {
        Some(log) => {
            actix_rt::spawn(follow_log(log, tx));
        }
        None => {
            let response = view_of(&state, run_id.clone()).await;
            if !response.status().is_success() {
                return response;
            }
            let body = actix_web::body::to_bytes(response.into_body())
                .await
                .unwrap_or_default();
            let text = String::from_utf8_lossy(&body).into_owned();
            let left_running =
                serde_json::from_str::<Value>(&text).is_ok_and(|v| v["status"] == "running");
            if left_running {
                // Left `running` by a lead before this one and not resumed yet: the stream
                // waits for this lead to take it up (then follows it) instead of ending a
                // run that is not over.
                let state = state.clone();
                actix_rt::spawn(async move {
                    let until = std::time::Instant::now() + RESUME_FOLLOW_WAIT;
                    while std::time::Instant::now() < until && !tx.is_closed() {
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        let held = state
                            .runs
                            .manager
                            .send(manager::WatchRun(run_id.clone()))
                            .await;
                        if let Ok(Some(log)) = held {
                            return follow_log(log, tx).await;
                        }
                    }
                    let _ = tx.send(sse("end", &text)).await;
                });
            } else {
                let _ = tx.try_send(sse("end", &text));
            }
        }
    }
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
