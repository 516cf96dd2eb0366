//! A compiled rule and its matchers: tool, source and JSON-pointer matchers on the call, and,
//! on one simple command of a bash line or on a file tool's path arguments, the program prefix,
//! flags, path globs, paths outside roots and written paths, each answering [`Match`]
//! (`Maybe` when a part is known only at run time).

use globset::{GlobMatcher, GlobSet};
use regex::Regex;
use serde_json::Value;

use super::paths::{self, Match, Place};
use super::rules::BASH_TOOL;
use super::shell::{self, Cwd, SimpleCommand};
use super::{CallFacts, CallSource, Decision};

/// One compiled rule.
#[derive(Clone, Debug)]
pub(crate) struct Rule {
    pub name: String,
    pub origin: String,
    pub decision: Decision,
    pub justification: Option<String>,
    pub tool: ToolMatch,
    pub source: Option<SourceMatch>,
    /// Program-and-prefix alternatives, the program by basename.
    pub commands: Vec<Vec<String>>,
    pub flags: Vec<String>,
    pub paths: Option<GlobSet>,
    pub paths_outside: Option<Vec<String>>,
    pub writes: Option<GlobSet>,
    pub args: Vec<ArgRule>,
    /// Has `command(s)` or `flags`: applies to bash calls only.
    pub shell_only: bool,
    /// Where relative paths resolve.
    pub cwd: String,
}

/// A rule's `tool`.
#[derive(Clone, Debug)]
pub(crate) enum ToolMatch {
    Any,
    Exact(String),
    Glob(GlobMatcher),
}

/// A rule's `source`.
#[derive(Clone, Debug)]
pub(crate) enum SourceMatch {
    Builtin,
    Sandbox,
    Mcp(Option<GlobMatcher>),
    Acp,
    Task,
    Config,
}

/// One of a rule's `args` matchers.
#[derive(Clone, Debug)]
pub(crate) struct ArgRule {
    pub pointer: String,
    pub equals: Option<Value>,
    pub glob: Option<GlobMatcher>,
    pub regex: Option<Regex>,
    pub present: Option<bool>,
}

/// The path arguments of the file tools (DeerFlow's sandbox tools), and whether the tool writes
/// them.
fn file_tool_paths(tool: &str) -> (&'static [&'static str], bool) {
    match tool {
        "read_file" | "ls" | "glob" | "grep" => (&["/path"], false),
        "write_file" | "str_replace" => (&["/path"], true),
        "view_image" => (&["/image_path"], false),
        "present_files" => (&["/filepaths"], false),
        _ => (&[], false),
    }
}

impl Rule {
    /// Whether the rule has matchers on paths or bash commands.
    pub fn reads_paths_or_commands(&self) -> bool {
        self.shell_only
            || self.paths.is_some()
            || self.paths_outside.is_some()
            || self.writes.is_some()
    }

    /// Whether the rule is about bash command lines (its examples are command lines).
    pub fn is_bash_rule(&self) -> bool {
        self.shell_only || matches!(&self.tool, ToolMatch::Exact(t) if t == BASH_TOOL)
    }

    /// The literal tool name, when the rule names one.
    pub fn exact_tool(&self) -> Option<&str> {
        match &self.tool {
            ToolMatch::Exact(t) => Some(t),
            _ => None,
        }
    }

    /// Tool, source and argument matchers.
    pub fn head_matches(&self, call: &CallFacts<'_>) -> bool {
        let tool = match &self.tool {
            ToolMatch::Any => true,
            ToolMatch::Exact(name) => name == call.tool,
            ToolMatch::Glob(glob) => glob.is_match(call.tool),
        };
        tool && self.source_matches(call.source) && self.args_match(call.args)
    }

    fn source_matches(&self, source: CallSource<'_>) -> bool {
        match (&self.source, source) {
            (None, _) => true,
            (Some(SourceMatch::Builtin), CallSource::Builtin)
            | (Some(SourceMatch::Sandbox), CallSource::Sandbox)
            | (Some(SourceMatch::Acp), CallSource::Acp)
            | (Some(SourceMatch::Task), CallSource::Task)
            | (Some(SourceMatch::Config), CallSource::Config)
            | (Some(SourceMatch::Mcp(None)), CallSource::Mcp { .. }) => true,
            (Some(SourceMatch::Mcp(Some(glob))), CallSource::Mcp { server }) => {
                glob.is_match(server)
            }
            _ => false,
        }
    }

    pub fn args_match(&self, args: &Value) -> bool {
        self.args.iter().all(|m| m.matches(args))
    }

    /// The path matchers on a file tool's path arguments.
    pub fn match_file_tool(&self, tool: &str, args: &Value) -> Match {
        let (pointers, writes) = file_tool_paths(tool);
        let mut places = Vec::new();
        for pointer in pointers {
            match args.pointer(pointer) {
                Some(Value::String(path)) => {
                    places.push(Place::Known(paths::resolve(path, &self.cwd)))
                }
                Some(Value::Array(items)) => places.extend(
                    items
                        .iter()
                        .filter_map(Value::as_str)
                        .map(|p| Place::Known(paths::resolve(p, &self.cwd))),
                ),
                _ => {}
            }
        }
        let mut result = Match::Yes;
        if let Some(globs) = &self.paths {
            result = result.and(any(&places, |p| paths::matches(p, globs)));
        }
        if let Some(roots) = &self.paths_outside {
            result = result.and(any(&places, |p| paths::outside(p, roots)));
        }
        if let Some(globs) = &self.writes {
            let written: &[Place] = if writes { &places } else { &[] };
            result = result.and(any(written, |p| paths::matches(p, globs)));
        }
        result
    }

