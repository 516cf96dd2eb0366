//! A thread's uploads directory (`user-data/uploads`) as the uploads routes change it
//! ([`UploadOp`]), the same code on the lead's disk (local mode) and on the sandbox-host
//! replica that owns the thread (cluster mode): staging files (`.upload-*.part`) written
//! in pieces and renamed into place only once a request was accepted, listing, deletion,
//! a user's total across its threads, and the manifest of Markdown twins
//! (`user-data/.uploads-manifest.json`, outside what the sandbox mounts) that says which
//! `.md` a conversion wrote, so a user's own `a.md` is never taken for, overwritten by or
//! deleted with `a.pdf`'s twin. Every name is one plain file name. Everything here
//! blocks: callers on an async thread run it on a blocking pool.

use std::collections::BTreeMap;
use std::io::{self, Seek as _, SeekFrom, Write as _};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::Path;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::messages::{
    ListedFile, StagedUpload, ThreadFileError, ThreadFileReply, UploadListing, UploadOp,
};

/// The twins' manifest, in the thread's `user-data` directory.
pub const MANIFEST_FILE: &str = ".uploads-manifest.json";
/// A file still being written (DeerFlow's `UPLOAD_STAGING_PREFIX` / `_SUFFIX`).
pub const STAGING_PREFIX: &str = ".upload-";
pub const STAGING_SUFFIX: &str = ".part";
/// A staging file older than this belongs to no request any more.
pub const STALE_STAGING: Duration = Duration::from_secs(3600);
/// The uploads directory as the model sees it.
const VIRTUAL_UPLOADS: &str = "/mnt/user-data/uploads";

/// Whether `name` is a staging file.
pub fn is_staging(name: &str) -> bool {
    name.starts_with(STAGING_PREFIX) && name.ends_with(STAGING_SUFFIX)
}

/// Which `.md` file is which upload's twin.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Upload name -> its twin's name.
    #[serde(default)]
    pub twins: BTreeMap<String, String>,
}

