//! The LangGraph-compatible run routes (spec A.3–A.7): create a run on a thread in the
//! background, as a stream or waited for (and the stateless `POST /api/runs/stream|wait`,
//! whose thread comes from `config.configurable.thread_id` or is new), list, get, cancel
//! (`interrupt` or `rollback`, `wait`), join and join the stream. A body is DeerFlow's
//! `RunCreateRequest`: unknown fields refused, its placeholders refused with its text.
//! One run at a time per thread: `reject` answers 409, `interrupt`/`rollback` cancel the
//! live run and wait for it. A clarification answer (`human_input_response`) or
//! `command.resume` drives the thread's interrupted run again, on the lead that holds it
//! (forwarded there under leases, in the same form). A `checkpoint` (or `checkpoint_id`)
//! forks the thread there before the run starts (`langgraph_checkpoints`).

use std::time::Duration;

use actix_web::{http::StatusCode, web, HttpResponse};
use serde_json::{json, Value};

use super::caller::Caller;
use super::forward::{self, Relay};
use super::langgraph::{
    check_thread_id, json_body_as_sent, on_store, run_json, run_not_found, thread_not_found,
    user_of, values, Refused, ASSISTANT_ID, ROLLED_BACK,
};
use super::langgraph_checkpoints as checkpoints;
use super::langgraph_stream::{self as stream, Cursor, Modes, RunStream};
use super::runs_api::{over_limit, principal_of};
use super::{error, quota, State};
use crate::runs::manager;
use crate::runs::prepare::PrepareError;
use crate::runs::store::{RunRecord, RunStatus};

/// How long a run started with `interrupt`/`rollback` waits for the live run to end.
const TAKE_OVER_WAIT: Duration = Duration::from_secs(60);

/// `Run option '{option}' is not supported by DeerFlow` (spec A.3).
fn unsupported(option: &str) -> Refused {
    error(
        StatusCode::UNPROCESSABLE_ENTITY,
        format!("Run option '{option}' is not supported by DeerFlow"),
    )
    .into()
}

/// DeerFlow's `RunCreateRequest` (`extra="forbid"`), with the fields `langgraph-sdk`
/// sends besides.
#[derive(serde::Deserialize, Default, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RunBody {
    #[serde(default)]
    assistant_id: Option<String>,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    command: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)]
    metadata: Option<Value>,
    #[serde(default)]
    config: Option<Value>,
    #[serde(default)]
    context: Option<Value>,
    #[serde(default)]
    checkpoint_id: Option<Value>,
    #[serde(default)]
    checkpoint: Option<Value>,
    #[serde(default)]
    interrupt_before: Option<Value>,
    #[serde(default)]
    interrupt_after: Option<Value>,
    #[serde(default)]
    stream_mode: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)]
    stream_subgraphs: Option<bool>,
    #[serde(default)]
    on_disconnect: Option<String>,
    #[serde(default)]
    multitask_strategy: Option<String>,
    #[serde(default)]
    webhook: Option<Value>,
    #[serde(default)]
    on_completion: Option<Value>,
    #[serde(default)]
    after_seconds: Option<Value>,
    #[serde(default)]
    feedback_keys: Option<Value>,
    #[serde(default)]
    if_not_exists: Option<String>,
    /// Every stream is resumable here: accepted whatever its value.
    #[serde(default)]
    #[allow(dead_code)]
    stream_resumable: Option<bool>,
    // Sent by newer SDKs; Antler checkpoints every step whatever they say.
    #[serde(default)]
    #[allow(dead_code)]
    checkpoint_during: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)]
    durability: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)]
    strict_resume: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)]
    langsmith_tracer: Option<Value>,
}

/// What to do with a thread's live run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Multitask {
    Reject,
    Interrupt,
    Rollback,
}

/// A run request, checked.
struct RunRequest {
    modes: Modes,
    cancel_on_disconnect: bool,
    multitask: Multitask,
    create_thread: bool,
    /// The user's new message.
    task: Option<String>,
    /// The uploads it carries (`additional_kwargs.files[].filename`, spec A.7 step 3).
    files: Vec<String>,
    /// An answer to the thread's interrupted run.
    answer: Option<String>,
    /// `command.resume` as sent (approvals read their decisions from it).
    resume: Option<Value>,
    agent: Option<String>,
    model: Option<String>,
    subagents: Option<bool>,
    clarification: bool,
    /// The checkpoint the run starts from (the thread forks there), e.g. regenerate's.
    checkpoint: Option<String>,
    /// `input.title`: the title the forked thread keeps (regenerate replays it).
    title: Option<String>,
}

