//! What loading a config file can report: errors that fail the load (`ConfigError`) and
//! warnings that do not (`ConfigWarning`), each naming the file, line and column, the field
//! path (`tools[3].group`) and what would be accepted. `CheckReport` gathers both for
//! `antler config check`. Lines and columns are 1-based.

use std::fmt;
use std::path::{Path, PathBuf};

/// A 1-based line and column in a config file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
}

/// One step of a field path: a mapping key or a list index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathSegment {
    /// A mapping key.
    Key(String),
    /// A list index.
    Index(usize),
}

/// Where a value sits in a config file, displayed as `tools[3].group`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldPath(Vec<PathSegment>);

impl FieldPath {
    /// The document root.
    pub fn root() -> Self {
        Self::default()
    }

    /// This path extended by a mapping key.
    pub fn key(&self, key: impl Into<String>) -> Self {
        let mut next = self.clone();
        next.0.push(PathSegment::Key(key.into()));
        next
    }

    /// This path extended by a list index.
    pub fn index(&self, index: usize) -> Self {
        let mut next = self.clone();
        next.0.push(PathSegment::Index(index));
        next
    }

    /// The segments from the root.
    pub fn segments(&self) -> &[PathSegment] {
        &self.0
    }

    /// Whether this is the document root.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// This path followed by `tail`.
    pub fn join(&self, tail: &FieldPath) -> Self {
        let mut next = self.clone();
        next.0.extend(tail.0.iter().cloned());
        next
    }

    /// The path one step up, or `None` at the root.
    pub fn parent(&self) -> Option<Self> {
        let mut up = self.clone();
        up.0.pop().map(|_| up)
    }

    pub(crate) fn from_path_to_error(path: &serde_path_to_error::Path) -> Self {
        use serde_path_to_error::Segment;
        let segments = path
            .iter()
            .filter_map(|segment| match segment {
                Segment::Seq { index } => Some(PathSegment::Index(*index)),
                Segment::Map { key } => Some(PathSegment::Key(key.clone())),
                Segment::Enum { variant } => Some(PathSegment::Key(variant.clone())),
                Segment::Unknown => None,
            })
            .collect();
        Self(segments)
    }

    pub(crate) fn from_ignored(path: &serde_ignored::Path<'_>) -> Self {
        fn walk(path: &serde_ignored::Path<'_>, out: &mut Vec<PathSegment>) {
            use serde_ignored::Path;
            match path {
                Path::Root => {}
                Path::Seq { parent, index } => {
                    walk(parent, out);
                    out.push(PathSegment::Index(*index));
                }
                Path::Map { parent, key } => {
                    walk(parent, out);
                    out.push(PathSegment::Key(key.clone()));
                }
                Path::Some { parent }
                | Path::NewtypeStruct { parent }
                | Path::NewtypeVariant { parent } => walk(parent, out),
            }
        }
        let mut segments = Vec::new();
        walk(path, &mut segments);
        Self(segments)
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str(".");
        }
        for (i, segment) in self.0.iter().enumerate() {
            match segment {
                PathSegment::Key(key) if i == 0 => f.write_str(key)?,
                PathSegment::Key(key) => write!(f, ".{key}")?,
                PathSegment::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

/// A value at a known place that is not acceptable.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// The file, as it was named to the loader.
    pub file: PathBuf,
    /// Where in the file, when it could be found.
    pub location: Option<Location>,
    /// The field path; the root for a syntax error.
    pub path: FieldPath,
    /// What is wrong (DeerFlow's own text where DeerFlow has one).
    pub message: String,
    /// What would be accepted, when `message` does not already say it.
    pub expected: Option<String>,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_place(f, &self.file, self.location, &self.path)?;
        f.write_str(&self.message)?;
        if let Some(expected) = &self.expected {
            write!(f, "; {expected}")?;
        }
        Ok(())
    }
}

fn write_place(
    f: &mut fmt::Formatter<'_>,
    file: &Path,
    location: Option<Location>,
    path: &FieldPath,
) -> fmt::Result {
    write!(f, "{}:", file.display())?;
    if let Some(Location { line, column }) = location {
        write!(f, "{line}:{column}:")?;
    }
    f.write_str(" ")?;
    if !path.is_root() {
        write!(f, "{path}: ")?;
    }
    Ok(())
}

/// An error that fails a load: the file cannot be read, parsed or accepted.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists (or was named) but cannot be read.
    #[error("{}: cannot read the file: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A file named explicitly (argument or environment variable) does not exist.
    #[error("{what} specified by {origin} not found at {}", path.display())]
    NotFound {
        /// `Config file` or `Extensions config file`.
        what: &'static str,
        /// The missing file.
        path: PathBuf,
        /// Who named it: ``param `config_path` `` or ``environment variable `X` ``.
        origin: String,
    },
    /// `extensions_config.json` is not JSON; the message is DeerFlow's.
    #[error("Extensions config file at {} is not valid JSON: {message}", file.display())]
    InvalidJson {
        /// The file.
        file: PathBuf,
        /// Where the parser stopped.
        location: Location,
        /// The parser's message, which ends with the line and column.
        message: String,
    },
    /// Bad syntax in YAML, a value of the wrong type, or a value out of range.
    #[error("{0}")]
    Invalid(Box<FieldError>),
}