impl Manifest {
    /// The manifest of `user_data` (empty when there is none or it does not parse).
    pub fn read(user_data: &Path) -> Manifest {
        std::fs::read(user_data.join(MANIFEST_FILE))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    /// Writes it through a temporary file and a rename.
    pub fn write(&self, user_data: &Path) -> io::Result<()> {
        let path = user_data.join(MANIFEST_FILE);
        let temporary = user_data.join(format!(
            "{MANIFEST_FILE}.{}.tmp",
            uuid::Uuid::new_v4().simple()
        ));
        let bytes = serde_json::to_vec(self).map_err(io::Error::other)?;
        std::fs::write(&temporary, bytes)?;
        std::fs::rename(&temporary, &path).inspect_err(|_| {
            let _ = std::fs::remove_file(&temporary);
        })
    }

    /// Whether `name` is some upload's twin.
    pub fn is_twin(&self, name: &str) -> bool {
        self.twins.values().any(|t| t == name)
    }

    /// A file named `name` was written by the user: it is nobody's twin any more, and
    /// an upload of that name's old twin is stale.
    pub fn forget(&mut self, name: &str) {
        self.twins.retain(|_, twin| twin != name);
    }
}

/// Whether a regular file `name` is in `dir`.
pub fn regular_file(dir: &Path, name: &str) -> Option<std::fs::Metadata> {
    std::fs::symlink_metadata(dir.join(name))
        .ok()
        .filter(|m| m.file_type().is_file())
}

/// Whether writing the upload `name` into `dir` is refused (DeerFlow's
/// `UnsafeUploadPathError`): something that is not a regular file, or a file with more
/// than one link, is there.
pub fn unsafe_destination(dir: &Path, name: &str) -> bool {
    match std::fs::symlink_metadata(dir.join(name)) {
        Ok(meta) => !meta.file_type().is_file() || meta.nlink() > 1,
        Err(_) => false,
    }
}

/// Removes the staging files of `dir` older than [`STALE_STAGING`] (a request that died
/// with its lead left them).
pub fn sweep_stale(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !is_staging(name) {
            continue;
        }
        let stale = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|m| now.duration_since(m).ok())
            .is_some_and(|age| age > STALE_STAGING);
        if stale {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The bytes `user` keeps in the uploads of all its threads under the data root `base`.
pub fn user_usage(base: &Path, user: &str) -> u64 {
    let threads = base.join("users").join(user).join("threads");
    let Ok(threads) = std::fs::read_dir(threads) else {
        return 0;
    };
    let mut total = 0u64;
    for thread in threads.flatten() {
        let uploads = thread.path().join("user-data").join("uploads");
        let Ok(files) = std::fs::read_dir(uploads) else {
            continue;
        };
        for file in files.flatten() {
            if let Ok(meta) = std::fs::symlink_metadata(file.path()) {
                if meta.file_type().is_file() {
                    total = total.saturating_add(meta.len());
                }
            }
        }
    }
    total
}

/// The regular files of `dir` by name, staging files left out (`list_files_in_dir`).
pub fn list(dir: &Path) -> Vec<ListedFile> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<ListedFile> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            if is_staging(&name) {
                return None;
            }
            let meta = std::fs::symlink_metadata(entry.path()).ok()?;
            if !meta.file_type().is_file() {
                return None;
            }
            let modified_ns = meta
                .modified()
                .ok()
                .and_then(|m| m.duration_since(SystemTime::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            Some(ListedFile {
                name,
                size: meta.len(),
                modified_ns,
            })
        })
        .collect();
    files.sort_by(|a, b| a.name.cmp(&b.name));
    files
}

/// `name` when it is one plain file name.
fn plain(name: &str) -> Result<&str, ThreadFileError> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        return Err(ThreadFileError::BadName {
            name: name.to_owned(),
        });
    }
    Ok(name)
}

/// `name` when it is a staging name.
fn staging(name: &str) -> Result<&str, ThreadFileError> {
    match plain(name)? {
        name if is_staging(name) => Ok(name),
        _ => Err(ThreadFileError::BadName {
            name: name.to_owned(),
        }),
    }
}

/// The error of `e` for the upload `name` (its virtual path, never a host path).
fn failed(name: &str, e: &io::Error) -> ThreadFileError {
    ThreadFileError::Io {
        path: format!("{VIRTUAL_UPLOADS}/{name}"),
        message: io::Error::from(e.kind()).to_string(),
    }
}

/// Runs `op` on the uploads of the thread whose `user-data` directory is `user_data`.
pub fn serve(user_data: &Path, op: UploadOp) -> Result<ThreadFileReply, ThreadFileError> {
    let uploads = user_data.join("uploads");
    match op {
        UploadOp::Prepare => {
            for dir in crate::thread_dir::USER_DATA_DIRS {
                std::fs::create_dir_all(user_data.join(dir)).map_err(|e| failed("", &e))?;
            }
            sweep_stale(&uploads);
            Ok(ThreadFileReply::Done)
        }
        UploadOp::CheckDestination { name } => Ok(ThreadFileReply::Checked(!unsafe_destination(
            &uploads,
            plain(&name)?,
        ))),
        UploadOp::WriteStaged {
            staging: name,
            offset,
            content,
        } => {
            write_staged(&uploads, staging(&name)?, offset, &content)
                .map_err(|e| failed(&name, &e))?;
            Ok(ThreadFileReply::Done)
        }
        UploadOp::Discard { staging: names } => {
            for name in &names {
                let _ = std::fs::remove_file(uploads.join(staging(name)?));
            }
            Ok(ThreadFileReply::Done)
        }
        UploadOp::Commit { files } => {
            commit(user_data, &uploads, &files)?;
            Ok(ThreadFileReply::Done)
        }
        UploadOp::KeepTwin {
            source,
            staging: staged,
            twin,
            max_bytes,
        } => {
            let (source, twin) = (plain(&source)?, plain(&twin)?);
            keep_twin(
                user_data,
                &uploads,
                source,
                staging(&staged)?,
                twin,
                max_bytes,
            )?;
            Ok(ThreadFileReply::Done)
        }
        UploadOp::Delete { name } => delete(user_data, &uploads, plain(&name)?)
            .map(ThreadFileReply::Deleted)
            .map_err(|e| failed(&name, &e)),
        UploadOp::List => Ok(ThreadFileReply::Uploads(UploadListing {
            files: list(&uploads),
            twins: Manifest::read(user_data).twins,
        })),
    }
}

