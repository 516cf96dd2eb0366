//! `POST /api/threads/{tid}/runs/regenerate/prepare` and `…/edit-regenerate/prepare`
//! (spec A.1, DeerFlow's `thread_runs.py`): what a client sends to run the thread's latest
//! turn again, `{input, checkpoint, metadata, target_run_id}`. The checkpoint is the state
//! before the turn's user message (`{run_id}:before` of the run that added it, or the
//! step before a clarification's answer); a run created with it forks the thread there
//! (`langgraph_checkpoints`), so the model sees the history before that message only.

use actix_web::{http::StatusCode, web, HttpResponse};
use serde_json::{json, Map, Value};

use super::caller::OwnThread;
use super::langgraph::{json_body, messages, on_store};
use super::langgraph_checkpoints::Checkpoint;
use super::langgraph_turns::{id_of, text_of, visible_ai, visible_human};
use super::{error, State};
use crate::runs::store::{RunRecord, RunStatus};
use antler_engine::{Message, ThreadState};

/// How many of the thread's checkpoints are searched for the user message (DeerFlow's
/// `REGENERATE_HISTORY_RAW_SCAN_LIMIT`).
const CHECKPOINT_SCAN_LIMIT: usize = 400;
/// `additional_kwargs` key of a user message's text before the uploads block.
const ORIGINAL_CONTENT: &str = "original_user_content";
/// The `additional_kwargs` an edited message keeps from the one it replaces.
const EDIT_KEPT_KWARGS: [&str; 2] = ["files", "referenced_message_contexts"];

const NOT_VISIBLE_AI: &str = "Only visible assistant messages can be regenerated";
const NOT_LATEST_AI: &str = "Only the latest assistant message can be regenerated";
const NO_USER_MESSAGE: &str = "Could not find the user message for this assistant response";
const NO_SOURCE_RUN: &str = "Could not find source run for assistant message";
const USER_MESSAGE_NO_ID: &str = "The source user message is missing an id";
const AI_MESSAGE_NO_ID: &str = "The source assistant message is missing an id";
const EDIT_EMPTY: &str = "Edited message cannot be empty";
const EDIT_UNCHANGED: &str = "Edited message is unchanged";
const EDIT_GOAL_ACTIVE: &str = "Cannot edit while a goal is active";
const EDIT_NOT_LATEST: &str = "Only the latest completed user turn can be edited";
const EDIT_NOT_TEXT_TURN: &str = "Only completed assistant text turns can be edited";
const EDIT_NOT_SUCCESSFUL: &str = "Only successful assistant runs can be edited and rerun";

/// `regenerate/prepare`'s body.
#[derive(serde::Deserialize, utoipa::ToSchema)]
pub(super) struct RegenerateBody {
    message_id: String,
}

/// `edit-regenerate/prepare`'s body.
#[derive(serde::Deserialize, utoipa::ToSchema)]
pub(super) struct EditBody {
    human_message_id: String,
    replacement_text: String,
}

/// The text a user wrote: before any uploads block the run prepended.
fn original_text(message: &Value) -> String {
    message["additional_kwargs"][ORIGINAL_CONTENT]
        .as_str()
        .map_or_else(|| text_of(message), str::to_owned)
}

