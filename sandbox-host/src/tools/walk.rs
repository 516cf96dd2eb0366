//! Walking a thread's directories for `ls` (a depth-2 tree) and `glob`, pruning DeerFlow's
//! ignore list (spec 6.6, case-sensitive), in sorted order so output is deterministic. The
//! walk holds a handle on each directory and never enters one through a link, so a link
//! planted or swapped in while it runs lists nothing outside the thread.
//! Glob matching is Python's `PurePosixPath(rel).match(pattern)` (right-anchored, one
//! component per pattern component), and a `**/x` pattern also tries `x`.

use std::{
    path::{Path, PathBuf},
    sync::OnceLock,
};

use antler_protocol::beneath::{is_escape, Kind, Step};
use globset::{GlobBuilder, GlobMatcher, GlobSet, GlobSetBuilder};
use serde::Deserialize;

use super::{clamp_max_results, ToolContext};
use crate::{output::truncate_ls, paths::Located, skill_state};

/// DeerFlow's ignore list (glob, grep and ls skip these names).
pub const IGNORE_PATTERNS: &[&str] = &[
    ".git",
    ".svn",
    ".hg",
    ".bzr",
    "node_modules",
    "__pycache__",
    ".venv",
    "venv",
    ".env",
    "env",
    ".tox",
    ".nox",
    ".eggs",
    "*.egg-info",
    "site-packages",
    "dist",
    "build",
    ".next",
    ".nuxt",
    ".output",
    ".turbo",
    "target",
    "out",
    ".idea",
    ".vscode",
    "*.swp",
    "*.swo",
    "*~",
    ".project",
    ".classpath",
    ".settings",
    ".DS_Store",
    "Thumbs.db",
    "desktop.ini",
    "*.lnk",
    "*.log",
    "*.tmp",
    "*.temp",
    ".upload-*.part",
    "*.bak",
    "*.cache",
    ".cache",
    "logs",
    ".coverage",
    "coverage",
    ".nyc_output",
    "htmlcov",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
];

pub const GLOB_DEFAULT_MAX_RESULTS: i64 = 200;
pub const GLOB_MAX_MAX_RESULTS: i64 = 1000;

fn ignore_set() -> &'static GlobSet {
    static SET: OnceLock<GlobSet> = OnceLock::new();
    SET.get_or_init(|| {
        let mut b = GlobSetBuilder::new();
        for p in IGNORE_PATTERNS {
            if let Ok(g) = GlobBuilder::new(p).literal_separator(true).build() {
                b.add(g);
            }
        }
        b.build().unwrap_or_else(|_| GlobSet::empty())
    })
}

/// Whether a file or directory name is on the ignore list.
pub fn is_ignored(name: &str) -> bool {
    ignore_set().is_match(name)
}

/// `PurePosixPath(rel).match(pattern)` plus the `**/x` → `x` retry.
pub struct PosixPattern {
    alternatives: Vec<Vec<GlobMatcher>>,
}

impl PosixPattern {
    pub fn new(pattern: &str) -> Result<Self, globset::Error> {
        let mut alternatives = vec![Self::components(pattern)?];
        if let Some(rest) = pattern.strip_prefix("**/") {
            alternatives.push(Self::components(rest)?);
        }
        Ok(Self { alternatives })
    }

    fn components(pattern: &str) -> Result<Vec<GlobMatcher>, globset::Error> {
        pattern
            .split('/')
            .filter(|c| !c.is_empty())
            .map(|c| {
                let c = if c == "**" { "*" } else { c };
                GlobBuilder::new(c)
                    .literal_separator(true)
                    .backslash_escape(true)
                    .build()
                    .map(|g| g.compile_matcher())
            })
            .collect()
    }

    pub fn is_match(&self, rel: &str) -> bool {
        let parts: Vec<&str> = rel.split('/').filter(|c| !c.is_empty()).collect();
        self.alternatives.iter().any(|pat| {
            !pat.is_empty()
                && pat.len() <= parts.len()
                && pat
                    .iter()
                    .zip(&parts[parts.len() - pat.len()..])
                    .all(|(g, part)| g.is_match(part))
        })
    }
}

#[derive(Debug, Deserialize)]
pub struct LsArgs {
    pub path: String,
}

#[derive(Debug, Deserialize)]
pub struct GlobArgs {
    pub pattern: String,
    pub path: String,
    #[serde(default)]
    pub include_dirs: bool,
    #[serde(default = "default_glob_max")]
    pub max_results: i64,
}

fn default_glob_max() -> i64 {
    GLOB_DEFAULT_MAX_RESULTS
}

/// A search root beneath its family's root: the handle on it and its virtual path.
pub struct SearchRoot {
    pub at: Located,
    /// Where the given path really is beneath the family root (links inside followed).
    pub real: PathBuf,
    pub is_file: bool,
}

impl SearchRoot {
    /// The virtual path of `rel` beneath the search root.
    pub fn virtual_path(&self, rel: &Path) -> String {
        self.at.virtual_path(&self.real.join(rel))
    }

    /// Whether `rel` beneath the search root is in another user's skills (never listed,
    /// never entered).
    pub fn hides(&self, rel: &Path) -> bool {
        self.at.hides(&self.real.join(rel))
    }
}

fn open_error(p: &str, e: &std::io::Error) -> String {
    if is_escape(e) || e.kind() == std::io::ErrorKind::PermissionDenied {
        format!("Error: Permission denied: {p}")
    } else {
        format!("Error: Directory not found: {p}")
    }
}

/// Which tool a search root is for: their texts for a root that is not a directory differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RootFor {
    /// A file is "Directory not found".
    Ls,
    /// A file is "Path is not a directory".
    Glob,
    /// A file is a root of its own.
    Grep,
}