/// Writes `content` at `offset` of the staging file `name` (created at 0, never over a
/// file; extended at its end otherwise).
fn write_staged(uploads: &Path, name: &str, offset: u64, content: &[u8]) -> io::Result<()> {
    let path = uploads.join(name);
    let mut file = if offset == 0 {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)?
    } else {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)?;
        if file.metadata()?.len() != offset {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the staging file is not as long as the offset",
            ));
        }
        file.seek(SeekFrom::Start(offset))?;
        file
    };
    file.write_all(content)?;
    file.flush()
}

/// Renames the staged files into place, all or none.
fn commit(user_data: &Path, uploads: &Path, files: &[StagedUpload]) -> Result<(), ThreadFileError> {
    for file in files {
        staging(&file.staging)?;
        plain(&file.name)?;
    }
    let mut manifest = Manifest::read(user_data);
    let mut done: Vec<&StagedUpload> = Vec::new();
    for file in files {
        let from = uploads.join(&file.staging);
        let renamed = std::fs::set_permissions(&from, std::fs::Permissions::from_mode(0o644))
            .and_then(|()| std::fs::rename(&from, uploads.join(&file.name)));
        if let Err(e) = renamed {
            for staged in files {
                let _ = std::fs::remove_file(uploads.join(&staged.staging));
            }
            for earlier in &done {
                let _ = std::fs::remove_file(uploads.join(&earlier.name));
            }
            return Err(failed(&file.name, &e));
        }
        manifest.forget(&file.name);
        if let Some(old) = manifest.twins.remove(&file.name) {
            if regular_file(uploads, &old).is_some() {
                let _ = std::fs::remove_file(uploads.join(&old));
            }
        }
        done.push(file);
    }
    manifest
        .write(user_data)
        .map_err(|e| failed(MANIFEST_FILE, &e))
}

/// Keeps the staging file as `source`'s twin and records it.
fn keep_twin(
    user_data: &Path,
    uploads: &Path,
    source: &str,
    staged: &str,
    twin: &str,
    max_bytes: u64,
) -> Result<(), ThreadFileError> {
    let path = uploads.join(staged);
    let kept = match regular_file(uploads, staged) {
        None => Err(ThreadFileError::NotFound {
            path: format!("{VIRTUAL_UPLOADS}/{staged}"),
        }),
        Some(meta) if meta.len() > max_bytes => Err(ThreadFileError::Io {
            path: format!("{VIRTUAL_UPLOADS}/{twin}"),
            message: format!("the Markdown is larger than {max_bytes} bytes"),
        }),
        Some(_) => std::fs::rename(&path, uploads.join(twin)).map_err(|e| failed(twin, &e)),
    };
    let _ = std::fs::remove_file(&path);
    kept?;
    let mut manifest = Manifest::read(user_data);
    manifest.forget(twin);
    manifest.twins.insert(source.to_owned(), twin.to_owned());
    manifest
        .write(user_data)
        .map_err(|e| failed(MANIFEST_FILE, &e))
}