/// The text of a LangChain message's `content` (a string, or the text of its blocks).
fn content_text(content: &Value) -> Option<String> {
    match content {
        Value::String(text) => Some(text.clone()),
        Value::Array(blocks) => Some(
            blocks
                .iter()
                .filter_map(|b| match b {
                    Value::String(text) => Some(text.as_str()),
                    _ => b["text"].as_str(),
                })
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        _ => None,
    }
}

/// A message's kind, from `type` or `role` (LangChain's and OpenAI's words).
fn kind_of(message: &Value) -> Option<&'static str> {
    let kind = message["type"].as_str().or(message["role"].as_str())?;
    Some(match kind {
        "human" | "user" => "human",
        "ai" | "assistant" | "AIMessageChunk" => "ai",
        "tool" => "tool",
        "system" | "developer" => "system",
        _ => return None,
    })
}

/// `values.messages` of a state write as the state's messages (LangChain dicts in, the
/// thread state's messages out).
pub(super) fn state_messages(value: &Value) -> Result<Value, String> {
    let Some(list) = value.as_array() else {
        return Err("messages must be a list".to_owned());
    };
    let mut out = Vec::new();
    for (i, m) in list.iter().enumerate() {
        let bad = |why: &str| format!("Invalid message at values.messages[{i}]: {why}");
        let kind = kind_of(m).ok_or_else(|| bad("unknown message type"))?;
        let content = content_text(&m["content"]).ok_or_else(|| bad("no content"))?;
        out.push(match kind {
            "human" => json!({"role": "human", "content": content}),
            "system" => json!({"role": "system", "content": content}),
            "ai" => json!({
                "role": "ai",
                "id": m["id"].as_str().map_or_else(|| format!("ai-set-{i}"), str::to_owned),
                "content": content,
                "tool_calls": m["tool_calls"].as_array().cloned().unwrap_or_default().iter()
                    .map(|c| json!({"id": c["id"], "name": c["name"], "args": c["args"]}))
                    .collect::<Vec<_>>(),
            }),
            _ => json!({
                "role": "tool",
                "tool_call_id": m["tool_call_id"].as_str().ok_or_else(|| bad("no tool_call_id"))?,
                "name": m["name"].as_str().unwrap_or_default(),
                "content": content,
                "status": if m["status"] == "error" { "error" } else { "success" },
            }),
        });
    }
    Ok(Value::Array(out))
}

impl RunBody {
    /// The checked request, or the 4xx DeerFlow answers.
    fn check(self) -> Result<RunRequest, Refused> {
        let set = |v: &Option<Value>| v.as_ref().is_some_and(|v| !v.is_null());
        for (option, value) in [
            ("webhook", &self.webhook),
            ("on_completion", &self.on_completion),
            ("after_seconds", &self.after_seconds),
            ("feedback_keys", &self.feedback_keys),
        ] {
            if set(value) {
                return Err(unsupported(option));
            }
        }
        for (option, value) in [
            ("interrupt_before", &self.interrupt_before),
            ("interrupt_after", &self.interrupt_after),
        ] {
            let empty = value
                .as_ref()
                .is_none_or(|v| v.is_null() || v.as_array().is_some_and(Vec::is_empty));
            if !empty {
                return Err(unsupported(option));
            }
        }
        let create_thread = match self.if_not_exists.as_deref() {
            None => false,
            Some("create") => true,
            Some(_) => return Err(unsupported("if_not_exists")),
        };
        let cancel_on_disconnect = match self.on_disconnect.as_deref() {
            None | Some("cancel") => true,
            Some("continue") => false,
            Some(_) => return Err(unsupported("on_disconnect")),
        };
        let multitask = match self.multitask_strategy.as_deref() {
            None | Some("reject") => Multitask::Reject,
            Some("interrupt") => Multitask::Interrupt,
            Some("rollback") => Multitask::Rollback,
            Some(_) => return Err(unsupported("multitask_strategy")),
        };
        let modes = Modes::parse(self.stream_mode.as_ref())
            .map_err(|e| Refused::from(error(StatusCode::UNPROCESSABLE_ENTITY, e)))?;
        let (task, mut answer, files) = input_message(self.input.as_ref())?;
        let resume_value = self
            .command
            .as_ref()
            .map(|c| c["resume"].clone())
            .filter(|r| !r.is_null());
        if let Some(resume) = self.command.as_ref().map(|c| &c["resume"]) {
            if !resume.is_null() {
                answer = Some(match resume {
                    Value::String(text) => text.clone(),
                    other => other["value"]
                        .as_str()
                        .map_or_else(|| other.to_string(), str::to_owned),
                });
            }
        }
        if task.is_none() && answer.is_none() {
            return Err(Refused::from(error(
                StatusCode::UNPROCESSABLE_ENTITY,
                "the run needs a human message in input.messages, or command.resume",
            )));
        }
        let context = self.context.unwrap_or_default();
        let configurable = self
            .config
            .as_ref()
            .map(|c| c["configurable"].clone())
            .unwrap_or_default();
        let pick = |key: &str| {
            let v = &context[key];
            if v.is_null() {
                configurable[key].clone()
            } else {
                v.clone()
            }
        };
        let agent = match self.assistant_id.as_deref() {
            None | Some(ASSISTANT_ID) => pick("agent_name").as_str().map(str::to_owned),
            Some(id) => {
                let name = id.to_ascii_lowercase().replace('_', "-");
                if name.is_empty()
                    || !name
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                {
                    return Err(Refused::from(error(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        format!("Invalid assistant_id: {id}"),
                    )));
                }
                Some(name)
            }
        };
        Ok(RunRequest {
            modes,
            cancel_on_disconnect,
            multitask,
            create_thread,
            task,
            files,
            answer,
            resume: resume_value,
            agent,
            model: pick("model_name").as_str().map(str::to_owned),
            subagents: pick("subagent_enabled").as_bool(),
            clarification: pick("disable_clarification").as_bool() != Some(true),
            checkpoint: checkpoints::requested(
                self.checkpoint.as_ref(),
                self.checkpoint_id.as_ref(),
            ),
            title: self
                .input
                .as_ref()
                .and_then(|i| i["title"].as_str())
                .map(str::to_owned),
        })
    }
}

