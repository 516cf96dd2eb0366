//! Compiled rules and their evaluation. A rule matches when every matcher it has matches
//! (for bash, on one simple command of the line); the strictest matching rule wins (deny >
//! ask > allow; the first in order among equals). A matcher that only possibly matches (a part
//! of the command is known only at run time) makes a deny or ask rule ask, and an allow rule not
//! match. Rules are indexed by tool and, for bash, by program, and a bash line is analysed once
//! per evaluation, only when a rule that reads commands applies.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use globset::{GlobBuilder, GlobMatcher, GlobSet, GlobSetBuilder};
use regex::Regex;
use serde_json::Value;

use super::paths::{self, Match, Place};
use super::shell::{self, basename, Analysis, Cwd, SimpleCommand};
use super::{CallFacts, CallSource, Decision, PolicyEnv, PolicyError, RuleConfig, Verdict};
use crate::config::approvals::ApprovalsConfig;
use crate::config::FieldPath;

/// The origin of `approvals.rules`.
pub const GLOBAL_ORIGIN: &str = "approvals.rules";
/// The rule name a verdict carries when a bash command could not be analysed.
pub const UNPARSED_RULE: &str = "unparsed";
/// The tool whose `command` argument is a bash command line.
pub(crate) const BASH_TOOL: &str = "bash";

/// A compiled set of approval rules: cheap to clone, shared by every run.
#[derive(Clone, Debug, Default)]
pub struct ApprovalPolicy {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    rules: Vec<Rule>,
    /// The decision for an unanalysable command; `None`: ask.
    unparsed: Option<Decision>,
    index: Index,
}

impl ApprovalPolicy {
    /// The config's global layer (+ the shipped defaults when `defaults`), examples checked: a
    /// failing example, a bad glob/regex/pointer, a duplicate name is a PolicyError naming rule
    /// and example.
    pub fn from_config(
        config: &ApprovalsConfig,
        env: &PolicyEnv,
    ) -> Result<ApprovalPolicy, PolicyError> {
        let mut rules = Vec::new();
        if config.defaults {
            let defaults = super::default_rules(env);
            rules.extend(compile_layer(&defaults, super::DEFAULTS_ORIGIN, env)?);
        }
        rules.extend(compile_layer(&config.rules, GLOBAL_ORIGIN, env)?);
        Ok(Self::build(rules, Some(config.unparsed)))
    }

    /// One more layer (a role's, a custom agent's, a skill's rules), `origin` names it in errors
    /// and verdicts.
    pub fn layer(
        rules: &[RuleConfig],
        origin: &str,
        env: &PolicyEnv,
    ) -> Result<ApprovalPolicy, PolicyError> {
        Ok(Self::build(compile_layer(rules, origin, env)?, None))
    }

    /// The layer of `role` in `config` (`approvals.roles.<role>`); empty when it has none.
    pub fn role(
        config: &ApprovalsConfig,
        role: &str,
        env: &PolicyEnv,
    ) -> Result<ApprovalPolicy, PolicyError> {
        match config.roles.get(role) {
            Some(rules) => Self::layer(rules, &super::role_origin(role), env),
            None => Ok(Self::default()),
        }
    }

    /// The union of both policies' rules (this one's first); the stricter `unparsed`.
    pub fn with(&self, other: &ApprovalPolicy) -> ApprovalPolicy {
        if other.is_empty() && other.inner.unparsed.is_none() {
            return self.clone();
        }
        if self.is_empty() && self.inner.unparsed.is_none() {
            return other.clone();
        }
        let rules = self
            .inner
            .rules
            .iter()
            .chain(&other.inner.rules)
            .cloned()
            .collect();
        let unparsed = self.inner.unparsed.max(other.inner.unparsed);
        Self::build(rules, unparsed)
    }

    /// Whether the policy has no rules (every call is allowed).
    pub fn is_empty(&self) -> bool {
        self.inner.rules.is_empty()
    }

