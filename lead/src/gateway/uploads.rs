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

mod convert;
mod files;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

use actix_web::{http::StatusCode, web, HttpRequest, HttpResponse};
use antler_protocol::config::UploadsConfig;
use futures::StreamExt as _;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt as _;

use super::body::BODY_DEADLINE;
use super::runs_api::principal_of;
use super::{error, Refusal, State};
use crate::runs::prepare::{check_id, RunEnv};
use files::{Listed, Manifest, UploadsDir};

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
/// `501` in a cluster whose lead has no access to the thread directories.
pub const UPLOADS_NEED_LOCAL: &str = "uploads need the thread directories on the lead's machine: this cluster reaches them through sandbox-host, which does not take uploads yet";
/// The largest Markdown twin kept.
const MAX_TWIN_BYTES: u64 = 64 << 20;

/// The thread a request is for, once the caller may use it.
struct Target {
    env: Arc<RunEnv>,
    user: String,
    thread: String,
    base: PathBuf,
    dir: UploadsDir,
    config: UploadsConfig,
}

/// The caller's thread `{tid}`: 400 for a bad id, 404 for another user's thread, 501 in a
/// cluster whose lead cannot reach the thread directories.
async fn target(state: &State, req: &HttpRequest) -> Result<Target, HttpResponse> {
    let Some(principal) = principal_of(req) else {
        return Err(Refusal::Credential.response());
    };
    let thread = req.match_info().get("tid").unwrap_or_default().to_owned();
    check_id("thread", &thread).map_err(|e| error(StatusCode::BAD_REQUEST, e.to_string()))?;
    let user = principal
        .user
        .clone()
        .unwrap_or_else(|| "default".to_owned());
    let env = Arc::clone(&state.runs.env);
    if env.thread_files_mode() != antler_engine::ThreadFilesMode::Local {
        return Err(error(StatusCode::NOT_IMPLEMENTED, UPLOADS_NEED_LOCAL));
    }
    // The caller's own thread (threads are keyed by user and id: another user's thread
    // of the same id is another thread, never reached here). An upload creates it, as
    // DeerFlow's does; listing and deleting need it to exist.
    let creates = req.method() == actix_web::http::Method::POST;
    // The limits are the configuration's, whatever the thread (a client asks before its
    // first upload).
    let any_thread = req.path().ends_with("/uploads/limits");
    let (owner, id) = (user.clone(), thread.clone());
    let exists = env
        .store
        .call(move |store| {
            if creates {
                store.create_thread(&owner, &id, &Default::default())?;
                return Ok(true);
            }
            Ok(any_thread || store.thread(&owner, &id)?.is_some())
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
    Ok(Target {
        env,
        user,
        thread,
        base,
        dir: UploadsDir::new(&paths),
        config,
    })
}

/// Runs blocking file work off the gateway's thread; a failure is a 500 that names no path.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T, HttpResponse> {
    match web::block(work).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the uploads directory cannot be written: {}", e.kind()),
        )),
        Err(e) => Err(error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
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
    let target = match target(&state, &req).await {
        Ok(t) => t,
        Err(response) => return response,
    };
    let uploads = target.dir.uploads.clone();
    let (base, user) = (target.base.clone(), target.user.clone());
    let user_data = target.dir.user_data.clone();
    let prepared = blocking(move || {
        for dir in antler_protocol::thread_dir::USER_DATA_DIRS {
            std::fs::create_dir_all(user_data.join(dir))?;
        }
        files::sweep_stale(&uploads);
        Ok(files::user_usage(&base, &user))
    })
    .await;
    let used = match prepared {
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

/// Reads every part, staging each `files` part under its claimed name: the limits are
/// checked as the bytes arrive, and a refusal removes everything staged.
async fn read_files(target: &Target, mut multipart: actix_multipart::Multipart, used: u64) -> Read {
    let limits = &target.config;
    let mut staged: Vec<Staged> = Vec::new();
    let mut skipped = Vec::new();
    let mut seen = HashSet::new();
    let mut parts = 0u64;
    let mut total = 0u64;
    // What a refusal staged is removed (off the gateway's thread) before it is answered.
    let refuse = |staged: &[Staged], status: StatusCode, detail: String| {
        let paths: Vec<PathBuf> = staged
            .iter()
            .map(|s| target.dir.uploads.join(&s.staging))
            .collect();
        async move {
            let _ = web::block(move || {
                for path in paths {
                    let _ = std::fs::remove_file(path);
                }
            })
            .await;
            Read::Refused(error(status, detail))
        }
    };
    loop {
        let next = match tokio::time::timeout(BODY_DEADLINE, multipart.next()).await {
            Ok(next) => next,
            Err(_) => {
                return refuse(
                    &staged,
                    StatusCode::REQUEST_TIMEOUT,
                    format!("the body stalled for {} s", BODY_DEADLINE.as_secs()),
                )
                .await
            }
        };
        let mut field = match next {
            None => break,
            Some(Ok(field)) => field,
            // A body with no part at all (only its closing boundary) has no file.
            Some(Err(_)) if parts == 0 => {
                return refuse(&staged, StatusCode::BAD_REQUEST, NO_FILES.to_owned()).await
            }
            Some(Err(e)) => {
                return refuse(
                    &staged,
                    StatusCode::BAD_REQUEST,
                    format!("the body is not valid multipart/form-data: {e}"),
                )
                .await
            }
        };
        if field.name() != Some("files") {
            // Another form field: read and ignored.
            if let Err(response) = drain(&mut field).await {
                return refuse(&staged, response.0, response.1).await;
            }
            continue;
        }
        parts += 1;
        if parts > limits.max_files {
            return refuse(
                &staged,
                StatusCode::PAYLOAD_TOO_LARGE,
                TOO_MANY_FILES.replace("{n}", &limits.max_files.to_string()),
            )
            .await;
        }
        let raw = field
            .content_disposition()
            .and_then(|d| d.get_filename())
            .unwrap_or_default()
            .to_owned();
        // Unsafe names are dropped silently, as DeerFlow does.
        let Some(original) = files::normalize(&raw) else {
            if let Err(response) = drain(&mut field).await {
                return refuse(&staged, response.0, response.1).await;
            }
            continue;
        };
        let name = files::claim(&original, &mut seen);
        let (dir, checked) = (target.dir.uploads.clone(), name.clone());
        let unsafe_destination = web::block(move || files::unsafe_destination(&dir, &checked))
            .await
            .unwrap_or(true);
        if files::is_staging(&name) || unsafe_destination {
            skipped.push(name);
            if let Err(response) = drain(&mut field).await {
                return refuse(&staged, response.0, response.1).await;
            }
            continue;
        }
        let staging = files::staging_name();
        let path = target.dir.uploads.join(&staging);
        let opened = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&path)
            .await;
        let mut file = match opened {
            Ok(file) => file,
            Err(e) => {
                return refuse(
                    &staged,
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("the uploads directory cannot be written: {}", e.kind()),
                )
                .await
            }
        };
        staged.push(Staged {
            staging,
            name: name.clone(),
            original,
            size: 0,
        });
        let mut size = 0u64;
        loop {
            let chunk = match tokio::time::timeout(BODY_DEADLINE, field.next()).await {
                Err(_) => {
                    return refuse(
                        &staged,
                        StatusCode::REQUEST_TIMEOUT,
                        format!("the body stalled for {} s", BODY_DEADLINE.as_secs()),
                    )
                    .await
                }
                Ok(None) => break,
                Ok(Some(Err(e))) => {
                    return refuse(
                        &staged,
                        StatusCode::BAD_REQUEST,
                        format!("cannot read the body: {e}"),
                    )
                    .await
                }
                Ok(Some(Ok(chunk))) => chunk,
            };
            size += chunk.len() as u64;
            total += chunk.len() as u64;
            if size > limits.max_file_size {
                return refuse(
                    &staged,
                    StatusCode::PAYLOAD_TOO_LARGE,
                    FILE_TOO_LARGE.replace("{name}", &name),
                )
                .await;
            }
            if total > limits.max_total_size {
                return refuse(
                    &staged,
                    StatusCode::PAYLOAD_TOO_LARGE,
                    TOTAL_TOO_LARGE.to_owned(),
                )
                .await;
            }
            if used.saturating_add(total) > limits.max_user_total_size {
                return refuse(
                    &staged,
                    StatusCode::PAYLOAD_TOO_LARGE,
                    USER_QUOTA.replace("{limit}", &limits.max_user_total_size.to_string()),
                )
                .await;
            }
            if let Err(e) = file.write_all(&chunk).await {
                return refuse(
                    &staged,
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("the uploads directory cannot be written: {}", e.kind()),
                )
                .await;
            }
        }
        if let Err(e) = file.flush().await {
            return refuse(
                &staged,
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the uploads directory cannot be written: {}", e.kind()),
            )
            .await;
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
    let dir = target.dir.clone();
    blocking(move || {
        let mut manifest = Manifest::read(&dir.user_data);
        let mut done: Vec<Staged> = Vec::new();
        for file in staged {
            let from = dir.uploads.join(&file.staging);
            let renamed = std::fs::set_permissions(
                &from,
                std::os::unix::fs::PermissionsExt::from_mode(0o644),
            )
            .and_then(|()| std::fs::rename(&from, dir.uploads.join(&file.name)));
            if let Err(e) = renamed {
                let _ = std::fs::remove_file(&from);
                for earlier in &done {
                    let _ = std::fs::remove_file(dir.uploads.join(&earlier.name));
                }
                return Err(e);
            }
            manifest.forget(&file.name);
            if let Some(old) = manifest.twins.remove(&file.name) {
                if files::regular_file(&dir.uploads, &old).is_some() {
                    let _ = std::fs::remove_file(dir.uploads.join(&old));
                }
            }
            done.push(file);
        }
        manifest.write(&dir.user_data)?;
        Ok(done)
    })
    .await
}

/// Converts the upload `name` in the thread's sandbox and records its twin: the twin's
/// name, or why there is none.
async fn twin(target: &Target, name: &str, seen: &mut HashSet<String>) -> Result<String, String> {
    let dir = target.dir.clone();
    let taken = {
        let dir = dir.clone();
        web::block(move || {
            let manifest = Manifest::read(&dir.user_data);
            files::list(&dir.uploads)
                .into_iter()
                .map(|l: Listed| l.name)
                .filter(|n| !manifest.is_twin(n))
                .collect::<HashSet<String>>()
        })
        .await
        .map_err(|e| e.to_string())?
    };
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
    let converted = conversion.run().await;
    let source = name.to_owned();
    let twin = md.clone();
    let kept = web::block(move || -> Result<(), String> {
        let staged = dir.uploads.join(&staging);
        let outcome = match converted {
            Err(e) => Err(e.to_string()),
            Ok(_) => match files::regular_file(&dir.uploads, &staging) {
                None => Err(convert::ConversionError::NoOutput.to_string()),
                Some(meta) if meta.len() > MAX_TWIN_BYTES => Err(format!(
                    "the Markdown is larger than {MAX_TWIN_BYTES} bytes"
                )),
                Some(_) => std::fs::rename(&staged, dir.uploads.join(&twin))
                    .map_err(|e| format!("the Markdown cannot be kept: {}", e.kind())),
            },
        };
        let _ = std::fs::remove_file(&staged);
        outcome?;
        let mut manifest = Manifest::read(&dir.user_data);
        manifest.forget(&twin);
        manifest.twins.insert(source, twin);
        manifest
            .write(&dir.user_data)
            .map_err(|e| format!("the twin cannot be recorded: {}", e.kind()))
    })
    .await
    .map_err(|e| e.to_string())?;
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
    match target(&state, &req).await {
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
    let t = match target(&state, &req).await {
        Ok(t) => t,
        Err(response) => return response,
    };
    let dir = t.dir.clone();
    let listed =
        blocking(move || Ok((files::list(&dir.uploads), Manifest::read(&dir.user_data)))).await;
    let (listed, manifest) = match listed {
        Ok(l) => l,
        Err(response) => return response,
    };
    let files: Vec<Value> = listed
        .iter()
        .map(|f| {
            let mut entry = json!({
                "filename": f.name,
                "size": f.size,
                "extension": files::suffix(&f.name),
                "modified": f.modified,
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
    let t = match target(&state, &req).await {
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
    let dir = t.dir.clone();
    let deleting = name.clone();
    match blocking(move || dir.delete(&deleting)).await {
        Ok(true) => HttpResponse::Ok().json(json!({
            "success": true,
            "message": format!("Deleted {name}"),
        })),
        Ok(false) => error(StatusCode::NOT_FOUND, FILE_NOT_FOUND.replace("{f}", &name)),
        Err(response) => response,
    }
}