/// The user's new message of `input.messages` (the last human one), when it answers a
/// clarification (spec A.7 step 5) its answer, and the names of the uploads it carries;
/// 400 for a message that is not one.
fn input_message(input: Option<&Value>) -> Result<InputMessage, Refused> {
    let Some(list) = input.and_then(|i| i["messages"].as_array()) else {
        return Ok((None, None, Vec::new()));
    };
    let mut task = None;
    let mut answer = None;
    let mut files = Vec::new();
    for (i, m) in list.iter().enumerate() {
        let bad = |why: &str| {
            Refused::from(error(
                StatusCode::BAD_REQUEST,
                format!("Invalid message at input.messages[{i}]: {why}"),
            ))
        };
        let kind = kind_of(m).ok_or_else(|| bad("unknown message type"))?;
        let text = content_text(&m["content"])
            .ok_or_else(|| bad("content must be a string or a list of blocks"))?;
        if kind != "human" {
            continue;
        }
        let response = &m["additional_kwargs"]["human_input_response"];
        answer = response["value"].as_str().map(str::to_owned);
        files = m["additional_kwargs"]["files"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| f["filename"].as_str().map(str::to_owned))
            .collect();
        task = Some(text);
    }
    Ok((task, answer, files))
}

/// [`input_message`]'s answer: the task, the clarification answer, the upload names.
type InputMessage = (Option<String>, Option<String>, Vec<String>);

/// What a run route answers once the run is started.
enum Reply {
    Background,
    Stream,
    Wait,
}

/// Answers the approvals `approvals` of the interrupted run `run_id` with the decisions of
/// `resume` (the last answer resumes the run); the run's id and the event its stream
/// starts at.
async fn answer_approvals(
    state: &web::Data<State>,
    user: &str,
    run_id: &str,
    resume: &Value,
    approvals: &antler_engine::ApprovalState,
) -> Result<(String, usize), HttpResponse> {
    let waiting: Vec<_> = approvals.unanswered().cloned().collect();
    let decisions = super::langgraph_approvals::decisions(resume, &waiting)
        .map_err(|why| error(StatusCode::UNPROCESSABLE_ENTITY, why))?;
    let from = match state
        .runs
        .manager
        .send(manager::WatchRun(run_id.to_owned()))
        .await
    {
        Ok(Some(log)) => log.since(0).next,
        _ => 0,
    };
    for (call, choice, reason) in decisions {
        let asked = manager::AnswerApproval {
            run_id: run_id.to_owned(),
            tool_call_id: call,
            choice,
            reason,
            by: Some(user.to_owned()),
        };
        match state.runs.manager.send(asked).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(error(StatusCode::CONFLICT, e.to_string())),
            Err(e) => return Err(error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())),
        }
    }
    Ok((run_id.to_owned(), from))
}