/// Deletes the upload `name` and, when it has one, its recorded twin. `Ok(false)`: no
/// such regular file.
fn delete(user_data: &Path, uploads: &Path, name: &str) -> io::Result<bool> {
    if regular_file(uploads, name).is_none() {
        return Ok(false);
    }
    std::fs::remove_file(uploads.join(name))?;
    let mut manifest = Manifest::read(user_data);
    let twin = manifest.twins.remove(name);
    manifest.forget(name);
    if let Some(twin) = twin {
        if regular_file(uploads, &twin).is_some() {
            let _ = std::fs::remove_file(uploads.join(&twin));
        }
    }
    manifest.write(user_data)?;
    Ok(true)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn op(user_data: &Path, op: UploadOp) -> ThreadFileReply {
        serve(user_data, op).unwrap()
    }

    fn names(user_data: &Path) -> Vec<String> {
        match op(user_data, UploadOp::List) {
            ThreadFileReply::Uploads(listing) => {
                listing.files.into_iter().map(|f| f.name).collect()
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn staged_pieces_commit_into_place_and_deleting_takes_the_twin_only() {
        let dir = tempfile::tempdir().unwrap();
        let user_data = dir.path().join("users/u/threads/t/user-data");
        op(&user_data, UploadOp::Prepare);
        let write = |staging: &str, offset: u64, content: &[u8]| UploadOp::WriteStaged {
            staging: staging.into(),
            offset,
            content: content.to_vec(),
        };
        op(&user_data, write(".upload-1.part", 0, b"%PDF"));
        op(&user_data, write(".upload-1.part", 4, b"-1.7"));
        // A piece at the wrong offset, or a name that is not a staging name, is refused.
        assert!(serve(&user_data, write(".upload-1.part", 2, b"x")).is_err());
        assert!(matches!(
            serve(&user_data, write("a.pdf", 0, b"x")),
            Err(ThreadFileError::BadName { .. })
        ));
        assert!(serve(&user_data, write("../.upload-x.part", 0, b"x")).is_err());
        op(&user_data, write(".upload-2.part", 0, b"mine"));
        let commit = UploadOp::Commit {
            files: vec![
                StagedUpload {
                    staging: ".upload-1.part".into(),
                    name: "a.pdf".into(),
                },
                StagedUpload {
                    staging: ".upload-2.part".into(),
                    name: "a.md".into(),
                },
            ],
        };
        op(&user_data, commit);
        op(&user_data, write(".upload-3.part", 0, b"# A"));
        op(
            &user_data,
            UploadOp::KeepTwin {
                source: "a.pdf".into(),
                staging: ".upload-3.part".into(),
                twin: "a_1.md".into(),
                max_bytes: 100,
            },
        );
        assert_eq!(names(&user_data), ["a.md", "a.pdf", "a_1.md"]);
        let uploads = user_data.join("uploads");
        assert_eq!(std::fs::read(uploads.join("a.pdf")).unwrap(), b"%PDF-1.7");
        assert_eq!(
            op(
                &user_data,
                UploadOp::CheckDestination {
                    name: "a.pdf".into()
                }
            ),
            ThreadFileReply::Checked(true)
        );
        std::os::unix::fs::symlink("/etc/passwd", uploads.join("link")).unwrap();
        assert_eq!(
            op(
                &user_data,
                UploadOp::CheckDestination {
                    name: "link".into()
                }
            ),
            ThreadFileReply::Checked(false)
        );
        assert_eq!(user_usage(dir.path(), "u"), 8 + 4 + 3);
        assert_eq!(
            op(
                &user_data,
                UploadOp::Delete {
                    name: "a.pdf".into()
                }
            ),
            ThreadFileReply::Deleted(true)
        );
        assert_eq!(names(&user_data), ["a.md"]);
        assert_eq!(
            op(
                &user_data,
                UploadOp::Delete {
                    name: "a.pdf".into()
                }
            ),
            ThreadFileReply::Deleted(false)
        );
        assert_eq!(Manifest::read(&user_data), Manifest::default());
    }
}
