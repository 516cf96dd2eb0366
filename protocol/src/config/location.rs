//! Where the two config files are: an explicit path, then Antler's environment variable,
//! then DeerFlow's, then the usual names in the project directory. A file named by a path
//! or a variable must exist (DeerFlow's `FileNotFoundError`); otherwise no file is no config.

use std::path::{Path, PathBuf};

use super::diagnostics::ConfigError;
use super::env::EnvLookup;

/// Antler's variable naming `config.yaml`; checked before DeerFlow's.
pub const ANTLER_CONFIG_ENV: &str = "ANTLER_CONFIG_PATH";
/// DeerFlow's variable naming `config.yaml`.
pub const DEERFLOW_CONFIG_ENV: &str = "DEER_FLOW_CONFIG_PATH";
/// Antler's variable naming the extensions file; checked before DeerFlow's.
pub const ANTLER_EXTENSIONS_ENV: &str = "ANTLER_EXTENSIONS_CONFIG_PATH";
/// DeerFlow's variable naming the extensions file.
pub const DEERFLOW_EXTENSIONS_ENV: &str = "DEER_FLOW_EXTENSIONS_CONFIG_PATH";
/// File names looked for in the project directory, in order.
pub const EXTENSIONS_FILE_NAMES: &[&str] = &["extensions_config.json", "mcp_config.json"];

/// Where `config.yaml` is: `explicit`, then `ANTLER_CONFIG_PATH`, then
/// `DEER_FLOW_CONFIG_PATH` (a named file that is missing is an error), then `config.yaml`
/// in `project_dir`; `None` when there is none.
pub fn resolve_app_config_path(
    explicit: Option<&Path>,
    project_dir: &Path,
    env: EnvLookup<'_>,
) -> Result<Option<PathBuf>, ConfigError> {
    const WHAT: &str = "Config file";
    if let Some(path) = explicit {
        return named_file(WHAT, path.to_path_buf(), "param `config_path`".to_owned());
    }
    for var in [ANTLER_CONFIG_ENV, DEERFLOW_CONFIG_ENV] {
        if let Some(value) = env(var).filter(|v| !v.is_empty()) {
            let origin = format!("environment variable `{var}`");
            return named_file(WHAT, PathBuf::from(value), origin);
        }
    }
    let default = project_dir.join("config.yaml");
    Ok(default.is_file().then_some(default))
}

/// Where the extensions file is (spec §5.1, adapted): `explicit`, then
/// `ANTLER_EXTENSIONS_CONFIG_PATH`, then `DEER_FLOW_EXTENSIONS_CONFIG_PATH` (a named file
/// that is missing is an error), then `extensions_config.json` and `mcp_config.json` in
/// `project_dir`; `None` means no file, which is an empty config.
pub fn resolve_extensions_path(
    explicit: Option<&Path>,
    project_dir: &Path,
    env: EnvLookup<'_>,
) -> Result<Option<PathBuf>, ConfigError> {
    const WHAT: &str = "Extensions config file";
    if let Some(path) = explicit {
        return named_file(WHAT, path.to_path_buf(), "param `config_path`".to_owned());
    }
    for var in [ANTLER_EXTENSIONS_ENV, DEERFLOW_EXTENSIONS_ENV] {
        if let Some(value) = env(var).filter(|v| !v.is_empty()) {
            return named_file(
                WHAT,
                PathBuf::from(value),
                format!("environment variable `{var}`"),
            );
        }
    }
    Ok(EXTENSIONS_FILE_NAMES
        .iter()
        .map(|name| project_dir.join(name))
        .find(|candidate| candidate.is_file()))
}

/// [`resolve_extensions_path`] for a command that was given `config.yaml`: after the
/// explicit path and the variables, the usual names beside `config` come before those in
/// `project_dir`, so `--config examples/report/config.yaml` from anywhere finds
/// `examples/report/extensions_config.json`.
pub fn resolve_extensions_beside(
    explicit: Option<&Path>,
    config: Option<&Path>,
    project_dir: &Path,
    env: EnvLookup<'_>,
) -> Result<Option<PathBuf>, ConfigError> {
    let named = explicit.is_some()
        || [ANTLER_EXTENSIONS_ENV, DEERFLOW_EXTENSIONS_ENV]
            .iter()
            .any(|var| env(var).is_some_and(|v| !v.is_empty()));
    let beside = config.and_then(Path::parent).map(|dir| {
        if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        }
    });
    if let (false, Some(dir)) = (named, beside) {
        let found = EXTENSIONS_FILE_NAMES
            .iter()
            .map(|name| dir.join(name))
            .find(|candidate| candidate.is_file());
        if found.is_some() {
            return Ok(found);
        }
    }
    resolve_extensions_path(explicit, project_dir, env)
}

/// `Some(path)` when the named file exists, else DeerFlow's `FileNotFoundError`.
fn named_file(
    what: &'static str,
    path: PathBuf,
    origin: String,
) -> Result<Option<PathBuf>, ConfigError> {
    if path.exists() {
        Ok(Some(path))
    } else {
        Err(ConfigError::NotFound { what, path, origin })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn the_extensions_file_beside_config_comes_before_the_working_directory() {
        let root = tempfile::tempdir().unwrap();
        let example = root.path().join("examples/report");
        std::fs::create_dir_all(&example).unwrap();
        let beside = example.join("extensions_config.json");
        std::fs::write(&beside, "{}").unwrap();
        let cwd_file = root.path().join("extensions_config.json");
        std::fs::write(&cwd_file, "{}").unwrap();
        let config = example.join("config.yaml");
        let found = resolve_extensions_beside(None, Some(&config), root.path(), &no_env);
        assert_eq!(found.unwrap(), Some(beside));
        // Without a config, the working directory's file.
        let found = resolve_extensions_beside(None, None, root.path(), &no_env);
        assert_eq!(found.unwrap(), Some(cwd_file.clone()));
        // A variable wins over the file beside the config.
        let env =
            |var: &str| (var == ANTLER_EXTENSIONS_ENV).then(|| cwd_file.display().to_string());
        let found = resolve_extensions_beside(None, Some(&config), root.path(), &env);
        assert_eq!(found.unwrap(), Some(cwd_file));
    }
}
