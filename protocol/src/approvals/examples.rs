//! A rule's examples, checked when the rule is compiled: each `match` example must match by
//! this rule alone, surely (not only for some run-time values), and each `not_match` example
//! must not match at all. A bash rule's examples are command lines; any other rule's are
//! argument objects, tried with the rule's own tool (tool and source are not checked).

use serde_json::{json, Value};

use super::matcher::Rule;
use super::paths::Match;
use super::shell;
use super::RuleConfig;
use crate::config::FieldPath;

/// The tool an object example is tried as when the rule names no single tool: its `path` is
/// read, and written.
const EXAMPLE_FILE_TOOL: &str = "write_file";

/// Checks `config`'s examples against its compiled `rule`; a problem names the example.
pub(crate) fn check(rule: &Rule, config: &RuleConfig) -> Result<(), (FieldPath, String)> {
    let Some(examples) = &config.examples else {
        return Ok(());
    };
    let base = FieldPath::root().key("examples");
    for (i, example) in examples.matching.iter().enumerate() {
        let at = base.key("match").index(i);
        match example_match(rule, example).map_err(|e| (at.clone(), e))? {
            Match::Yes => {}
            Match::Maybe => {
                return Err((
                    at,
                    format!(
                        "example {} must match but only may (a part is known only at run time)",
                        show(example)
                    ),
                ))
            }
            Match::No => {
                return Err((
                    at,
                    format!("example {} must match but does not", show(example)),
                ))
            }
        }
    }
    for (i, example) in examples.not_match.iter().enumerate() {
        let at = base.key("not_match").index(i);
        match example_match(rule, example).map_err(|e| (at.clone(), e))? {
            Match::No => {}
            Match::Maybe => {
                return Err((
                    at,
                    format!(
                        "example {} must not match but may (a part is known only at run time)",
                        show(example)
                    ),
                ))
            }
            Match::Yes => {
                return Err((
                    at,
                    format!("example {} must not match but does", show(example)),
                ))
            }
        }
    }
    Ok(())
}

/// How `rule` alone matches `example`.
fn example_match(rule: &Rule, example: &Value) -> Result<Match, String> {
    match example {
        Value::String(line) => {
            if !rule.is_bash_rule() && rule.exact_tool().is_some() {
                return Err(format!(
                    "example {} is a command line, but the rule is about `{}`: give an object of arguments",
                    show(example),
                    rule.exact_tool().unwrap_or_default()
                ));
            }
            let args = json!({ "command": line });
            if !rule.args_match(&args) {
                return Ok(Match::No);
            }
            if !rule.reads_paths_or_commands() {
                return Ok(Match::Yes);
            }
            let analysis = shell::analyse(line);
            let mut best = Match::No;
            for command in analysis.commands() {
                best = best.max(rule.match_command(command));
            }
            Ok(best)
        }
        Value::Object(_) => {
            if rule.is_bash_rule() {
                return Err(format!(
                    "example {} is an object, but the rule is about bash: give a command line",
                    show(example)
                ));
            }
            if !rule.args_match(example) {
                return Ok(Match::No);
            }
            if !rule.reads_paths_or_commands() {
                return Ok(Match::Yes);
            }
            let tool = rule.exact_tool().unwrap_or(EXAMPLE_FILE_TOOL);
            Ok(rule.match_file_tool(tool, example))
        }
        _ => Err(format!(
            "example {} is neither a command line nor an object of arguments",
            show(example)
        )),
    }
}

/// An example as the messages show it: a command line in backquotes, JSON otherwise.
fn show(example: &Value) -> String {
    match example {
        Value::String(s) => format!("`{s}`"),
        other => format!("`{other}`"),
    }
}
