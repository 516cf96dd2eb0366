//! `POST /api/threads/{tid}/branches` (spec A.2 "Branch", DeerFlow's `branch_thread`): a
//! new thread of the caller's, forked from one of its threads at a completed assistant
//! turn. The branch holds the newest checkpoint that ends with that turn, every channel
//! but the sandbox (the branch gets its own); the parent's `user-data/` is copied only
//! when the turn is the thread's latest (older files would leak into an older turn).

use std::collections::HashSet;

use actix_web::{http::StatusCode, web, HttpResponse};
use serde_json::{json, Map, Value};

use super::caller::OwnThread;
use super::langgraph::{json_body, messages, on_store};
use super::langgraph_checkpoints::Checkpoint;
use super::langgraph_turns::{ends_with_turn, human_of_turn};
use super::{error, State};
use crate::runs::manager;
use antler_engine::ThreadState;

/// The metadata key that marks a branch.
const BRANCH_KEY: &str = "deerflow_branch";
/// The metadata key that marks a sidecar conversation (not branchable).
const SIDECAR_KEY: &str = "deerflow_sidecar";
/// How many of the thread's checkpoints are searched for the turn (DeerFlow's raw scan
/// limit, twice its 200).
const HISTORY_SCAN_LIMIT: usize = 400;
/// The longest title a branch may be given.
const MAX_TITLE_CHARS: usize = 256;
/// DeerFlow's refusal when no checkpoint ends with the turn.
pub(super) const NOT_BRANCHABLE: &str = "This turn can no longer be branched from.";
/// DeerFlow's refusal to branch a sidecar conversation.
const SIDECAR_ONLY: &str = "Branching is only available in the main conversation.";
/// The workspace was not copied: the branch is from an older turn.
const SKIPPED_HISTORICAL: &str = "skipped_historical_turn";

/// The body: the turn's assistant message (and all of the turn's), an optional title.
#[derive(serde::Deserialize, utoipa::ToSchema)]
pub(super) struct BranchBody {
    message_id: String,
    #[serde(default)]
    message_ids: Vec<String>,
    #[serde(default)]
    title: Option<String>,
}

/// One state of the thread the turn is looked for in, with its checkpoint id.
struct Snapshot {
    checkpoint_id: Option<String>,
    state: ThreadState,
}

/// The display name a branch takes when none is given: the parent's title, without the
/// `branch:` prefixes a branch of a branch would pile up.
fn default_title(parent: Option<&str>, parent_is_branch: bool) -> Option<String> {
    let mut name = parent?.trim();
    if parent_is_branch {
        while name
            .get(..7)
            .is_some_and(|p| p.eq_ignore_ascii_case("branch:"))
        {
            name = name[7..].trim();
        }
    }
    (!name.is_empty()).then(|| name.to_owned())
}

/// The state a branch starts from: every channel of the checkpoint but the sandbox.
fn branch_state(mut state: ThreadState) -> ThreadState {
    state.sandbox = None;
    state
}

