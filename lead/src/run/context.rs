//! Who and where a run is: its ids and the thread's directories on the lead's host
//! (`{base}/users/{user}/threads/{thread}/user-data/{workspace,uploads,outputs}`, the
//! same layout sandbox-host mounts at `/mnt/user-data`).

use std::path::{Path, PathBuf};

/// The virtual root of a thread's user data, as the model sees it.
pub const VIRTUAL_USER_DATA: &str = "/mnt/user-data";

/// A thread's host directories.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadPaths {
    user_data: PathBuf,
}

impl ThreadPaths {
    /// The thread `thread_id` of `user_id` under the data root `base`.
    pub fn new(base: &Path, user_id: &str, thread_id: &str) -> ThreadPaths {
        ThreadPaths {
            user_data: base
                .join("users")
                .join(user_id)
                .join("threads")
                .join(thread_id)
                .join("user-data"),
        }
    }

    /// `/mnt/user-data` on the host.
    pub fn user_data(&self) -> &Path {
        &self.user_data
    }

    /// `/mnt/user-data/outputs` on the host.
    pub fn outputs(&self) -> PathBuf {
        self.user_data.join("outputs")
    }

    /// Creates `workspace`, `uploads` and `outputs`.
    pub fn create(&self) -> std::io::Result<()> {
        for dir in ["workspace", "uploads", "outputs"] {
            std::fs::create_dir_all(self.user_data.join(dir))?;
        }
        Ok(())
    }
}

/// A run's identity and settings the tools and middlewares read.
#[derive(Clone, Debug)]
pub struct RunContext {
    pub run_id: String,
    pub user_id: String,
    pub thread_id: String,
    pub paths: ThreadPaths,
    /// Whether `ask_clarification` interrupts the run (a person can answer) or returns
    /// the "proceed with your best judgment" text.
    pub clarification_enabled: bool,
}
