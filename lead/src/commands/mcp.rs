//! `antler mcp status`, `antler mcp tools`, `antler mcp call` and `antler mcp login`: the MCP servers of the
//! running cluster (or of an ephemeral one started for the command), reached through the
//! lead and mcp-host; `antler mcp serve`: Antler as an MCP server on stdio (`mcp_serve`).

use std::{process::ExitCode, time::Duration};

use antler_protocol::{
    calls::McpCalls,
    messages::{McpCall, McpCallResult, McpContent, McpOAuthLogin, McpServerStatus, McpTool},
    Role,
};
use anyhow::bail;
use clap::Subcommand;
use serde_json::{json, Value};

use super::{host, on_host, Ctx};

/// How long listing may wait for servers that are still starting.
const LIST_TIMEOUT: Duration = Duration::from_secs(75);
/// How long one call may take end to end.
const CALL_TIMEOUT: Duration = Duration::from_secs(130);
/// How long discovery and registration may take when a login starts.
const LOGIN_START: Duration = Duration::from_secs(60);
/// How long a login waits for the user.
const LOGIN_WAIT: Duration = Duration::from_secs(300);

/// `antler mcp ...`
#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Each MCP server: state, tool count, last error and reconnect count.
    Status {
        /// Print a JSON array, one object per server.
        #[arg(long)]
        json: bool,
    },
    /// The tools of every ready server, or of one.
    Tools {
        /// Only this server's tools.
        server: Option<String>,
        /// A JSON array of {server, name, description, input_schema}.
        #[arg(long)]
        json: bool,
    },
    /// Call one tool and print its result; exits 1 on an error result.
    Call {
        /// The server's name in extensions_config.json.
        server: String,
        /// The tool's name as the server lists it (or the prefixed `{server}_{tool}`).
        tool: String,
        /// The arguments as a JSON object.
        #[arg(long, default_value = "{}")]
        args: String,
        /// Print the whole result as JSON.
        #[arg(long)]
        json: bool,
        /// Run on this user's pooled session (stdio servers).
        #[arg(long)]
        user: Option<String>,
        /// Run on this thread's pooled session (stdio servers).
        #[arg(long)]
        thread: Option<String>,
        /// The thread's workspace: the pooled server's working directory.
        #[arg(long)]
        workspace: Option<std::path::PathBuf>,
    },
    /// Serve Antler's tools as an MCP server on stdin and stdout (for an MCP client's
    /// `mcpServers`): the running cluster's, through its gateway, or an ephemeral one's.
    Serve {
        /// The user the session acts for (default: the local operator's).
        #[arg(long)]
        user: Option<String>,
        /// config.yaml for the cluster this command starts (a running cluster keeps its own).
        #[arg(long)]
        config: Option<std::path::PathBuf>,
    },
    /// Log in to an HTTP server with OAuth (authorization code + PKCE): the URL goes to
    /// `$BROWSER` (or is printed), the redirect comes back to mcp-host on loopback, and the
    /// token is kept by mcp-host for this user (never shown).
    Login {
        /// The server's name in extensions_config.json.
        server: String,
        /// Whose token it is (default: the default user).
        #[arg(long)]
        user: Option<String>,
    },
}

