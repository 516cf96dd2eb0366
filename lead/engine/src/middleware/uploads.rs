//! DeerFlow's `UploadsMiddleware` (spec B.3): once at the start of each run, before the
//! first model call, the last message, when it is a user turn whose
//! `additional_kwargs.files` names files that are in the thread's uploads directory, gets
//! the `<current_uploads>` block prepended (its original text kept in
//! `additional_kwargs.original_user_content`), and `uploaded_files` is set to those files;
//! otherwise `uploaded_files` is `[]`. Sizes are the server's (the bytes on disk, never the
//! client's claim); outlines come from the upload's Markdown twin, the one the gateway
//! recorded in the uploads manifest (so a user's own `a.md` is never taken for `a.pdf`'s).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::thread::files::ThreadFiles;
use crate::thread::input::neutralize_untrusted_tags;
use crate::thread::state::{Message, StateUpdate, ThreadState, UploadedFile};

/// The uploads directory as the model sees it.
pub const VIRTUAL_UPLOADS: &str = "/mnt/user-data/uploads";
/// The gateway's record of the uploads' Markdown twins, beside (not inside) the three
/// directories the sandbox mounts: sandboxed code can neither read nor forge it.
pub const UPLOADS_MANIFEST: &str = "/mnt/user-data/.uploads-manifest.json";
/// [`UPLOADS_MANIFEST`]'s file name in the thread's `user-data` directory.
pub const UPLOADS_MANIFEST_FILE: &str = antler_protocol::uploads_dir::MANIFEST_FILE;
/// The most files the block lists (`_MAX_FILES_PER_CONTEXT_SECTION`).
pub const MAX_FILES_IN_BLOCK: usize = 10;
/// The most outline entries of one file (`MAX_OUTLINE_ENTRIES`).
pub const MAX_OUTLINE_ENTRIES: usize = 50;
/// The lines of a preview when a twin has no headings (`_OUTLINE_PREVIEW_LINES`).
pub const PREVIEW_LINES: usize = 5;
/// The largest twin read for its outline.
pub const MAX_TWIN_BYTES: u64 = 8 << 20;
/// `additional_kwargs` key of the text before the block (`ORIGINAL_USER_CONTENT_KEY`).
pub const ORIGINAL_USER_CONTENT: &str = "original_user_content";
/// A gateway upload still being written.
const STAGING_PREFIX: &str = ".upload-";
const STAGING_SUFFIX: &str = ".part";

pub const BLOCK_OPEN: &str = "<current_uploads>";
pub const BLOCK_CLOSE: &str = "</current_uploads>";
pub const BLOCK_INTRO: &str = "The following files were uploaded in this message:";
pub const BLOCK_EMPTY: &str = "(empty)";
pub const OUTLINE_INTRO: &str =
    "  Document outline (use `read_file` with line ranges to read sections):";
/// `{n}`: the entries shown.
pub const OUTLINE_TRUNCATED: &str =
    "    ... (showing first {n} headings; use `read_file` to explore further)";
pub const PREVIEW_INTRO: &str = "  No structural headings detected. Document begins with:";
pub const GREP_HINT: &str = "  Use `grep` to search for keywords (e.g. `grep(pattern='keyword', path='/mnt/user-data/uploads/')`).";
/// `{k}`: the files left out.
pub const OMITTED: &str = "... ({k} more file(s) from this message omitted from this context.)";
/// `{types}`: `"{count} {extension}"` by extension.
pub const OMITTED_TYPES: &str = "  Omitted file types: {types}";
pub const OMITTED_GLOB: &str =
    "  Use `glob(pattern='**/*', path='/mnt/user-data/uploads/')` to list all uploads.";
pub const OMITTED_GREP: &str =
    "  Use `grep(pattern='keyword', path='/mnt/user-data/uploads/')` to search across uploads.";
/// The block's closing advice, line by line.
pub const BLOCK_ADVICE: [&str; 6] = [
    "To work with these files:",
    "- Read from the file first — use the outline line numbers and `read_file` to locate relevant sections.",
    "- Use `grep` to search for keywords when you are not sure which section to look at",
    "  (e.g. `grep(pattern='revenue', path='/mnt/user-data/uploads/')`).",
    "- Use `glob` to find files by name pattern",
    "  (e.g. `glob(pattern='**/*.md', path='/mnt/user-data/uploads/')`).",
];
pub const BLOCK_LAST_ADVICE: &str =
    "- Only fall back to web search if the file content is clearly insufficient to answer the question.";

