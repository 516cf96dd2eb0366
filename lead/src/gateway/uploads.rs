//! The uploads routes (spec B.1): `POST /api/threads/{tid}/uploads` (multipart, `files`
//! repeated), `GET …/uploads/limits`, `GET …/uploads/list`, `DELETE …/uploads/{filename}`.
//! Files land in the caller's own thread directory (`{base}/users/{user}/threads/{tid}/
//! user-data/uploads`, `/mnt/user-data/uploads` in the sandbox); another user's thread is
//! 404. Limits are checked while the body streams in (per file, per request, and per user
//! across its threads); every file is staged as `.upload-*.part` and only renamed into
//! place once the whole request was accepted, so a refused request leaves nothing behind
//! and overwrites nothing. With `uploads.auto_convert_documents`, documents get a Markdown
//! twin converted inside the thread's sandbox (`convert`); the twin is recorded (`files`)
//! so a user's own `.md` is never clobbered or deleted with it. Responses name virtual
//! paths and artifact URLs only, never a host path, and `size` is the server's count.
//! Every step on the directory goes through the thread's `ThreadFiles` (`files::Uploads`):
//! this disk in local mode, the sandbox-host replica that owns the thread in a cluster
//! whose lead has no share of its volume; the per-user total is then every replica's
//! share, summed (`SandboxRequest::UploadsUsage`).

mod convert;
mod files;

use std::collections::HashSet;
use std::sync::Arc;

use actix_web::{http::StatusCode, web, HttpRequest, HttpResponse};
use antler_engine::{ThreadFiles, ThreadFilesMode};
use antler_protocol::calls::SandboxCalls as _;
use antler_protocol::config::UploadsConfig;
use antler_protocol::messages::{StagedUpload, ThreadFileError};
use futures::StreamExt as _;
use serde_json::{json, Value};

use super::body::BODY_DEADLINE;
use super::langgraph::user_of;
use super::{error, State};
use crate::runs::prepare::{check_id, RunEnv};
use files::Uploads;

/// `400`: the request had no file part.
pub const NO_FILES: &str = "No files provided";
/// `413`: more `files` parts than `max_files`; `{n}` is the limit.
pub const TOO_MANY_FILES: &str = "Too many files: maximum is {n}";
/// `413`: one file over `max_file_size`; `{name}` is its name.
pub const FILE_TOO_LARGE: &str = "File too large: {name}";
/// `413`: the request's files together over `max_total_size`.
pub const TOTAL_TOO_LARGE: &str = "Total upload size too large";
/// `413` (Antler's): the user's uploads across its threads would pass
/// `uploads.max_user_total_size`; `{limit}` in bytes.
pub const USER_QUOTA: &str = "Upload quota exceeded: your uploads across all threads may total at most {limit} bytes (uploads.max_user_total_size); delete some uploads first";
/// `message` of a successful upload; `{n}` files.
pub const UPLOADED: &str = "Successfully uploaded {n} file(s)";
/// Appended to [`UPLOADED`] when files were skipped; `{k}` of them.
pub const SKIPPED: &str = "; skipped {k} unsafe file(s)";
/// `400` of a delete whose name is not a plain file name.
pub const INVALID_PATH: &str = "Invalid path";
/// `404` of a delete; `{f}` is the name.
pub const FILE_NOT_FOUND: &str = "File not found: {f}";
/// `503` when a sandbox-host replica does not say how much the user keeps there.
pub const QUOTA_UNKNOWN: &str = "the upload quota cannot be checked now (uploads.max_user_total_size): a sandbox-host replica did not answer; try again";
/// The largest Markdown twin kept.
const MAX_TWIN_BYTES: u64 = 64 << 20;
/// The most bytes one staged write carries (well under the frame limit).
const STAGE_CHUNK: usize = 1 << 20;
/// The deadline of the per-user total's count on every replica.
const USAGE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The thread a request is for, once the caller may use it.
struct Target {
    env: Arc<RunEnv>,
    user: String,
    thread: String,
    /// The thread's files: this disk, or the replica that owns the thread.
    files: Arc<dyn ThreadFiles>,
    config: UploadsConfig,
}

impl Target {
    fn uploads(&self) -> Uploads<'_> {
        Uploads(&*self.files)
    }
}

/// The answer to a failed step on the uploads directory: 503 when the replica that owns
/// the thread cannot be had, else 500; never a host path.
fn files_failed(e: &ThreadFileError) -> HttpResponse {
    match e {
        ThreadFileError::Unavailable(why) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the thread's files are unavailable: {why}"),
        ),
        other => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the uploads directory cannot be written: {other}"),
        ),
    }
}

