//! A deleted thread's files: its `users/{uid}/threads/{tid}` directory on sandbox-host's
//! base directory, removed off the actor: on this disk when the lead shares it, else by
//! the sandbox-host replica that owns the thread (`ThreadFileOp::RemoveThread`).

use actix::prelude::*;
use antler_engine::{ThreadFilesMode, ThreadPaths};
use antler_protocol::messages::ThreadFileOp;

use super::RunManager;
use crate::runs::prepare::PrepareError;

/// Remove the files of `user`'s thread `thread` (the thread has no run in flight).
#[derive(Message)]
#[rtype(result = "Result<(), PrepareError>")]
pub struct RemoveThreadFiles {
    pub user: String,
    pub thread: String,
}

impl Handler<RemoveThreadFiles> for RunManager {
    type Result = ResponseFuture<Result<(), PrepareError>>;

    fn handle(&mut self, msg: RemoveThreadFiles, _: &mut Context<Self>) -> Self::Result {
        let env = self.env.clone();
        Box::pin(async move {
            crate::runs::prepare::check_id("user", &msg.user)?;
            crate::runs::prepare::check_id("thread", &msg.thread)?;
            let base = env.base_dir().await?;
            let paths = ThreadPaths::new(&base, &msg.user, &msg.thread);
            if !matches!(env.thread_files_mode(), ThreadFilesMode::Local) {
                let files = env.thread_files(&paths, &msg.user, &msg.thread);
                return files
                    .op(ThreadFileOp::RemoveThread)
                    .await
                    .map(drop)
                    .map_err(|e| {
                        PrepareError::Config(format!("cannot remove the thread's files: {e}"))
                    });
            }
            let Some(dir) = paths.user_data().parent().map(std::path::Path::to_path_buf) else {
                return Ok(());
            };
            match tokio::fs::remove_dir_all(&dir).await {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(PrepareError::Config(format!(
                    "cannot remove the thread's files: {}",
                    e.kind()
                ))),
            }
        })
    }
}
