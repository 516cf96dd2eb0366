//! The runs routes: submit (`POST /api/runs`, idempotent with a key, within the
//! principal's quotas), list, view, messages, catalog, a presented file, answer and
//! cancel. A run another user owns is 404 to a member ([`VisibleRun`]); every route
//! asks the `RunManager` by message.

use actix_web::{http::StatusCode, web, HttpResponse};
use antler_protocol::messages::PlaybookSource;
use serde_json::{json, Value};

use super::{
    body, error, quota, secrets, Principal, Refusal, State, MAX_ANSWER_BODY, MAX_RUN_BODY,
};
use crate::runs::manager;
use crate::runs::prepare::PrepareError;

/// The header that makes a run's submission safe to repeat.
pub(super) const IDEMPOTENCY_KEY: &str = "Idempotency-Key";
/// The longest idempotency key.
pub(super) const MAX_IDEMPOTENCY_KEY: usize = 200;

/// A submission refused before it reaches the run manager: the status and the detail
/// the client is answered.
struct Refused(StatusCode, String);

impl Refused {
    fn response(self) -> HttpResponse {
        error(self.0, self.1)
    }
}

/// The body of `POST /api/runs`.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SubmitBody {
    task: String,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    thread: Option<String>,
    /// A file of `antler.playbook_dirs`, by its relative name.
    #[serde(default)]
    playbook: Option<String>,
    /// The playbook's YAML.
    #[serde(default)]
    playbook_yaml: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    clarification: bool,
    #[serde(default)]
    agent: Option<String>,
    #[serde(default)]
    bootstrap: bool,
    /// `false`: nobody talks to the run, so `ask_clarification` is not offered.
    #[serde(default)]
    interactive: Option<bool>,
    /// `true`: the run is offered `task` (subagents on the cluster's workers).
    #[serde(default)]
    subagents: Option<bool>,
    /// Uploads of the thread the task's turn carries: names, or DeerFlow's
    /// `additional_kwargs.files` entries (`{"filename", ...}`).
    #[serde(default)]
    files: Vec<UploadRef>,
}

/// One entry of `files`: a name in the thread's `uploads/`, or an object naming one.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub(super) enum UploadRef {
    Name(String),
    Entry { filename: String },
}

impl UploadRef {
    fn into_name(self) -> String {
        match self {
            UploadRef::Name(name) | UploadRef::Entry { filename: name } => name,
        }
    }
}

/// `POST /api/runs` with `{"task", "user"?, "thread"?, "playbook"?, "model"?,
/// "clarification"?}`: starts a run in the lead; 201 with `{"run_id", "status"}`. With an
/// `Idempotency-Key` header, a repeat by the same user is answered the first one's run.
pub(super) async fn post_run(
    state: web::Data<State>,
    req: actix_web::HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    let Some(principal) = principal_of(&req) else {
        return Refusal::Credential.response();
    };
    let mut body = match submit_body(payload).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let playbook = match playbook_source(body.playbook.take(), body.playbook_yaml.take()) {
        Ok(playbook) => playbook,
        Err(refused) => return refused.response(),
    };
    let user = match run_user(&principal, body.user.take()) {
        Ok(user) => user,
        Err(refused) => return refused.response(),
    };
    // A scripted model scripts every call of the run: a test and demo facility, the
    // operator's unless the operator opened it to everyone.
    if playbook.is_some() && !principal.operator && !state.settings.allow_scripted_models {
        return error(StatusCode::FORBIDDEN, SCRIPTED_REFUSED);
    }
    if !principal.operator {
        if let Err(response) = within_quotas(&state, &user).await {
            return response;
        }
    }
    let idempotency_key = match idempotency_key(&req) {
        Ok(key) => key,
        Err(refused) => return refused.response(),
    };
    let submission = antler_protocol::messages::RunSubmission {
        task: body.task,
        user,
        thread: body.thread,
        playbook,
        model: body.model,
        clarification: body.clarification,
        config: None,
        agent: body.agent,
        bootstrap: body.bootstrap,
        interactive: body.interactive.unwrap_or(true),
        subagents: body.subagents,
        role: principal
            .role
            .clone()
            .filter(|_| !principal.operator || principal.user.is_some()),
        idempotency_key,
        files: body.files.into_iter().map(UploadRef::into_name).collect(),
    };
    let submitted = state
        .runs
        .manager
        .send(manager::SubmitRun(submission))
        .await;
    submitted_reply(submitted)
}

