//! A thread's own files: [`ThreadPaths`], its directories on the lead's host
//! (`{base}/users/{user}/threads/{thread}/user-data/{workspace,uploads,outputs}`, the same
//! layout sandbox-host mounts at `/mnt/user-data`), and [`ThreadFiles`], how a run (the
//! lead's, or a subagent's on a worker) reaches them: spill files, `view_image`, `present_files`,
//! `list_uploaded_files`, `web_capture`'s screenshots, settlement's snapshots, the thread directories and artifact
//! downloads. [`LocalThreadFiles`] works on this machine's disk (local mode, the default);
//! [`HostThreadFiles`] asks the sandbox-host replica that owns the thread (a cluster whose
//! lead and workers have no access to its volume). Both run the same operations
//! (`antler_protocol::thread_dir`), beneath a handle on the thread's `user-data`, and
//! never on the caller's thread.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use antler_protocol::calls::SandboxCalls;
use antler_protocol::messages::{
    FileContent, FileRead, ListedFile, Principal, ThreadFileError, ThreadFileOp, ThreadFileReply,
};
use antler_protocol::thread_dir;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use super::hosts::ToolHosts;

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

    /// `/mnt/user-data/workspace` on the host (a pooled stdio MCP server's working
    /// directory and root).
    pub fn workspace(&self) -> PathBuf {
        self.user_data.join("workspace")
    }

    /// `/mnt/user-data/outputs` on the host.
    pub fn outputs(&self) -> PathBuf {
        self.user_data.join("outputs")
    }

    /// `/mnt/user-data/uploads` on the host.
    pub fn uploads(&self) -> PathBuf {
        self.user_data.join("uploads")
    }

    /// The thread's files on this machine's disk, under these directories.
    pub fn local_files(&self) -> Arc<dyn ThreadFiles> {
        Arc::new(LocalThreadFiles::new(self))
    }

    /// Creates `workspace`, `uploads` and `outputs`.
    pub fn create(&self) -> std::io::Result<()> {
        for dir in ["workspace", "uploads", "outputs"] {
            std::fs::create_dir_all(self.user_data.join(dir))?;
        }
        Ok(())
    }
}

/// The largest piece one request to sandbox-host reads (well under the frame limit).
pub const HOST_READ_CHUNK: u64 = 4 << 20;
/// The deadline of one thread file request to sandbox-host.
pub const HOST_FILES_TIMEOUT: Duration = Duration::from_secs(30);

/// Which [`ThreadFiles`] a run uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThreadFilesMode {
    /// The thread directories on this machine's disk.
    #[default]
    Local,
    /// Through the sandbox-host replica that owns the thread.
    SandboxHost,
}

impl ThreadFilesMode {
    /// The thread files of (`user`, `thread`), whose directories are `paths` when local,
    /// reached through `hosts` otherwise.
    pub fn for_thread(
        self,
        paths: &ThreadPaths,
        hosts: Arc<dyn ToolHosts>,
        user: &str,
        thread: &str,
    ) -> Arc<dyn ThreadFiles> {
        match self {
            ThreadFilesMode::Local => Arc::new(LocalThreadFiles::new(paths)),
            ThreadFilesMode::SandboxHost => Arc::new(HostThreadFiles::new(hosts, user, thread)),
        }
    }
}

/// One thread's files. Callers use the typed methods on `dyn ThreadFiles`.
pub trait ThreadFiles: Send + Sync + fmt::Debug {
    /// Runs one operation.
    fn op(&self, op: ThreadFileOp) -> BoxFuture<'_, Result<ThreadFileReply, ThreadFileError>>;

    /// The most one read operation asks for.
    fn read_chunk(&self) -> u64;
}

fn unexpected(reply: ThreadFileReply) -> ThreadFileError {
    ThreadFileError::Unavailable(format!("unexpected reply: {reply:?}"))
}