/// The user message to send again: its original text as one text block, its kwargs
/// without the hidden flag and the original text, its id and name.
fn clean_for_regenerate(message: &Value) -> Value {
    let mut kwargs = message["additional_kwargs"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    kwargs.remove(ORIGINAL_CONTENT);
    kwargs.remove("hide_from_ui");
    let mut clean = json!({
        "type": "human",
        "content": [{"type": "text", "text": original_text(message)}],
        "additional_kwargs": kwargs,
    });
    if let Some(id) = id_of(message) {
        clean["id"] = json!(id);
    }
    if let Some(name) = message["name"].as_str() {
        clean["name"] = json!(name);
    }
    clean
}

/// The edited user message: the new text, the id it will have, the files it carried.
fn clean_for_edit(message: &Value, id: &str, text: &str) -> Value {
    let kwargs: Map<String, Value> = EDIT_KEPT_KWARGS
        .iter()
        .filter_map(|k| {
            message["additional_kwargs"]
                .get(*k)
                .map(|v| ((*k).to_owned(), v.clone()))
        })
        .collect();
    let mut clean = json!({
        "type": "human",
        "id": id,
        "content": [{"type": "text", "text": text}],
        "additional_kwargs": kwargs,
    });
    if let Some(name) = message["name"].as_str() {
        clean["name"] = json!(name);
    }
    clean
}

/// A visible AI message with text and no tool calls.
fn terminal_text(message: &Value) -> bool {
    visible_ai(message)
        && !text_of(message).trim().is_empty()
        && message["tool_calls"].as_array().is_none_or(Vec::is_empty)
}

/// The latest turn when the user message `human_id` begins it and a text answer ends it:
/// the user message, the answer, the ids from one to the other.
fn latest_editable_turn<'a>(
    dicts: &'a [Value],
    human_id: &str,
) -> Result<(&'a Value, &'a Value, Vec<String>), &'static str> {
    let start = dicts
        .iter()
        .rposition(visible_human)
        .filter(|&i| id_of(&dicts[i]) == Some(human_id))
        .ok_or(EDIT_NOT_LATEST)?;
    let end = (start + 1..dicts.len())
        .rev()
        .find(|&i| visible_ai(&dicts[i]))
        .filter(|&i| terminal_text(&dicts[i]))
        .ok_or(EDIT_NOT_TEXT_TURN)?;
    let ids = dicts[start..=end]
        .iter()
        .filter_map(|m| id_of(m).map(str::to_owned))
        .collect();
    Ok((&dicts[start], &dicts[end], ids))
}

/// Where a user message entered the thread, from its checkpoints newest first, each
/// given as (run, step, whether its last message is that user message): the run that
/// added it and the checkpoint before it. A run's first checkpoint already holds its user
/// message (the checkpoint before is `{run}:before`); a clarification's answer is added
/// as a step of its run (the one before is that step's predecessor). A message rewritten
/// in place (the uploads block) stays the last message over several steps: the earliest
/// counts.
fn entered_at(checkpoints: &[(String, i64, bool)]) -> Option<(String, Checkpoint)> {
    let newest = checkpoints.iter().position(|c| c.2)?;
    let run = checkpoints[newest].0.clone();
    let mut earliest = newest;
    while checkpoints
        .get(earliest + 1)
        .is_some_and(|c| c.0 == run && c.2)
    {
        earliest += 1;
    }
    let checkpoint = match checkpoints[earliest].1 {
        0 => Checkpoint::Before(run.clone()),
        step => Checkpoint::Step(run.clone(), step - 1),
    };
    Some((run, checkpoint))
}

/// The thread's run that added the user message `human`, and the checkpoint before it;
/// 409 when none of the thread's last checkpoints has it.
async fn source_run(
    state: &State,
    user: &str,
    thread: &str,
    human: &Value,
) -> Result<(RunRecord, Checkpoint), HttpResponse> {
    let (u, t, text) = (user.to_owned(), thread.to_owned(), original_text(human));
    let found = on_store(state, move |store| {
        let checkpoints: Vec<(String, i64, bool)> = store
            .thread_checkpoints(&u, &t, CHECKPOINT_SCAN_LIMIT)?
            .into_iter()
            .map(|c| {
                let last = messages(&c.state.messages).pop();
                let ends = last.is_some_and(|m| visible_human(&m) && original_text(&m) == text);
                (c.run_id, c.step, ends)
            })
            .collect();
        let Some((run_id, checkpoint)) = entered_at(&checkpoints) else {
            return Ok(None);
        };
        Ok(store.run(&run_id)?.map(|run| (run, checkpoint)))
    })
    .await?;
    found.ok_or_else(|| error(StatusCode::CONFLICT, NO_SOURCE_RUN))
}

/// The caller's thread's latest state, or the 404s DeerFlow answers.
async fn latest_state(state: &State, own: &OwnThread) -> Result<ThreadState, HttpResponse> {
    let current = own.state(state).await?;
    current.ok_or_else(|| {
        error(
            StatusCode::NOT_FOUND,
            format!("Thread {} has no checkpoint", own.id),
        )
    })
}