/// Resolves a search root for ls, glob and grep: the root or the tool's error text.
pub fn search_root(ctx: &ToolContext, p: &str, tool: RootFor) -> Result<SearchRoot, String> {
    let at = ctx
        .map
        .locate(p, true)
        .map_err(|_| format!("Error: Permission denied: {p}"))?;
    let meta = at.root.metadata(&at.rel).map_err(|e| open_error(p, &e))?;
    if !(meta.is_dir() || (tool == RootFor::Grep && meta.is_file())) {
        return Err(match tool {
            RootFor::Ls => format!("Error: Directory not found: {p}"),
            RootFor::Glob | RootFor::Grep => format!("Error: Path is not a directory: {p}"),
        });
    }
    let real = at.root.resolve(&at.rel).map_err(|e| open_error(p, &e))?;
    Ok(SearchRoot {
        at,
        real,
        is_file: meta.is_file(),
    })
}

/// `ls`: sorted absolute paths down to depth 2, directories with a trailing `/`. A link is
/// listed when it resolves beneath the listed directory (or dangles), never followed out.
/// A path in a disabled skill's directory gets DeerFlow's refusal first, before any
/// validation.
pub fn ls(ctx: &ToolContext, a: LsArgs) -> String {
    let p = a.path.as_str();
    if let Some(name) = ctx.map.skill_name_of(p) {
        if skill_state::is_disabled(ctx.settings.extensions_path.as_deref(), name) {
            return skill_state::skill_disabled_message(name);
        }
    }
    let root = match search_root(ctx, p, RootFor::Ls) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let dir = match root.at.root.open_dir(&root.real) {
        Ok(d) => d,
        Err(e) => return open_error(p, &e),
    };
    let mut entries: Vec<String> = Vec::new();
    let _ = dir.walk(Some(2), &mut |rel, entry, _| {
        if is_ignored(&entry.name.to_string_lossy()) || root.hides(rel) {
            return Step::Skip;
        }
        let is_dir = match entry.kind {
            Kind::Dir => true,
            Kind::Symlink => match dir.metadata(rel) {
                Ok(m) => m.is_dir(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
                Err(_) => return Step::Continue,
            },
            _ => false,
        };
        let mut shown = root.virtual_path(rel);
        if is_dir {
            shown.push('/');
        }
        entries.push(shown);
        Step::Continue
    });
    entries.sort();
    if entries.is_empty() {
        return "(empty)".into();
    }
    truncate_ls(&entries.join("\n"), ctx.settings.ls_output_max_chars)
}

/// `glob`.
pub fn glob(ctx: &ToolContext, a: GlobArgs) -> String {
    let p = a.path.as_str();
    let limit = clamp_max_results(
        a.max_results,
        GLOB_DEFAULT_MAX_RESULTS,
        GLOB_MAX_MAX_RESULTS,
    )
    .min(clamp_max_results(
        ctx.settings.glob_max_results,
        GLOB_DEFAULT_MAX_RESULTS,
        GLOB_MAX_MAX_RESULTS,
    ));
    let root = match search_root(ctx, p, RootFor::Glob) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let pattern = match PosixPattern::new(&a.pattern) {
        Ok(m) => m,
        Err(e) => return format!("Error: Unexpected error searching paths: {e}"),
    };
    let dir = match root.at.root.open_dir(&root.real) {
        Ok(d) => d,
        Err(e) => return open_error(p, &e),
    };
    let mut matches = Vec::new();
    let mut truncated = false;
    let _ = dir.walk(None, &mut |rel, entry, _| {
        if is_ignored(&entry.name.to_string_lossy()) || root.hides(rel) {
            return Step::Skip;
        }
        if entry.kind == Kind::Dir && !a.include_dirs {
            return Step::Continue;
        }
        if !pattern.is_match(&rel.to_string_lossy()) {
            return Step::Continue;
        }
        if matches.len() == limit {
            truncated = true;
            return Step::Stop;
        }
        matches.push(root.virtual_path(rel));
        Step::Continue
    });
    format_glob(p, &matches, truncated)
}

/// DeerFlow's `_format_glob_results`.
pub fn format_glob(root: &str, matches: &[String], truncated: bool) -> String {
    if matches.is_empty() {
        return format!("No files matched under {root}");
    }
    let mut lines = vec![format!("Found {} paths under {root}", matches.len())];
    if truncated {
        lines[0].push_str(&format!(" (showing first {})", matches.len()));
    }
    lines.extend(
        matches
            .iter()
            .enumerate()
            .map(|(i, m)| format!("{}. {m}", i + 1)),
    );
    if truncated {
        lines.push("Results truncated. Narrow the path or pattern to see fewer matches.".into());
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn posix_match_is_right_anchored_with_the_double_star_retry() {
        let m = PosixPattern::new("**/*.py").expect("pattern");
        assert!(m.is_match("a.py") && m.is_match("x/a.py") && m.is_match("x/y/a.py"));
        assert!(!m.is_match("a.txt"));
        let m = PosixPattern::new("*.md").expect("pattern");
        assert!(m.is_match("docs/a.md"));
        let m = PosixPattern::new("src/*.rs").expect("pattern");
        assert!(m.is_match("src/a.rs") && m.is_match("x/src/a.rs") && !m.is_match("a.rs"));
    }

    #[test]
    fn ignore_list_is_case_sensitive() {
        assert!(
            is_ignored("node_modules")
                && is_ignored("x.egg-info")
                && is_ignored("a.log")
                && is_ignored("f~")
        );
        assert!(is_ignored(".upload-1.part"));
        assert!(!is_ignored("Node_Modules") && !is_ignored("src"));
    }
}
