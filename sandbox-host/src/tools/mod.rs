//! The sandbox tools (spec 6.5): `bash`, `ls`, `read_file`, `write_file`, `str_replace`,
//! `glob`, `grep`. Each takes the model's JSON arguments and returns the text the model
//! reads; failures the model should see are `Error: ...` results, never a failed request.
//! File tools work on the thread's host directories through the validated [`PathMap`];
//! `bash` runs through the sandbox's [`Runner`] (host bash, or the bwrap'd supervisor).

pub mod bash;
pub mod fs;
pub mod grep;
pub mod quota;
pub mod walk;

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, Mutex},
};

use antler_protocol::messages::{ToolCall, ToolResult};
use antler_protocol::Json;
use serde::de::DeserializeOwned;

use crate::{paths::PathMap, provider::Runner, settings::SandboxSettings};

/// The tools sandbox-host runs (the protocol's list).
pub use antler_protocol::messages::SANDBOX_TOOLS as TOOL_NAMES;

/// Per-file locks: `write_file` and `str_replace` on one path run one at a time.
#[derive(Debug, Default)]
pub struct FileLocks {
    locks: Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>,
}

impl FileLocks {
    /// The lock of one host path.
    pub fn of(&self, path: &std::path::Path) -> Arc<Mutex<()>> {
        match self.locks.lock() {
            Ok(mut m) => m.entry(path.to_path_buf()).or_default().clone(),
            // A poisoned map only means a writer panicked; a fresh lock is still correct
            // for the paths that follow.
            Err(_) => Arc::new(Mutex::new(())),
        }
    }
}

/// Everything a tool call needs from its sandbox.
#[derive(Clone)]
pub struct ToolContext {
    pub map: Arc<PathMap>,
    pub settings: Arc<SandboxSettings>,
    pub runner: Runner,
    pub locks: Arc<FileLocks>,
}

/// A tool's text, marked as an error when it is one.
pub fn result(content: String) -> ToolResult {
    let is_error = content.starts_with("Error:");
    ToolResult { content, is_error }
}

/// The arguments as `T`, read from their JSON text so an error names where it is, as
/// the model would see it in the text it wrote.
fn parse<T: DeserializeOwned>(tool: &str, args: &Json) -> Result<T, ToolResult> {
    serde_json::from_str(&args.to_string())
        .map_err(|e| result(format!("Error: Invalid arguments for {tool}: {e}")))
}

/// Runs one tool call. Blocking file work runs on the blocking pool.
pub async fn call(ctx: ToolContext, call: ToolCall) -> ToolResult {
    let ToolCall {
        tool,
        args,
        secrets,
        // Checked by the service before the call got here.
        clearance: _,
    } = call;
    macro_rules! blocking {
        ($args:ty, $f:path) => {{
            let args: $args = match parse(&tool, &args) {
                Ok(a) => a,
                Err(e) => return e,
            };
            let ctx = ctx.clone();
            match tokio::task::spawn_blocking(move || $f(&ctx, args)).await {
                Ok(text) => result(text),
                Err(e) => result(format!("Error: Unexpected error running {tool}: {e}")),
            }
        }};
    }
    match tool.as_str() {
        "bash" => match parse::<bash::BashArgs>(&tool, &args) {
            Ok(args) => result(bash::run(&ctx, args, &secrets).await),
            Err(e) => e,
        },
        "ls" => blocking!(walk::LsArgs, walk::ls),
        "glob" => blocking!(walk::GlobArgs, walk::glob),
        "grep" => blocking!(grep::GrepArgs, grep::grep),
        "read_file" => blocking!(fs::ReadArgs, fs::read_file),
        "write_file" => blocking!(fs::WriteArgs, fs::write_file),
        "str_replace" => blocking!(fs::ReplaceArgs, fs::str_replace),
        other => result(format!("Error: Unknown sandbox tool: {other}")),
    }
}

/// DeerFlow's `_clamp_max_results`.
pub fn clamp_max_results(value: i64, default: i64, upper: i64) -> usize {
    let v = if value <= 0 {
        default
    } else {
        value.min(upper)
    };
    v as usize
}