/// One outline entry: a heading's title and its 1-based line in the twin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutlineEntry {
    pub line: usize,
    pub title: String,
}

/// What a file's twin says of it: its headings (and whether there were more), or, with
/// none, its first lines.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outline {
    pub entries: Vec<OutlineEntry>,
    pub truncated: bool,
    pub preview: Vec<String>,
}

/// One file as the block lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockFile {
    pub filename: String,
    pub size: u64,
    pub outline: Outline,
}

/// DeerFlow's size: `{:.1f} KB`, or `MB` from 1024 KB up.
pub fn format_size(bytes: u64) -> String {
    let kb = bytes as f64 / 1024.0;
    if kb < 1024.0 {
        format!("{kb:.1} KB")
    } else {
        format!("{:.1} MB", kb / 1024.0)
    }
}

/// `Path(name).suffix`.
pub fn suffix(name: &str) -> &str {
    match name.rfind('.') {
        Some(i) if i > 0 && i < name.len() - 1 => &name[i..],
        _ => "",
    }
}

/// The `<current_uploads>` block (`_create_files_message`): `files` are the listed ones,
/// `omitted` the names past the cap.
pub fn block(files: &[BlockFile], omitted: &[String]) -> String {
    let mut lines: Vec<String> = vec![BLOCK_OPEN.into(), BLOCK_INTRO.into(), String::new()];
    if files.is_empty() {
        lines.push(BLOCK_EMPTY.into());
        lines.push(String::new());
    } else {
        for file in files {
            entry(file, &mut lines);
        }
        if !omitted.is_empty() {
            lines.push(OMITTED.replace("{k}", &omitted.len().to_string()));
            lines.push(OMITTED_TYPES.replace("{types}", &omitted_types(omitted)));
            lines.push(OMITTED_GLOB.into());
            lines.push(OMITTED_GREP.into());
            lines.push(String::new());
        }
    }
    lines.extend(BLOCK_ADVICE.iter().map(|l| (*l).to_owned()));
    lines.push(BLOCK_LAST_ADVICE.into());
    lines.push(BLOCK_CLOSE.into());
    lines.join("\n")
}

/// `_format_file_entry`.
fn entry(file: &BlockFile, lines: &mut Vec<String>) {
    lines.push(format!(
        "- {} ({})",
        neutralize_untrusted_tags(&file.filename),
        format_size(file.size)
    ));
    lines.push(format!(
        "  Path: {}",
        neutralize_untrusted_tags(&format!("{VIRTUAL_UPLOADS}/{}", file.filename))
    ));
    let outline = &file.outline;
    if !outline.entries.is_empty() {
        lines.push(OUTLINE_INTRO.into());
        for e in &outline.entries {
            lines.push(format!(
                "    L{}: {}",
                e.line,
                neutralize_untrusted_tags(&e.title)
            ));
        }
        if outline.truncated {
            lines.push(OUTLINE_TRUNCATED.replace("{n}", &outline.entries.len().to_string()));
        }
    } else {
        if !outline.preview.is_empty() {
            lines.push(PREVIEW_INTRO.into());
            for text in &outline.preview {
                lines.push(format!("    > {}", neutralize_untrusted_tags(text)));
            }
        }
        lines.push(GREP_HINT.into());
    }
    lines.push(String::new());
}

/// `_format_omitted_file_types`: `"{count} {extension}"` per lower-cased extension (or
/// `(no extension)`), sorted, joined with `", "`.
fn omitted_types(names: &[String]) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for name in names {
        let ext = neutralize_untrusted_tags(&suffix(name).to_lowercase());
        let label = if ext.is_empty() {
            "(no extension)".to_owned()
        } else {
            ext
        };
        *counts.entry(label).or_default() += 1;
    }
    let parts: Vec<String> = counts.iter().map(|(e, c)| format!("{c} {e}")).collect();
    neutralize_untrusted_tags(&parts.join(", "))
}

