//! `antler tool call NAME --args JSON [--user U] [--thread T] [--config FILE]`: runs one
//! tool through the real execution path and prints its result; exit code 1 on an error
//! result. Sandbox tools (bash, ls, read_file, write_file, str_replace, glob, grep) go
//! through the lead to sandbox-host, which acquires the thread's sandbox, runs the tool and
//! releases the sandbox to its warm pool. Any other tool is looked up in the catalog
//! assembled from the config and mcp-host's tools: an MCP tool runs on its server through
//! mcp-host, `tool_search` runs on the catalog; builtins that need a run's state say so.

use std::{path::PathBuf, process::ExitCode, time::Duration};

use std::sync::Arc;

use antler_protocol::{
    calls::{McpCalls, SandboxCalls},
    messages::{McpCall, Principal, ToolCall},
    Role,
};
use anyhow::{bail, Context};
use clap::Subcommand;

use super::{
    catalog::{load_config, mcp_source_tools},
    cluster_spec, host, on_host, Ctx,
};
use crate::cluster::attach_or_start;
use crate::cluster::LeadClient;
use antler_engine::catalog::{
    assemble, AssemblyRequest, McpTools, Sources, ToolSource, TOOL_SEARCH_NAME,
};

pub use antler_protocol::messages::SANDBOX_TOOLS;

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
        return actix::System::new().block_on(call_catalog_tool(
            ctx,
            config.as_ref(),
            CatalogCall {
                name,
                args: parsed,
                user,
                thread,
                timeout: Duration::from_secs(timeout_s),
            },
        ));
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
    let request = (
        Principal {
            user_id: user,
            thread_id: thread,
            roles,
        },
        ToolCall {
            tool: name,
            args: parsed.into(),
            secrets,
            // Nobody approved it: sandbox-host's approval policy decides it alone.
            clearance: None,
        },
    );
    actix::System::new().block_on(async move {
        let timeout = Duration::from_secs(timeout_s);
        let (principal, call) = request;
        let reply = on_host(ctx, Role::SandboxHost, 0, async |host| {
            host.call_once(principal, call, timeout).await
        })
        .await?;
        match reply {
            Ok(result) => {
                println!("{}", result.content);
                Ok(if result.is_error {
                    ExitCode::from(1)
                } else {
                    ExitCode::SUCCESS
                })
            }
            Err(e) => {
                println!("Error: {e}");
                Ok(ExitCode::from(1))
            }
        }
    })
}

/// What `antler tool call NAME` says when it cannot run NAME: the closest name it can run
/// and every one it can, the sandbox tools first (they run without a catalog entry).
fn unknown_tool(name: &str, catalog: &[&str]) -> String {
    let mut runnable: Vec<&str> = SANDBOX_TOOLS.to_vec();
    for tool in catalog {
        if !runnable.contains(tool) {
            runnable.push(tool);
        }
    }
    let hint = antler_engine::catalog::closest(name, runnable.iter().copied())
        .into_iter()
        .next()
        .filter(|best| antler_engine::catalog::edit_distance(name, best) <= 2)
        .map(|best| format!(" (did you mean `{best}`?)"))
        .unwrap_or_default();
    format!(
        "`{name}` is not a tool `antler tool call` can run{hint}; it runs: {}",
        runnable.join(", ")
    )
}

/// A call of a tool that is not a sandbox tool.
struct CatalogCall {
    name: String,
    /// A JSON object.
    args: serde_json::Value,
    user: String,
    thread: String,
    timeout: Duration,
}

/// Runs a non-sandbox tool of the catalog: the catalog is assembled from the config and the
/// cluster's MCP tools, and the tool runs where it belongs.
async fn call_catalog_tool(
    ctx: &Ctx,
    config: Option<&PathBuf>,
    call: CatalogCall,
) -> anyhow::Result<ExitCode> {
    let spec = cluster_spec(ctx.runtime_dir.clone(), None, None)?;
    let client = attach_or_start(spec, Duration::from_secs(15)).await?;
    let result = call_on(&client, config, call).await;
    client.finish().await;
    result
}

async fn call_on(
    client: &LeadClient,
    config: Option<&PathBuf>,
    call: CatalogCall,
) -> anyhow::Result<ExitCode> {
    let listing = host(client, Role::McpHost, 0)
        .list_tools(None, Duration::from_secs(60))
        .await?;
    let (app, _) = load_config(config)?;
    let sources = Sources {
        config: Arc::new(app),
        extensions: None,
        mcp: McpTools::new(mcp_source_tools(listing)),
    };
    let assembled = assemble(&sources, &AssemblyRequest::lead())?;
    let catalog = &assembled.catalog;
    let Some(tool) = catalog.get(&call.name) else {
        // What this command runs of the catalog: MCP tools and tool_search (builtins need
        // a run's state).
        let known: Vec<&str> = catalog
            .tools()
            .iter()
            .filter(|t| {
                t.name == TOOL_SEARCH_NAME
                    || matches!(
                        &t.source,
                        ToolSource::Mcp {
                            server: Some(_),
                            ..
                        }
                    )
            })
            .map(|t| t.name.as_str())
            .collect();
        bail!("{}", unknown_tool(&call.name, &known));
    };
    match &tool.source {
        ToolSource::Mcp {
            server: Some(server),
            original_name,
        } => {
            let result = host(client, Role::McpHost, 0)
                .call_tool(
                    McpCall {
                    server: server.to_string(),
                    tool: original_name.to_string(),
                    args: call.args.into(),
                    user: Some(call.user),
                    thread: Some(call.thread),
                    workspace: None,
                    run_id: None,
                    tool_call_id: None,
                    clearance: None,
                },
                call.timeout,
            )
            .await?;
            println!("{}", result.text());
            Ok(if result.is_error {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
        _ if call.name == TOOL_SEARCH_NAME => {
            let query = call.args["query"]
                .as_str()
                .context("tool_search takes {\"query\": \"...\"}")?;
            let out = catalog.tool_search(query, "cli")?;
            println!("{}", out.message.content);
            Ok(ExitCode::SUCCESS)
        }
        _ => bail!(
            "`{}` is a builtin that acts on a run's state (messages, artifacts, the thread's outputs); run it inside `antler run`",
            call.name
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_name_lists_the_sandbox_tools_and_suggests_the_closest() {
        let text = unknown_tool("bsh", &["everything_echo", "tool_search"]);
        assert!(
            text.starts_with(
                "`bsh` is not a tool `antler tool call` can run (did you mean `bash`?); it runs: "
            ),
            "{text}"
        );
        for tool in [
            "bash",
            "read_file",
            "write_file",
            "tool_search",
            "everything_echo",
        ] {
            assert!(text.contains(tool), "{tool} missing: {text}");
        }
    }
}