/// Starts (or, for an answer, drives again) a run on the caller's thread `thread`: its
/// id and the event its stream starts at.
async fn start_run(
    state: &web::Data<State>,
    req: &actix_web::HttpRequest,
    user: &str,
    thread: &str,
    request: &RunRequest,
) -> Result<(String, usize), HttpResponse> {
    check_thread_id(thread)?;
    let (u, id, create) = (user.to_owned(), thread.to_owned(), request.create_thread);
    let row = on_store(state, move |store| {
        if create {
            store.create_thread(&u, &id, &Default::default())?;
        }
        let row = store.thread(&u, &id)?;
        let last = match row.as_ref().and_then(|r| r.last_run_id.clone()) {
            Some(run) => store.run(&run)?,
            None => None,
        };
        Ok(row.map(|row| (row, last)))
    })
    .await?;
    let Some((row, last)) = row else {
        return Err(thread_not_found(thread));
    };
    // A clarification answered: the interrupted run goes on (not for a run from a
    // checkpoint, which forks the thread).
    if let (Some(answer), Some(last), None) = (&request.answer, &last, &request.checkpoint) {
        if last.status == RunStatus::Interrupted {
            // A run that waits on approvals takes the resume's decisions (issue 37).
            let run = last.run_id.clone();
            let waiting = on_store(state, move |store| {
                Ok(store
                    .latest(&run)?
                    .map(|(_, s)| s.approvals)
                    .filter(|a| a.waiting()))
            })
            .await?;
            if let Some(approvals) = waiting {
                let resume = request
                    .resume
                    .clone()
                    .unwrap_or_else(|| Value::String(answer.clone()));
                return answer_approvals(state, user, &last.run_id, &resume, &approvals).await;
            }
            let from = match state
                .runs
                .manager
                .send(manager::WatchRun(last.run_id.clone()))
                .await
            {
                Ok(Some(log)) => log.since(0).next,
                _ => 0,
            };
            let resumed = state
                .runs
                .manager
                .send(manager::ResumeRun {
                    run_id: last.run_id.clone(),
                    answer: Some(answer.clone()),
                    playbook: None,
                })
                .await;
            return match resumed {
                Ok(Ok(run_id)) => Ok((run_id, from)),
                Ok(Err(e)) => Err(error(StatusCode::CONFLICT, e.to_string())),
                Err(e) => Err(error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())),
            };
        }
    }
    let Some(task) = request.task.clone().or_else(|| request.answer.clone()) else {
        return Err(error(
            StatusCode::CONFLICT,
            format!("Thread {thread} has no interrupted run to resume"),
        ));
    };
    if let Some(active) = row.active_run_id {
        match request.multitask {
            Multitask::Reject => {
                return Err(error(
                    StatusCode::CONFLICT,
                    format!("Thread {thread} already has an active run"),
                ))
            }
            Multitask::Interrupt | Multitask::Rollback => {
                take_over(state, &active, request.multitask == Multitask::Rollback).await?;
            }
        }
    }
    let principal = principal_of(req);
    if principal.as_ref().is_some_and(|p| !p.operator) {
        within_quotas(state, user).await?;
    }
    // From a checkpoint: the thread forks there first, and gets back what it held if the
    // run does not start.
    let before_fork = match &request.checkpoint {
        Some(checkpoint) => {
            checkpoints::fork(state, user, thread, checkpoint, request.title.clone()).await?
        }
        None => None,
    };
    let submission = antler_protocol::messages::RunSubmission {
        task,
        user: user.to_owned(),
        thread: Some(thread.to_owned()),
        playbook: None,
        model: request.model.clone(),
        clarification: request.clarification,
        config: None,
        agent: request.agent.clone(),
        bootstrap: false,
        interactive: true,
        subagents: request.subagents,
        role: principal.and_then(|p| p.role.clone().filter(|_| !p.operator || p.user.is_some())),
        idempotency_key: None,
        files: request.files.clone(),
    };
    let submitted = match state
        .runs
        .manager
        .send(manager::SubmitRun(submission))
        .await
    {
        Ok(Ok(run_id)) => Ok((run_id, 0)),
        Ok(Err(e @ PrepareError::ThreadBusy { .. })) => {
            Err(error(StatusCode::CONFLICT, e.to_string()))
        }
        Ok(Err(e @ PrepareError::ThreadNotFound(_))) => {
            Err(error(StatusCode::NOT_FOUND, e.to_string()))
        }
        // DeerFlow's text for a `context.model_name` that is not configured (spec A.3).
        Ok(Err(PrepareError::Model(antler_engine::ModelError::UnknownModel { name, .. }))) => {
            Err(error(
                StatusCode::BAD_REQUEST,
                format!("Model '{name}' is not in the configured model allowlist"),
            ))
        }
        Ok(Err(e @ (PrepareError::InvalidId { .. } | PrepareError::Model(_)))) => {
            Err(error(StatusCode::BAD_REQUEST, e.to_string()))
        }
        Ok(Err(e)) if e.is_overload() => Err(error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())),
        Ok(Err(e)) => Err(error(StatusCode::UNPROCESSABLE_ENTITY, e.to_string())),
        Err(e) => Err(error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())),
    };
    if let (Err(_), Some(previous)) = (&submitted, before_fork) {
        checkpoints::unfork(state, user, thread, previous, row.title).await;
    }
    submitted
}