/// The submission's body, read within [`MAX_RUN_BODY`]: a JSON object with a task that is
/// not empty.
async fn submit_body(payload: web::Payload) -> Result<SubmitBody, HttpResponse> {
    let body = body::read_body(payload, MAX_RUN_BODY).await?;
    let body: SubmitBody = serde_json::from_slice(&body).map_err(|e| {
        error(
            StatusCode::BAD_REQUEST,
            format!("the body must be a JSON object with a `task` string: {e}"),
        )
    })?;
    if body.task.trim().is_empty() {
        return Err(error(StatusCode::BAD_REQUEST, "the task is empty"));
    }
    Ok(body)
}

/// The run's playbook: one named in `antler.playbook_dirs`, or sent inline, not both.
fn playbook_source(
    named: Option<String>,
    inline: Option<String>,
) -> Result<Option<PlaybookSource>, Refused> {
    match (named, inline) {
        (Some(_), Some(_)) => Err(Refused(
            StatusCode::BAD_REQUEST,
            "send either `playbook` (a name in antler.playbook_dirs) or `playbook_yaml`, not both"
                .to_owned(),
        )),
        (Some(name), None) => Ok(Some(PlaybookSource::Named(name))),
        (None, Some(yaml)) => Ok(Some(PlaybookSource::Inline(yaml))),
        (None, None) => Ok(None),
    }
}

/// The user the run is for: a user's runs are its own; the operator names the user (else
/// `default`).
fn run_user(principal: &Principal, asked: Option<String>) -> Result<String, Refused> {
    match (&principal.user, asked) {
        (_, Some(asked)) if principal.operator => Ok(asked),
        (None, None) => Ok("default".to_owned()),
        (Some(own), None) => Ok(own.clone()),
        (Some(own), Some(asked)) if &asked == own => Ok(asked),
        (Some(own), Some(_)) => Err(Refused(
            StatusCode::FORBIDDEN,
            format!("this token acts as user {own}: a run's user is its principal's"),
        )),
        (None, Some(asked)) => Ok(asked),
    }
}

/// Takes one of `user`'s submissions a minute and checks its running runs against its
/// limit; the refusal when it is over either.
async fn within_quotas(state: &State, user: &str) -> Result<(), HttpResponse> {
    state
        .quotas
        .submit_shared(state.runs.ownership.as_deref(), user)
        .await
        .map_err(|over| over_limit(&over))?;
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
        Ok(Err(e)) => Err(manager_error(e)),
        Err(e) => Err(error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())),
    }
}