/// `extract_outline` and its preview fallback, on a twin's text.
pub fn outline(markdown: &str) -> Outline {
    let mut entries = Vec::new();
    let mut truncated = false;
    for (index, line) in markdown.lines().enumerate() {
        let stripped = line.trim();
        if stripped.is_empty() {
            continue;
        }
        let title = if stripped.starts_with('#') {
            Some(clean_bold_title(stripped.trim_start_matches('#').trim()))
        } else if let Some(title) = bold_heading(stripped) {
            Some(title)
        } else if split_bold_heading(stripped) {
            Some(bold_blocks(stripped).join(" "))
        } else {
            None
        };
        if let Some(title) = title.filter(|t| !t.is_empty()) {
            if entries.len() == MAX_OUTLINE_ENTRIES {
                truncated = true;
                break;
            }
            entries.push(OutlineEntry {
                line: index + 1,
                title,
            });
        }
    }
    let preview = if entries.is_empty() {
        markdown
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .take(PREVIEW_LINES)
            .map(str::to_owned)
            .collect()
    } else {
        Vec::new()
    };
    Outline {
        entries,
        truncated,
        preview,
    }
}

/// `_clean_bold_title`: adjacent bold spans merged, an outer `**…**` removed.
fn clean_bold_title(raw: &str) -> String {
    static SPANS: std::sync::LazyLock<Option<regex::Regex>> =
        std::sync::LazyLock::new(|| regex::Regex::new(r"\*\*\s*\*\*").ok());
    let merged = match SPANS.as_ref() {
        Some(re) => re.replace_all(raw, " ").trim().to_owned(),
        None => raw.trim().to_owned(),
    };
    // `re.fullmatch(r"\*\*(.+?)\*\*", merged, re.DOTALL)`.
    match merged
        .strip_prefix("**")
        .and_then(|rest| rest.strip_suffix("**"))
    {
        Some(inner) if !inner.is_empty() => inner.trim().to_owned(),
        _ => merged,
    }
}

/// `_BOLD_HEADING_RE`: `**ITEM 1. BUSINESS**` and the like.
fn bold_heading(line: &str) -> Option<String> {
    static RE: std::sync::LazyLock<Option<regex::Regex>> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r"^\*\*((ITEM|PART|SECTION|SCHEDULE|EXHIBIT|APPENDIX|ANNEX|CHAPTER)\b[A-Z0-9 .,\-]*)\*\*\s*$",
        )
        .ok()
    });
    let caps = RE.as_ref()?.captures(line)?;
    Some(caps.get(1)?.as_str().trim().to_owned())
}

/// `_SPLIT_BOLD_HEADING_RE`: `**1** **Introduction**` (2 to 4 bold blocks, the first a
/// section number, the second not numbers only). The `regex` crate has no lookahead:
/// the second block's rule is checked on its own.
fn split_bold_heading(line: &str) -> bool {
    static RE: std::sync::LazyLock<Option<regex::Regex>> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"^\*\*[\dA-Z][\d\.]*\*\*\s+\*\*[^*]+\*\*(?:\s+\*\*[^*]+\*\*){0,2}\s*$")
            .ok()
    });
    static NUMERIC: std::sync::LazyLock<Option<regex::Regex>> =
        std::sync::LazyLock::new(|| regex::Regex::new(r"^\d[\d\s.,\-–—/:()%]*$").ok());
    let (Some(re), Some(numeric)) = (RE.as_ref(), NUMERIC.as_ref()) else {
        return false;
    };
    re.is_match(line)
        && bold_blocks(line)
            .get(1)
            .is_some_and(|second| !numeric.is_match(second))
}

/// The texts of a line's `**…**` blocks.
fn bold_blocks(line: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut rest = line;
    while let Some(start) = rest.find("**") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("**") else { break };
        let inner = &after[..end];
        if !inner.is_empty() && !inner.contains('*') {
            blocks.push(inner.to_owned());
        }
        rest = &after[end + 2..];
    }
    blocks
}

/// Whether `name` may be an upload's name (a plain name, not a staging file).
fn plain_upload_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\', '\0'])
        && !(name.starts_with(STAGING_PREFIX) && name.ends_with(STAGING_SUFFIX))
}