    /// The strictest matching rule's verdict; no rule matches -> Allow with rule None.
    pub fn evaluate(&self, call: &CallFacts<'_>) -> Verdict {
        let inner = &*self.inner;
        if inner.rules.is_empty() {
            return Verdict::allow();
        }
        let mut best = Best::default();
        let is_bash = call.tool == BASH_TOOL;
        let mut shell_candidates: Vec<usize> = Vec::new();
        for i in inner.index.candidates(call.tool) {
            let rule = &inner.rules[i];
            if !rule.head_matches(call) {
                continue;
            }
            if !rule.reads_paths_or_commands() {
                best.consider(i, rule, Match::Yes);
            } else if is_bash {
                shell_candidates.push(i);
            } else if !rule.shell_only {
                best.consider(i, rule, rule.match_file_tool(call.tool, call.args));
            }
        }
        if shell_candidates.is_empty() {
            return best.verdict(&inner.rules);
        }
        let analysis = match call.args.get("command").and_then(Value::as_str) {
            Some(line) => shell::analyse(line),
            None => Analysis::Unanalysable {
                reason: "the call has no command string".to_owned(),
                partial: Vec::new(),
            },
        };
        shell_candidates.sort_unstable();
        for command in analysis.commands() {
            let by_program = inner.index.by_program.get(command.program.as_str());
            for &i in by_program
                .into_iter()
                .flatten()
                .chain(&inner.index.any_program)
            {
                if shell_candidates.binary_search(&i).is_ok() {
                    let rule = &inner.rules[i];
                    best.consider(i, rule, rule.match_command(command));
                }
            }
        }
        if let Some(reason) = analysis.unanalysable() {
            best.consider_unparsed(inner.unparsed.unwrap_or(Decision::Ask), reason);
        }
        best.verdict(&inner.rules)
    }

    fn build(rules: Vec<Rule>, unparsed: Option<Decision>) -> Self {
        let index = Index::new(&rules);
        Self {
            inner: Arc::new(Inner {
                rules,
                unparsed,
                index,
            }),
        }
    }
}

/// The best verdict so far: the strictest decision; among equals a sure match before one that
/// only may apply, then the lowest rule index.
#[derive(Default)]
struct Best {
    /// Decision, whether the match is sure, rule index.
    found: Option<(Decision, bool, usize)>,
    unparsed: Option<(Decision, String)>,
}

/// What a verdict's justification adds when its rule only may apply.
const MAY_APPLY: &str = "may apply: part of the command is known only at run time";

impl Best {
    fn consider(&mut self, index: usize, rule: &Rule, matched: Match) {
        let (decision, sure) = match matched {
            Match::Yes => (rule.decision, true),
            Match::Maybe if rule.decision >= Decision::Ask => (Decision::Ask, false),
            Match::Maybe | Match::No => return,
        };
        let better = match self.found {
            None => true,
            Some((d, s, i)) => {
                (decision, sure, std::cmp::Reverse(index)) > (d, s, std::cmp::Reverse(i))
            }
        };
        if better {
            self.found = Some((decision, sure, index));
        }
    }

    fn consider_unparsed(&mut self, decision: Decision, reason: &str) {
        self.unparsed = Some((decision, reason.to_owned()));
    }

    fn verdict(self, rules: &[Rule]) -> Verdict {
        let from_rule = self.found.map(|(decision, sure, i)| {
            let rule = &rules[i];
            let justification = match (sure, &rule.justification) {
                (true, j) => j.clone(),
                (false, Some(j)) => Some(format!("{j} ({MAY_APPLY})")),
                (false, None) => Some(MAY_APPLY.to_owned()),
            };
            Verdict {
                decision,
                rule: Some(rule.name.clone()),
                origin: Some(rule.origin.clone()),
                justification,
            }
        });
        let from_unparsed = self.unparsed.map(|(decision, reason)| Verdict {
            decision,
            rule: Some(UNPARSED_RULE.to_owned()),
            origin: Some("approvals.unparsed".to_owned()),
            justification: Some(format!("the command cannot be analysed: {reason}")),
        });
        match (from_rule, from_unparsed) {
            (Some(r), Some(u)) if u.decision > r.decision => u,
            (Some(r), _) => r,
            (None, Some(u)) => u,
            (None, None) => Verdict::allow(),
        }
    }
}