/// `POST /api/threads/{tid}/branches`.
pub(super) async fn branch_thread(
    state: web::Data<State>,
    own: OwnThread,
    payload: web::Payload,
) -> HttpResponse {
    let body: BranchBody = match json_body(payload).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    if body.message_id.is_empty() {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "message_id must not be empty",
        );
    }
    if body
        .title
        .as_ref()
        .is_some_and(|t| t.chars().count() > MAX_TITLE_CHARS)
    {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("title must be at most {MAX_TITLE_CHARS} characters"),
        );
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
    if row.metadata.get(SIDECAR_KEY) == Some(&Value::Bool(true)) {
        return error(StatusCode::CONFLICT, SIDECAR_ONLY);
    }
    let (u, t) = (user.clone(), thread.clone());
    let stored = match on_store(&state, move |store| {
        store.thread_checkpoints(&u, &t, HISTORY_SCAN_LIMIT)
    })
    .await
    {
        Ok(stored) => stored,
        Err(response) => return response,
    };
    // The thread's own state is its newest (a state write or a branch leaves no run).
    let own_id = row.last_run_id.clone().or_else(|| {
        row.metadata
            .get("branch_parent_checkpoint_id")
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    let snapshots = current
        .map(|state| Snapshot {
            checkpoint_id: own_id,
            state,
        })
        .into_iter()
        .chain(stored.into_iter().map(|c| Snapshot {
            checkpoint_id: Some(Checkpoint::Step(c.run_id, c.step).id()),
            state: c.state,
        }));
    let mut targets: HashSet<String> = body.message_ids.iter().cloned().collect();
    targets.insert(body.message_id.clone());
    let mut latest = true;
    let mut from_latest_turn = false;
    let mut found = None;
    for snapshot in snapshots {
        let dicts = messages(&snapshot.state.messages);
        let matches = ends_with_turn(&dicts, &targets);
        if latest && !dicts.is_empty() {
            from_latest_turn = matches;
            latest = false;
        }
        if matches {
            let has_human = human_of_turn(&dicts, &targets).is_some();
            found = Some((snapshot, has_human));
            break;
        }
    }
    let Some((snapshot, true)) = found else {
        return error(StatusCode::CONFLICT, NOT_BRANCHABLE);
    };
    let Some(parent_checkpoint_id) = snapshot.checkpoint_id else {
        return error(StatusCode::CONFLICT, NOT_BRANCHABLE);
    };
    let branch_id = uuid::Uuid::new_v4().to_string();
    let now = super::langgraph::iso(antler_protocol::sys::unix_ms() as i64);
    let mut metadata = Map::new();
    metadata.insert(BRANCH_KEY.into(), json!(true));
    metadata.insert("branch_parent_thread_id".into(), json!(thread));
    metadata.insert(
        "branch_parent_checkpoint_id".into(),
        json!(parent_checkpoint_id),
    );
    metadata.insert("branch_parent_message_id".into(), json!(body.message_id));
    metadata.insert("branch_created_at".into(), json!(now));
    let display_name = body.title.filter(|t| !t.is_empty()).or_else(|| {
        default_title(
            row.title.as_deref(),
            row.metadata.get(BRANCH_KEY) == Some(&Value::Bool(true)),
        )
    });
    let forked = branch_state(snapshot.state);
    let seeded = if forked.messages.is_empty() {
        "skipped_empty"
    } else {
        "seeded"
    };
    let (u, id) = (user.clone(), branch_id.clone());
    let created = on_store(&state, move |store| {
        store.create_thread(&u, &id, &metadata)?;
        store.put_thread_state(&u, &id, &forked, display_name.as_deref())
    })
    .await;
    match created {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(response) => return response,
    }
    let workspace_clone_mode = if from_latest_turn {
        state
            .runs
            .manager
            .send(manager::CopyThreadUserData {
                user,
                from: thread.clone(),
                to: branch_id.clone(),
            })
            .await
            .unwrap_or("failed")
    } else {
        SKIPPED_HISTORICAL
    };
    HttpResponse::Ok().json(json!({
        "thread_id": branch_id,
        "parent_thread_id": thread,
        "parent_checkpoint_id": parent_checkpoint_id,
        "branched_from_message_id": body.message_id,
        "workspace_clone_mode": workspace_clone_mode,
        "history_seed_mode": seeded,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_branch_of_a_branch_sheds_the_prefixes() {
        assert_eq!(
            default_title(Some("Branch: branch:Trip plan"), true).as_deref(),
            Some("Trip plan")
        );
        assert_eq!(
            default_title(Some("Branch: kept"), false).as_deref(),
            Some("Branch: kept")
        );
        assert_eq!(default_title(Some("  "), false), None);
        assert_eq!(default_title(None, true), None);
    }

    #[test]
    fn the_branch_gets_no_sandbox_and_keeps_the_rest() {
        let mut parent = ThreadState::new("hi");
        parent.title = Some("t".into());
        let mut parent: ThreadState = {
            let mut v = serde_json::to_value(&parent).unwrap_or_default();
            v["sandbox"] = json!({"sandbox_id": "sb-1"});
            serde_json::from_value(v).unwrap_or_default()
        };
        assert!(parent.sandbox.is_some());
        parent.artifacts.push("/mnt/user-data/outputs/a.md".into());
        let branch = branch_state(parent);
        assert_eq!(branch.sandbox, None);
        assert_eq!(branch.title.as_deref(), Some("t"));
        assert_eq!(branch.messages.len(), 1);
        assert_eq!(branch.artifacts.len(), 1);
    }
}