impl dyn ThreadFiles + '_ {
    /// Creates `workspace`, `uploads` and `outputs`.
    pub async fn ensure_dirs(&self) -> Result<(), ThreadFileError> {
        match self.op(ThreadFileOp::EnsureDirs).await? {
            ThreadFileReply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Where the virtual `path` really is, relative to `user-data`.
    pub async fn resolve(&self, path: &str) -> Result<PathBuf, ThreadFileError> {
        match self.op(ThreadFileOp::Resolve { path: path.into() }).await? {
            ThreadFileReply::Resolved(real) => Ok(PathBuf::from(real)),
            other => Err(unexpected(other)),
        }
    }

    /// The virtual `path`'s file, whole, when it is a regular file of at most `max_size`
    /// bytes (in pieces of [`ThreadFiles::read_chunk`]). Bytes that do not add up to the
    /// size mean the file changed during the read.
    pub async fn read(&self, path: &str, max_size: u64) -> Result<FileRead, ThreadFileError> {
        let chunk = self.read_chunk().min(max_size.saturating_add(1)).max(1);
        let mut whole = self.read_at(path, 0, chunk, max_size).await?;
        let mut bytes = match std::mem::replace(&mut whole.content, FileContent::Unreadable) {
            FileContent::Bytes(bytes) => bytes,
            other => {
                whole.content = other;
                return Ok(whole);
            }
        };
        let mut last = bytes.len() as u64;
        while last == chunk && (bytes.len() as u64) < whole.size && bytes.len() as u64 <= max_size {
            let next = self
                .read_at(path, bytes.len() as u64, chunk, max_size)
                .await?;
            match next.content {
                FileContent::Bytes(piece) => {
                    last = piece.len() as u64;
                    bytes.extend_from_slice(&piece);
                }
                other => {
                    return Ok(FileRead {
                        content: other,
                        ..next
                    })
                }
            }
        }
        whole.content = FileContent::Bytes(bytes);
        Ok(whole)
    }

    async fn read_at(
        &self,
        path: &str,
        offset: u64,
        len: u64,
        max_size: u64,
    ) -> Result<FileRead, ThreadFileError> {
        let op = ThreadFileOp::Read {
            path: path.into(),
            offset,
            len,
            max_size,
        };
        match self.op(op).await? {
            ThreadFileReply::Read(read) => Ok(read),
            other => Err(unexpected(other)),
        }
    }

    /// Writes the spill file `outputs/.tool-results/{name}`.
    pub async fn write_spill(&self, name: &str, content: &str) -> Result<(), ThreadFileError> {
        let op = ThreadFileOp::WriteSpill {
            name: name.into(),
            content: content.as_bytes().to_vec(),
        };
        match self.op(op).await? {
            ThreadFileReply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Writes `content` as a new file directly under `outputs`, named `name` or, when that
    /// is taken, `{stem}-1{ext}`, `{stem}-2{ext}`, ...; never over an existing file.
    /// Returns the virtual path written.
    pub async fn write_output(
        &self,
        name: &str,
        content: Vec<u8>,
    ) -> Result<String, ThreadFileError> {
        let op = ThreadFileOp::WriteOutput {
            name: name.into(),
            content,
        };
        match self.op(op).await? {
            ThreadFileReply::Written(path) => Ok(path),
            other => Err(unexpected(other)),
        }
    }

    /// The regular files under `outputs` (not `.tool-results`): virtual path ->
    /// (size, modification ns).
    pub async fn snapshot_outputs(&self) -> Result<BTreeMap<String, (u64, u128)>, ThreadFileError> {
        match self.op(ThreadFileOp::SnapshotOutputs).await? {
            ThreadFileReply::Snapshot(files) => Ok(files),
            other => Err(unexpected(other)),
        }
    }

    /// The regular files directly in the virtual directory `path`.
    pub async fn list_files(&self, path: &str) -> Result<Vec<ListedFile>, ThreadFileError> {
        match self
            .op(ThreadFileOp::ListFiles { path: path.into() })
            .await?
        {
            ThreadFileReply::Files(files) => Ok(files),
            other => Err(unexpected(other)),
        }
    }
}

/// The thread's directories on this machine's disk (today's behaviour in local mode).
#[derive(Clone, Debug)]
pub struct LocalThreadFiles {
    user_data: PathBuf,
}

impl LocalThreadFiles {
    pub fn new(paths: &ThreadPaths) -> LocalThreadFiles {
        LocalThreadFiles {
            user_data: paths.user_data().to_path_buf(),
        }
    }
}

impl ThreadFiles for LocalThreadFiles {
    fn op(&self, op: ThreadFileOp) -> BoxFuture<'_, Result<ThreadFileReply, ThreadFileError>> {
        let user_data = self.user_data.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || thread_dir::serve(&user_data, op))
                .await
                .map_err(|e| {
                    ThreadFileError::Unavailable(format!("the file operation did not finish: {e}"))
                })?
        })
    }

    fn read_chunk(&self) -> u64 {
        u64::MAX
    }
}

/// The thread's directories on the sandbox-host replica that owns the thread
/// (`SandboxRequest::ThreadFiles`, pinned to the thread's sandbox id).
pub struct HostThreadFiles {
    hosts: Arc<dyn ToolHosts>,
    principal: Principal,
    timeout: Duration,
}

impl HostThreadFiles {
    pub fn new(hosts: Arc<dyn ToolHosts>, user: &str, thread: &str) -> HostThreadFiles {
        HostThreadFiles {
            hosts,
            principal: Principal {
                user_id: user.to_owned(),
                thread_id: thread.to_owned(),
                roles: Vec::new(),
            },
            timeout: HOST_FILES_TIMEOUT,
        }
    }
}

impl fmt::Debug for HostThreadFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostThreadFiles")
            .field("user_id", &self.principal.user_id)
            .field("thread_id", &self.principal.thread_id)
            .finish_non_exhaustive()
    }
}

impl ThreadFiles for HostThreadFiles {
    fn op(&self, op: ThreadFileOp) -> BoxFuture<'_, Result<ThreadFileReply, ThreadFileError>> {
        Box::pin(async move {
            self.hosts
                .thread_files(self.principal.clone(), op, self.timeout)
                .await
                .map_err(|e| ThreadFileError::Unavailable(e.to_string()))?
        })
    }

    fn read_chunk(&self) -> u64 {
        HOST_READ_CHUNK
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_read_in_pieces_is_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let paths = ThreadPaths::new(dir.path(), "u", "t");
        paths.create().unwrap();
        let content: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(paths.outputs().join("big.bin"), &content).unwrap();

        /// Local files read 3 KiB at a time, as a host's would be in frames.
        #[derive(Debug)]
        struct Pieces(LocalThreadFiles);
        impl ThreadFiles for Pieces {
            fn op(
                &self,
                op: ThreadFileOp,
            ) -> BoxFuture<'_, Result<ThreadFileReply, ThreadFileError>> {
                self.0.op(op)
            }
            fn read_chunk(&self) -> u64 {
                3 * 1024
            }
        }
        let files: Arc<dyn ThreadFiles> = Arc::new(Pieces(LocalThreadFiles::new(&paths)));
        let read = files
            .read("/mnt/user-data/outputs/big.bin", 20_000)
            .await
            .unwrap();
        assert_eq!(read.size, 10_000);
        assert_eq!(read.content, FileContent::Bytes(content));
        let small = files
            .read("/mnt/user-data/outputs/big.bin", 9_999)
            .await
            .unwrap();
        assert_eq!(small.content, FileContent::TooLarge);
    }
}
