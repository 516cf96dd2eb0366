//! `antler tool call NAME --args JSON [--user U] [--thread T] [--config FILE]`: runs one
//! tool through the real execution path and prints its result; exit code 1 on an error
//! result. Sandbox tools (bash, ls, read_file, write_file, str_replace, glob, grep) go
//! through the lead to sandbox-host, which acquires the thread's sandbox, runs the tool and
//! releases the sandbox to its warm pool.

use std::{path::PathBuf, process::ExitCode, time::Duration};

use antler_protocol::{
    messages::{Principal, Reply, Request, SandboxReply, SandboxRequest, ToolCall},
    Role,
};
use anyhow::{bail, Context};
use clap::Subcommand;

use super::{forward, Ctx};

/// The tools sandbox-host runs.
pub const SANDBOX_TOOLS: &[&str] = &[
    "bash",
    "ls",
    "read_file",
    "write_file",
    "str_replace",
    "glob",
    "grep",
];

/// The tool commands.
#[derive(Debug, Subcommand)]
pub enum ToolCommand {
    /// Run one tool and print its result (exit code 1 on an error result).
    Call {
        /// The tool's name.
        name: String,
        /// Its arguments, a JSON object.
        #[arg(long, default_value = "{}")]
        args: String,
        /// The user the call runs as.
        #[arg(long, default_value = "default")]
        user: String,
        /// The thread whose sandbox and files the call uses.
        #[arg(long, default_value = "cli")]
        thread: String,
        /// A role of the user (for acquire-time authorization); repeatable.
        #[arg(long = "role")]
        roles: Vec<String>,
        /// A request-scoped secret NAME=VALUE for bash (injected only when allowlisted).
        #[arg(long = "secret")]
        secrets: Vec<String>,
        /// config.yaml for the cluster this command starts (a running cluster keeps its own).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Seconds to wait for the result.
        #[arg(long, default_value_t = 900)]
        timeout_s: u64,
    },
}

pub fn run(ctx: &Ctx, command: ToolCommand) -> anyhow::Result<ExitCode> {
    let ToolCommand::Call {
        name,
        args,
        user,
        thread,
        roles,
        secrets,
        config,
        timeout_s,
    } = command;
    let parsed: serde_json::Value = serde_json::from_str(&args).context("--args is not JSON")?;
    if !parsed.is_object() {
        bail!("--args must be a JSON object");
    }
    if !SANDBOX_TOOLS.contains(&name.as_str()) {
        bail!(
            "`{name}` is not a tool this command can run yet; it runs the sandbox tools: {}",
            SANDBOX_TOOLS.join(", ")
        );
    }
    let secrets = secrets
        .iter()
        .map(|s| {
            s.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .with_context(|| format!("--secret `{s}` is not NAME=VALUE"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    if let Some(path) = &config {
        let path = std::fs::canonicalize(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        // The cluster this command starts (if none runs) hands it to sandbox-host.
        std::env::set_var("ANTLER_CONFIG", path);
    }
    let request = Request::Sandbox(SandboxRequest::CallOnce {
        principal: Principal {
            user_id: user,
            thread_id: thread,
            roles,
        },
        call: ToolCall {
            tool: name,
            args_json: args,
            secrets,
        },
    });
    actix::System::new().block_on(async move {
        let reply = forward(
            ctx,
            Role::SandboxHost,
            0,
            request,
            Duration::from_secs(timeout_s),
        )
        .await?;
        match reply {
            Reply::Sandbox(SandboxReply::ToolResult(Ok(result))) => {
                println!("{}", result.content);
                Ok(if result.is_error {
                    ExitCode::from(1)
                } else {
                    ExitCode::SUCCESS
                })
            }
            Reply::Sandbox(SandboxReply::ToolResult(Err(e))) => {
                println!("Error: {e}");
                Ok(ExitCode::from(1))
            }
            other => bail!("unexpected reply from sandbox-host: {other:?}"),
        }
    })
}
