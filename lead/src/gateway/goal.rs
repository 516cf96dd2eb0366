//! `GET`/`PUT`/`DELETE /api/threads/{tid}/goal` (spec A.6 "Goals", DeerFlow's
//! `get_thread_goal`, `set_thread_goal`, `clear_thread_goal`): the goal kept in the
//! caller's thread's state, `{goal}` (null when none is active). A goal is set or cleared
//! only between runs (409 during one); the run loop pursues it (`antler_engine`'s
//! `run::goal`). Unlike DeerFlow, a missing thread is not created: it is the 404 another
//! user's thread is.

use actix_web::{http::StatusCode, web, HttpResponse};
use serde_json::{json, Value};

use super::caller::OwnThread;
use super::langgraph::{iso, json_body, on_store, thread_not_found};
use super::{error, State};
use crate::runs::store::ThreadRefusal;
use antler_engine::{GoalState, ThreadState, MAX_GOAL_CONTINUATIONS, MAX_GOAL_OBJECTIVE_CHARS};

/// DeerFlow's refusal to set a goal during a run.
const SET_IN_FLIGHT: &str = "Thread has a run in flight. Set the goal after the run finishes.";
/// DeerFlow's refusal to clear a goal during a run.
const CLEAR_IN_FLIGHT: &str = "Thread has a run in flight. Clear the goal after the run finishes.";

/// `PUT …/goal`'s body.
#[derive(serde::Deserialize, utoipa::ToSchema)]
pub(super) struct GoalBody {
    /// At most `MAX_GOAL_OBJECTIVE_CHARS` characters.
    #[schema(max_length = 4000)]
    objective: String,
    /// 0 to `MAX_GOAL_CONTINUATIONS`.
    #[serde(default = "default_max")]
    #[schema(minimum = 0, maximum = 8)]
    max_continuations: i64,
}

fn default_max() -> i64 {
    i64::from(MAX_GOAL_CONTINUATIONS)
}

/// The goal DeerFlow's request model and `build_goal_state` accept, or their 422 text.
fn checked_goal(body: &GoalBody, now: &str) -> Result<GoalState, String> {
    if body.objective.chars().count() > MAX_GOAL_OBJECTIVE_CHARS {
        return Err(format!(
            "Goal objective must be at most {MAX_GOAL_OBJECTIVE_CHARS} characters."
        ));
    }
    let max = body.max_continuations;
    if max < 0 {
        return Err("Input should be greater than or equal to 0".to_owned());
    }
    let max = u32::try_from(max)
        .ok()
        .filter(|m| *m <= MAX_GOAL_CONTINUATIONS)
        .ok_or_else(|| format!("Input should be less than or equal to {MAX_GOAL_CONTINUATIONS}"))?;
    GoalState::new(&body.objective, max, now)
}

/// `{goal}` of a state.
fn goal_json(goal: Option<&GoalState>) -> Value {
    json!({"goal": goal.filter(|g| g.is_active())})
}

/// `GET /api/threads/{tid}/goal`.
pub(super) async fn get_goal(state: web::Data<State>, own: OwnThread) -> HttpResponse {
    match own.state(&state).await {
        Ok(current) => {
            HttpResponse::Ok().json(goal_json(current.as_ref().and_then(|s| s.goal.as_ref())))
        }
        Err(response) => response,
    }
}

/// Writes the goal of the caller's thread; `busy` is the 409's text.
async fn write_goal(
    state: &State,
    own: OwnThread,
    goal: Option<GoalState>,
    busy: &'static str,
) -> HttpResponse {
    let current = match own.state(state).await {
        Ok(current) => current,
        Err(response) => return response,
    };
    let OwnThread {
        user,
        id: thread,
        row,
    } = own;
    if row.active_run_id.is_some() {
        return error(StatusCode::CONFLICT, busy);
    }
    if goal.is_none() && current.as_ref().is_none_or(|s| s.goal.is_none()) {
        return HttpResponse::Ok().json(goal_json(None));
    }
    let mut next: ThreadState = current.unwrap_or_default();
    next.goal.clone_from(&goal);
    let id = thread.clone();
    let written = on_store(state, move |store| {
        store.put_thread_state(&user, &id, &next, None)
    })
    .await;
    match written {
        Ok(Ok(_)) => HttpResponse::Ok().json(goal_json(goal.as_ref())),
        Ok(Err(ThreadRefusal::Busy { .. })) => error(StatusCode::CONFLICT, busy),
        Ok(Err(ThreadRefusal::NotFound(_))) => thread_not_found(&thread),
        Err(response) => response,
    }
}

/// `PUT /api/threads/{tid}/goal`: sets (or replaces) the thread's goal.
pub(super) async fn put_goal(
    state: web::Data<State>,
    own: OwnThread,
    payload: web::Payload,
) -> HttpResponse {
    let body: GoalBody = match json_body(payload).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let now = iso(antler_protocol::sys::unix_ms() as i64);
    let goal = match checked_goal(&body, &now) {
        Ok(goal) => goal,
        Err(detail) => return error(StatusCode::UNPROCESSABLE_ENTITY, detail),
    };
    write_goal(&state, own, Some(goal), SET_IN_FLIGHT).await
}

/// `DELETE /api/threads/{tid}/goal`: clears the thread's goal.
pub(super) async fn delete_goal(state: web::Data<State>, own: OwnThread) -> HttpResponse {
    write_goal(&state, own, None, CLEAR_IN_FLIGHT).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(objective: &str, max: i64) -> GoalBody {
        GoalBody {
            objective: objective.to_owned(),
            max_continuations: max,
        }
    }

    #[test]
    fn deerflows_limits_and_texts() {
        let goal = checked_goal(&body(" ship  it ", 3), "t0");
        assert_eq!(
            goal.map(|g| (g.objective, g.max_continuations)),
            Ok(("ship it".into(), 3))
        );
        assert_eq!(
            checked_goal(&body("  ", 3), "t0").err().as_deref(),
            Some("Goal objective must not be empty.")
        );
        assert_eq!(
            checked_goal(&body(&"x".repeat(4001), 3), "t0")
                .err()
                .as_deref(),
            Some("Goal objective must be at most 4000 characters.")
        );
        assert_eq!(
            checked_goal(&body("go", 9), "t0").err().as_deref(),
            Some("Input should be less than or equal to 8")
        );
        assert_eq!(
            checked_goal(&body("go", -1), "t0").err().as_deref(),
            Some("Input should be greater than or equal to 0")
        );
    }
}