/// The request's idempotency key, if it sent one: a client that repeats a submission
/// whose reply it lost (a timeout, a lead restart) sends the same key, and is answered
/// the first one's run.
fn idempotency_key(req: &actix_web::HttpRequest) -> Result<Option<String>, Refused> {
    let Some(value) = req.headers().get(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    match value.to_str() {
        Ok(key)
            if (1..=MAX_IDEMPOTENCY_KEY).contains(&key.len())
                && key.bytes().all(|b| b.is_ascii_graphic()) =>
        {
            Ok(Some(key.to_owned()))
        }
        _ => Err(Refused(
            StatusCode::BAD_REQUEST,
            format!("the {IDEMPOTENCY_KEY} header must be 1 to {MAX_IDEMPOTENCY_KEY} visible ASCII characters"),
        )),
    }
}

/// What the run manager said of a submission, as the gateway answers it: 201 with the
/// run, 400 for a bad id or playbook, 503 with `Retry-After` for the lead's own load, 422
/// for anything else the run cannot start with.
fn submitted_reply(
    submitted: Result<Result<String, PrepareError>, actix::MailboxError>,
) -> HttpResponse {
    match submitted {
        Ok(Ok(run_id)) => HttpResponse::Created()
            .insert_header(("Location", format!("/api/runs/{run_id}")))
            .json(json!({"run_id": run_id, "status": "running"})),
        Ok(Err(e @ (PrepareError::InvalidId { .. } | PrepareError::Playbook(_)))) => {
            error(StatusCode::BAD_REQUEST, e.to_string())
        }
        // Runs of one thread are serialised (spec A.4's `reject`).
        Ok(Err(e @ PrepareError::ThreadBusy { .. })) => error(StatusCode::CONFLICT, e.to_string()),
        Ok(Err(e @ PrepareError::ThreadNotFound(_))) => error(StatusCode::NOT_FOUND, e.to_string()),
        // The lead's own load (a host away, busy or slow, the store locked): come back.
        Ok(Err(e)) if e.is_overload() => busy(e.to_string()),
        Ok(Err(e)) => error(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()),
        Err(e) => busy(e.to_string()),
    }
}

/// 503 with `Retry-After`: the lead is busy, come back.
fn busy(detail: String) -> HttpResponse {
    let mut busy = error(StatusCode::SERVICE_UNAVAILABLE, detail);
    busy.headers_mut().insert(
        actix_web::http::header::RETRY_AFTER,
        crate::runs::prepare::RETRY_AFTER_S.into(),
    );
    busy
}

/// Why a member's run with a playbook is refused.
pub const SCRIPTED_REFUSED: &str = "scripted models (playbook, playbook_yaml) are the operator's: a test and demo facility (set antler.gateway.allow_scripted_models: true to open them)";

/// 429 with `Retry-After` for a user over its own limit; 503 when the gateway as a whole
/// is full.
pub(super) fn over_limit(over: &quota::OverLimit) -> HttpResponse {
    let status = if over.is_cluster_wide() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::TOO_MANY_REQUESTS
    };
    let mut response = error(status, over.to_string());
    if let Ok(value) = over.retry_after_s().to_string().parse() {
        response
            .headers_mut()
            .insert(actix_web::http::header::RETRY_AFTER, value);
    }
    response
}

pub(super) async fn view_of(state: &State, run_id: String) -> HttpResponse {
    match state.runs.manager.send(manager::GetRun(run_id)).await {
        Ok(Ok(view)) => HttpResponse::Ok().json(view),
        Ok(Err(e @ crate::runs::prepare::PrepareError::UnknownRun(_))) => {
            error(StatusCode::NOT_FOUND, e.to_string())
        }
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

/// The principal the guard found for `req`.
pub(super) fn principal_of(req: &actix_web::HttpRequest) -> Option<Principal> {
    actix_web::HttpMessage::extensions(req)
        .get::<Principal>()
        .cloned()
}

/// `Ok` when `req`'s principal may see run `run_id`; otherwise the response: 404 for a run
/// that does not exist and for another user's alike, so ids say nothing.
pub(super) async fn visible(
    state: &State,
    req: &actix_web::HttpRequest,
    run_id: &str,
) -> Result<(), HttpResponse> {
    let Some(principal) = principal_of(req) else {
        return Err(Refusal::Credential.response());
    };
    let unknown = || {
        error(
            StatusCode::NOT_FOUND,
            crate::runs::prepare::PrepareError::UnknownRun(run_id.to_owned()).to_string(),
        )
    };
    match state
        .runs
        .manager
        .send(manager::RunOwner(run_id.to_owned()))
        .await
    {
        Ok(Ok(Some(owner))) if principal.may_see(&owner) => Ok(()),
        Ok(Ok(_)) => Err(unknown()),
        Ok(Err(e)) => Err(manager_error(e)),
        Err(e) => Err(error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())),
    }
}

/// The response to a run manager's failure: 503 for the lead's own load, 500 otherwise.
pub(super) fn manager_error(e: crate::runs::prepare::PrepareError) -> HttpResponse {
    if e.is_overload() {
        error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
    } else {
        error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
    }
}

/// The `{id}` of a run route whose principal may see that run: extracting it answers
/// the request with [`visible`]'s refusal otherwise, before any body is read.
pub(super) struct VisibleRun(pub(super) String);

impl actix_web::FromRequest for VisibleRun {
    type Error = actix_web::Error;
    type Future = futures::future::LocalBoxFuture<'static, Result<Self, Self::Error>>;

    fn from_request(req: &actix_web::HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move {
            let refused = |response| {
                actix_web::Error::from(actix_web::error::InternalError::from_response(
                    "run not visible",
                    response,
                ))
            };
            let (Some(state), Some(run_id)) = (
                req.app_data::<web::Data<State>>().cloned(),
                req.match_info().get("id").map(str::to_owned),
            ) else {
                return Err(refused(error(
                    actix_web::http::StatusCode::INTERNAL_SERVER_ERROR,
                    "a run route without its run",
                )));
            };
            visible(&state, &req, &run_id).await.map_err(refused)?;
            Ok(VisibleRun(run_id))
        })
    }
}

