//! A deleted thread's sandbox and files: the sandbox-host replica that owns the thread
//! destroys the thread's warm sandbox (a thread made again under the same id never gets
//! one whose mounts hold the deleted directories), then removes its
//! `users/{uid}/threads/{tid}` directory (`ThreadFileOp::RemoveThread`); a sandbox still
//! leased keeps both. When the lead shares the disk and sandbox-host cannot be reached, no
//! sandbox of it is alive: the directory is removed here, off the actor.

use actix::prelude::*;
use antler_engine::{ThreadFilesMode, ThreadPaths};
use antler_protocol::messages::{ThreadFileError, ThreadFileOp};

use super::RunManager;

/// Why a thread's files were not removed.
#[derive(Debug, thiserror::Error)]
pub enum RemoveThreadError {
    /// A run or an MCP session holds the thread's sandbox.
    #[error("the thread's sandbox is in use")]
    InUse,
    #[error("cannot remove the thread's files: {0}")]
    Failed(String),
}

/// Remove the sandbox and files of `user`'s thread `thread` (the thread has no run in
/// flight).
#[derive(Message)]
#[rtype(result = "Result<(), RemoveThreadError>")]
pub struct RemoveThreadFiles {
    pub user: String,
    pub thread: String,
}

impl Handler<RemoveThreadFiles> for RunManager {
    type Result = ResponseFuture<Result<(), RemoveThreadError>>;

    fn handle(&mut self, msg: RemoveThreadFiles, _: &mut Context<Self>) -> Self::Result {
        let env = self.env.clone();
        Box::pin(async move {
            let failed = |e: &dyn std::fmt::Display| RemoveThreadError::Failed(e.to_string());
            crate::runs::prepare::check_id("user", &msg.user).map_err(|e| failed(&e))?;
            crate::runs::prepare::check_id("thread", &msg.thread).map_err(|e| failed(&e))?;
            let base = env.base_dir().await.map_err(|e| failed(&e))?;
            let paths = ThreadPaths::new(&base, &msg.user, &msg.thread);
            let host = ThreadFilesMode::SandboxHost.for_thread(
                &paths,
                env.hosts.clone(),
                &msg.user,
                &msg.thread,
            );
            match host.op(ThreadFileOp::RemoveThread).await {
                Ok(_) => return Ok(()),
                Err(ThreadFileError::InUse) => return Err(RemoveThreadError::InUse),
                Err(ThreadFileError::Unavailable(e))
                    if matches!(env.thread_files_mode(), ThreadFilesMode::Local) =>
                {
                    tracing::warn!(
                        "sandbox-host did not remove the thread ({e}): removing its directory here"
                    );
                }
                Err(e) => return Err(failed(&e)),
            }
            let Some(dir) = paths.user_data().parent().map(std::path::Path::to_path_buf) else {
                return Ok(());
            };
            match tokio::fs::remove_dir_all(&dir).await {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(failed(&std::io::Error::from(e.kind()))),
            }
        })
    }
}