pub fn run(ctx: &Ctx, command: McpCommand) -> anyhow::Result<ExitCode> {
    actix::System::new().block_on(async move {
        match command {
            McpCommand::Status { json } => {
                let list = on_host(ctx, Role::McpHost, 0, async |host| {
                    host.mcp_status(LIST_TIMEOUT).await
                })
                .await?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&status_json(&list))?);
                } else {
                    print!("{}", status_table(&list));
                }
                Ok(ExitCode::SUCCESS)
            }
            McpCommand::Tools { server, json } => {
                // Every server's: what a run would start with, and who is not ready.
                let tools = match server {
                    Some(server) => {
                        on_host(ctx, Role::McpHost, 0, async |host| {
                            host.list_tools(Some(server), LIST_TIMEOUT).await
                        })
                        .await?
                    }
                    None => {
                        let d = on_host(ctx, Role::McpHost, 0, async |host| {
                            host.discover(LIST_TIMEOUT).await
                        })
                        .await?;
                        for s in &d.not_ready {
                            eprintln!(
                                "antler: MCP server '{}' is not ready ({}); its tools are not listed",
                                s.name, s.state
                            );
                        }
                        d.tools
                    }
                };
                if json {
                    println!("{}", serde_json::to_string_pretty(&tools_json(&tools))?);
                } else {
                    for t in &tools {
                        let first = t.description.lines().next().unwrap_or("");
                        println!("{:<40} {}", t.name, first);
                    }
                }
                Ok(ExitCode::SUCCESS)
            }
            McpCommand::Login { server, user } => login(ctx, server, user).await,
            McpCommand::Serve { user, config } => super::mcp_serve::serve(ctx, user, config).await,
            McpCommand::Call {
                server,
                tool,
                args,
                json,
                user,
                thread,
                workspace,
            } => {
                let parsed: Value = serde_json::from_str(&args)
                    .map_err(|e| anyhow::anyhow!("--args is not valid JSON: {e}"))?;
                if !parsed.is_object() {
                    bail!("--args must be a JSON object");
                }
                let call = McpCall {
                    server,
                    tool,
                    args: parsed.into(),
                    user,
                    thread,
                    workspace: workspace
                        .map(|w| std::path::absolute(&w).unwrap_or(w).display().to_string()),
                    run_id: None,
                    tool_call_id: None,
                    clearance: None,
                };
                let result = on_host(ctx, Role::McpHost, 0, async |host| {
                    host.call_tool(call, CALL_TIMEOUT).await
                })
                .await?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&call_json(&result))?);
                } else {
                    print!("{}", call_text(&result));
                }
                Ok(if result.is_error {
                    ExitCode::from(1)
                } else {
                    ExitCode::SUCCESS
                })
            }
        }
    })
}

/// `antler mcp login`: one connection to the lead for both the start and the wait, so an
/// ephemeral cluster lives until the login is done.
async fn login(ctx: &Ctx, server: String, user: Option<String>) -> anyhow::Result<ExitCode> {
    let spec = super::cluster_spec(ctx.runtime_dir.clone(), None, None)?;
    let client = crate::cluster::attach_or_start(spec, Duration::from_secs(15)).await?;
    let outcome = async {
        let mcp_host = host(&client, Role::McpHost, 0);
        let start = McpOAuthLogin {
            server: server.clone(),
            user: user.clone(),
            redirect_uri: None,
        };
        let url = mcp_host.oauth_start(start, LOGIN_START).await?;
        match std::env::var("BROWSER")
            .ok()
            .filter(|b| !b.trim().is_empty())
        {
            Some(browser) => {
                eprintln!("antler: opening the login page with $BROWSER ({browser})");
                open_browser(&browser, &url)?;
            }
            None => println!("Open this URL to log in to '{server}':\n{url}"),
        }
        let (server, user) = mcp_host
            .oauth_wait(server.clone(), user.clone(), LOGIN_WAIT)
            .await?;
        println!("logged in to '{server}' as user '{user}'");
        Ok(ExitCode::SUCCESS)
    }
    .await;
    client.finish().await;
    outcome
}

/// Runs `$BROWSER` (its first `:`-separated entry; `%s` is the URL, else it is appended).
fn open_browser(browser: &str, url: &str) -> anyhow::Result<()> {
    let first = browser.split(':').next().unwrap_or(browser);
    let mut words: Vec<String> = first.split_whitespace().map(str::to_owned).collect();
    if words.is_empty() {
        bail!("$BROWSER is empty");
    }
    if words.iter().any(|w| w.contains("%s")) {
        words.iter_mut().for_each(|w| *w = w.replace("%s", url));
    } else {
        words.push(url.to_owned());
    }
    std::process::Command::new(&words[0])
        .args(&words[1..])
        .stdin(std::process::Stdio::null())
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot start $BROWSER `{}`: {e}", words[0]))?;
    Ok(())
}