/// The user's submissions a minute and running runs, against its limits.
async fn within_quotas(state: &State, user: &str) -> Result<(), HttpResponse> {
    state
        .quotas
        .submit_shared(state.runs.ownership.as_deref(), user)
        .await
        .map_err(|over: quota::OverLimit| over_limit(&over))?;
    let running = state
        .runs
        .manager
        .send(manager::CountRunning {
            user: user.to_owned(),
        })
        .await;
    match running {
        Ok(Ok(running)) => state
            .quotas
            .concurrent(user, running)
            .map_err(|over| over_limit(&over)),
        Ok(Err(e)) => Err(error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())),
        Err(e) => Err(error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())),
    }
}

/// `interrupt`/`rollback`: the live run is cancelled and waited for (rolled back: the
/// thread gets back the state it had before it).
async fn take_over(state: &State, run_id: &str, rollback: bool) -> Result<(), HttpResponse> {
    let _ = state
        .runs
        .manager
        .send(manager::CancelRun(run_id.to_owned()))
        .await;
    if !wait_ended(state, run_id, TAKE_OVER_WAIT).await {
        return Err(error(
            StatusCode::CONFLICT,
            format!("Run {run_id} did not stop in time; retry"),
        ));
    }
    if rollback {
        let id = run_id.to_owned();
        on_store(state, move |store| store.roll_back_run(&id, ROLLED_BACK)).await?;
    }
    Ok(())
}

