//! [`SandboxRequest::ThreadFiles`](antler_protocol::messages::SandboxRequest): a lead or
//! worker that cannot see this host's volume reads and writes a thread's own files here,
//! on the replica that owns the thread. The principal's ids are checked as for an acquire,
//! the operation runs on the blocking pool (never on an actor's thread) beneath a handle on
//! the thread's `user-data` (`antler_protocol::thread_dir`), and no sandbox is started.

use std::path::Path;

use antler_protocol::{
    messages::{Principal, ThreadFileError, ThreadFileOp, ThreadFileReply},
    thread_dir,
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
        op => thread_dir::serve(&paths.user_data, op),
    })
    .await
    .map_err(|e| ThreadFileError::Unavailable(format!("the file operation did not finish: {e}")))?
}
