//! `grep` (spec 6.5) on ripgrep's crates: a file or a tree walked beneath a handle on the
//! thread's root (ignore list pruned, symlinks skipped, files opened without following a
//! link), files over 1,000,000 bytes and binary files (a NUL in the first 8 KiB)
//! skipped, lines over 2,000 characters skipped, lines cut to 200 characters.

use std::io::{Read, Seek, SeekFrom};

use antler_protocol::beneath::{Kind, Step};

use grep_matcher::Matcher;
use grep_regex::RegexMatcherBuilder;
use grep_searcher::{sinks::Lossy, BinaryDetection, SearcherBuilder};
use serde::Deserialize;

use super::{
    clamp_max_results,
    walk::{is_ignored, search_root, PosixPattern, RootFor},
    ToolContext,
};

pub const GREP_DEFAULT_MAX_RESULTS: i64 = 100;
pub const GREP_MAX_MAX_RESULTS: i64 = 500;
pub const MAX_FILE_BYTES: u64 = 1_000_000;
pub const BINARY_SNIFF_BYTES: usize = 8192;
pub const MAX_LINE_CHARS: usize = 2000;
pub const SHOWN_LINE_CHARS: usize = 200;

#[derive(Debug, Deserialize)]
pub struct GrepArgs {
    pub pattern: String,
    pub path: String,
    #[serde(default)]
    pub glob: Option<String>,
    #[serde(default)]
    pub literal: bool,
    #[serde(default)]
    pub case_sensitive: bool,
    #[serde(default = "default_max")]
    pub max_results: i64,
}

fn default_max() -> i64 {
    GREP_DEFAULT_MAX_RESULTS
}

/// A NUL in the first 8 KiB; the file is read from its start again afterwards.
fn is_binary(f: &mut std::fs::File) -> bool {
    let mut buf = vec![0u8; BINARY_SNIFF_BYTES];
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(_) => return true,
        }
    }
    f.seek(SeekFrom::Start(0)).is_err() || buf[..n].contains(&0)
}

/// Cuts a line to 200 characters (197 and `...`).
pub fn shorten_line(line: &str) -> String {
    if line.chars().count() <= SHOWN_LINE_CHARS {
        return line.to_string();
    }
    let head: String = line.chars().take(SHOWN_LINE_CHARS - 3).collect();
    format!("{head}...")
}

pub fn grep(ctx: &ToolContext, a: GrepArgs) -> String {
    let p = a.path.as_str();
    let limit = clamp_max_results(
        a.max_results,
        GREP_DEFAULT_MAX_RESULTS,
        GREP_MAX_MAX_RESULTS,
    )
    .min(clamp_max_results(
        ctx.settings.grep_max_results,
        GREP_DEFAULT_MAX_RESULTS,
        GREP_MAX_MAX_RESULTS,
    ));
    let root = match search_root(ctx, p, RootFor::Grep) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let pattern = if a.literal {
        regex::escape(&a.pattern)
    } else {
        a.pattern.clone()
    };
    let matcher = match RegexMatcherBuilder::new()
        .case_insensitive(!a.case_sensitive)
        .build(&pattern)
    {
        Ok(m) => m,
        Err(e) => return format!("Error: Invalid regex pattern: {e}"),
    };
    let filter = match a.glob.as_deref().map(PosixPattern::new).transpose() {
        Ok(f) => f,
        Err(e) => return format!("Error: Unexpected error searching file contents: {e}"),
    };
    let mut searcher = SearcherBuilder::new()
        .line_number(true)
        .binary_detection(BinaryDetection::none())
        .build();
    let mut results: Vec<String> = Vec::new();
    let mut truncated = false;
    // Search one regular file; false once the limit is reached.
    let mut search = |mut file: std::fs::File, rel: &str, shown: String| -> bool {
        if filter.as_ref().is_some_and(|f| !f.is_match(rel)) {
            return true;
        }
        if file
            .metadata()
            .map(|m| m.len() > MAX_FILE_BYTES)
            .unwrap_or(true)
            || is_binary(&mut file)
        {
            return true;
        }
        let mut found: Vec<(u64, String)> = Vec::new();
        let mut over = false;
        let _ = searcher.search_file(
            &matcher,
            &file,
            Lossy(|line_no, line| {
                let line = line.trim_end_matches(['\n', '\r']);
                if line.chars().count() > MAX_LINE_CHARS {
                    return Ok(true);
                }
                // The matcher found the line; confirm on the trimmed text (no newline).
                if matcher.is_match(line.as_bytes()).unwrap_or(true) {
                    if results.len() + found.len() == limit {
                        over = true;
                        return Ok(false);
                    }
                    found.push((line_no, shorten_line(line)));
                }
                Ok(true)
            }),
        );
        for (n, line) in found {
            results.push(format!("{shown}:{n}: {line}"));
        }
        if over {
            truncated = true;
        }
        !over
    };
    if root.is_file {
        // The root itself, opened beneath the family root (a link inside followed).
        if let Ok(file) = root.at.root.open_read(&root.real) {
            let name = root
                .real
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            search(file, &name, root.at.virtual_path(&root.real));
        }
        return format_grep(p, &results, truncated);
    }
    let dir = match root.at.root.open_dir(&root.real) {
        Ok(d) => d,
        Err(_) => return format!("Error: Directory not found: {p}"),
    };
    let _ = dir.walk(None, &mut |rel, entry, parent| {
        if is_ignored(&entry.name.to_string_lossy()) || root.hides(rel) {
            return Step::Skip;
        }
        if entry.kind != Kind::File {
            return Step::Continue;
        }
        // Opened from its directory's handle without following a link: a file swapped for
        // a link since the listing is skipped.
        let Ok(file) = parent.child_file(&entry.name) else {
            return Step::Continue;
        };
        if search(file, &rel.to_string_lossy(), root.virtual_path(rel)) {
            Step::Continue
        } else {
            Step::Stop
        }
    });
    format_grep(p, &results, truncated)
}

/// DeerFlow's `_format_grep_results`.
pub fn format_grep(root: &str, lines: &[String], truncated: bool) -> String {
    if lines.is_empty() {
        return format!("No matches found under {root}");
    }
    let mut out = vec![format!("Found {} matches under {root}", lines.len())];
    if truncated {
        out[0].push_str(&format!(" (showing first {})", lines.len()));
    }
    out.extend(lines.iter().cloned());
    if truncated {
        out.push("Results truncated. Narrow the path or add a glob filter.".into());
    }
    out.join("\n")
}