/// `GET /api/runs/{id}`: the run's view.
pub(super) async fn get_run(
    state: web::Data<State>,
    VisibleRun(run_id): VisibleRun,
) -> HttpResponse {
    view_of(&state, run_id).await
}

/// `GET /api/runs/{id}/messages`: the run's messages (its last checkpoint), tool-call
/// arguments that hold secrets redacted and texts cut at 16 KiB.
pub(super) async fn run_messages(
    state: web::Data<State>,
    VisibleRun(run_id): VisibleRun,
) -> HttpResponse {
    match state.runs.manager.send(manager::RunMessages(run_id)).await {
        Ok(Ok(messages)) => {
            HttpResponse::Ok().json(json!({"messages": secrets::shown_messages(&messages)}))
        }
        Ok(Err(e @ crate::runs::prepare::PrepareError::UnknownRun(_))) => {
            error(actix_web::http::StatusCode::NOT_FOUND, e.to_string())
        }
        Ok(Err(e)) => manager_error(e),
        Err(e) => error(
            actix_web::http::StatusCode::SERVICE_UNAVAILABLE,
            e.to_string(),
        ),
    }
}

/// `GET /api/runs/{id}/catalog`: the tools the run sees, by source, deferred or not, and
/// the catalog's hash; 404 when the lead no longer holds the run (after a restart).
pub(super) async fn run_catalog(
    state: web::Data<State>,
    VisibleRun(run_id): VisibleRun,
) -> HttpResponse {
    match state
        .runs
        .manager
        .send(manager::RunCatalog(run_id.clone()))
        .await
    {
        Ok(Some(catalog)) => HttpResponse::Ok().json(catalog),
        Ok(None) => error(
            StatusCode::NOT_FOUND,
            format!("the lead no longer holds the catalog of run {run_id}"),
        ),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

/// `GET /api/runs/{id}/artifact?path=/mnt/user-data/outputs/F`: a file the run presented,
/// as an attachment (`nosniff`, a sandbox CSP: an HTML artifact never runs as the
/// gateway's page). 404 for a file the run did not present, one outside the thread's
/// outputs, or another user's run.
pub(super) async fn download_artifact(
    state: web::Data<State>,
    VisibleRun(run_id): VisibleRun,
    query: web::Query<std::collections::HashMap<String, String>>,
) -> HttpResponse {
    let Some(path) = query.get("path").cloned() else {
        return error(
            StatusCode::BAD_REQUEST,
            "path: the artifact's path is required",
        );
    };
    let bytes = match state
        .runs
        .manager
        .send(manager::RunArtifact {
            run_id,
            path: path.clone(),
        })
        .await
    {
        Ok(Ok(manager::ArtifactContent::Bytes(bytes))) => bytes,
        Ok(Ok(manager::ArtifactContent::TooLarge)) => {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the artifact is larger than {} bytes",
                    manager::MAX_ARTIFACT_BYTES
                ),
            )
        }
        Ok(Err(e @ crate::runs::prepare::PrepareError::NoArtifact { .. })) => {
            return error(StatusCode::NOT_FOUND, e.to_string())
        }
        Ok(Err(e)) => return manager_error(e),
        Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    };
    attachment(&path, bytes)
}

/// `bytes` as a download named after `path`'s last part (`nosniff` and a sandbox CSP: an
/// HTML file never runs as the gateway's page).
pub(super) fn attachment(path: &str, bytes: Vec<u8>) -> HttpResponse {
    let name: String = path
        .rsplit('/')
        .next()
        .unwrap_or("artifact")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || ".-_".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    HttpResponse::Ok()
        .content_type("application/octet-stream")
        .insert_header((
            "Content-Disposition",
            format!("attachment; filename=\"{name}\""),
        ))
        .insert_header(("X-Content-Type-Options", "nosniff"))
        .insert_header(("Content-Security-Policy", "sandbox; default-src 'none'"))
        .body(bytes)
}

