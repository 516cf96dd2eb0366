//! The uploads directory on disk (`{base}/users/{user}/threads/{thread}/user-data/uploads`):
//! DeerFlow's name rules (basename only, unsafe names dropped, `stem_1.ext` within a
//! request), staging names (`.upload-*.part`), listing, deletion, each user's total, and
//! the manifest of Markdown twins (`user-data/.uploads-manifest.json`, outside what the
//! sandbox mounts) that says which `.md` a conversion wrote, so a user's own `a.md` is
//! never taken for, overwritten by or deleted with `a.pdf`'s twin. Everything here
//! blocks: the routes call it on the blocking pool.

use std::collections::{BTreeMap, HashSet};
use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

/// Extensions that get a Markdown twin (`CONVERTIBLE_EXTENSIONS`).
pub const CONVERTIBLE: [&str; 7] = [".pdf", ".ppt", ".pptx", ".xls", ".xlsx", ".doc", ".docx"];
/// A file still being written (`UPLOAD_STAGING_PREFIX` / `_SUFFIX`).
pub const STAGING_PREFIX: &str = ".upload-";
pub const STAGING_SUFFIX: &str = ".part";
/// A staging file older than this belongs to no request any more.
pub const STALE_STAGING: Duration = Duration::from_secs(3600);
/// The longest name, in UTF-8 bytes.
const MAX_NAME_BYTES: usize = 255;

/// `normalize_filename`: the basename of a client's file name, or `None` when it is
/// empty, `.`, `..`, holds a backslash or a NUL, or is longer than 255 bytes (DeerFlow
/// drops those silently).
pub fn normalize(raw: &str) -> Option<String> {
    // `Path(raw).name`: trailing slashes do not count, the last component is the name.
    let name = raw.trim_end_matches('/').rsplit('/').next().unwrap_or("");
    let bad = name.is_empty()
        || name == "."
        || name == ".."
        || name.contains(['\\', '\0'])
        || name.len() > MAX_NAME_BYTES;
    (!bad).then(|| name.to_owned())
}

/// `Path(name).suffix`.
pub fn suffix(name: &str) -> &str {
    match name.rfind('.') {
        Some(i) if i > 0 && i < name.len() - 1 => &name[i..],
        _ => "",
    }
}

/// `Path(name).stem`.
pub fn stem(name: &str) -> &str {
    &name[..name.len() - suffix(name).len()]
}

/// `claim_unique_filename`: `name`, else the first free `{stem}_{n}{suffix}`; claimed in
/// `seen`.
pub fn claim(name: &str, seen: &mut HashSet<String>) -> String {
    claim_where(name, |_| true, seen)
}

/// [`claim`], also skipping names `free` says are taken.
pub fn claim_where(name: &str, free: impl Fn(&str) -> bool, seen: &mut HashSet<String>) -> String {
    let mut candidate = name.to_owned();
    let mut n = 1u32;
    while seen.contains(&candidate) || !free(&candidate) {
        candidate = format!("{}_{n}{}", stem(name), suffix(name));
        n += 1;
    }
    seen.insert(candidate.clone());
    candidate
}

/// Whether `name` is a staging file.
pub fn is_staging(name: &str) -> bool {
    name.starts_with(STAGING_PREFIX) && name.ends_with(STAGING_SUFFIX)
}

/// Whether `name` gets a Markdown twin.
pub fn convertible(name: &str) -> bool {
    CONVERTIBLE.contains(&suffix(name).to_lowercase().as_str())
}

