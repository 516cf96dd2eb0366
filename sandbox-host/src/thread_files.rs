//! [`SandboxRequest::ThreadFiles`](antler_protocol::messages::SandboxRequest): a lead or
//! worker that cannot see this host's volume reads and writes a thread's own files here,
//! on the replica that owns the thread. The principal's ids are checked as for an acquire,
//! the operation runs on the blocking pool (never on an actor's thread) beneath a handle on
//! the thread's `user-data` (`antler_protocol::thread_dir`; the uploads routes' steps in
//! `antler_protocol::uploads_dir`), and no sandbox is started. A user's upload total here
//! is counted for the lead's per-user limit (`SandboxRequest::UploadsUsage`).

use std::path::Path;

use antler_protocol::{
    messages::{Principal, ThreadFileError, ThreadFileOp, ThreadFileReply, UploadOp},
    thread_dir, uploads_dir,
};

use crate::{identity, paths::ThreadPaths};

/// Runs `op` on the thread directories of `principal` under `base_dir`.
pub async fn serve(
    base_dir: &Path,
    principal: Principal,
    op: ThreadFileOp,
) -> Result<ThreadFileReply, ThreadFileError> {
    identity::validate(&principal).map_err(|e| ThreadFileError::InvalidIdentity(e.to_string()))?;
    let paths = ThreadPaths::new(base_dir, &principal.user_id, &principal.thread_id);
    tokio::task::spawn_blocking(move || match op {
        // The sandbox's own layout and modes (an unprivileged sandbox user writes them).
        ThreadFileOp::EnsureDirs => {
            paths.create().map_err(|e| ThreadFileError::Io {
                path: thread_dir::VIRTUAL_USER_DATA.to_owned(),
                message: std::io::Error::from(e.kind()).to_string(),
            })?;
            Ok(ThreadFileReply::Done)
        }
        // The upload routes' directories too, before the staging files are swept.
        ThreadFileOp::Uploads(UploadOp::Prepare) => {
            paths.create().map_err(|e| ThreadFileError::Io {
                path: thread_dir::VIRTUAL_USER_DATA.to_owned(),
                message: std::io::Error::from(e.kind()).to_string(),
            })?;
            uploads_dir::serve(&paths.user_data, UploadOp::Prepare)
        }
        op => thread_dir::serve(&paths.user_data, op),
    })
    .await
    .map_err(|e| ThreadFileError::Unavailable(format!("the file operation did not finish: {e}")))?
}

/// The bytes `user_id` keeps in the uploads of its threads under `base_dir` (this
/// replica's share of the user's total).
pub async fn uploads_usage(base_dir: &Path, user_id: String) -> Result<u64, ThreadFileError> {
    // A user id is checked as an acquire checks it (any valid thread id will do).
    let principal = Principal {
        user_id,
        thread_id: "usage".to_owned(),
        roles: Vec::new(),
    };
    identity::validate(&principal).map_err(|e| ThreadFileError::InvalidIdentity(e.to_string()))?;
    let base = base_dir.to_path_buf();
    tokio::task::spawn_blocking(move || uploads_dir::user_usage(&base, &principal.user_id))
        .await
        .map_err(|e| ThreadFileError::Unavailable(format!("the usage was not counted: {e}")))
}