/// Which rules can apply to a tool, and to a bash program.
#[derive(Debug, Default)]
struct Index {
    by_tool: HashMap<String, Vec<usize>>,
    tool_globs: Option<(GlobSet, Vec<usize>)>,
    any_tool: Vec<usize>,
    by_program: HashMap<String, Vec<usize>>,
    any_program: Vec<usize>,
}

impl Index {
    fn new(rules: &[Rule]) -> Self {
        let mut index = Index::default();
        let mut globs = GlobSetBuilder::new();
        let mut glob_rules = Vec::new();
        for (i, rule) in rules.iter().enumerate() {
            match &rule.tool {
                ToolMatch::Any => index.any_tool.push(i),
                ToolMatch::Exact(name) => index.by_tool.entry(name.clone()).or_default().push(i),
                ToolMatch::Glob(matcher) => {
                    globs.add(matcher.glob().clone());
                    glob_rules.push(i);
                }
            }
            if rule.reads_paths_or_commands() {
                match rule.commands.is_empty() {
                    true => index.any_program.push(i),
                    false => {
                        let programs: HashSet<&str> = rule
                            .commands
                            .iter()
                            .filter_map(|c| c.first())
                            .map(String::as_str)
                            .collect();
                        for program in programs {
                            index
                                .by_program
                                .entry(program.to_owned())
                                .or_default()
                                .push(i);
                        }
                    }
                }
            }
        }
        if !glob_rules.is_empty() {
            // Each glob compiled alone already, so the set builds.
            if let Ok(set) = globs.build() {
                index.tool_globs = Some((set, glob_rules));
            }
        }
        index
    }

    /// The rules whose tool matcher matches `tool`, in order.
    fn candidates(&self, tool: &str) -> Vec<usize> {
        let mut out: Vec<usize> = self.any_tool.clone();
        if let Some(exact) = self.by_tool.get(tool) {
            out.extend(exact);
        }
        if let Some((set, rules)) = &self.tool_globs {
            out.extend(set.matches(tool).into_iter().map(|g| rules[g]));
        }
        out.sort_unstable();
        out
    }
}

/// One compiled rule.
#[derive(Clone, Debug)]
pub(crate) struct Rule {
    pub name: String,
    pub origin: String,
    pub decision: Decision,
    pub justification: Option<String>,
    tool: ToolMatch,
    source: Option<SourceMatch>,
    /// Program-and-prefix alternatives, the program by basename.
    commands: Vec<Vec<String>>,
    flags: Vec<String>,
    paths: Option<GlobSet>,
    paths_outside: Option<Vec<String>>,
    writes: Option<GlobSet>,
    args: Vec<ArgRule>,
    /// Has `command(s)` or `flags`: applies to bash calls only.
    pub shell_only: bool,
    /// Where relative paths resolve.
    cwd: String,
}

#[derive(Clone, Debug)]
enum ToolMatch {
    Any,
    Exact(String),
    Glob(GlobMatcher),
}

#[derive(Clone, Debug)]
enum SourceMatch {
    Builtin,
    Sandbox,
    Mcp(Option<GlobMatcher>),
    Acp,
    Task,
    Config,
}