/// Waits (at most `within`) until the run's drive has stopped; whether it did.
async fn wait_ended(state: &State, run_id: &str, within: Duration) -> bool {
    let until = tokio::time::Instant::now() + within;
    loop {
        let log = state
            .runs
            .manager
            .send(manager::WatchRun(run_id.to_owned()))
            .await
            .ok()
            .flatten();
        if let Some(log) = log {
            let mut changes = log.subscribe();
            loop {
                changes.borrow_and_update();
                if !log.is_driving() {
                    return true;
                }
                match tokio::time::timeout_at(until, changes.changed()).await {
                    Ok(Ok(())) => continue,
                    _ => return !log.is_driving(),
                }
            }
        }
        let id = run_id.to_owned();
        let record = state.runs.store.call(move |s| s.run(&id)).await;
        if !matches!(
            record,
            Ok(Some(RunRecord {
                status: RunStatus::Running,
                ..
            }))
        ) {
            return true;
        }
        if tokio::time::Instant::now() > until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Cancels the run when dropped armed: a `/wait` client that goes away with
/// `on_disconnect: cancel` takes its run with it.
struct CancelOnDrop {
    state: web::Data<State>,
    run_id: String,
    armed: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.armed {
            self.state
                .runs
                .manager
                .do_send(manager::CancelRun(self.run_id.clone()));
        }
    }
}

/// The run's thread's values once it ended (`/wait`, `/join`), or `{status, error}`
/// when there are none.
async fn final_values(state: &State, user: &str, thread: &str, run_id: &str) -> HttpResponse {
    let (u, t, r) = (user.to_owned(), thread.to_owned(), run_id.to_owned());
    let read = on_store(state, move |store| {
        Ok((
            store.run(&r)?,
            store.latest(&r)?.map(|(_, s)| s),
            store.thread(&u, &t)?,
        ))
    })
    .await;
    match read {
        Ok((Some(record), Some(last), _)) if record.user_id == user => {
            HttpResponse::Ok().json(values(&last))
        }
        Ok((Some(record), None, _)) if record.user_id == user => HttpResponse::Ok()
            .json(json!({"status": super::langgraph::run_status(&record), "error": record.detail})),
        Ok(_) => run_not_found(run_id),
        Err(response) => response,
    }
}

/// With leases on, a resume (`command.resume` or a clarification answer) of the caller's
/// thread's interrupted run while another lead holds that run's live lease: the request is
/// sent to that lead as it came (`sent`), and its response relayed in `reply`'s form (a
/// stream streamed through, a wait waited for). `None`: this lead answers it (no leases,
/// no resume, not the caller's thread, no interrupted run, or the run is not held
/// elsewhere).
async fn resume_elsewhere(
    state: &State,
    req: &actix_web::HttpRequest,
    user: &str,
    thread: &str,
    request: &RunRequest,
    sent: &[u8],
    reply: &Reply,
) -> Option<HttpResponse> {
    state.runs.ownership.as_ref()?;
    if request.answer.is_none() || request.checkpoint.is_some() || check_thread_id(thread).is_err()
    {
        return None;
    }
    let (u, t) = (user.to_owned(), thread.to_owned());
    let last = on_store(state, move |store| {
        match store.thread(&u, &t)?.and_then(|row| row.last_run_id) {
            Some(run) => store.run(&run),
            None => Ok(None),
        }
    })
    .await
    .ok()??;
    if last.status != RunStatus::Interrupted {
        return None;
    }
    let relay = match reply {
        Reply::Background => Relay::Whole,
        Reply::Stream => Relay::Stream,
        Reply::Wait => Relay::Wait,
    };
    forward::to_owner_as(state, req, &last.run_id, sent, relay).await
}

/// The three forms of creating a run on a thread, and the stateless ones.
async fn create(
    state: web::Data<State>,
    req: actix_web::HttpRequest,
    thread: Option<String>,
    payload: web::Payload,
    reply: Reply,
) -> HttpResponse {
    let user = match user_of(&req) {
        Ok(user) => user,
        Err(response) => return response.into(),
    };
    let (sent, body): (web::Bytes, RunBody) = match json_body_as_sent(payload).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let stateless = thread.is_none();
    let thread = thread.unwrap_or_else(|| {
        body.config
            .as_ref()
            .and_then(|c| c["configurable"]["thread_id"].as_str())
            .map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_owned)
    });
    let mut request = match body.check() {
        Ok(request) => request,
        Err(response) => return response.into(),
    };
    request.create_thread |= stateless;
    if let Some(forwarded) =
        resume_elsewhere(&state, &req, &user, &thread, &request, &sent, &reply).await
    {
        return forwarded;
    }
    let (run_id, from_event) = match start_run(&state, &req, &user, &thread, &request).await {
        Ok(started) => started,
        Err(response) => return response,
    };
    match reply {
        Reply::Background => {
            let id = run_id.clone();
            let record = on_store(&state, move |store| {
                Ok((store.run(&id)?, store.run_times(&id)?))
            })
            .await;
            match record {
                Ok((Some(record), times)) => HttpResponse::Ok()
                    .insert_header((
                        "Content-Location",
                        format!("/api/threads/{thread}/runs/{run_id}"),
                    ))
                    .json(run_json(&record, times)),
                Ok((None, _)) => run_not_found(&run_id),
                Err(response) => response,
            }
        }
        Reply::Stream => stream::response(
            RunStream {
                state: state.clone(),
                run_id: run_id.clone(),
                thread_id: thread.clone(),
                modes: request.modes,
                resume: None,
                from_event,
                cancel_on_disconnect: request.cancel_on_disconnect,
            },
            Some(format!("/api/threads/{thread}/runs/{run_id}")),
        ),
        Reply::Wait => {
            let mut guard = CancelOnDrop {
                state: state.clone(),
                run_id: run_id.clone(),
                armed: request.cancel_on_disconnect,
            };
            wait_ended(&state, &run_id, Duration::from_secs(7 * 24 * 3600)).await;
            guard.armed = false;
            let mut response = final_values(&state, &user, &thread, &run_id).await;
            if let Ok(location) = format!("/api/threads/{thread}/runs/{run_id}").parse() {
                response
                    .headers_mut()
                    .insert(actix_web::http::header::CONTENT_LOCATION, location);
            }
            response
        }
    }
}