/// `POST /api/threads/{tid}/runs/regenerate/prepare`: the latest assistant message's
/// user message, to send again from the state before it.
pub(super) async fn prepare_regenerate(
    state: web::Data<State>,
    own: OwnThread,
    payload: web::Payload,
) -> HttpResponse {
    let body: RegenerateBody = match json_body(payload).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    if body.message_id.is_empty() {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "message_id must not be empty",
        );
    }
    match regenerate(&state, &own, &body.message_id).await {
        Ok(prepared) => HttpResponse::Ok().json(prepared),
        Err(response) => response,
    }
}

async fn regenerate(
    state: &State,
    own: &OwnThread,
    message_id: &str,
) -> Result<Value, HttpResponse> {
    let (user, thread) = (own.user.as_str(), own.id.as_str());
    let current = latest_state(state, own).await?;
    let dicts = messages(&current.messages);
    let conflict = |detail: &str| error(StatusCode::CONFLICT, detail);
    let Some(target) = dicts.iter().position(|m| id_of(m) == Some(message_id)) else {
        return Err(error(
            StatusCode::NOT_FOUND,
            format!("Message {message_id} not found"),
        ));
    };
    if !visible_ai(&dicts[target]) {
        return Err(conflict(NOT_VISIBLE_AI));
    }
    let latest_ai = dicts.iter().rev().find(|m| visible_ai(m)).and_then(id_of);
    if latest_ai != Some(message_id) {
        return Err(conflict(NOT_LATEST_AI));
    }
    let Some(human) = dicts[..target].iter().rev().find(|m| visible_human(m)) else {
        return Err(conflict(NO_USER_MESSAGE));
    };
    if id_of(human).is_none() {
        return Err(conflict(USER_MESSAGE_NO_ID));
    }
    let (run, checkpoint) = source_run(state, user, thread, human).await?;
    let mut input = json!({"messages": [clean_for_regenerate(human)]});
    if let Some(title) = current.title.as_deref().filter(|t| !t.is_empty()) {
        input["title"] = json!(title);
    }
    Ok(json!({
        "input": input,
        "checkpoint": checkpoint.json(),
        "metadata": {
            "regenerate_from_message_id": message_id,
            "regenerate_from_run_id": run.run_id,
            "regenerate_checkpoint_id": checkpoint.id(),
        },
        "target_run_id": run.run_id,
    }))
}

/// `POST /api/threads/{tid}/runs/edit-regenerate/prepare`: the latest user message
/// replaced by new text, to send from the state before it.
pub(super) async fn prepare_edit_regenerate(
    state: web::Data<State>,
    own: OwnThread,
    payload: web::Payload,
) -> HttpResponse {
    let body: EditBody = match json_body(payload).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    if body.human_message_id.is_empty() || body.replacement_text.is_empty() {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "human_message_id and replacement_text must not be empty",
        );
    }
    match edit(&state, &own, &body).await {
        Ok(prepared) => HttpResponse::Ok().json(prepared),
        Err(response) => response,
    }
}