#[derive(Clone, Debug)]
struct ArgRule {
    pointer: String,
    equals: Option<Value>,
    glob: Option<GlobMatcher>,
    regex: Option<Regex>,
    present: Option<bool>,
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
    fn head_matches(&self, call: &CallFacts<'_>) -> bool {
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

/// Compiles one layer's rules, checking names and examples.
fn compile_layer(
    configs: &[RuleConfig],
    origin: &str,
    env: &PolicyEnv,
) -> Result<Vec<Rule>, PolicyError> {
    let mut names: HashMap<&str, usize> = HashMap::new();
    let mut rules = Vec::with_capacity(configs.len());
    for (index, config) in configs.iter().enumerate() {
        let fail = |field: FieldPath, message: String| {
            PolicyError::rule(origin, index, &config.name, field, message)
        };
        if let Some(first) = names.insert(&config.name, index) {
            return Err(fail(
                FieldPath::root().key("name"),
                format!("the name is already used by {origin}[{first}]"),
            ));
        }
        let rule = compile(config, origin, env).map_err(|(field, message)| fail(field, message))?;
        super::examples::check(&rule, config).map_err(|(field, message)| fail(field, message))?;
        rules.push(rule);
    }
    Ok(rules)
}

type Problem = (FieldPath, String);

/// One rule, compiled; a problem names the field relative to the rule.
pub(crate) fn compile(config: &RuleConfig, origin: &str, env: &PolicyEnv) -> Result<Rule, Problem> {
    let root = FieldPath::root();
    if config.name.trim().is_empty() {
        return Err((root.key("name"), "a rule needs a name".to_owned()));
    }
    let tool = match config.tool.as_deref() {
        None => ToolMatch::Any,
        Some(t) if t.contains(['*', '?', '[', '{']) => {
            ToolMatch::Glob(glob(t, false).map_err(|e| (root.key("tool"), e))?)
        }
        Some(t) => ToolMatch::Exact(t.to_owned()),
    };
    let source = config
        .source
        .as_deref()
        .map(|s| parse_source(s).map_err(|e| (root.key("source"), e)))
        .transpose()?;
    let mut commands = Vec::new();
    if let Some(command) = &config.command {
        commands.push(program_prefix(command).map_err(|e| (root.key("command"), e))?);
    }
    for (i, command) in config.commands.iter().flatten().enumerate() {
        commands.push(program_prefix(command).map_err(|e| (root.key("commands").index(i), e))?);
    }
    if config.commands.as_ref().is_some_and(Vec::is_empty) {
        return Err((
            root.key("commands"),
            "an empty list matches nothing".to_owned(),
        ));
    }
    let flags = config.flags.clone().unwrap_or_default();
    for (i, flag) in flags.iter().enumerate() {
        if !flag.starts_with('-') || flag.trim_start_matches('-').is_empty() {
            return Err((
                root.key("flags").index(i),
                format!("`{flag}` is not a flag (`-r`, `--recursive`)"),
            ));
        }
    }
    if config.flags.as_ref().is_some_and(Vec::is_empty) {
        return Err((
            root.key("flags"),
            "an empty list matches nothing".to_owned(),
        ));
    }
    let shell_only = !commands.is_empty() || !flags.is_empty();
    if shell_only {
        let bash_tool = match &tool {
            ToolMatch::Any => true,
            ToolMatch::Exact(t) => t == BASH_TOOL,
            ToolMatch::Glob(g) => g.is_match(BASH_TOOL),
        };
        if !bash_tool {
            return Err((
                root.key("tool"),
                "command, commands and flags match bash command lines, but this tool is not `bash`"
                    .to_owned(),
            ));
        }
    }
    let cwd = env.workspace.clone();
    let paths = config
        .paths
        .as_ref()
        .map(|g| path_globs(g, &cwd).map_err(|(i, e)| (root.key("paths").index(i), e)))
        .transpose()?;
    let writes = config
        .writes
        .as_ref()
        .map(|g| path_globs(g, &cwd).map_err(|(i, e)| (root.key("writes").index(i), e)))
        .transpose()?;
    let paths_outside = match &config.paths_outside {
        None => None,
        Some(roots) if roots.is_empty() => {
            return Err((
                root.key("paths_outside"),
                "an empty list matches nothing".to_owned(),
            ))
        }
        Some(roots) => Some(roots.iter().map(|r| paths::resolve(r, &cwd)).collect()),
    };
    let mut args = Vec::new();
    for (i, matcher) in config.args.iter().flatten().enumerate() {
        let at = root.key("args").index(i);
        if !(matcher.pointer.is_empty() || matcher.pointer.starts_with('/')) {
            return Err((
                at.key("pointer"),
                format!(
                    "`{}` is not a JSON pointer (`/path`, `/to/0`)",
                    matcher.pointer
                ),
            ));
        }
        if matcher.equals.is_none()
            && matcher.glob.is_none()
            && matcher.regex.is_none()
            && matcher.present.is_none()
        {
            return Err((
                at,
                "a matcher needs equals, glob, regex or present".to_owned(),
            ));
        }
        let glob = matcher
            .glob
            .as_deref()
            .map(|g| glob(g, false).map_err(|e| (at.key("glob"), e)))
            .transpose()?;
        let regex = matcher
            .regex
            .as_deref()
            .map(|r| Regex::new(r).map_err(|e| (at.key("regex"), format!("bad regex: {e}"))))
            .transpose()?;
        args.push(ArgRule {
            pointer: matcher.pointer.clone(),
            equals: matcher.equals.clone(),
            glob,
            regex,
            present: matcher.present,
        });
    }
    Ok(Rule {
        name: config.name.clone(),
        origin: origin.to_owned(),
        decision: config.decision,
        justification: config.justification.clone(),
        tool,
        source,
        commands,
        flags,
        paths,
        paths_outside,
        writes,
        args,
        shell_only,
        cwd,
    })
}

fn parse_source(source: &str) -> Result<SourceMatch, String> {
    Ok(match source {
        "builtin" => SourceMatch::Builtin,
        "sandbox" => SourceMatch::Sandbox,
        "mcp" => SourceMatch::Mcp(None),
        "acp" => SourceMatch::Acp,
        "task" => SourceMatch::Task,
        "config" => SourceMatch::Config,
        other => match other.strip_prefix("mcp:") {
            Some(server) if !server.is_empty() => SourceMatch::Mcp(Some(glob(server, false)?)),
            _ => {
                return Err(format!(
                    "unknown source `{other}`; expected builtin, sandbox, mcp, mcp:<server>, acp, task or config"
                ))
            }
        },
    })
}

fn program_prefix(words: &[String]) -> Result<Vec<String>, String> {
    let Some((program, rest)) = words.split_first() else {
        return Err("a command needs at least a program".to_owned());
    };
    if program.is_empty() {
        return Err("the program is empty".to_owned());
    }
    let mut out = vec![basename(program).to_owned()];
    out.extend(rest.iter().cloned());
    Ok(out)
}

/// A glob; with `separator`, `*` stops at `/` (`**` crosses it).
fn glob(pattern: &str, separator: bool) -> Result<GlobMatcher, String> {
    GlobBuilder::new(pattern)
        .literal_separator(separator)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| format!("bad glob: {e}"))
}

/// Path globs, relative ones taken from the workspace (unless they start with `**`).
fn path_globs(patterns: &[String], cwd: &str) -> Result<GlobSet, (usize, String)> {
    if patterns.is_empty() {
        return Err((0, "an empty list matches nothing".to_owned()));
    }
    let mut set = GlobSetBuilder::new();
    for (i, pattern) in patterns.iter().enumerate() {
        let absolute = match pattern.starts_with('/') || pattern.starts_with("**") {
            true => pattern.clone(),
            false => format!("{}/{pattern}", cwd.trim_end_matches('/')),
        };
        let glob = GlobBuilder::new(&absolute)
            .literal_separator(true)
            .build()
            .map_err(|e| (i, format!("bad glob: {e}")))?;
        set.add(glob);
    }
    set.build().map_err(|e| (0, format!("bad glob: {e}")))
}