impl ConfigError {
    /// The file the error is about.
    pub fn file(&self) -> &Path {
        match self {
            Self::Read { path, .. } | Self::NotFound { path, .. } => path,
            Self::InvalidJson { file, .. } => file,
            Self::Invalid(e) => &e.file,
        }
    }

    /// The line and column, when the error has one.
    pub fn location(&self) -> Option<Location> {
        match self {
            Self::Read { .. } | Self::NotFound { .. } => None,
            Self::InvalidJson { location, .. } => Some(*location),
            Self::Invalid(e) => e.location,
        }
    }

    /// The field path, when the error is about a field.
    pub fn field_path(&self) -> Option<&FieldPath> {
        match self {
            Self::Invalid(e) => Some(&e.path),
            _ => None,
        }
    }
}

/// What a warning is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WarningKind {
    /// A key neither DeerFlow nor Antler knows; it is ignored.
    UnknownKey,
    /// A value out of its range, used clamped (as DeerFlow does).
    Clamped,
    /// An enabled MCP server that cannot start as configured; it is skipped, the others load.
    ServerSkipped,
    /// A DeerFlow setting Antler reads but does not act on (not built yet); it does nothing.
    Ignored,
}

/// Something a load accepted but the operator should see.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigWarning {
    /// What the warning is about.
    pub kind: WarningKind,
    /// The file.
    pub file: PathBuf,
    /// Where in the file, when it could be found.
    pub location: Option<Location>,
    /// The field path (for an unknown key, the key itself).
    pub path: FieldPath,
    /// What happened (DeerFlow's own text for a skipped server).
    pub message: String,
    /// What would be accepted, when `message` does not already say it.
    pub expected: Option<String>,
}

impl ConfigWarning {
    /// The same finding as an error (`check_file` reports a skipped server as one).
    pub fn into_error(self) -> ConfigError {
        ConfigError::Invalid(Box::new(FieldError {
            file: self.file,
            location: self.location,
            path: self.path,
            message: self.message,
            expected: self.expected,
        }))
    }
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_place(f, &self.file, self.location, &self.path)?;
        f.write_str(&self.message)?;
        if let Some(expected) = &self.expected {
            write!(f, "; {expected}")?;
        }
        Ok(())
    }
}

/// The message of an unknown-key warning, with a suggestion when a known key is one or two
/// edits away.
pub(crate) fn unknown_key_message(path: &FieldPath, known: &[&str]) -> String {
    let suggestion = match path.segments().last() {
        Some(PathSegment::Key(key)) => known
            .iter()
            .map(|k| (edit_distance(key, k), *k))
            .filter(|(d, _)| *d <= 2)
            .min()
            .map(|(_, k)| k),
        _ => None,
    };
    match suggestion {
        Some(best) => format!("unknown key, ignored (did you mean `{best}`?)"),
        None => "unknown key, ignored".to_owned(),
    }
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// Which of the two config files a file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigKind {
    /// `config.yaml`.
    App,
    /// `extensions_config.json`.
    Extensions,
}

impl ConfigKind {
    /// `.yaml`/`.yml` is the app config, `.json` the extensions config; otherwise a file
    /// whose first non-blank character is `{` is JSON.
    pub fn detect(path: &Path, text: &str) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some(ext) if ext.eq_ignore_ascii_case("json") => Self::Extensions,
            Some(ext) if ext.eq_ignore_ascii_case("yaml") || ext.eq_ignore_ascii_case("yml") => {
                Self::App
            }
            _ if text.trim_start().starts_with('{') => Self::Extensions,
            _ => Self::App,
        }
    }
}

/// The result of `check_file`: every error and warning for one file.
#[derive(Debug)]
pub struct CheckReport {
    /// The file checked.
    pub file: PathBuf,
    /// The kind it was checked as.
    pub kind: ConfigKind,
    /// Errors: the file would not load, or an enabled MCP server would be skipped.
    pub errors: Vec<ConfigError>,
    /// Warnings: unknown keys and clamped values.
    pub warnings: Vec<ConfigWarning>,
}

