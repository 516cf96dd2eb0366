//! Which `extensions_config.json` (the MCP servers) a command and the cluster it starts
//! use: `--extensions`, then the variables, then the file beside `config.yaml`, then the
//! working directory's. The choice is pinned in `ANTLER_EXTENSIONS_CONFIG_PATH` (absolute)
//! so every process of the cluster reads the same file, and `antler run` prints it.

use std::{
    fmt,
    path::{Path, PathBuf},
};

use antler_protocol::config::{process_env, resolve_extensions_beside, ANTLER_EXTENSIONS_ENV};

/// What `antler run` prints when no extensions file was found.
pub const NO_EXTENSIONS: &str = "extensions: none found (no --extensions, no ANTLER_EXTENSIONS_CONFIG_PATH, no extensions_config.json beside the config or in the working directory): the run has no MCP tools";
/// What `antler run` prints when it uses a cluster that was already running.
pub const RUNNING_CLUSTER_EXTENSIONS: &str =
    "extensions: those of the running cluster (`antler mcp status` lists its servers)";

/// The extensions file a command uses.
#[derive(Debug)]
pub enum ExtensionsFile {
    /// This file (absolute).
    Found(PathBuf),
    /// A file was named (`--extensions` or a variable) but cannot be used.
    Unusable(String),
    /// None: no MCP servers.
    NotFound,
}

impl fmt::Display for ExtensionsFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Found(path) => write!(f, "extensions: {}", path.display()),
            Self::Unusable(why) => write!(f, "extensions: {why}: the run has no MCP tools"),
            Self::NotFound => f.write_str(NO_EXTENSIONS),
        }
    }
}

/// Finds the extensions file for a command given `config` (already resolved) and pins it
/// in `ANTLER_EXTENSIONS_CONFIG_PATH` for this process and the hosts it starts. Called
/// before the command starts any thread.
pub fn pin(config: Option<&Path>) -> ExtensionsFile {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    match resolve_extensions_beside(None, config, &cwd, &process_env) {
        Ok(Some(path)) => {
            let path = std::fs::canonicalize(&path).unwrap_or_else(|_| cwd.join(path));
            std::env::set_var(ANTLER_EXTENSIONS_ENV, &path);
            ExtensionsFile::Found(path)
        }
        Ok(None) => ExtensionsFile::NotFound,
        Err(e) => ExtensionsFile::Unusable(e.to_string()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_the_file_or_says_none_was_found() {
        let found = ExtensionsFile::Found(PathBuf::from("/x/extensions_config.json"));
        assert_eq!(found.to_string(), "extensions: /x/extensions_config.json");
        assert!(ExtensionsFile::NotFound
            .to_string()
            .starts_with("extensions: none found"));
    }
}
