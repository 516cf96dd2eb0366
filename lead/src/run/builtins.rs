//! The tools the lead executes itself (spec 3): `present_files`, `ask_clarification`
//! (formatted here, intercepted by the clarification middleware) and `tool_search`
//! over the catalog. Each returns a [`StateUpdate`] holding its tool message; a failure
//! the model should see is an `Error: ...` tool message or a [`ToolFailure`] for the
//! error middleware.

use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use super::context::{RunContext, VIRTUAL_USER_DATA};
use super::middleware::tool_error::ToolFailure;
use super::state::{Message, StateUpdate, ToolCall, ToolStatus};
use crate::catalog::builtins::PRESENT_FILES;
use crate::catalog::{Catalog, TOOL_SEARCH_NAME};

pub use super::middleware::clarification::format_question as ask_clarification_text;

/// `present_files`' reply on success.
pub const PRESENTED: &str = "Successfully presented files";
/// A path outside the outputs directory; `{filepath}` as given.
pub const ONLY_OUTPUTS: &str = "Only files in /mnt/user-data/outputs can be presented: {filepath}";
/// A virtual path that climbs out of the thread's user data.
pub const PATH_TRAVERSAL: &str = "Access denied: path traversal detected";
/// Antler's improvement on DeerFlow: a presented path must exist.
pub const FILE_NOT_FOUND: &str = "File not found: {filepath}";
/// The virtual outputs directory the normalised paths start with.
pub const VIRTUAL_OUTPUTS: &str = "/mnt/user-data/outputs";

/// `present_files(filepaths)`: all or nothing. Every path is normalised to
/// `/mnt/user-data/outputs/...`; the first that fails makes the reply `Error: {reason}`
/// and no artifact is recorded.
pub fn present_files(call: &ToolCall, context: &RunContext) -> StateUpdate {
    let paths: Vec<String> = match call.args.get("filepaths") {
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| item.to_string())
            })
            .collect(),
        Some(Value::String(one)) => vec![one.clone()],
        _ => Vec::new(),
    };
    let normalised: Result<Vec<String>, String> = paths
        .iter()
        .map(|path| normalize_presented_path(path, context))
        .collect();
    match normalised {
        Ok(artifacts) => StateUpdate {
            artifacts,
            messages: vec![Message::tool(
                &call.id,
                PRESENT_FILES,
                PRESENTED,
                ToolStatus::Success,
            )],
            ..StateUpdate::default()
        },
        Err(reason) => StateUpdate::messages([Message::tool(
            &call.id,
            PRESENT_FILES,
            format!("Error: {reason}"),
            ToolStatus::Error,
        )]),
    }
}

/// `_normalize_presented_filepath`, plus the existence check; the outputs directory
/// itself is `/mnt/user-data/outputs`.
pub fn normalize_presented_path(filepath: &str, context: &RunContext) -> Result<String, String> {
    let outputs = resolve(&context.paths.outputs());
    let stripped = filepath.trim_start_matches('/');
    let prefix = VIRTUAL_USER_DATA.trim_start_matches('/');
    let actual = if stripped == prefix || stripped.starts_with(&format!("{prefix}/")) {
        let base = resolve(context.paths.user_data());
        let relative = stripped[prefix.len()..].trim_start_matches('/');
        let actual = resolve(&base.join(relative));
        if !actual.starts_with(&base) {
            return Err(PATH_TRAVERSAL.to_owned());
        }
        actual
    } else {
        resolve(&expand_user(filepath))
    };
    let only_outputs = || ONLY_OUTPUTS.replacen("{filepath}", filepath, 1);
    let relative = actual.strip_prefix(&outputs).map_err(|_| only_outputs())?;
    if !actual.exists() {
        return Err(FILE_NOT_FOUND.replacen("{filepath}", filepath, 1));
    }
    let parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    // DeerFlow gives the outputs directory itself as `/mnt/user-data/outputs/.`, which
    // settlement's coverage rule never matches; Antler gives the directory's own path,
    // which covers every output (spec 11.7).
    if parts.is_empty() {
        return Ok(VIRTUAL_OUTPUTS.to_owned());
    }
    Ok(format!("{VIRTUAL_OUTPUTS}/{}", parts.join("/")))
}

/// `Path.expanduser()`: a leading `~` is the home directory.
fn expand_user(path: &str) -> PathBuf {
    match (path.strip_prefix('~'), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) if rest.is_empty() || rest.starts_with('/') => {
            PathBuf::from(home).join(rest.trim_start_matches('/'))
        }
        _ => PathBuf::from(path),
    }
}

/// `Path.resolve()` (non-strict): absolute against the current directory, symlinks of
/// the parts that exist followed, `..` applied after them.
pub fn resolve(path: &Path) -> PathBuf {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .unwrap_or_else(|_| PathBuf::from("/"))
            .join(path)
    };
    let mut resolved = PathBuf::from("/");
    for component in absolute.components() {
        match component {
            Component::RootDir | Component::Prefix(_) | Component::CurDir => {}
            Component::ParentDir => {
                resolved.pop();
            }
            Component::Normal(part) => {
                resolved.push(part);
                if let Ok(real) = resolved.canonicalize() {
                    resolved = real;
                }
            }
        }
    }
    resolved
}

/// `tool_search(query)`: the promotion and the rendered schemas, from the catalog.
pub fn tool_search(call: &ToolCall, catalog: &Catalog) -> Result<StateUpdate, ToolFailure> {
    let query = call
        .args
        .get("query")
        .and_then(Value::as_str)
        .ok_or_else(|| ToolFailure::new("ValidationError", "query: field required (a string)"))?;
    let outcome = catalog
        .tool_search(query, &call.id)
        .map_err(|e| ToolFailure::new("ToolSearchUnavailable", e.to_string()))?;
    Ok(StateUpdate {
        promoted: Some(outcome.promoted),
        messages: vec![Message::tool(
            outcome.message.tool_call_id,
            TOOL_SEARCH_NAME,
            outcome.message.content,
            ToolStatus::Success,
        )],
        ..StateUpdate::default()
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
#[path = "builtins_tests.rs"]
mod tests;
