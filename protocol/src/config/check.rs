//! `antler config check`: every finding in one file, not only the first. A load stops at
//! the first bad value; the check goes on past each one (it drops the value and types the
//! rest again), then reports every value out of range, every model parameter a provider
//! would refuse, and the findings of the caller's own checks (the engine's registries of
//! tool `use:` ids and model providers), each with file:line:column.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::app::{load_app, semantic_errors, AppConfig, ModelConfig};
use super::diagnostics::{humanize, ConfigError, FieldPath, PathSegment};
use super::document::Document;
use super::env::EnvLookup;
use super::locate::Format;
use super::ConfigWarning;

/// At most this many type errors are reported for one file.
const MAX_TYPE_ERRORS: usize = 100;

/// A finding of a check the caller runs on a config that loads (a tool `use:` id the
/// catalog does not know, a model provider a run cannot speak to).
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    /// Where: `tools[2].use`.
    pub path: FieldPath,
    /// What is wrong.
    pub message: String,
    /// What would be accepted (the closest known values).
    pub expected: Option<String>,
}

/// The caller's checks of a loaded config.
pub type ExtraChecks<'a> = &'a dyn Fn(&AppConfig) -> Vec<Finding>;

/// Every error and warning of a `config.yaml` text.
pub(crate) fn check_app(
    file: &Path,
    text: &str,
    env: EnvLookup<'_>,
    extra: ExtraChecks<'_>,
) -> (Vec<ConfigError>, Vec<ConfigWarning>) {
    let doc = Document {
        file,
        text,
        format: Format::Yaml,
    };
    let (config, warnings) = match load_app(&doc, env) {
        Ok(loaded) => loaded,
        Err(first) => return (every_type_error::<AppConfig>(&doc, first), Vec::new()),
    };
    let mut errors = semantic_errors(&doc, &config);
    for (index, model) in config.models.iter().enumerate() {
        let at = FieldPath::root().key("models").index(index);
        for (path, message, expected) in model_parameter_problems(&at, model) {
            errors.push(doc.invalid(path, message, Some(expected.to_owned())));
        }
    }
    for (section, message) in super::context::section_problems(&config.other) {
        errors.push(doc.invalid(FieldPath::root().key(section), message, None));
    }
    for finding in extra(&config) {
        errors.push(doc.invalid(finding.path, finding.message, finding.expected));
    }
    errors.sort_by_key(|e| e.location().map(|l| (l.line, l.column)));
    (errors, warnings)
}

/// `first` (the load's error, with the parser's exact position) and every other value of
/// the file that does not type-check as `T`. A syntax error is the only error.
fn every_type_error<T: DeserializeOwned>(
    doc: &Document<'_>,
    first: ConfigError,
) -> Vec<ConfigError> {
    let Ok(mut value) = serde_yaml::from_str::<serde_yaml::Value>(doc.text) else {
        return vec![first];
    };
    let mut errors = vec![first];
    // Original indexes of the list elements dropped so far, by their list's original path:
    // later errors' indexes are mapped back through them.
    let mut dropped: Vec<(FieldPath, usize)> = Vec::new();
    for _ in 0..MAX_TYPE_ERRORS {
        let error = match serde_path_to_error::deserialize::<_, T>(value.clone()) {
            Ok(_) => break,
            Err(e) => e,
        };
        let at = FieldPath::from_path_to_error(error.path());
        let original = original_path(&at, &dropped);
        // A struct missing a field because its bad value was dropped is not news.
        let known = errors.iter().any(|e| {
            e.field_path()
                .is_some_and(|p| p.segments().starts_with(original.segments()))
        });
        if !known {
            let message = humanize(&error.inner().to_string());
            errors.push(doc.invalid(original.clone(), message, None));
        }
        if at.is_root() || !remove(&mut value, at.segments()) {
            break;
        }
        if let (Some(PathSegment::Index(i)), Some(list)) =
            (original.segments().last(), original.parent())
        {
            dropped.push((list, *i));
        }
    }
    errors.sort_by_key(|e| e.location().map(|l| (l.line, l.column)));
    errors
}

/// `path` in the value as it is now, mapped to the file as written.
fn original_path(path: &FieldPath, dropped: &[(FieldPath, usize)]) -> FieldPath {
    let mut original = FieldPath::root();
    for segment in path.segments() {
        original = match segment {
            PathSegment::Key(key) => original.key(key.clone()),
            PathSegment::Index(now) => {
                let mut gone: Vec<usize> = dropped
                    .iter()
                    .filter(|(list, _)| *list == original)
                    .map(|(_, i)| *i)
                    .collect();
                gone.sort_unstable();
                let mut index = *now;
                for i in gone {
                    if i <= index {
                        index += 1;
                    }
                }
                original.index(index)
            }
        };
    }
    original
}

/// Removes the node at `path`; whether it was there.
fn remove(value: &mut serde_yaml::Value, path: &[PathSegment]) -> bool {
    let Some((last, parents)) = path.split_last() else {
        return false;
    };
    let mut node = value;
    for segment in parents {
        let next = match (segment, node) {
            (PathSegment::Key(key), serde_yaml::Value::Mapping(map)) => map.get_mut(key.as_str()),
            (PathSegment::Index(i), serde_yaml::Value::Sequence(list)) => list.get_mut(*i),
            _ => None,
        };
        match next {
            Some(child) => node = child,
            None => return false,
        }
    }
    match (last, node) {
        (PathSegment::Key(key), serde_yaml::Value::Mapping(map)) => {
            map.remove(key.as_str()).is_some()
        }
        (PathSegment::Index(i), serde_yaml::Value::Sequence(list)) if *i < list.len() => {
            list.remove(*i);
            true
        }
        _ => false,
    }
}