/// The JSON array `antler mcp status --json` prints.
pub fn status_json(list: &[McpServerStatus]) -> Value {
    Value::Array(
        list.iter()
            .map(|s| {
                json!({
                    "name": s.name,
                    "transport": s.transport,
                    "state": s.state,
                    "tools": s.tools,
                    "last_error": s.last_error,
                    "reconnects": s.reconnects,
                    "in_flight": s.in_flight,
                    "protocol_version": s.protocol_version,
                    "lifecycle": s.lifecycle,
                    "auth": s.auth,
                })
            })
            .collect(),
    )
}

fn status_table(list: &[McpServerStatus]) -> String {
    let mut out = format!(
        "{:<20} {:<9} {:<13} {:<10} {:<10} {:>5} {:>10} {:>9}  {}\n",
        "SERVER",
        "TRANSPORT",
        "STATE",
        "PROTOCOL",
        "LIFECYCLE",
        "TOOLS",
        "RECONNECTS",
        "IN-FLIGHT",
        "LAST ERROR"
    );
    for s in list {
        out.push_str(&format!(
            "{:<20} {:<9} {:<13} {:<10} {:<10} {:>5} {:>10} {:>9}  {}\n",
            s.name,
            s.transport,
            s.state,
            s.protocol_version.as_deref().unwrap_or("-"),
            s.lifecycle.as_deref().unwrap_or("-"),
            s.tools,
            s.reconnects,
            s.in_flight,
            s.last_error.as_deref().unwrap_or("-")
        ));
    }
    out
}

/// The JSON array `antler mcp tools --json` prints.
pub fn tools_json(tools: &[McpTool]) -> Value {
    Value::Array(
        tools
            .iter()
            .map(|t| {
                json!({
                    "server": t.server,
                    "name": t.name,
                    "description": t.description,
                    "input_schema": t.input_schema,
                })
            })
            .collect(),
    )
}

fn content_json(c: &McpContent) -> Value {
    match c {
        McpContent::Text(t) => json!({"type": "text", "text": t}),
        McpContent::Image { data, mime_type } => {
            json!({"type": "image", "data": data, "mime_type": mime_type})
        }
        McpContent::Audio { data, mime_type } => {
            json!({"type": "audio", "data": data, "mime_type": mime_type})
        }
        McpContent::ResourceLink {
            uri,
            name,
            mime_type,
        } => {
            json!({"type": "resource_link", "uri": uri, "name": name, "mime_type": mime_type})
        }
        McpContent::Resource {
            uri,
            mime_type,
            text,
            blob,
        } => {
            json!({"type": "resource", "uri": uri, "mime_type": mime_type, "text": text, "blob": blob})
        }
    }
}

/// The JSON object `antler mcp call --json` prints.
pub fn call_json(r: &McpCallResult) -> Value {
    json!({
        "is_error": r.is_error,
        "content": r.content.iter().map(content_json).collect::<Vec<_>>(),
        "structured_content": r.structured,
    })
}

fn call_text(r: &McpCallResult) -> String {
    let mut out = String::new();
    for c in &r.content {
        match c {
            McpContent::Text(t) => out.push_str(t),
            McpContent::Image { data, mime_type } => {
                out.push_str(&format!("[image {mime_type}, {} base64 bytes]", data.len()))
            }
            McpContent::Audio { data, mime_type } => {
                out.push_str(&format!("[audio {mime_type}, {} base64 bytes]", data.len()))
            }
            McpContent::ResourceLink { uri, .. } => out.push_str(&format!("[link {uri}]")),
            McpContent::Resource {
                uri, text, blob, ..
            } => match (text, blob) {
                (Some(t), _) => out.push_str(t),
                (None, Some(b)) => {
                    out.push_str(&format!("[resource {uri}, {} base64 bytes]", b.len()))
                }
                _ => out.push_str(&format!("[resource {uri}]")),
            },
        }
        out.push('\n');
    }
    if r.content.is_empty() {
        if let Some(s) = &r.structured {
            out.push_str(&s.to_string());
            out.push('\n');
        }
    }
    out
}