/// What a route needs of the thread `{tid}`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ThreadNeed {
    /// An upload creates the caller's thread, as DeerFlow's does.
    Create,
    /// Listing and deleting need it to exist.
    Existing,
    /// The limits are the configuration's, whatever the thread (a client asks before its
    /// first upload).
    Any,
}

/// The caller's thread `{tid}`: 400 for a bad id, 404 for another user's thread.
async fn target(
    state: &State,
    req: &HttpRequest,
    need: ThreadNeed,
) -> Result<Target, HttpResponse> {
    let user = user_of(req).map_err(HttpResponse::from)?;
    let thread = req.match_info().get("tid").unwrap_or_default().to_owned();
    check_id("thread", &thread).map_err(|e| error(StatusCode::BAD_REQUEST, e.to_string()))?;
    let env = Arc::clone(&state.runs.env);
    // The caller's own thread (threads are keyed by user and id: another user's thread
    // of the same id is another thread, never reached here).
    let (owner, id) = (user.clone(), thread.clone());
    let exists = env
        .store
        .call(move |store| match need {
            ThreadNeed::Create => {
                store.create_thread(&owner, &id, &Default::default())?;
                Ok(true)
            }
            ThreadNeed::Any => Ok(true),
            ThreadNeed::Existing => Ok(store.thread(&owner, &id)?.is_some()),
        })
        .await
        .map_err(|e| error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
    if !exists {
        return Err(error(
            StatusCode::NOT_FOUND,
            format!("Thread {thread} not found"),
        ));
    }
    let base = env
        .base_dir()
        .await
        .map_err(|e| error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
    let config = match env.app_config().await {
        Ok(app) => {
            let (config, warnings) = UploadsConfig::from_section(app.other.get("uploads"));
            for warning in warnings {
                tracing::warn!("{warning}");
            }
            config
        }
        Err(e) => return Err(error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())),
    };
    let paths = antler_engine::ThreadPaths::new(&base, &user, &thread);
    let files = env.thread_files(&paths, &user, &thread);
    Ok(Target {
        env,
        user,
        thread,
        files,
        config,
    })
}

/// The bytes the caller keeps in the uploads of all its threads: counted on this disk,
/// or summed over every sandbox-host replica (503 while one does not answer: the limit is
/// never checked against part of the total).
async fn user_usage(target: &Target) -> Result<u64, HttpResponse> {
    match target.env.thread_files_mode() {
        ThreadFilesMode::Local => {
            let base = target
                .env
                .base_dir()
                .await
                .map_err(|e| error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
            let user = target.user.clone();
            web::block(move || antler_protocol::uploads_dir::user_usage(&base, &user))
                .await
                .map_err(|e| error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
        }
        ThreadFilesMode::SandboxHost => {
            let hosts = antler_engine::HostOf {
                hosts: target.env.hosts.as_ref(),
                role: antler_protocol::Role::SandboxHost,
            };
            let counted = hosts
                .uploads_usage(target.user.clone(), USAGE_TIMEOUT)
                .await;
            match counted {
                Ok(Ok(bytes)) => Ok(bytes),
                Ok(Err(e)) => {
                    tracing::warn!(user = %target.user, "cannot count the user's uploads: {e}");
                    Err(error(StatusCode::SERVICE_UNAVAILABLE, QUOTA_UNKNOWN))
                }
                Err(e) => {
                    tracing::warn!(user = %target.user, "cannot count the user's uploads: {e}");
                    Err(error(StatusCode::SERVICE_UNAVAILABLE, QUOTA_UNKNOWN))
                }
            }
        }
    }
}

/// `/api/threads/{tid}/artifacts/mnt/user-data/uploads/{percent-encoded name}`.
fn artifact_url(thread: &str, name: &str) -> String {
    let mut encoded = String::new();
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            encoded.push(b as char);
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    format!("/api/threads/{thread}/artifacts/mnt/user-data/uploads/{encoded}")
}

fn virtual_path(name: &str) -> String {
    format!("{}/{name}", antler_engine::VIRTUAL_UPLOADS)
}

/// One file of the request, staged.
struct Staged {
    staging: String,
    name: String,
    original: String,
    size: u64,
}

/// What reading the body ended with.
enum Read {
    Done {
        staged: Vec<Staged>,
        skipped: Vec<String>,
        parts: u64,
    },
    Refused(HttpResponse),
}

/// `POST /api/threads/{tid}/uploads`.
pub(super) async fn upload(
    state: web::Data<State>,
    req: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    let target = match target(&state, &req, ThreadNeed::Create).await {
        Ok(t) => t,
        Err(response) => return response,
    };
    if let Err(e) = target.uploads().prepare().await {
        return files_failed(&e);
    }
    let used = match user_usage(&target).await {
        Ok(used) => used,
        Err(response) => return response,
    };
    let multipart = actix_multipart::Multipart::new(req.headers(), payload);
    let read = read_files(&target, multipart, used).await;
    let (staged, skipped, parts) = match read {
        Read::Done {
            staged,
            skipped,
            parts,
        } => (staged, skipped, parts),
        Read::Refused(response) => return response,
    };
    if parts == 0 {
        return error(StatusCode::BAD_REQUEST, NO_FILES);
    }
    let committed = commit(&target, staged).await;
    let committed = match committed {
        Ok(c) => c,
        Err(response) => return response,
    };
    let mut listed = Vec::new();
    let mut seen: HashSet<String> = committed.iter().map(|s| s.name.clone()).collect();
    for file in &committed {
        let mut info = json!({
            "filename": file.name,
            "size": file.size,
            "virtual_path": virtual_path(&file.name),
            "artifact_url": artifact_url(&target.thread, &file.name),
        });
        if file.name != file.original {
            info["original_filename"] = file.original.clone().into();
        }
        if target.config.auto_convert_documents && files::convertible(&file.name) {
            match twin(&target, &file.name, &mut seen).await {
                Ok(md) => {
                    info["markdown_file"] = md.clone().into();
                    info["markdown_virtual_path"] = virtual_path(&md).into();
                    info["markdown_artifact_url"] = artifact_url(&target.thread, &md).into();
                }
                Err(why) => info["conversion_error"] = why.into(),
            }
        }
        listed.push(info);
    }
    let mut message = UPLOADED.replace("{n}", &listed.len().to_string());
    if !skipped.is_empty() {
        message.push_str(&SKIPPED.replace("{k}", &skipped.len().to_string()));
    }
    HttpResponse::Ok().json(json!({
        "success": skipped.is_empty(),
        "files": listed,
        "message": message,
        "skipped_files": skipped,
    }))
}

/// Reads every part, staging each `files` part under its claimed name (in pieces of at
/// most [`STAGE_CHUNK`]): the limits are checked as the bytes arrive, and a refusal
/// removes everything staged.
async fn read_files(target: &Target, mut multipart: actix_multipart::Multipart, used: u64) -> Read {
    let limits = &target.config;
    let uploads = target.uploads();
    let mut staged: Vec<Staged> = Vec::new();
    let mut skipped = Vec::new();
    let mut seen = HashSet::new();
    let mut parts = 0u64;
    let mut total = 0u64;
    // What a refusal staged is removed before it is answered.
    let refuse = |staged: &[Staged], response: HttpResponse| {
        let names: Vec<String> = staged.iter().map(|s| s.staging.clone()).collect();
        let uploads = Uploads(&*target.files);
        async move {
            if let Err(e) = uploads.discard(names).await {
                tracing::warn!("a refused upload's staging files stay until swept: {e}");
            }
            Read::Refused(response)
        }
    };
    let stalled = || {
        error(
            StatusCode::REQUEST_TIMEOUT,
            format!("the body stalled for {} s", BODY_DEADLINE.as_secs()),
        )
    };
    loop {
        let next = match tokio::time::timeout(BODY_DEADLINE, multipart.next()).await {
            Ok(next) => next,
            Err(_) => return refuse(&staged, stalled()).await,
        };
        let mut field = match next {
            None => break,
            Some(Ok(field)) => field,
            // A body with no part at all (only its closing boundary) has no file.
            Some(Err(_)) if parts == 0 => {
                return refuse(&staged, error(StatusCode::BAD_REQUEST, NO_FILES)).await
            }
            Some(Err(e)) => {
                let detail = format!("the body is not valid multipart/form-data: {e}");
                return refuse(&staged, error(StatusCode::BAD_REQUEST, detail)).await;
            }
        };
        if field.name() != Some("files") {
            // Another form field: read and ignored.
            if let Err(response) = drain(&mut field).await {
                return refuse(&staged, error(response.0, response.1)).await;
            }
            continue;
        }
        parts += 1;
        if parts > limits.max_files {
            let detail = TOO_MANY_FILES.replace("{n}", &limits.max_files.to_string());
            return refuse(&staged, error(StatusCode::PAYLOAD_TOO_LARGE, detail)).await;
        }
        let raw = field
            .content_disposition()
            .and_then(|d| d.get_filename())
            .unwrap_or_default()
            .to_owned();
        // Unsafe names are dropped silently, as DeerFlow does.
        let Some(original) = files::normalize(&raw) else {
            if let Err(response) = drain(&mut field).await {
                return refuse(&staged, error(response.0, response.1)).await;
            }
            continue;
        };
        let name = files::claim(&original, &mut seen);
        let safe = if files::is_staging(&name) {
            false
        } else {
            match uploads.destination_safe(&name).await {
                Ok(safe) => safe,
                Err(e) => return refuse(&staged, files_failed(&e)).await,
            }
        };
        if !safe {
            skipped.push(name);
            if let Err(response) = drain(&mut field).await {
                return refuse(&staged, error(response.0, response.1)).await;
            }
            continue;
        }
        let staging = files::staging_name();
        staged.push(Staged {
            staging: staging.clone(),
            name: name.clone(),
            original,
            size: 0,
        });
        let mut size = 0u64;
        let mut written = 0u64;
        let mut pending: Vec<u8> = Vec::new();
        loop {
            let chunk = match tokio::time::timeout(BODY_DEADLINE, field.next()).await {
                Err(_) => return refuse(&staged, stalled()).await,
                Ok(None) => None,
                Ok(Some(Err(e))) => {
                    let detail = format!("cannot read the body: {e}");
                    return refuse(&staged, error(StatusCode::BAD_REQUEST, detail)).await;
                }
                Ok(Some(Ok(chunk))) => Some(chunk),
            };
            if let Some(chunk) = &chunk {
                size += chunk.len() as u64;
                total += chunk.len() as u64;
                if size > limits.max_file_size {
                    let detail = FILE_TOO_LARGE.replace("{name}", &name);
                    return refuse(&staged, error(StatusCode::PAYLOAD_TOO_LARGE, detail)).await;
                }
                if total > limits.max_total_size {
                    let detail = TOTAL_TOO_LARGE.to_owned();
                    return refuse(&staged, error(StatusCode::PAYLOAD_TOO_LARGE, detail)).await;
                }
                if used.saturating_add(total) > limits.max_user_total_size {
                    let detail =
                        USER_QUOTA.replace("{limit}", &limits.max_user_total_size.to_string());
                    return refuse(&staged, error(StatusCode::PAYLOAD_TOO_LARGE, detail)).await;
                }
                pending.extend_from_slice(chunk);
            }
            // The file's first piece creates its staging file, even when it is empty.
            let last = chunk.is_none();
            if pending.len() >= STAGE_CHUNK || (last && (written == 0 || !pending.is_empty())) {
                let piece = std::mem::take(&mut pending);
                let length = piece.len() as u64;
                if let Err(e) = uploads.write_staged(&staging, written, piece).await {
                    return refuse(&staged, files_failed(&e)).await;
                }
                written += length;
            }
            if last {
                break;
            }
        }
        if let Some(last) = staged.last_mut() {
            last.size = size;
        }
    }
    Read::Done {
        staged,
        skipped,
        parts,
    }
}

/// Reads a part to its end (a dropped or skipped one), within the body's deadline.
async fn drain(field: &mut actix_multipart::Field) -> Result<(), (StatusCode, String)> {
    loop {
        match tokio::time::timeout(BODY_DEADLINE, field.next()).await {
            Err(_) => {
                return Err((
                    StatusCode::REQUEST_TIMEOUT,
                    format!("the body stalled for {} s", BODY_DEADLINE.as_secs()),
                ))
            }
            Ok(None) => return Ok(()),
            Ok(Some(Err(e))) => {
                return Err((
                    StatusCode::BAD_REQUEST,
                    format!("cannot read the body: {e}"),
                ))
            }
            Ok(Some(Ok(_))) => {}
        }
    }
}

/// Renames the staged files into place (the request was accepted): a name the user now
/// writes is nobody's twin any more, and an upload written again loses its old twin.
async fn commit(target: &Target, staged: Vec<Staged>) -> Result<Vec<Staged>, HttpResponse> {
    let files = staged
        .iter()
        .map(|s| StagedUpload {
            staging: s.staging.clone(),
            name: s.name.clone(),
        })
        .collect();
    match target.uploads().commit(files).await {
        Ok(()) => Ok(staged),
        Err(e) => Err(files_failed(&e)),
    }
}

/// Converts the upload `name` in the thread's sandbox and records its twin: the twin's
/// name, or why there is none.
async fn twin(target: &Target, name: &str, seen: &mut HashSet<String>) -> Result<String, String> {
    let uploads = target.uploads();
    let listing = uploads.list().await.map_err(|e| e.to_string())?;
    let taken: HashSet<String> = listing
        .files
        .into_iter()
        .map(|f| f.name)
        .filter(|n| !listing.twins.values().any(|t| t == n))
        .collect();
    // `{stem}.md`, claimed in the request's names; a user's file of that name is never
    // overwritten: the twin takes the next free name.
    let md = files::claim_where(
        &format!("{}.md", files::stem(name)),
        |n| !taken.contains(n),
        seen,
    );
    let staging = files::staging_name();
    let conversion = convert::Conversion {
        hosts: target.env.hosts.as_ref(),
        user: &target.user,
        thread: &target.thread,
        source: name,
        output: &staging,
        pdf_converter: target.config.pdf_converter,
        timeout_s: target.config.conversion_timeout_s,
    };
    let kept = match conversion.run().await {
        Err(e) => {
            let _ = uploads.discard(vec![staging]).await;
            Err(e.to_string())
        }
        Ok(_) => match uploads.keep_twin(name, &staging, &md, MAX_TWIN_BYTES).await {
            Ok(()) => Ok(()),
            Err(ThreadFileError::NotFound { .. }) => {
                Err(convert::ConversionError::NoOutput.to_string())
            }
            Err(ThreadFileError::Io { message, .. }) => Err(message),
            Err(e) => Err(format!("the Markdown cannot be kept: {e}")),
        },
    };
    match kept {
        Ok(()) => Ok(md),
        Err(why) => {
            seen.remove(&md);
            Err(why)
        }
    }
}

/// `GET /api/threads/{tid}/uploads/limits`.
pub(super) async fn limits(state: web::Data<State>, req: HttpRequest) -> HttpResponse {
    match target(&state, &req, ThreadNeed::Any).await {
        Ok(t) => HttpResponse::Ok().json(json!({
            "max_files": t.config.max_files,
            "max_file_size": t.config.max_file_size,
            "max_total_size": t.config.max_total_size,
            "max_user_total_size": t.config.max_user_total_size,
        })),
        Err(response) => response,
    }
}

/// `GET /api/threads/{tid}/uploads/list`: `{files, count}` by name, each with its
/// `markdown_file` when it has a twin.
pub(super) async fn list(state: web::Data<State>, req: HttpRequest) -> HttpResponse {
    let t = match target(&state, &req, ThreadNeed::Existing).await {
        Ok(t) => t,
        Err(response) => return response,
    };
    let listing = match t.uploads().list().await {
        Ok(listing) => listing,
        Err(e) => return files_failed(&e),
    };
    let manifest = &listing;
    let files: Vec<Value> = listing
        .files
        .iter()
        .map(|f| {
            let mut entry = json!({
                "filename": f.name,
                "size": f.size,
                "extension": files::suffix(&f.name),
                "modified": f.modified_ns as f64 / 1e9,
                "virtual_path": virtual_path(&f.name),
                "artifact_url": artifact_url(&t.thread, &f.name),
            });
            if let Some(md) = manifest.twins.get(&f.name) {
                entry["markdown_file"] = md.clone().into();
            }
            if let Some((upload, _)) = manifest.twins.iter().find(|(_, md)| **md == f.name) {
                entry["twin_of"] = upload.clone().into();
            }
            entry
        })
        .collect();
    HttpResponse::Ok().json(json!({"count": files.len(), "files": files}))
}

/// `DELETE /api/threads/{tid}/uploads/{filename}`: the file and its recorded twin.
pub(super) async fn delete(state: web::Data<State>, req: HttpRequest) -> HttpResponse {
    let t = match target(&state, &req, ThreadNeed::Existing).await {
        Ok(t) => t,
        Err(response) => return response,
    };
    let name = req
        .match_info()
        .get("filename")
        .unwrap_or_default()
        .to_owned();
    if files::normalize(&name).as_deref() != Some(name.as_str()) || files::is_staging(&name) {
        return error(StatusCode::BAD_REQUEST, INVALID_PATH);
    }
    match t.uploads().delete(&name).await {
        Ok(true) => HttpResponse::Ok().json(json!({
            "success": true,
            "message": format!("Deleted {name}"),
        })),
        Ok(false) => error(StatusCode::NOT_FOUND, FILE_NOT_FOUND.replace("{f}", &name)),
        Err(e) => files_failed(&e),
    }
}