/// The file names a user turn's `additional_kwargs.files` lists, in order.
fn listed_files(kwargs: Option<&Value>) -> Vec<String> {
    kwargs
        .and_then(|k| k.get("files"))
        .and_then(Value::as_array)
        .map(|files| {
            files
                .iter()
                .filter_map(|f| f.get("filename").and_then(Value::as_str))
                .filter(|f| plain_upload_name(f))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The twin of each upload the gateway recorded (upload name -> twin name).
pub async fn twins(files: &dyn ThreadFiles) -> BTreeMap<String, String> {
    let Ok(read) = files.read(UPLOADS_MANIFEST, 4 << 20).await else {
        return BTreeMap::new();
    };
    let antler_protocol::messages::FileContent::Bytes(bytes) = read.content else {
        return BTreeMap::new();
    };
    let Ok(manifest) = serde_json::from_slice::<Value>(&bytes) else {
        return BTreeMap::new();
    };
    manifest
        .get("twins")
        .and_then(Value::as_object)
        .map(|t| {
            t.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// The update of the run's start: the block on the last user turn and `uploaded_files`,
/// or `uploaded_files: []` alone.
pub async fn before_run(state: &ThreadState, files: &dyn ThreadFiles) -> StateUpdate {
    let cleared = StateUpdate {
        uploaded_files: Some(Vec::new()),
        ..StateUpdate::default()
    };
    let index = state.messages.len().saturating_sub(1);
    let Some(Message::Human {
        content,
        name,
        hide_from_ui,
        additional_kwargs,
    }) = state.messages.last()
    else {
        return cleared;
    };
    let kwargs = additional_kwargs.as_deref();
    // Already rewritten (a run resumed after its start): nothing to add again.
    if kwargs
        .and_then(|k| k.get(ORIGINAL_USER_CONTENT))
        .is_some_and(Value::is_string)
    {
        return cleared;
    }
    let wanted = listed_files(kwargs);
    if wanted.is_empty() {
        return cleared;
    }
    let Ok(listed) = files.list_files(VIRTUAL_UPLOADS).await else {
        return cleared;
    };
    let sizes: BTreeMap<&str, u64> = listed.iter().map(|f| (f.name.as_str(), f.size)).collect();
    let mut uploaded: Vec<UploadedFile> = Vec::new();
    for name in wanted {
        if uploaded.iter().any(|u| u.filename == name) {
            continue;
        }
        if let Some(size) = sizes.get(name.as_str()) {
            uploaded.push(UploadedFile {
                path: format!("{VIRTUAL_UPLOADS}/{name}"),
                extension: suffix(&name).to_owned(),
                filename: name,
                size: *size,
            });
        }
    }
    if uploaded.is_empty() {
        return cleared;
    }
    let twins = twins(files).await;
    let mut shown = Vec::new();
    for file in uploaded.iter().take(MAX_FILES_IN_BLOCK) {
        let outline = match twins.get(&file.filename) {
            Some(twin) => twin_outline(files, twin).await,
            None => Outline::default(),
        };
        shown.push(BlockFile {
            filename: file.filename.clone(),
            size: file.size,
            outline,
        });
    }
    let omitted: Vec<String> = uploaded
        .iter()
        .skip(MAX_FILES_IN_BLOCK)
        .map(|f| f.filename.clone())
        .collect();
    let text = block(&shown, &omitted);
    let mut kwargs = match kwargs {
        Some(Value::Object(map)) => map.clone(),
        _ => serde_json::Map::new(),
    };
    kwargs.insert(ORIGINAL_USER_CONTENT.into(), content.clone().into());
    let message = Message::Human {
        content: format!("{text}\n\n{content}"),
        name: name.clone(),
        hide_from_ui: *hide_from_ui,
        additional_kwargs: Some(Box::new(Value::Object(kwargs))),
    };
    StateUpdate {
        uploaded_files: Some(uploaded),
        rewritten_human: Some(Box::new((index, message))),
        ..StateUpdate::default()
    }
}

/// The outline of the twin `twin` in the uploads directory (none when unreadable).
pub async fn twin_outline(files: &dyn ThreadFiles, twin: &str) -> Outline {
    let path = format!("{VIRTUAL_UPLOADS}/{twin}");
    match files.read(&path, MAX_TWIN_BYTES).await {
        Ok(read) => match read.content {
            antler_protocol::messages::FileContent::Bytes(bytes) => {
                outline(&String::from_utf8_lossy(&bytes))
            }
            _ => Outline::default(),
        },
        Err(_) => Outline::default(),
    }
}

/// The text a user turn's sanitization should cover: the user's own text when the block
/// was prepended (the trusted block is never escaped), as `(prefix, user text)`.
pub fn split_block(content: &str, kwargs: Option<&Value>) -> Option<(usize, String)> {
    let original = kwargs?.get(ORIGINAL_USER_CONTENT)?.as_str()?;
    if original.is_empty() || !content.starts_with(BLOCK_OPEN) {
        return None;
    }
    let at = content.rfind(original)?;
    (at + original.len() == content.len()).then(|| (at, original.to_owned()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
#[path = "uploads_tests.rs"]
mod tests;