/// The request parameters of a model that every OpenAI-compatible provider refuses as
/// written: (path, what is wrong, what is accepted).
fn model_parameter_problems(
    at: &FieldPath,
    model: &ModelConfig,
) -> Vec<(FieldPath, String, &'static str)> {
    const NUMBERS: &[(&str, f64, f64, &str)] = &[
        ("temperature", 0.0, 2.0, "expected a number from 0 to 2"),
        ("top_p", 0.0, 1.0, "expected a number from 0 to 1"),
    ];
    const COUNTS: &[&str] = &["max_tokens", "max_completion_tokens"];
    let mut problems = Vec::new();
    for (key, low, high, expected) in NUMBERS {
        let Some(value) = model.extra.get(*key).filter(|v| !v.is_null()) else {
            continue;
        };
        let fits = value.as_f64().is_some_and(|x| (*low..=*high).contains(&x));
        if !fits {
            problems.push((
                at.key(*key),
                format!("`{}` cannot be used", shown(value)),
                *expected,
            ));
        }
    }
    for key in COUNTS {
        let Some(value) = model.extra.get(*key).filter(|v| !v.is_null()) else {
            continue;
        };
        if value.as_u64().is_none_or(|n| n == 0) {
            let message = format!("`{}` cannot be used", shown(value));
            problems.push((
                at.key(*key),
                message,
                "expected a whole number of at least 1",
            ));
        }
    }
    if let Some(value) = model.extra.get("seed").filter(|v| !v.is_null()) {
        if value.as_i64().is_none() {
            let message = format!("`{}` cannot be used", shown(value));
            problems.push((at.key("seed"), message, "expected an integer"));
        }
    }
    problems
}

/// A value as the file wrote it (a string without JSON's quotes).
fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn none(_: &AppConfig) -> Vec<Finding> {
        Vec::new()
    }

    fn lines(errors: &[ConfigError]) -> Vec<String> {
        errors.iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn every_bad_value_is_reported_with_its_place() {
        let text = "\
tools:
  - name: a
    group: 5
    use: x:y
  - name: b
  - name: c
    group: g
    use: x:y
subagents:
  max_total_per_run: many
";
        let (errors, _) = check_app(Path::new("c.yaml"), text, &no_env, &none);
        let lines = lines(&errors);
        assert_eq!(lines.len(), 3, "{lines:#?}");
        assert!(lines[0].starts_with("c.yaml:3:"), "{lines:#?}");
        assert!(
            lines[0].contains(" tools[0].group: invalid type"),
            "{lines:#?}"
        );
        assert_eq!(lines[1], "c.yaml:5:5: tools[1]: missing field `group`");
        assert!(
            lines[2].starts_with("c.yaml:10:3: subagents.max_total_per_run: invalid type"),
            "{lines:#?}"
        );
    }

    #[test]
    fn a_model_parameter_a_provider_refuses_is_an_error() {
        let text = "\
models:
  - name: m
    use: langchain_openai:ChatOpenAI
    model: gpt
    temperature: hot
    max_tokens: 0
";
        let (errors, _) = check_app(Path::new("c.yaml"), text, &no_env, &none);
        assert_eq!(
            lines(&errors),
            [
                "c.yaml:5:5: models[0].temperature: `hot` cannot be used; expected a number from 0 to 2",
                "c.yaml:6:5: models[0].max_tokens: `0` cannot be used; expected a whole number of at least 1",
            ]
        );
    }

    #[test]
    fn a_context_section_out_of_range_is_an_error_naming_its_key() {
        let text = "summarization:\n  enabled: true\n  trigger: {type: fraction, value: 2}\ntitle:\n  max_chars: 5\n";
        let (errors, _) = check_app(Path::new("c.yaml"), text, &no_env, &none);
        let lines = lines(&errors);
        assert_eq!(lines.len(), 2, "{lines:#?}");
        assert!(
            lines[0].starts_with(
                "c.yaml:1:1: summarization: summarization.trigger: a fraction must be in (0, 1]"
            ),
            "{lines:#?}"
        );
        assert!(
            lines[1].starts_with("c.yaml:4:1: title: title.max_chars: must be in 10..=200"),
            "{lines:#?}"
        );
    }

    #[test]
    fn the_callers_findings_are_placed_in_the_file() {
        let text = "tools:\n  - name: a\n    group: g\n    use: x:y\n";
        let extra = |_: &AppConfig| {
            vec![Finding {
                path: FieldPath::root().key("tools").index(0).key("use"),
                message: "unknown use id `x:y`".into(),
                expected: Some("closest known ids: a:b".into()),
            }]
        };
        let (errors, _) = check_app(Path::new("c.yaml"), text, &no_env, &extra);
        assert_eq!(
            lines(&errors),
            ["c.yaml:4:5: tools[0].use: unknown use id `x:y`; closest known ids: a:b"]
        );
    }
}
