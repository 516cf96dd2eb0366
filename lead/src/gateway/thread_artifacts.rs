//! `GET /api/threads/{tid}/artifacts/{path}` (DeerFlow's route, the `artifact_url` an upload
//! answers): a file of the caller's own thread, by its sandbox path
//! (`mnt/user-data/{uploads,outputs,workspace}/...`), read through the thread's files (this
//! disk, or the sandbox-host replica that owns the thread) beneath the thread's
//! `user-data` (a `..` or a link out is simply not there), sent as an attachment with
//! `nosniff` and a sandbox CSP so an HTML file never runs as the gateway's page.

use actix_web::{http::StatusCode, web, HttpRequest, HttpResponse};
use antler_protocol::messages::{FileContent, ThreadFileError};

use super::caller::OwnThread;
use super::{error, State};
use crate::runs::manager::MAX_ARTIFACT_BYTES;

/// The directories of `user-data` a thread's artifacts come from.
const AREAS: [&str; 3] = ["uploads", "outputs", "workspace"];

/// `GET /api/threads/{tid}/artifacts/{path:.*}`.
pub(super) async fn thread_artifact(
    state: web::Data<State>,
    req: HttpRequest,
    own: OwnThread,
) -> HttpResponse {
    let OwnThread {
        user, id: thread, ..
    } = own;
    let path = req.match_info().get("path").unwrap_or_default().to_owned();
    let not_found = || error(StatusCode::NOT_FOUND, format!("Artifact not found: {path}"));
    let virtual_path = format!("/{}", path.trim_start_matches('/'));
    if !virtual_path.starts_with("/mnt/user-data/") {
        return not_found();
    }
    let env = &state.runs.env;
    let base = match env.base_dir().await {
        Ok(base) => base,
        Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    };
    let paths = antler_engine::ThreadPaths::new(&base, &user, &thread);
    let files = env.thread_files(&paths, &user, &thread);
    let read = match files.read(&virtual_path, MAX_ARTIFACT_BYTES).await {
        Ok(read) => read,
        Err(ThreadFileError::Unavailable(e)) => return error(StatusCode::SERVICE_UNAVAILABLE, e),
        Err(_) => return not_found(),
    };
    let inside = std::path::Path::new(&read.resolved)
        .components()
        .next()
        .and_then(|c| c.as_os_str().to_str())
        .is_some_and(|area| AREAS.contains(&area));
    let bytes = match read.content {
        FileContent::Bytes(bytes) if inside && read.is_file => bytes,
        FileContent::TooLarge if inside => {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the artifact is larger than {MAX_ARTIFACT_BYTES} bytes"),
            )
        }
        _ => return not_found(),
    };
    super::runs_api::attachment(&virtual_path, bytes)
}
