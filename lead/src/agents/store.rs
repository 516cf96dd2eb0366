//! Custom agents on disk (DeerFlow's `FileAgentStore`): `{base}/users/{user}/agents/{name}/`
//! holds `config.yaml` and `SOUL.md`; `{base}/users/{user}/SOUL.md` is the user's default
//! agent's soul; `{base}/agents/{name}/` (the legacy shared layout) and `{base}/SOUL.md` (the
//! operator's global soul) are never written by a run. Invariants: a name is checked before it becomes a path; a reader never
//! sees a half-written file (each is staged under a temporary name in its directory, then
//! renamed into place); a failed write leaves what was there before, and removes the
//! agent directory (and any parent) it created.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// An agent's config file.
pub const CONFIG_FILENAME: &str = "config.yaml";
/// An agent's soul (`SOUL_FILENAME`).
pub const SOUL_FILENAME: &str = "SOUL.md";
/// `AGENT_NAME_PATTERN`, as DeerFlow prints it.
pub const AGENT_NAME_PATTERN: &str = "^[A-Za-z0-9-]+$";
/// `validate_agent_name`'s error; `{name}` as given.
pub const INVALID_AGENT_NAME: &str = "Invalid agent name '{name}'. Must match pattern: {pattern}";

/// `validate_agent_name`: ASCII letters, digits and `-`, at least one. This is what keeps
/// `/`, `..` and the empty name out of the paths below.
pub fn validate_agent_name(name: &str) -> Result<&str, String> {
    if !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        return Ok(name);
    }
    Err(INVALID_AGENT_NAME
        .replacen("{name}", name, 1)
        .replacen("{pattern}", AGENT_NAME_PATTERN, 1))
}

/// `Paths.user_agent_dir`: where `user_id`'s agent `name` (already validated) lives.
pub fn user_agent_dir(base: &Path, user_id: &str, name: &str) -> PathBuf {
    base.join("users").join(user_id).join("agents").join(name)
}

/// `user_id`'s own default agent: its SOUL lives here, beside its custom agents. The
/// global `{base}/SOUL.md` is the operator's file, read when a user has none, never
/// written by a run.
pub fn user_default_dir(base: &Path, user_id: &str) -> PathBuf {
    base.join("users").join(user_id)
}

/// `Paths.agent_dir`: the legacy shared layout, read only.
pub fn legacy_agent_dir(base: &Path, name: &str) -> PathBuf {
    base.join("agents").join(name)
}

