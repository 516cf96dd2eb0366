//! Compiling a [`RuleConfig`] into a [`Rule`]: globs, regexes, pointers, sources and
//! program prefixes checked, relative path globs and roots taken from the workspace, names
//! unique within a layer, and the rule's examples checked ([`super::examples`]). A problem
//! names the field relative to the rule.

use std::collections::HashMap;

use globset::{GlobBuilder, GlobMatcher, GlobSet, GlobSetBuilder};
use regex::Regex;

use super::matcher::{ArgRule, Rule, SourceMatch, ToolMatch};
use super::paths;
use super::rules::BASH_TOOL;
use super::shell::basename;
use super::{PolicyEnv, PolicyError, RuleConfig};
use crate::config::FieldPath;

/// Compiles one layer's rules, checking names and examples.
pub(crate) fn compile_layer(
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
