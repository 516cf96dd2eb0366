//! The local cluster's runtime directory: created 0700 so no other local user can reach
//! its sockets (each 0600), holding the sockets, the cluster token (0600), the lead's pid
//! file and the children's logs. Names inside it are fixed, so every process finds them.

use std::{
    fs,
    io::{self, Write},
    os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt},
    path::{Path, PathBuf},
};

use crate::handshake::Role;

/// The environment variable that carries the cluster token (TCP mode, or instead of a file).
pub const TOKEN_ENV: &str = "ANTLER_CLUSTER_TOKEN";

/// A runtime directory that exists with mode 0700.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeDir {
    root: PathBuf,
}

impl RuntimeDir {
    /// The default location: `$XDG_RUNTIME_DIR/antler`, else `$XDG_STATE_HOME/antler/run`,
    /// else `~/.local/state/antler/run`, else `/tmp/antler-UID`.
    pub fn default_path() -> PathBuf {
        if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
            return PathBuf::from(d).join("antler");
        }
        if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
            return PathBuf::from(d).join("antler").join("run");
        }
        if let Some(h) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
            return PathBuf::from(h).join(".local/state/antler/run");
        }
        // SAFETY: getuid has no preconditions and cannot fail.
        let uid = unsafe { libc::getuid() };
        PathBuf::from(format!("/tmp/antler-{uid}"))
    }

    /// Opens `root`, creating it (and its parents) with mode 0700. An existing directory
    /// owned by another user is refused; one with wider permissions is narrowed to 0700.
    pub fn open(root: impl Into<PathBuf>) -> io::Result<RuntimeDir> {
        let root = root.into();
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&root)?;
        let meta = fs::metadata(&root)?;
        // SAFETY: getuid has no preconditions and cannot fail.
        let uid = unsafe { libc::getuid() };
        if meta.uid() != uid {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "runtime directory {} belongs to uid {}, not to this user ({uid})",
                    root.display(),
                    meta.uid()
                ),
            ));
        }
        if meta.mode() & 0o077 != 0 {
            fs::set_permissions(&root, fs::Permissions::from_mode(0o700))?;
        }
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(root.join("logs"))?;
        Ok(RuntimeDir { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The socket of the process with `role` (and worker `index` for subagents).
    pub fn socket(&self, role: Role, index: u32) -> PathBuf {
        match role {
            Role::Subagent => self.root.join(format!("subagent-{index}.sock")),
            other => self.root.join(format!("{}.sock", other.as_str())),
        }
    }

    /// The log file of a child process.
    pub fn log(&self, role: Role, index: u32) -> PathBuf {
        match role {
            Role::Subagent => self.root.join("logs").join(format!("subagent-{index}.log")),
            other => self
                .root
                .join("logs")
                .join(format!("{}.log", other.as_str())),
        }
    }

    pub fn token_path(&self) -> PathBuf {
        self.root.join("cluster.token")
    }

    pub fn pid_path(&self) -> PathBuf {
        self.root.join("lead.pid")
    }

    /// Writes a fresh random token for this cluster (0600) and returns it.
    pub fn generate_token(&self) -> io::Result<String> {
        let token = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        write_private(&self.token_path(), token.as_bytes())?;
        Ok(token)
    }

    /// Reads the cluster token written by `antler up`.
    pub fn read_token(&self) -> io::Result<String> {
        read_token_file(&self.token_path())
    }
}

/// Reads a token file, trimming whitespace; an empty file is an error.
pub fn read_token_file(path: &Path) -> io::Result<String> {
    let t = fs::read_to_string(path)?.trim().to_string();
    if t.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("token file {} is empty", path.display()),
        ));
    }
    Ok(t)
}

/// Writes `bytes` to `path` with mode 0600, atomically (temporary file, then rename).
pub fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_private_and_narrowed_when_too_open() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("a/b/run");
        let rd = RuntimeDir::open(&root).unwrap();
        let mode = fs::metadata(rd.root()).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
        fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
        RuntimeDir::open(&root).unwrap();
        assert_eq!(fs::metadata(&root).unwrap().mode() & 0o777, 0o700);
        let tok = rd.generate_token().unwrap();
        assert_eq!(rd.read_token().unwrap(), tok);
        assert_eq!(fs::metadata(rd.token_path()).unwrap().mode() & 0o777, 0o600);
        assert!(rd.socket(Role::Subagent, 3).ends_with("subagent-3.sock"));
    }
}
