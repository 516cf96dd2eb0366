//! DeerFlow's upload name rules (basename only, unsafe names dropped, `stem_1.ext` within
//! a request), staging names (`.upload-*.part`), and [`Uploads`]: the typed steps the
//! routes take on a thread's uploads directory through its `ThreadFiles`, on this disk or
//! on the sandbox-host replica that owns the thread (`antler_protocol::uploads_dir` runs
//! them where the directory is).

use std::collections::HashSet;

use antler_engine::ThreadFiles;
use antler_protocol::messages::{
    StagedUpload, ThreadFileError, ThreadFileOp, ThreadFileReply, UploadListing, UploadOp,
};
pub use antler_protocol::uploads_dir::is_staging;
use antler_protocol::uploads_dir::{STAGING_PREFIX, STAGING_SUFFIX};

/// Extensions that get a Markdown twin (`CONVERTIBLE_EXTENSIONS`).
pub const CONVERTIBLE: [&str; 7] = [".pdf", ".ppt", ".pptx", ".xls", ".xlsx", ".doc", ".docx"];
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

/// A thread's uploads, wherever they are (this disk, or the sandbox-host replica that
/// owns the thread): one typed call per [`UploadOp`].
pub struct Uploads<'a>(pub &'a dyn ThreadFiles);

fn unexpected(reply: ThreadFileReply) -> ThreadFileError {
    ThreadFileError::Unavailable(format!("unexpected reply: {reply:?}"))
}

impl Uploads<'_> {
    async fn done(&self, op: UploadOp) -> Result<(), ThreadFileError> {
        match self.0.op(ThreadFileOp::Uploads(op)).await? {
            ThreadFileReply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Creates the thread's directories and sweeps stale staging files.
    pub async fn prepare(&self) -> Result<(), ThreadFileError> {
        self.done(UploadOp::Prepare).await
    }

    /// Whether the upload `name` may be written.
    pub async fn destination_safe(&self, name: &str) -> Result<bool, ThreadFileError> {
        let op = UploadOp::CheckDestination { name: name.into() };
        match self.0.op(ThreadFileOp::Uploads(op)).await? {
            ThreadFileReply::Checked(safe) => Ok(safe),
            other => Err(unexpected(other)),
        }
    }

    /// Writes `content` at `offset` of the staging file `staging`.
    pub async fn write_staged(
        &self,
        staging: &str,
        offset: u64,
        content: Vec<u8>,
    ) -> Result<(), ThreadFileError> {
        self.done(UploadOp::WriteStaged {
            staging: staging.into(),
            offset,
            content,
        })
        .await
    }

    /// Removes these staging files.
    pub async fn discard(&self, staging: Vec<String>) -> Result<(), ThreadFileError> {
        self.done(UploadOp::Discard { staging }).await
    }

    /// Renames the staged files into place, all or none.
    pub async fn commit(&self, files: Vec<StagedUpload>) -> Result<(), ThreadFileError> {
        self.done(UploadOp::Commit { files }).await
    }

    /// Keeps the staging file `staging` as `source`'s twin `twin`.
    pub async fn keep_twin(
        &self,
        source: &str,
        staging: &str,
        twin: &str,
        max_bytes: u64,
    ) -> Result<(), ThreadFileError> {
        self.done(UploadOp::KeepTwin {
            source: source.into(),
            staging: staging.into(),
            twin: twin.into(),
            max_bytes,
        })
        .await
    }

    /// Deletes the upload `name` and its twin; `false`: no such upload.
    pub async fn delete(&self, name: &str) -> Result<bool, ThreadFileError> {
        let op = UploadOp::Delete { name: name.into() };
        match self.0.op(ThreadFileOp::Uploads(op)).await? {
            ThreadFileReply::Deleted(found) => Ok(found),
            other => Err(unexpected(other)),
        }
    }

    /// The uploads by name and the twins.
    pub async fn list(&self) -> Result<UploadListing, ThreadFileError> {
        match self.0.op(ThreadFileOp::Uploads(UploadOp::List)).await? {
            ThreadFileReply::Uploads(listing) => Ok(listing),
            other => Err(unexpected(other)),
        }
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
}