impl CheckReport {
    /// Whether the file has no errors (warnings allowed).
    pub fn is_ok(&self) -> bool {
        self.errors.is_empty()
    }

    /// `antler config check --strict`: every key that does nothing (unknown, or a DeerFlow
    /// setting Antler ignores) is an error.
    pub fn strict(mut self) -> Self {
        let (inert, kept): (Vec<_>, Vec<_>) = self
            .warnings
            .into_iter()
            .partition(|w| matches!(w.kind, WarningKind::UnknownKey | WarningKind::Ignored));
        self.errors
            .extend(inert.into_iter().map(ConfigWarning::into_error));
        self.errors
            .sort_by_key(|e| e.location().map(|l| (l.line, l.column)));
        self.warnings = kept;
        self
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for error in &self.errors {
            writeln!(f, "error: {error}")?;
        }
        for warning in &self.warnings {
            writeln!(f, "warning: {warning}")?;
        }
        let kind = match self.kind {
            ConfigKind::App => "app config",
            ConfigKind::Extensions => "extensions config",
        };
        write!(
            f,
            "{}: {kind}: {} error(s), {} warning(s)",
            self.file.display(),
            self.errors.len(),
            self.warnings.len()
        )
    }
}

/// Rewrites serde's expectations for Rust primitives into words an operator reads.
pub(crate) fn humanize(message: &str) -> String {
    const REWRITES: &[(&str, &str)] = &[
        ("expected u8", "expected a non-negative integer"),
        ("expected u16", "expected a non-negative integer"),
        ("expected u32", "expected a non-negative integer"),
        ("expected u64", "expected a non-negative integer"),
        ("expected usize", "expected a non-negative integer"),
        ("expected i32", "expected an integer"),
        ("expected i64", "expected an integer"),
        ("expected f32", "expected a number"),
        ("expected f64", "expected a number"),
        ("expected a sequence", "expected a list"),
        ("expected a map", "expected a mapping"),
        ("expected path string", "expected a path string"),
    ];
    for (from, to) in REWRITES {
        if let Some(head) = message.strip_suffix(from) {
            return format!("{head}{to}");
        }
    }
    message.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_path_displays_like_the_issue_says() {
        let path = FieldPath::root().key("tools").index(3).key("group");
        assert_eq!(path.to_string(), "tools[3].group");
        assert_eq!(FieldPath::root().to_string(), ".");
        assert_eq!(
            path.parent().map(|p| p.to_string()),
            Some("tools[3]".into())
        );
    }

    #[test]
    fn field_error_display_names_file_line_column_path_and_expectation() {
        let error = FieldError {
            file: PathBuf::from("config.yaml"),
            location: Some(Location {
                line: 12,
                column: 5,
            }),
            path: FieldPath::root().key("tools").index(3).key("group"),
            message: "invalid type: integer `5`, expected a string".into(),
            expected: None,
        };
        assert_eq!(
            error.to_string(),
            "config.yaml:12:5: tools[3].group: invalid type: integer `5`, expected a string"
        );
    }

    #[test]
    fn unknown_key_suggests_within_two_edits() {
        let path = FieldPath::root().key("tool_serch");
        assert_eq!(
            unknown_key_message(&path, &["tool_search", "tools"]),
            "unknown key, ignored (did you mean `tool_search`?)"
        );
        let far = FieldPath::root().key("zzzzzz");
        assert_eq!(
            unknown_key_message(&far, &["tools"]),
            "unknown key, ignored"
        );
    }

    #[test]
    fn humanize_rewrites_primitive_expectations_only_at_the_end() {
        assert_eq!(
            humanize("invalid type: string \"x\", expected u64"),
            "invalid type: string \"x\", expected a non-negative integer"
        );
        assert_eq!(humanize("expected u64 here"), "expected u64 here");
    }

    #[test]
    fn detect_kind_by_extension_then_content() {
        assert_eq!(
            ConfigKind::detect(Path::new("a.yml"), "{}"),
            ConfigKind::App
        );
        assert_eq!(
            ConfigKind::detect(Path::new("a.JSON"), "x: 1"),
            ConfigKind::Extensions
        );
        assert_eq!(
            ConfigKind::detect(Path::new("conf"), "  {\"mcpServers\": {}}"),
            ConfigKind::Extensions
        );
        assert_eq!(
            ConfigKind::detect(Path::new("conf"), "tools: []"),
            ConfigKind::App
        );
    }
}
