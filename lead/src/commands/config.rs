//! `antler config check [FILE] [--strict]`: validates a `config.yaml` or
//! `extensions_config.json` and prints every error (file:line:column, field path, what is
//! accepted) and warning. Beyond the loader's checks, a `config.yaml` is checked as the
//! catalog and a run would use it: each tool's `use:` id against the registry and each
//! model against the provider a run would build, with the closest known ids as hints.

use std::{path::PathBuf, process::ExitCode};

use antler_protocol::config::{self, process_env, AppConfig, FieldPath, Finding};
use clap::Subcommand;

use antler_engine::{
    catalog::{resolve, Resolution},
    ModelError,
};

/// The config commands.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate a config file (default: config.yaml as `antler up` would find it).
    Check {
        /// config.yaml or extensions_config.json (the kind follows the extension).
        file: Option<PathBuf>,
        /// Every key that does nothing (unknown, or a DeerFlow setting Antler does not act
        /// on yet) is an error, not a warning.
        #[arg(long)]
        strict: bool,
    },
}

pub fn run(command: ConfigCommand) -> anyhow::Result<ExitCode> {
    match command {
        ConfigCommand::Check { file, strict } => {
            let path = match file {
                Some(f) => f,
                None => {
                    let cwd = std::env::current_dir()?;
                    match config::resolve_app_config_path(None, &cwd, &process_env)? {
                        Some(p) => p,
                        None => anyhow::bail!(
                            "no config file given and no config.yaml found (looked at ANTLER_CONFIG_PATH, DEER_FLOW_CONFIG_PATH and {})",
                            cwd.join("config.yaml").display()
                        ),
                    }
                }
            };
            let mut report = config::check_file_with(&path, &process_env, &as_a_run_would);
            if strict {
                report = report.strict();
            }
            println!("{report}");
            Ok(if report.is_ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
    }
}

/// What the catalog and a run would refuse in a config that loads.
fn as_a_run_would(app: &AppConfig) -> Vec<Finding> {
    let mut findings = Vec::new();
    for (index, tool) in app.tools.iter().enumerate() {
        if let Resolution::Unknown { closest } = resolve(&tool.use_) {
            findings.push(Finding {
                path: FieldPath::root().key("tools").index(index).key("use"),
                message: format!("tool '{}': unknown use id `{}`", tool.name, tool.use_),
                expected: Some(format!("closest known ids: {}", closest.join(", "))),
            });
        }
    }
    for (index, model) in app.models.iter().enumerate() {
        let at = FieldPath::root().key("models").index(index);
        let finding = match antler_engine::check_model_entry(model, &process_env) {
            Ok(_) => continue,
            Err(error @ ModelError::UnsupportedProvider { .. }) => Finding {
                path: at.key("use"),
                message: error.to_string(),
                expected: Some(format!(
                    "closest known: {} (or any class with a base_url, or `provider:`)",
                    antler_engine::catalog::closest(
                        &model.use_,
                        antler_engine::MODEL_USE_IDS.iter().map(|(id, _)| *id)
                    )
                    .join(", ")
                )),
            },
            Err(ModelError::InvalidConfig {
                model: name,
                message,
            }) => {
                // The setting the message is about: its first word, when that is a key
                // of the entry (`base_url ...`, `max_retries must be ...`).
                let first = message.split_whitespace().next().unwrap_or_default();
                let named = (first == "base_url" && model.base_url.is_some())
                    || model.extra.contains_key(first);
                Finding {
                    path: if named { at.key(first) } else { at.clone() },
                    message: format!("model `{name}`: {message}"),
                    expected: (named && first == "base_url").then(|| BASE_URL_EXPECTED.to_owned()),
                }
            }
            // An unset `$VAR` is the environment's, not the file's: a run in another
            // environment may have it.
            Err(_) => continue,
        };
        findings.push(finding);
    }
    findings
}

/// What a model's `base_url` must look like.
const BASE_URL_EXPECTED: &str =
    "expected an http:// or https:// URL, e.g. http://127.0.0.1:8000/v1";

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn findings(text: &str) -> Vec<String> {
        let loaded =
            config::parse_app_config(std::path::Path::new("c.yaml"), text, &|_| None).unwrap();
        as_a_run_would(&loaded.value)
            .into_iter()
            .map(|f| format!("{}: {} ({:?})", f.path, f.message, f.expected))
            .collect()
    }

    #[test]
    fn an_unknown_use_id_gets_the_catalogs_closest_ids() {
        let found = findings(
            "tools:\n  - name: bash\n    group: bash\n    use: deerflow.sandbox.tools:bash_tol\n",
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with(
                "tools[0].use: tool 'bash': unknown use id `deerflow.sandbox.tools:bash_tol`"
            ),
            "{found:?}"
        );
        assert!(
            found[0].contains("closest known ids: deerflow.sandbox.tools:bash_tool"),
            "{found:?}"
        );
    }

    #[test]
    fn a_model_a_run_cannot_build_is_named_at_its_field() {
        let found = findings(
            "models:\n  - name: a\n    use: langchain_mistralai:ChatMistralAI\n    model: c\n  - name: b\n    use: x:Y\n    model: m\n    base_url: 127.0.0.1:8000/v1\n",
        );
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found[0]
                .starts_with("models[0].use: model `a`: Antler has no client for `use: langchain_mistralai:ChatMistralAI`"),
            "{found:?}"
        );
        assert!(
            found[0].contains("closest known: langchain_openai:ChatOpenAI"),
            "{found:?}"
        );
        assert!(
            found[1].starts_with("models[1].base_url: model `b`: base_url `127.0.0.1:8000/v1`"),
            "{found:?}"
        );
    }
}
