//! A branch's copy of its parent thread's files (spec A.2): the parent's `user-data/`
//! copied into the new thread's, skipping symlinks and unfinished uploads
//! (`.upload-*.part`), off the actor. Best effort: what happened is the answer, never
//! an error (DeerFlow's `workspace_clone_mode`).

use std::path::Path;

use actix::prelude::*;
use antler_engine::{ThreadFilesMode, ThreadPaths};

use super::RunManager;

/// Copied (DeerFlow's `current_thread_best_effort`).
pub const COPIED: &str = "current_thread_best_effort";
/// The parent has no `user-data/`.
pub const NOT_FOUND: &str = "not_found";
/// The copy failed (or the files are on sandbox-host's volume, out of the lead's reach).
pub const FAILED: &str = "failed";

/// Copy `user`'s thread `from`'s `user-data/` into thread `to`'s; the mode it ended in.
#[derive(Message)]
#[rtype(result = "&'static str")]
pub struct CopyThreadUserData {
    pub user: String,
    pub from: String,
    pub to: String,
}

impl Handler<CopyThreadUserData> for RunManager {
    type Result = ResponseFuture<&'static str>;

    fn handle(&mut self, msg: CopyThreadUserData, _: &mut Context<Self>) -> Self::Result {
        let env = self.env.clone();
        Box::pin(async move {
            let ids_ok = [&msg.user, &msg.from, &msg.to]
                .into_iter()
                .all(|id| crate::runs::prepare::check_id("id", id).is_ok());
            if !ids_ok {
                return FAILED;
            }
            if !matches!(env.thread_files_mode(), ThreadFilesMode::Local) {
                tracing::warn!(thread = %msg.from, "the thread's files are on sandbox-host's volume: not copied to its branch");
                return FAILED;
            }
            let Ok(base) = env.base_dir().await else {
                return FAILED;
            };
            let from = ThreadPaths::new(&base, &msg.user, &msg.from)
                .user_data()
                .to_path_buf();
            let to = ThreadPaths::new(&base, &msg.user, &msg.to)
                .user_data()
                .to_path_buf();
            let copied = tokio::task::spawn_blocking(move || {
                if !from.is_dir() {
                    return Ok(NOT_FOUND);
                }
                copy_tree(&from, &to).map(|()| COPIED)
            })
            .await;
            match copied {
                Ok(Ok(mode)) => mode,
                Ok(Err(e)) => {
                    tracing::warn!(thread = %msg.from, branch = %msg.to, "cannot copy the thread's user-data to its branch: {}", e.kind());
                    FAILED
                }
                Err(_) => FAILED,
            }
        })
    }
}

/// Whether a directory entry named `name` stays behind.
fn skipped(name: &str) -> bool {
    name.starts_with(".upload-") && name.ends_with(".part")
}

/// Copies the tree `from` into `to` (created), without symlinks or unfinished uploads.
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let name = entry.file_name();
        if kind.is_symlink() || skipped(&name.to_string_lossy()) {
            continue;
        }
        let (source, target) = (entry.path(), to.join(&name));
        if kind.is_dir() {
            copy_tree(&source, &target)?;
        } else if kind.is_file() {
            std::fs::copy(&source, &target)?;
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_copy_leaves_symlinks_and_unfinished_uploads_behind() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("from");
        std::fs::create_dir_all(from.join("uploads")).unwrap();
        std::fs::write(from.join("uploads/a.txt"), "a").unwrap();
        std::fs::write(from.join("uploads/.upload-a.txt.part"), "partial").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", from.join("link")).unwrap();
        let to = dir.path().join("to");
        copy_tree(&from, &to).unwrap();
        assert_eq!(
            std::fs::read_to_string(to.join("uploads/a.txt")).unwrap(),
            "a"
        );
        assert!(!to.join("uploads/.upload-a.txt.part").exists());
        assert!(std::fs::symlink_metadata(to.join("link")).is_err());
    }
}