    /// The command-level matchers on one simple command of a bash line.
    pub fn match_command(&self, command: &SimpleCommand) -> Match {
        if self.commands.is_empty() {
            return self.match_after_prefix(command, 0);
        }
        let mut best = Match::No;
        for alternative in &self.commands {
            let prefix = prefix_match(alternative, command);
            if prefix == Match::No {
                continue;
            }
            best = best.max(prefix.and(self.match_after_prefix(command, alternative.len() - 1)));
            if best == Match::Yes {
                break;
            }
        }
        best
    }

    fn match_after_prefix(&self, command: &SimpleCommand, skip: usize) -> Match {
        let mut result = Match::Yes;
        if !self.flags.is_empty() {
            result = result.and(flags_match(&self.flags, &command.args));
            if result == Match::No {
                return result;
            }
        }
        if self.paths.is_none() && self.paths_outside.is_none() && self.writes.is_none() {
            return result;
        }
        let dir = match &command.cwd {
            Cwd::Start => Some(self.cwd.clone()),
            Cwd::Path(path) => Some(paths::resolve(path, &self.cwd)),
            Cwd::Unknown => None,
        };
        if self.paths.is_some() || self.paths_outside.is_some() {
            let rest = command.args.get(skip..).unwrap_or(&[]);
            let places: Vec<Place> = super::programs::operands(rest)
                .map(|w| paths::place(w, dir.as_deref()))
                .collect();
            if let Some(globs) = &self.paths {
                result = result.and(any(&places, |p| paths::matches(p, globs)));
            }
            if let Some(roots) = &self.paths_outside {
                result = result.and(any(&places, |p| paths::outside(p, roots)));
            }
        }
        if let Some(globs) = &self.writes {
            result = result.and(any(&command.writes, |w| {
                paths::matches(&paths::place(w, dir.as_deref()), globs)
            }));
        }
        result
    }
}

/// The best match of `f` over `items`; `No` for none.
fn any<T>(items: &[T], f: impl Fn(&T) -> Match) -> Match {
    let mut best = Match::No;
    for item in items {
        best = best.max(f(item));
        if best == Match::Yes {
            break;
        }
    }
    best
}

/// Whether `command` starts with `prefix` (a program, then arguments).
fn prefix_match(prefix: &[String], command: &SimpleCommand) -> Match {
    let Some((program, words)) = prefix.split_first() else {
        return Match::No;
    };
    if *program != command.program {
        return Match::No;
    }
    let mut result = Match::Yes;
    for (i, word) in words.iter().enumerate() {
        match command.args.get(i) {
            None => return Match::No,
            Some(arg) if arg.dynamic => result = Match::Maybe,
            Some(arg) if arg.text == *word => {}
            Some(_) => return Match::No,
        }
    }
    result
}

/// Whether any of `flags` is among `args` (before `--`).
fn flags_match(flags: &[String], args: &[shell::Word]) -> Match {
    let mut result = Match::No;
    for arg in args {
        if !arg.dynamic && arg.text == "--" {
            break;
        }
        let literal = arg.literal_part();
        if flags.iter().any(|f| flag_in(f, literal)) {
            return Match::Yes;
        }
        if arg.dynamic && (literal.is_empty() || literal.starts_with('-')) {
            result = Match::Maybe;
        }
    }
    result
}

/// Whether the option word `arg` gives `flag`: `-r` inside a short cluster (`-rf`), a long
/// option or its abbreviation (`--rec` for `--recursive`), a single-dash word option exactly.
fn flag_in(flag: &str, arg: &str) -> bool {
    if let Some(long) = flag.strip_prefix("--") {
        let Some(given) = arg.strip_prefix("--") else {
            return false;
        };
        let given = given.split_once('=').map_or(given, |(name, _)| name);
        return !given.is_empty() && long.starts_with(given);
    }
    let Some(short) = flag.strip_prefix('-') else {
        return false;
    };
    let mut chars = short.chars();
    match (chars.next(), chars.next()) {
        (Some(letter), None) => {
            arg.starts_with('-') && !arg.starts_with("--") && arg[1..].contains(letter)
        }
        _ => arg == flag,
    }
}

impl ArgRule {
    fn matches(&self, args: &Value) -> bool {
        let value = args.pointer(&self.pointer);
        if let Some(present) = self.present {
            if present != value.is_some() {
                return false;
            }
        }
        if let Some(equals) = &self.equals {
            if value != Some(equals) {
                return false;
            }
        }
        if self.glob.is_none() && self.regex.is_none() {
            return true;
        }
        let text = match value {
            Some(Value::String(s)) => s.clone(),
            Some(v @ (Value::Number(_) | Value::Bool(_))) => v.to_string(),
            _ => return false,
        };
        self.glob.as_ref().is_none_or(|g| g.is_match(&text))
            && self.regex.as_ref().is_none_or(|r| r.is_match(&text))
    }
}