/// The largest `limit` of `GET /api/runs`.
pub(super) const MAX_LIST: usize = 1000;

/// `GET /api/runs[?status=S][&limit=N]`: the principal's runs, newest first (the
/// operator's: every user's, or one user's with `user=U`); `limit` 100 by default.
pub(super) async fn list_runs(
    state: web::Data<State>,
    req: actix_web::HttpRequest,
    query: web::Query<std::collections::HashMap<String, String>>,
) -> HttpResponse {
    let Some(principal) = principal_of(&req) else {
        return Refusal::Credential.response();
    };
    let limit = match query.get("limit").map(|l| l.parse::<usize>()) {
        None => 100,
        Some(Ok(n)) if (1..=MAX_LIST).contains(&n) => n,
        Some(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("limit: expected an integer from 1 to {MAX_LIST}"),
            )
        }
    };
    let status = match query.get("status") {
        None => None,
        Some(s) => match crate::runs::store::RunStatus::parse(s) {
            Some(status) => Some(status),
            None => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "status: expected running, success, error or interrupted",
                )
            }
        },
    };
    let user = if principal.operator {
        query.get("user").cloned()
    } else {
        principal.user.clone()
    };
    match state
        .runs
        .manager
        .send(manager::ListRuns {
            user,
            status,
            limit,
        })
        .await
    {
        Ok(Ok(runs)) => HttpResponse::Ok().json(json!({"runs": runs})),
        Ok(Err(e)) => manager_error(e),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

/// `POST /api/runs/{id}/answer` with `{"answer"}`: answers an interrupted run's question
/// and drives it again.
pub(super) async fn answer_run(
    state: web::Data<State>,
    VisibleRun(run_id): VisibleRun,
    req: actix_web::HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    let body = match body::read_body(payload, MAX_ANSWER_BODY).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    if let Some(forwarded) = super::forward::to_owner(&state, &req, &run_id, &body).await {
        return forwarded;
    }
    let answer = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("answer").and_then(Value::as_str).map(str::to_owned));
    let Some(answer) = answer else {
        return error(
            StatusCode::BAD_REQUEST,
            "the body must be a JSON object with an `answer` string",
        );
    };
    let resume = manager::ResumeRun {
        run_id,
        answer: Some(answer),
        playbook: None,
    };
    match state.runs.manager.send(resume).await {
        Ok(Ok(run_id)) => {
            HttpResponse::Accepted().json(json!({"run_id": run_id, "status": "running"}))
        }
        Ok(Err(e @ crate::runs::prepare::PrepareError::UnknownRun(_))) => {
            error(StatusCode::NOT_FOUND, e.to_string())
        }
        Ok(Err(e @ crate::runs::prepare::PrepareError::NotWaiting { .. })) => {
            error(StatusCode::CONFLICT, e.to_string())
        }
        Ok(Err(e)) => error(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

/// `POST /api/runs/{id}/cancel`: cancels a running run (or one waiting for an answer);
/// 202 with `{"run_id", "status": "error", "cancelled": true}`, 404 for an unknown run,
/// 409 for one that has ended.
pub(super) async fn cancel_run(
    state: web::Data<State>,
    VisibleRun(run_id): VisibleRun,
    req: actix_web::HttpRequest,
) -> HttpResponse {
    if let Some(forwarded) = super::forward::to_owner(&state, &req, &run_id, &[]).await {
        return forwarded;
    }
    match state
        .runs
        .manager
        .send(manager::CancelRun(run_id.clone()))
        .await
    {
        Ok(Ok(manager::CancelOutcome::Cancelled)) => HttpResponse::Accepted()
            .json(json!({"run_id": run_id, "status": "error", "cancelled": true})),
        Ok(Err(e @ crate::runs::prepare::PrepareError::UnknownRun(_))) => {
            error(StatusCode::NOT_FOUND, e.to_string())
        }
        Ok(Err(e @ crate::runs::prepare::PrepareError::NotRunning { .. })) => {
            error(StatusCode::CONFLICT, e.to_string())
        }
        Ok(Err(e)) => manager_error(e),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}
