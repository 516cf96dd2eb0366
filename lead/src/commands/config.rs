//! `antler config check [FILE]`: validates a `config.yaml` or `extensions_config.json` and
//! prints every error (file:line:column, field path, what is accepted) and warning.

use std::{path::PathBuf, process::ExitCode};

use antler_protocol::config::{self, process_env};
use clap::Subcommand;

/// The config commands.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate a config file (default: config.yaml as `antler up` would find it).
    Check {
        /// config.yaml or extensions_config.json (the kind follows the extension).
        file: Option<PathBuf>,
    },
}

pub fn run(command: ConfigCommand) -> anyhow::Result<ExitCode> {
    match command {
        ConfigCommand::Check { file } => {
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
            let report = config::check_file(&path);
            println!("{report}");
            Ok(if report.is_ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
    }
}
