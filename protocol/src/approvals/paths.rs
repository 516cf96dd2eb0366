//! Paths as rules see them: resolved lexically (no file system: `.` and `..` folded, relative
//! to the sandbox's working directory), and where a path known only in part may lie. Rules
//! match with a three-valued answer, [`Match`]: a path known only at run time may match.

use globset::GlobSet;

use super::shell::Word;

/// Whether a matcher matches: surely, possibly (a part is known only at run time), or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Match {
    /// Does not match.
    No,
    /// Matches for some run-time values.
    Maybe,
    /// Matches.
    Yes,
}

impl Match {
    /// Both matchers hold.
    pub fn and(self, other: Match) -> Match {
        self.min(other)
    }

    /// `Yes` for true, `No` for false.
    pub fn from_bool(b: bool) -> Match {
        if b {
            Match::Yes
        } else {
            Match::No
        }
    }
}

/// Where a path argument lies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// Exactly this absolute, normalised path.
    Known(String),
    /// Some entry of this directory (an unquoted glob: `/tmp/*.log`); the path text itself,
    /// resolved, for matching as written.
    Glob { dir: String, text: String },
    /// Somewhere below this directory, by a run-time value that may hold `..`.
    Below(String),
    /// Anywhere.
    Unknown,
}

/// Where `word`, a path relative to `cwd` (`None`: a directory unknown statically), lies.
pub(crate) fn place(word: &Word, cwd: Option<&str>) -> Place {
    let cwd = match cwd {
        Some(cwd) => cwd,
        None if word.literal_part().starts_with('/') => "/",
        None => return Place::Unknown,
    };
    if !word.dynamic && !word.glob {
        return Place::Known(resolve(&word.text, cwd));
    }
    if !word.dynamic {
        let first_glob = word.text.find(['*', '?', '[']).unwrap_or(word.text.len());
        let (dir, entry) = match word.text[..first_glob].rfind('/') {
            Some(slash) => (&word.text[..slash.max(1)], &word.text[slash + 1..]),
            None => (".", word.text.as_str()),
        };
        // `.*` once matched `..`: treat it as the parent's entries.
        let dir = match entry.starts_with('.') {
            true => resolve(&format!("{dir}/.."), cwd),
            false => resolve(dir, cwd),
        };
        return Place::Glob {
            dir,
            text: resolve(&word.text, cwd),
        };
    }
    match word.literal_part().rfind('/') {
        Some(slash) => Place::Below(resolve(&word.text[..slash.max(1)], cwd)),
        None => Place::Unknown,
    }
}

/// `path` made absolute against `cwd` and normalised lexically (`.`, `..`, `//` folded; `..`
/// at the root stays there).
pub(crate) fn resolve(path: &str, cwd: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    let joined = match path.starts_with('/') {
        true => [path, ""],
        false => [cwd, path],
    };
    for segment in joined.iter().flat_map(|p| p.split('/')) {
        match segment {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    let mut out = String::with_capacity(path.len() + cwd.len());
    for part in &parts {
        out.push('/');
        out.push_str(part);
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

/// Whether `path` is `root` or lies below it (both normalised).
pub(crate) fn is_within(path: &str, root: &str) -> bool {
    root == "/"
        || path == root
        || (path.starts_with(root) && path.as_bytes().get(root.len()) == Some(&b'/'))
}

/// Whether the path at `place` lies outside every root.
pub(crate) fn outside(place: &Place, roots: &[String]) -> Match {
    let within_any = |p: &str| roots.iter().any(|r| is_within(p, r));
    match place {
        Place::Known(path) => Match::from_bool(!within_any(path)),
        // A glob's entries lie in its directory.
        Place::Glob { dir, .. } => Match::from_bool(!within_any(dir)),
        Place::Below(dir) => match within_any(dir) {
            true => Match::Maybe,
            false => Match::Yes,
        },
        Place::Unknown => Match::Maybe,
    }
}

/// Whether the path at `place` matches `globs`.
pub(crate) fn matches(place: &Place, globs: &GlobSet) -> Match {
    match place {
        Place::Known(path) => Match::from_bool(globs.is_match(path)),
        Place::Glob { text, .. } => Match::from_bool(globs.is_match(text)),
        Place::Below(_) | Place::Unknown => Match::Maybe,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_lexically_against_the_workspace() {
        let ws = "/mnt/user-data/workspace";
        assert_eq!(resolve("../x", ws), "/mnt/user-data/x");
        assert_eq!(resolve("a/./b//c/..", ws), "/mnt/user-data/workspace/a/b");
        assert_eq!(resolve("/../../etc", ws), "/etc");
        assert_eq!(resolve("..", "/"), "/");
        assert_eq!(resolve("/", ws), "/");
        assert_eq!(resolve("/mnt/user-data/", ws), "/mnt/user-data");
        assert!(is_within("/mnt/user-data/workspace/a", ws));
        assert!(is_within(ws, ws));
        assert!(!is_within("/mnt/user-data/workspace2", ws));
    }

    #[test]
    fn places_of_globs_and_expansions() {
        let ws = "/mnt/user-data/workspace";
        let glob = Word {
            text: "../*".into(),
            dynamic: false,
            glob: true,
            literal_len: 4,
        };
        let roots = vec![ws.to_owned()];
        assert_eq!(outside(&place(&glob, Some(ws)), &roots), Match::Yes);
        let inside = Word {
            text: "build/*.o".into(),
            ..glob.clone()
        };
        assert_eq!(outside(&place(&inside, Some(ws)), &roots), Match::No);
        let dots = Word {
            text: ".*".into(),
            ..glob
        };
        assert_eq!(outside(&place(&dots, Some(ws)), &roots), Match::Yes);
        let var = Word {
            text: "/tmp/$X".into(),
            dynamic: true,
            glob: false,
            literal_len: 5,
        };
        assert_eq!(place(&var, Some(ws)), Place::Below("/tmp".into()));
        assert_eq!(outside(&place(&var, Some(ws)), &roots), Match::Yes);
        let rel = Word {
            text: "build/$X".into(),
            literal_len: 6,
            ..var.clone()
        };
        assert_eq!(outside(&place(&rel, Some(ws)), &roots), Match::Maybe);
        assert_eq!(place(&Word::unknown("$X"), Some(ws)), Place::Unknown);
    }
}