/// A new staging name (unique: a UUID).
pub fn staging_name() -> String {
    format!(
        "{STAGING_PREFIX}{}{STAGING_SUFFIX}",
        uuid::Uuid::new_v4().simple()
    )
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
        std::fs::read(user_data.join(antler_engine::UPLOADS_MANIFEST_FILE))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    /// Writes it through a temporary file and a rename.
    pub fn write(&self, user_data: &Path) -> io::Result<()> {
        let path = user_data.join(antler_engine::UPLOADS_MANIFEST_FILE);
        let temporary = user_data.join(format!(
            "{}.{}.tmp",
            antler_engine::UPLOADS_MANIFEST_FILE,
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

/// Why an upload's destination is refused (DeerFlow's `UnsafeUploadPathError`).
pub fn unsafe_destination(dir: &Path, name: &str) -> bool {
    match std::fs::symlink_metadata(dir.join(name)) {
        Ok(meta) => !meta.file_type().is_file() || meta.nlink() > 1,
        Err(_) => false,
    }
}

/// Whether a regular file `name` is in `dir`.
pub fn regular_file(dir: &Path, name: &str) -> Option<std::fs::Metadata> {
    std::fs::symlink_metadata(dir.join(name))
        .ok()
        .filter(|m| m.file_type().is_file())
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

/// The bytes `user` keeps in the uploads of all its threads under `base`.
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

/// One file of a listing.
#[derive(Clone, Debug, PartialEq)]
pub struct Listed {
    pub name: String,
    pub size: u64,
    /// Seconds since the epoch (`st_mtime`).
    pub modified: f64,
}

/// The regular files of `dir` by name, staging files left out (`list_files_in_dir`).
pub fn list(dir: &Path) -> Vec<Listed> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<Listed> = entries
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
            let modified = meta
                .modified()
                .ok()
                .and_then(|m| m.duration_since(SystemTime::UNIX_EPOCH).ok())
                .map_or(0.0, |d| d.as_secs_f64());
            Some(Listed {
                name,
                size: meta.len(),
                modified,
            })
        })
        .collect();
    files.sort_by(|a, b| a.name.cmp(&b.name));
    files
}

/// Where a thread's uploads live on this disk.
#[derive(Clone, Debug)]
pub struct UploadsDir {
    pub user_data: PathBuf,
    pub uploads: PathBuf,
}

impl UploadsDir {
    pub fn new(paths: &antler_engine::ThreadPaths) -> UploadsDir {
        UploadsDir {
            user_data: paths.user_data().to_path_buf(),
            uploads: paths.uploads(),
        }
    }

    /// Deletes the upload `name` and, when it has one, its recorded twin (never a file
    /// that is not its twin). `Ok(false)`: no such regular file.
    pub fn delete(&self, name: &str) -> io::Result<bool> {
        if regular_file(&self.uploads, name).is_none() {
            return Ok(false);
        }
        std::fs::remove_file(self.uploads.join(name))?;
        let mut manifest = Manifest::read(&self.user_data);
        let twin = manifest.twins.remove(name);
        manifest.forget(name);
        if let Some(twin) = twin {
            if regular_file(&self.uploads, &twin).is_some() {
                let _ = std::fs::remove_file(self.uploads.join(&twin));
            }
        }
        manifest.write(&self.user_data)?;
        Ok(true)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_deerflows_rules() {
        assert_eq!(normalize("../../etc/passwd").as_deref(), Some("passwd"));
        assert_eq!(normalize("dir/a.pdf").as_deref(), Some("a.pdf"));
        assert_eq!(normalize("a.pdf/").as_deref(), Some("a.pdf"));
        for bad in ["", ".", "..", "a/..", "/", "a\\b.txt", "x\0y"] {
            assert_eq!(normalize(bad), None, "{bad:?}");
        }
        assert_eq!(normalize(&"é".repeat(128)), None);
        assert!(normalize(&"a".repeat(255)).is_some());
        let mut seen = HashSet::new();
        assert_eq!(claim("a.pdf", &mut seen), "a.pdf");
        assert_eq!(claim("a.pdf", &mut seen), "a_1.pdf");
        assert_eq!(claim("a.pdf", &mut seen), "a_2.pdf");
        assert_eq!(claim("README", &mut seen), "README");
        assert_eq!(claim("README", &mut seen), "README_1");
        assert_eq!(claim_where("a.md", |n| n != "a.md", &mut seen), "a_1.md");
        assert!(convertible("X.PDF") && convertible("b.docx") && !convertible("c.md"));
        assert!(is_staging(&staging_name()));
    }

    #[test]
    fn deleting_an_upload_deletes_its_twin_and_never_a_users_md() {
        let dir = tempfile::tempdir().unwrap();
        let paths = antler_engine::ThreadPaths::new(dir.path(), "u", "t");
        paths.create().unwrap();
        let up = UploadsDir::new(&paths);
        for name in ["a.pdf", "a.md", "a_1.md", "b.pdf", "b.md"] {
            std::fs::write(up.uploads.join(name), name).unwrap();
        }
        let mut manifest = Manifest::default();
        manifest.twins.insert("a.pdf".into(), "a_1.md".into());
        manifest.write(&up.user_data).unwrap();
        assert!(up.delete("a.pdf").unwrap());
        assert!(up.uploads.join("a.md").exists());
        assert!(!up.uploads.join("a_1.md").exists());
        // b.md is nobody's twin: it stays.
        assert!(up.delete("b.pdf").unwrap());
        assert!(up.uploads.join("b.md").exists());
        assert!(!up.delete("nope.pdf").unwrap());
        assert_eq!(Manifest::read(&up.user_data), Manifest::default());
        let names: Vec<String> = list(&up.uploads).into_iter().map(|l| l.name).collect();
        assert_eq!(names, ["a.md", "b.md"]);
        std::fs::write(up.uploads.join(".upload-x.part"), "").unwrap();
        assert_eq!(list(&up.uploads).len(), 2);
        assert_eq!(user_usage(dir.path(), "u"), 4 + 4);
    }
}