/// Why a write failed. The texts name files, never host paths: the model reads them.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("cannot create the agent directory: {0}")]
    CreateDir(#[source] io::Error),
    #[error("cannot write {file}: {source}")]
    Stage {
        file: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot replace {file}: {source}")]
    Replace {
        file: String,
        #[source]
        source: io::Error,
    },
}

/// Puts `files` (name, contents) into `dir` as one change. `dir` and its missing parents
/// are created first. Every file is staged under a temporary name in `dir` and synced;
/// only then is each renamed over its target, an existing target being kept under a
/// backup name until all are in place. On any failure the staged files are removed, the
/// targets already replaced get their backups back (or are removed if they are new), and
/// the directories this call created are removed.
pub fn write_files(dir: &Path, files: &[(&str, &[u8])]) -> Result<(), WriteError> {
    let mut created = Created::default();
    let result = created
        .create(dir)
        .and_then(|()| stage_and_replace(dir, files));
    if result.is_err() {
        created.remove();
    }
    result
}

/// The directories one write made.
#[derive(Default)]
struct Created {
    /// The directory written into, when this call's `mkdir` made it (so a concurrent
    /// writer's new directory is never taken for ours).
    own: Option<PathBuf>,
    /// Its parents that did not exist, deepest first.
    parents: Vec<PathBuf>,
}

impl Created {
    /// Creates `dir` and its missing parents.
    fn create(&mut self, dir: &Path) -> Result<(), WriteError> {
        if let Some(parent) = dir.parent() {
            self.parents = parent
                .ancestors()
                .take_while(|d| !d.as_os_str().is_empty() && fs::symlink_metadata(d).is_err())
                .map(Path::to_path_buf)
                .collect();
            fs::create_dir_all(parent).map_err(WriteError::CreateDir)?;
        }
        match fs::create_dir(dir) {
            Ok(()) => {
                self.own = Some(dir.to_path_buf());
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
            Err(e) => Err(WriteError::CreateDir(e)),
        }
    }

    /// Removes what [`Created::create`] made: its own directory with all it holds (only
    /// this call wrote there), the parents only while empty (another agent may have
    /// appeared in them meanwhile).
    fn remove(&self) {
        if let Some(own) = &self.own {
            if let Err(e) = fs::remove_dir_all(own) {
                tracing::warn!(dir = %own.display(), "cannot roll back a new agent directory: {e}");
                return;
            }
        }
        for parent in &self.parents {
            match fs::remove_dir(parent) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => break,
                _ => {}
            }
        }
    }
}

/// A file staged beside its target.
struct Staged {
    file: String,
    temp: PathBuf,
    target: PathBuf,
}

/// A target replaced so far, with where its previous contents are kept.
struct Replaced {
    target: PathBuf,
    backup: Option<PathBuf>,
}

fn stage_and_replace(dir: &Path, files: &[(&str, &[u8])]) -> Result<(), WriteError> {
    let mut staged = Vec::with_capacity(files.len());
    for (file, contents) in files {
        let temp = sibling(dir, file, "tmp");
        let written = stage(&temp, contents);
        // A partly written temporary file is removed with the others.
        staged.push(Staged {
            file: (*file).to_owned(),
            temp,
            target: dir.join(file),
        });
        if let Err(source) = written {
            discard(&staged);
            return Err(WriteError::Stage {
                file: (*file).to_owned(),
                source,
            });
        }
    }
    let mut replaced: Vec<Replaced> = Vec::with_capacity(staged.len());
    for (i, file) in staged.iter().enumerate() {
        match replace(dir, file) {
            Ok(done) => replaced.push(done),
            Err(source) => {
                restore(&replaced);
                discard(&staged[i..]);
                return Err(WriteError::Replace {
                    file: file.file.clone(),
                    source,
                });
            }
        }
    }
    for done in &replaced {
        if let Some(backup) = &done.backup {
            let _ = fs::remove_file(backup);
        }
    }
    if let Ok(handle) = File::open(dir) {
        // The renames are durable once the directory is synced; they are already
        // visible, so a failed sync is not a failed write.
        let _ = handle.sync_all();
    }
    Ok(())
}

/// Writes `contents` to a new file at `temp` and syncs it.
fn stage(temp: &Path, contents: &[u8]) -> io::Result<()> {
    let mut file = File::options().write(true).create_new(true).open(temp)?;
    file.write_all(contents)?;
    file.sync_all()
}

/// Keeps the target's current contents under a backup name (a second link to the same
/// file, or to the symlink itself, so the target never disappears), then renames the
/// staged file over it.
fn replace(dir: &Path, file: &Staged) -> io::Result<Replaced> {
    let backup = match fs::symlink_metadata(&file.target) {
        Ok(meta) if !meta.is_dir() => {
            let backup = sibling(dir, &file.file, "bak");
            fs::hard_link(&file.target, &backup)?;
            Some(backup)
        }
        _ => None,
    };
    if let Err(e) = fs::rename(&file.temp, &file.target) {
        if let Some(backup) = &backup {
            let _ = fs::remove_file(backup);
        }
        return Err(e);
    }
    Ok(Replaced {
        target: file.target.clone(),
        backup,
    })
}

/// Puts back what the replaced targets held, last first.
fn restore(replaced: &[Replaced]) {
    for done in replaced.iter().rev() {
        let restored = match &done.backup {
            Some(backup) => fs::rename(backup, &done.target),
            None => fs::remove_file(&done.target),
        };
        if let Err(e) = restored {
            tracing::warn!(file = %done.target.display(), "cannot roll back an agent file: {e}");
        }
    }
}

fn discard(staged: &[Staged]) {
    for file in staged {
        let _ = fs::remove_file(&file.temp);
    }
}

/// A hidden name beside `file` in `dir`, unique in this process (`.{file}.{pid}-{n}.{kind}`):
/// two writers of one agent never share a temporary file.
fn sibling(dir: &Path, file: &str, kind: &str) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut name = OsString::from(".");
    name.push(file);
    name.push(format!(".{}-{n}.{kind}", std::process::id()));
    dir.join(name)
}
