//! `read_file`, `write_file` and `str_replace` (spec 6.5), with DeerFlow's texts, the
//! 81,920-byte single-write guard (`DEERFLOW_WRITE_FILE_MAX_BYTES`), and the section-11
//! improvement: `str_replace` refuses an `old_str` that occurs more than once unless
//! `replace_all` is set, and says how many times it occurs. Every open, create and
//! directory creation resolves beneath a handle on the path's root (`PathMap::locate`),
//! so a link never leads out of the thread's directories, and no error quotes a file.

use std::{
    io::{ErrorKind, Read, Seek, SeekFrom, Write},
    os::unix::fs::PermissionsExt,
};

use antler_protocol::beneath::{is_escape, Open};
use serde::Deserialize;

use super::{quota, ToolContext};
use crate::{
    output::{truncate_middle, truncate_read_file},
    paths::Located,
};

/// The default single-call cap of a non-append `write_file`.
pub const WRITE_FILE_MAX_BYTES: i64 = 80 * 1024;
/// The environment variable that overrides it (≤ 0 disables it; malformed is ignored).
pub const WRITE_FILE_MAX_BYTES_ENV: &str = "DEERFLOW_WRITE_FILE_MAX_BYTES";
/// `write_file` error texts are cut to this many characters.
pub const WRITE_FILE_ERROR_MAX_CHARS: usize = 2000;

#[derive(Debug, Deserialize)]
pub struct ReadArgs {
    #[serde(default)]
    pub description: Option<String>,
    pub path: String,
    #[serde(default)]
    pub start_line: Option<i64>,
    #[serde(default)]
    pub end_line: Option<i64>,
}

#[derive(Debug, Deserialize)]
pub struct WriteArgs {
    #[serde(default)]
    pub description: Option<String>,
    pub path: String,
    pub content: String,
    #[serde(default)]
    pub append: bool,
}

#[derive(Debug, Deserialize)]
pub struct ReplaceArgs {
    #[serde(default)]
    pub description: Option<String>,
    pub path: String,
    pub old_str: String,
    pub new_str: String,
    #[serde(default)]
    pub replace_all: bool,
}

/// The binary-file text of `read_file`.
pub fn binary_file_message(path: &str) -> String {
    format!(
        "Error: cannot read '{path}' as text — it appears to be a binary file (e.g. .xlsx, .pdf, or an image). read_file only supports UTF-8 text. Use bash with a suitable library instead (pandas/openpyxl for spreadsheets), or view_image for images."
    )
}

/// The size-guard text of `write_file`.
pub fn write_too_large_message(bytes: usize, cap: i64) -> String {
    format!(
        "Error: write_file content ({bytes} bytes) exceeds the {cap}-byte single-call limit. Split the content into smaller pieces: either (a) write the first section now, then use `str_replace` for further edits, or (b) call write_file again with append=True carrying the next section. See SIZE POLICY in the tool docstring or issue #3189 for the rationale."
    )
}

/// The section-11 text for an `old_str` that is not unique.
pub fn not_unique_message(count: usize, path: &str) -> String {
    format!(
        "Error: String to replace occurs {count} times in file: {path}. Include more surrounding context to make it unique, or set replace_all=true to replace every occurrence."
    )
}

/// The effective cap from the environment variable's raw value.
pub fn write_cap(raw: Option<&str>) -> i64 {
    match raw {
        None => WRITE_FILE_MAX_BYTES,
        Some(v) => v.trim().parse::<i64>().unwrap_or(WRITE_FILE_MAX_BYTES),
    }
}

/// What an error of a file operation beneath the root is, for the texts.
enum Failure {
    NotFound,
    Denied,
    IsDirectory,
    Other(String),
}

fn classify(e: &std::io::Error) -> Failure {
    if is_escape(e) {
        return Failure::Denied;
    }
    match e.kind() {
        ErrorKind::NotFound => Failure::NotFound,
        ErrorKind::PermissionDenied => Failure::Denied,
        ErrorKind::IsADirectory => Failure::IsDirectory,
        // The text of an OS error names no path and quotes no content.
        _ => Failure::Other(e.to_string()),
    }
}

pub fn read_file(ctx: &ToolContext, a: ReadArgs) -> String {
    let p = a.path.as_str();
    if matches!(a.start_line, Some(s) if s < 1) {
        return "(start_line must be >= 1)".into();
    }
    let start = a.start_line.unwrap_or(1);
    if matches!(a.end_line, Some(e) if e < 1) {
        return "(end_line must be >= 1)".into();
    }
    if matches!(a.end_line, Some(e) if start > e) {
        return "(start_line > end_line — no lines in range)".into();
    }
    let at = match ctx.map.locate(p, true) {
        Ok(l) => l,
        Err(_) => return format!("Error: Permission denied reading file: {p}"),
    };
    let read = at.root.open_read(&at.rel).and_then(|mut f| {
        let mut b = Vec::new();
        f.read_to_end(&mut b).map(|_| b)
    });
    let bytes = match read {
        Ok(b) => b,
        Err(e) => {
            return match classify(&e) {
                Failure::NotFound => format!("Error: File not found: {p}"),
                Failure::Denied => format!("Error: Permission denied reading file: {p}"),
                Failure::IsDirectory => format!("Error: Path is a directory, not a file: {p}"),
                Failure::Other(e) => format!("Error: Unexpected error reading file: {e}"),
            }
        }
    };
    let Ok(text) = String::from_utf8(bytes) else {
        return binary_file_message(p);
    };
    let content = if a.start_line.is_some() || a.end_line.is_some() {
        let lines: Vec<&str> = text.lines().collect();
        let from = (start as usize - 1).min(lines.len());
        let to = a
            .end_line
            .map(|e| (e as usize).min(lines.len()))
            .unwrap_or(lines.len())
            .max(from);
        lines[from..to].join("\n")
    } else {
        text
    };
    if content.is_empty() {
        return if a.start_line.is_some_and(|s| s > 1) {
            "(start_line exceeds file length)".into()
        } else {
            "(empty)".into()
        };
    }
    truncate_read_file(&content, ctx.settings.read_file_output_max_chars)
}