/// `POST /api/threads/{tid}/runs`: a background run; its `Run`.
pub(super) async fn create_run(
    state: web::Data<State>,
    req: actix_web::HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> HttpResponse {
    create(
        state,
        req,
        Some(path.into_inner()),
        payload,
        Reply::Background,
    )
    .await
}

/// `POST /api/threads/{tid}/runs/stream`: the run as server-sent events.
pub(super) async fn create_stream(
    state: web::Data<State>,
    req: actix_web::HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> HttpResponse {
    create(state, req, Some(path.into_inner()), payload, Reply::Stream).await
}

/// `POST /api/threads/{tid}/runs/wait`: the thread's values once the run ended.
pub(super) async fn create_wait(
    state: web::Data<State>,
    req: actix_web::HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> HttpResponse {
    create(state, req, Some(path.into_inner()), payload, Reply::Wait).await
}

/// `POST /api/runs/stream`: stateless (the thread from `config.configurable.thread_id`,
/// else a new one).
pub(super) async fn stateless_stream(
    state: web::Data<State>,
    req: actix_web::HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    create(state, req, None, payload, Reply::Stream).await
}

/// `POST /api/runs/wait`: stateless, waited for.
pub(super) async fn stateless_wait(
    state: web::Data<State>,
    req: actix_web::HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    create(state, req, None, payload, Reply::Wait).await
}

/// The caller's run `run_id` of its thread `thread`, or the 404 (another user's, another
/// thread's and a missing one alike).
async fn own_run(
    state: &State,
    user: &str,
    thread: &str,
    run_id: &str,
) -> Result<(RunRecord, (Option<i64>, Option<i64>)), HttpResponse> {
    check_thread_id(thread)?;
    let (u, t, r) = (user.to_owned(), thread.to_owned(), run_id.to_owned());
    let found = on_store(state, move |store| {
        if store.thread(&u, &t)?.is_none() {
            return Ok(None);
        }
        let record = store.run(&r)?;
        let times = store.run_times(&r)?;
        Ok(record
            .filter(|rec| rec.user_id == u && rec.thread_id == t)
            .map(|rec| (rec, times)))
    })
    .await?;
    found.ok_or_else(|| run_not_found(run_id))
}

/// `GET /api/threads/{tid}/runs`: the thread's runs, newest first (`limit`, `offset`).
pub(super) async fn list_runs(
    state: web::Data<State>,
    Caller(user): Caller,
    path: web::Path<String>,
    query: web::Query<std::collections::HashMap<String, String>>,
) -> HttpResponse {
    let thread = path.into_inner();
    if let Err(response) = check_thread_id(&thread) {
        return response.into();
    }
    let number = |key: &str, default: usize| {
        query
            .get(key)
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(default)
    };
    let (limit, offset) = (number("limit", 10).min(1000), number("offset", 0));
    let t = thread.clone();
    let listed = on_store(&state, move |store| {
        if store.thread(&user, &t)?.is_none() {
            return Ok(None);
        }
        let runs = store.thread_runs(&user, &t, limit, offset)?;
        runs.into_iter()
            .map(|r| {
                let times = store.run_times(&r.run_id)?;
                Ok(run_json(&r, times))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    })
    .await;
    match listed {
        Ok(Some(runs)) => HttpResponse::Ok().json(runs),
        Ok(None) => thread_not_found(&thread),
        Err(response) => response,
    }
}

/// `GET /api/threads/{tid}/runs/{rid}`.
pub(super) async fn get_run(
    state: web::Data<State>,
    Caller(user): Caller,
    path: web::Path<(String, String)>,
) -> HttpResponse {
    let (thread, run_id) = path.into_inner();
    match own_run(&state, &user, &thread, &run_id).await {
        Ok((record, times)) => HttpResponse::Ok().json(run_json(&record, times)),
        Err(response) => response,
    }
}

/// The `action` and `wait` of a cancel or a stream join.
#[derive(serde::Deserialize, utoipa::IntoParams)]
pub(super) struct CancelQuery {
    #[serde(default)]
    action: Option<String>,
    #[serde(default)]
    wait: Option<String>,
    /// A join's: the run is cancelled when its client goes away.
    #[serde(default)]
    cancel_on_disconnect: Option<String>,
}

impl CancelQuery {
    fn wait(&self) -> bool {
        matches!(self.wait.as_deref(), Some("1" | "true" | "True"))
    }
}

/// Cancels the caller's run with `action` (`interrupt`, the default, or `rollback`);
/// with `wait`, once it has stopped. 409 for a run that ended.
async fn cancel(
    state: &State,
    record: &RunRecord,
    query: &CancelQuery,
) -> Result<(), HttpResponse> {
    let rollback = match query.action.as_deref() {
        None | Some("interrupt") => false,
        Some("rollback") => true,
        Some(other) => {
            return Err(error(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("Unknown cancel action: {other}"),
            ))
        }
    };
    let not_cancellable = || {
        error(
            StatusCode::CONFLICT,
            format!(
                "Run {} is not cancellable (status: {})",
                record.run_id,
                super::langgraph::run_status(record)
            ),
        )
    };
    if !matches!(record.status, RunStatus::Running | RunStatus::Interrupted) {
        return Err(not_cancellable());
    }
    match state
        .runs
        .manager
        .send(manager::CancelRun(record.run_id.clone()))
        .await
    {
        Ok(Ok(_)) => {}
        Ok(Err(PrepareError::NotRunning { .. })) => return Err(not_cancellable()),
        Ok(Err(e)) => return Err(error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())),
        Err(e) => return Err(error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())),
    }
    if query.wait() || rollback {
        wait_ended(state, &record.run_id, TAKE_OVER_WAIT).await;
    }
    if rollback {
        let id = record.run_id.clone();
        on_store(state, move |store| store.roll_back_run(&id, ROLLED_BACK)).await?;
    }
    Ok(())
}

/// `POST /api/threads/{tid}/runs/{rid}/cancel?wait=&action=`: 202, or 204 with `wait`
/// once the run has stopped.
pub(super) async fn cancel_run(
    state: web::Data<State>,
    req: actix_web::HttpRequest,
    Caller(user): Caller,
    path: web::Path<(String, String)>,
    query: web::Query<CancelQuery>,
) -> HttpResponse {
    let (thread, run_id) = path.into_inner();
    let record = match own_run(&state, &user, &thread, &run_id).await {
        Ok((record, _)) => record,
        Err(response) => return response,
    };
    if let Some(forwarded) = super::forward::to_owner(&state, &req, &run_id, &[]).await {
        return forwarded;
    }
    match cancel(&state, &record, &query).await {
        Ok(()) if query.wait() => HttpResponse::NoContent().finish(),
        Ok(()) => HttpResponse::Accepted().finish(),
        Err(response) => response,
    }
}

/// `GET /api/threads/{tid}/runs/{rid}/join`: the thread's values once the run ended.
pub(super) async fn join_run(
    state: web::Data<State>,
    Caller(user): Caller,
    path: web::Path<(String, String)>,
) -> HttpResponse {
    let (thread, run_id) = path.into_inner();
    if let Err(response) = own_run(&state, &user, &thread, &run_id).await {
        return response;
    }
    wait_ended(&state, &run_id, Duration::from_secs(7 * 24 * 3600)).await;
    final_values(&state, &user, &thread, &run_id).await
}

/// `GET|POST /api/threads/{tid}/runs/{rid}/stream?action=&wait=`: joins the run's stream
/// (from `Last-Event-ID` when given: the events after it, replayed from the store for a
/// run that ended); with `action`, the run is cancelled first (the SDK's stop button).
pub(super) async fn join_stream(
    state: web::Data<State>,
    req: actix_web::HttpRequest,
    Caller(user): Caller,
    path: web::Path<(String, String)>,
    query: web::Query<CancelQuery>,
) -> HttpResponse {
    let (thread, run_id) = path.into_inner();
    let record = match own_run(&state, &user, &thread, &run_id).await {
        Ok((record, _)) => record,
        Err(response) => return response,
    };
    if query.action.is_some() {
        if let Err(response) = cancel(&state, &record, &query).await {
            if response.status() != StatusCode::CONFLICT {
                return response;
            }
        }
    }
    // The modes a join serves: those asked (`stream_mode`, repeated or comma-separated),
    // else every one a client renders.
    let asked: Vec<Value> = req
        .query_string()
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .filter(|(k, _)| *k == "stream_mode")
        .flat_map(|(_, v)| {
            v.split(',')
                .filter(|m| !m.is_empty())
                .map(|m| Value::String(m.to_owned()))
                .collect::<Vec<_>>()
        })
        .collect();
    let modes = if asked.is_empty() {
        Modes::parse(Some(&json!([
            "values",
            "messages-tuple",
            "updates",
            "custom"
        ])))
    } else {
        Modes::parse(Some(&Value::Array(asked)))
    };
    let modes = match modes {
        Ok(modes) => modes,
        Err(e) => return error(StatusCode::UNPROCESSABLE_ENTITY, e),
    };
    let resume = req
        .headers()
        .get("Last-Event-ID")
        .and_then(|v| v.to_str().ok())
        .and_then(Cursor::parse);
    stream::response(
        RunStream {
            state: state.clone(),
            run_id,
            thread_id: thread,
            modes,
            resume,
            from_event: 0,
            cancel_on_disconnect: matches!(
                query.cancel_on_disconnect.as_deref(),
                Some("true" | "True" | "1")
            ),
        },
        None,
    )
}