async fn edit(state: &State, own: &OwnThread, body: &EditBody) -> Result<Value, HttpResponse> {
    let (user, thread) = (own.user.as_str(), own.id.as_str());
    let conflict = |detail: &str| error(StatusCode::CONFLICT, detail);
    let text = body.replacement_text.trim();
    if text.is_empty() {
        return Err(conflict(EDIT_EMPTY));
    }
    let current = latest_state(state, own).await?;
    if current.goal.as_ref().is_some_and(|g| g.is_active()) {
        return Err(conflict(EDIT_GOAL_ACTIVE));
    }
    let dicts = messages(&current.messages);
    let (human, answer, source_ids) =
        latest_editable_turn(&dicts, &body.human_message_id).map_err(conflict)?;
    if original_text(human).trim() == text {
        return Err(conflict(EDIT_UNCHANGED));
    }
    let (Some(human_id), Some(answer_id)) = (id_of(human), id_of(answer)) else {
        return Err(conflict(if id_of(human).is_none() {
            USER_MESSAGE_NO_ID
        } else {
            AI_MESSAGE_NO_ID
        }));
    };
    let (run, checkpoint) = source_run(state, user, thread, human).await?;
    if run.status != RunStatus::Success {
        return Err(conflict(EDIT_NOT_SUCCESSFUL));
    }
    let base = super::langgraph_checkpoints::resolve(state, user, thread, &checkpoint.id()).await?;
    // The id the edited message will have in the forked thread (ids are derived from
    // the messages, so it is known before the run).
    let mut replayed = base.messages.clone();
    replayed.push(Message::human(text));
    let replacement_id = messages(&replayed)
        .pop()
        .and_then(|m| id_of(&m).map(str::to_owned))
        .unwrap_or_default();
    let mut input = json!({"messages": [clean_for_edit(human, &replacement_id, text)]});
    let base_titled = base.title.as_deref().is_some_and(|t| !t.is_empty());
    if let (true, Some(title)) = (
        base_titled,
        current.title.as_deref().filter(|t| !t.is_empty()),
    ) {
        input["title"] = json!(title);
    }
    Ok(json!({
        "input": input,
        "checkpoint": checkpoint.json(),
        "metadata": {
            "replay_kind": "edit",
            "regenerate_from_message_id": answer_id,
            "regenerate_from_run_id": run.run_id,
            "regenerate_checkpoint_id": checkpoint.id(),
            "edit_from_message_id": human_id,
            "edit_message_id": replacement_id,
            "edit_version_group_id": human_id,
        },
        "target_run_id": run.run_id,
        "replacement_human_message_id": replacement_id,
        "source_message_ids": source_ids,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_sent_again_is_the_users_own_text() {
        let human = json!({"type": "human", "id": "h1", "name": null,
            "content": "<uploaded_files>…</uploaded_files>\n\nSummarise it",
            "additional_kwargs": {"original_user_content": "Summarise it",
                                  "hide_from_ui": false, "files": [{"filename": "a.txt"}]}});
        let clean = clean_for_regenerate(&human);
        assert_eq!(
            clean["content"],
            json!([{"type": "text", "text": "Summarise it"}])
        );
        assert_eq!(clean["id"], "h1");
        assert_eq!(
            clean["additional_kwargs"],
            json!({"files": [{"filename": "a.txt"}]})
        );
        let edited = clean_for_edit(&human, "h9", "Shorter");
        assert_eq!(
            edited["additional_kwargs"],
            json!({"files": [{"filename": "a.txt"}]})
        );
        assert_eq!(edited["id"], "h9");
    }

    #[test]
    fn a_message_entered_where_it_first_ended_the_messages() {
        let at = |list: &[(&str, i64, bool)]| {
            let list: Vec<(String, i64, bool)> = list
                .iter()
                .map(|(r, s, e)| ((*r).to_owned(), *s, *e))
                .collect();
            entered_at(&list).map(|(run, c)| (run, c.id()))
        };
        // A run's task, rewritten in place at step 1: before the run.
        assert_eq!(
            at(&[
                ("r2", 3, false),
                ("r2", 1, true),
                ("r2", 0, true),
                ("r1", 2, false)
            ]),
            Some(("r2".into(), "r2:before".into()))
        );
        // A clarification's answer at step 4 of its run: the step before it.
        assert_eq!(
            at(&[
                ("r1", 5, false),
                ("r1", 4, true),
                ("r1", 3, false),
                ("r1", 0, false)
            ]),
            Some(("r1".into(), "r1:3".into()))
        );
        assert_eq!(at(&[("r1", 1, false)]), None);
    }

    #[test]
    fn only_the_latest_text_turn_is_editable() {
        let turn = vec![
            json!({"type": "human", "id": "h1", "content": "q1"}),
            json!({"type": "ai", "id": "ai-1", "content": "a1"}),
            json!({"type": "human", "id": "h2", "content": "q2"}),
            json!({"type": "ai", "id": "ai-2", "content": "", "tool_calls": [{"id": "c"}]}),
            json!({"type": "tool", "id": "tool-c", "content": "out"}),
            json!({"type": "ai", "id": "ai-3", "content": "a2"}),
        ];
        let (human, answer, ids) =
            latest_editable_turn(&turn, "h2").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (human["id"].as_str(), answer["id"].as_str()),
            (Some("h2"), Some("ai-3"))
        );
        assert_eq!(ids, ["h2", "ai-2", "tool-c", "ai-3"]);
        assert_eq!(
            latest_editable_turn(&turn, "h1").err(),
            Some(EDIT_NOT_LATEST)
        );
        assert_eq!(
            latest_editable_turn(&turn[..4], "h2").err(),
            Some(EDIT_NOT_TEXT_TURN)
        );
    }
}