fn write_error(text: String) -> String {
    truncate_middle(&text, WRITE_FILE_ERROR_MAX_CHARS)
}

/// Writes `content` to `rel` beneath the root: missing parents are created as directories
/// a sandboxed user can write (0777), a new file is 0666.
fn write_beneath(at: &Located, content: &str, append: bool) -> std::io::Result<()> {
    if let Some(parent) = at.rel.parent().filter(|p| !p.as_os_str().is_empty()) {
        at.root.create_dir_all(parent, 0o777)?;
    }
    let existed = at.root.metadata(&at.rel).is_ok();
    let mut f = at.root.open_file(
        &at.rel,
        Open {
            write: true,
            create: true,
            append,
            truncate: !append,
            mode: 0o666,
            ..Open::default()
        },
    )?;
    f.write_all(content.as_bytes())?;
    if !existed {
        // The umask narrowed the mode: a file the host writes stays writable from the sandbox.
        let _ = f.set_permissions(std::fs::Permissions::from_mode(0o666));
    }
    Ok(())
}

pub fn write_file(ctx: &ToolContext, a: WriteArgs) -> String {
    let p = a.path.as_str();
    if !a.append {
        let cap = write_cap(std::env::var(WRITE_FILE_MAX_BYTES_ENV).ok().as_deref());
        if cap > 0 && a.content.len() as i64 > cap {
            return write_too_large_message(a.content.len(), cap);
        }
    }
    let at = match ctx.map.locate(p, false) {
        Ok(l) => l,
        Err(_) => return write_error(format!("Error: Permission denied writing to file: {p}")),
    };
    let lock = ctx.locks.of(&at.host_root.join(&at.rel));
    let _held = lock.lock();
    let replacing = if a.append {
        0
    } else {
        at.root.metadata(&at.rel).map(|m| m.len()).unwrap_or(0)
    };
    if let Err(e) = quota::check_write(ctx, a.content.len() as u64, replacing) {
        return write_error(e);
    }
    match write_beneath(&at, &a.content, a.append) {
        Ok(()) => "OK".into(),
        Err(e) => write_error(match classify(&e) {
            Failure::Denied => format!("Error: Permission denied writing to file: {p}"),
            Failure::IsDirectory => format!("Error: Path is a directory, not a file: {p}"),
            Failure::NotFound => format!("Error: Failed to write file '{p}': OSError: {e}"),
            Failure::Other(e) => format!("Error: Failed to write file '{p}': OSError: {e}"),
        }),
    }
}

pub fn str_replace(ctx: &ToolContext, a: ReplaceArgs) -> String {
    let p = a.path.as_str();
    let at = match ctx.map.locate(p, false) {
        Ok(l) => l,
        Err(_) => return format!("Error: Permission denied accessing file: {p}"),
    };
    let lock = ctx.locks.of(&at.host_root.join(&at.rel));
    let _held = lock.lock();
    // One handle for the read and the write: the file replaced is the file read.
    let opened = at.root.open_file(
        &at.rel,
        Open {
            read: true,
            write: true,
            ..Open::default()
        },
    );
    let mut file = match opened {
        Ok(f) => f,
        Err(e) => {
            return match classify(&e) {
                Failure::NotFound => format!("Error: File not found: {p}"),
                Failure::Denied => format!("Error: Permission denied accessing file: {p}"),
                Failure::IsDirectory => {
                    format!("Error: Unexpected error replacing string: IsADirectoryError: {e}")
                }
                Failure::Other(e) => format!("Error: Unexpected error replacing string: {e}"),
            }
        }
    };
    let mut bytes = Vec::new();
    if let Err(e) = file.read_to_end(&mut bytes) {
        return format!("Error: Unexpected error replacing string: {e}");
    }
    let content = match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => {
            return format!("Error: Unexpected error replacing string: UnicodeDecodeError: {e}")
        }
    };
    if a.old_str.is_empty() {
        return "OK".into();
    }
    let count = content.matches(a.old_str.as_str()).count();
    if content.is_empty() || count == 0 {
        return format!("Error: String to replace not found in file: {p}");
    }
    if count > 1 && !a.replace_all {
        return not_unique_message(count, p);
    }
    let updated = content.replace(a.old_str.as_str(), &a.new_str);
    if let Err(e) = quota::check_write(ctx, updated.len() as u64, content.len() as u64) {
        return e;
    }
    let written = file
        .set_len(0)
        .and_then(|()| file.seek(SeekFrom::Start(0)))
        .and_then(|_| file.write_all(updated.as_bytes()));
    match written {
        Ok(()) => "OK".into(),
        Err(e) if e.kind() == ErrorKind::PermissionDenied => {
            format!("Error: Permission denied accessing file: {p}")
        }
        Err(e) => format!("Error: Unexpected error replacing string: {e}"),
    }
}
