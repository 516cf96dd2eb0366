//! The files a run presented, as the gateway sends them: only a presented file, only a
//! regular file inside the thread's outputs once links are resolved, read through the
//! run's thread files (this disk, or the sandbox-host replica that owns the thread).

use actix::prelude::*;
use antler_protocol::messages::{FileContent, ThreadFileError};

use super::RunManager;
use crate::runs::prepare::PrepareError;
use antler_engine::ThreadFiles;

/// Where the sandbox shows a thread's outputs.
const OUTPUTS_PREFIX: &str = "/mnt/user-data/outputs/";

/// The largest artifact the gateway sends.
pub const MAX_ARTIFACT_BYTES: u64 = 64 << 20;

/// A presented file's content, or why it is not sent.
#[derive(Debug)]
pub enum ArtifactContent {
    Bytes(Vec<u8>),
    /// Larger than [`MAX_ARTIFACT_BYTES`].
    TooLarge,
}

/// The content of a file run `run_id` presented (`path` as its artifacts list it,
/// `/mnt/user-data/outputs/...`), read through the run's thread files (this disk, or the
/// sandbox-host replica that owns the thread): only a presented file, only a regular file
/// inside the thread's outputs once links are resolved.
#[derive(Message)]
#[rtype(result = "Result<ArtifactContent, PrepareError>")]
pub struct RunArtifact {
    pub run_id: String,
    pub path: String,
}

impl Handler<RunArtifact> for RunManager {
    type Result = ResponseFuture<Result<ArtifactContent, PrepareError>>;

    fn handle(&mut self, msg: RunArtifact, _: &mut Context<Self>) -> Self::Result {
        let env = self.env.clone();
        let view = self.view(&msg.run_id);
        Box::pin(async move {
            let missing = || PrepareError::NoArtifact {
                run_id: msg.run_id.clone(),
                path: msg.path.clone(),
            };
            let view = view.await?;
            let presented = view["artifacts"]
                .as_array()
                .is_some_and(|a| a.iter().any(|p| p.as_str() == Some(msg.path.as_str())));
            let user = view["user"].as_str().unwrap_or_default().to_owned();
            let thread = view["thread"].as_str().unwrap_or_default().to_owned();
            if !presented || !msg.path.starts_with(OUTPUTS_PREFIX) {
                return Err(missing());
            }
            let paths = antler_engine::ThreadPaths::new(&env.base_dir().await?, &user, &thread);
            let files = env.thread_files(&paths, &user, &thread);
            match read_artifact(&*files, &msg.path).await {
                Ok(Some(content)) => Ok(content),
                Ok(None) => Err(missing()),
                Err(e) => Err(PrepareError::FilesUnavailable(e)),
            }
        })
    }
}

/// The content of the presented file `path` (`/mnt/user-data/outputs/...`) of a thread:
/// `None` unless it is a regular file inside the thread's outputs once links are resolved
/// (a link out is simply not there); `Err` when the thread's files cannot be had now.
pub async fn read_artifact(
    files: &dyn ThreadFiles,
    path: &str,
) -> Result<Option<ArtifactContent>, String> {
    if !path.starts_with(OUTPUTS_PREFIX) {
        return Ok(None);
    }
    let read = match files.read(path, MAX_ARTIFACT_BYTES).await {
        Ok(read) => read,
        Err(ThreadFileError::Unavailable(e)) => return Err(e),
        Err(_) => return Ok(None),
    };
    let inside = std::path::Path::new(&read.resolved)
        .strip_prefix("outputs")
        .is_ok_and(|rest| !rest.as_os_str().is_empty());
    Ok(match read.content {
        FileContent::Bytes(bytes) if inside && read.is_file => Some(ArtifactContent::Bytes(bytes)),
        FileContent::TooLarge if inside => Some(ArtifactContent::TooLarge),
        _ => None,
    })
}
