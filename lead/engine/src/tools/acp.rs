//! `invoke_acp_agent` from a run (spec F): the call goes to sandbox-host, the replica of
//! the run's thread, which runs the agent (it owns the thread's `acp-workspace` and the
//! run's processes) and streams the agent's tool calls and plan back; each becomes a
//! [`RunEvent::AcpActivity`](crate::run::events::RunEvent::AcpActivity). The lead only adds
//! what is its own: the session's MCP servers (spec F.2.3, the enabled servers of the
//! extensions config) and the call's deadline (the agent's `timeout_seconds` plus the
//! handshake's).

use std::collections::HashMap;
use std::time::Duration;

use antler_protocol::config::{AppConfig, ExtensionsConfig, McpServerConfig};
use antler_protocol::messages::{AcpMcpServer, AcpTransport};

/// The longest `initialize` + `session/new` + shutdown can take on sandbox-host, over the
/// agent's own timeout (sandbox-host: 60 s each for the handshake, 4 s to stop).
const HANDSHAKE_MARGIN: Duration = Duration::from_secs(130);

/// The deadline of a call naming an agent the lead does not know: sandbox-host answers
/// with the list of its agents at once.
const UNKNOWN_AGENT_DEADLINE: Duration = Duration::from_secs(30);

/// What the lead adds to a run's `invoke_acp_agent` calls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AcpCalls {
    timeouts: HashMap<String, Duration>,
    /// The session's `mcpServers`.
    pub mcp_servers: Vec<AcpMcpServer>,
}

impl AcpCalls {
    /// `None` when no agent is configured (the tool is not offered then).
    pub fn from_config(app: &AppConfig, extensions: Option<&ExtensionsConfig>) -> Option<AcpCalls> {
        if app.acp_agents.is_empty() {
            return None;
        }
        let timeouts = app
            .acp_agents
            .iter()
            .map(|(name, agent)| {
                (
                    name.to_owned(),
                    Duration::from_secs(agent.timeout_seconds.max(1)),
                )
            })
            .collect();
        let mcp_servers = extensions.map(session_mcp_servers).unwrap_or_default();
        Some(AcpCalls {
            timeouts,
            mcp_servers,
        })
    }

    /// How long the call to `agent` may take in all.
    pub fn deadline(&self, agent: &str) -> Duration {
        self.timeouts
            .get(agent)
            .map_or(UNKNOWN_AGENT_DEADLINE, |t| *t + HANDSHAKE_MARGIN)
    }
}

/// Spec F.2.3: the enabled servers in ACP's shape. A stdio server without a command, an
/// http or sse server without a url, or an unknown type makes the list empty, with a
/// warning, as DeerFlow does.
pub fn session_mcp_servers(extensions: &ExtensionsConfig) -> Vec<AcpMcpServer> {
    let mut out = Vec::new();
    for (name, server) in extensions.mcp_servers.iter().filter(|(_, s)| s.enabled) {
        match acp_server(name, server) {
            Ok(entry) => out.push(entry),
            Err(reason) => {
                tracing::warn!("the ACP session gets no MCP servers: {reason}");
                return Vec::new();
            }
        }
    }
    out
}

fn pairs<'a>(map: impl Iterator<Item = (&'a str, &'a String)>) -> Vec<(String, String)> {
    map.map(|(name, value)| (name.to_owned(), value.clone()))
        .collect()
}

fn acp_server(name: &str, server: &McpServerConfig) -> Result<AcpMcpServer, String> {
    let kind = server
        .type_
        .as_deref()
        .or(server.transport.as_deref())
        .unwrap_or("stdio");
    match kind {
        "stdio" => {
            let command = server
                .command
                .as_deref()
                .ok_or_else(|| format!("the stdio MCP server {name} has no command"))?;
            Ok(AcpMcpServer::Stdio {
                name: name.to_owned(),
                command: command.to_owned(),
                args: server.args.clone(),
                env: pairs(server.env.iter()),
            })
        }
        "http" | "sse" => {
            let url = server
                .url
                .as_deref()
                .ok_or_else(|| format!("the {kind} MCP server {name} has no url"))?;
            Ok(AcpMcpServer::Remote {
                name: name.to_owned(),
                transport: if kind == "sse" {
                    AcpTransport::Sse
                } else {
                    AcpTransport::Http
                },
                url: url.to_owned(),
                headers: pairs(server.headers.iter()),
            })
        }
        other => Err(format!(
            "the MCP server {name} has the unknown type {other}"
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn extensions(json: &str) -> ExtensionsConfig {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn enabled_servers_take_acps_shape() {
        let e = extensions(
            r#"{"mcpServers": {
                "fs": {"command": "npx", "args": ["-y", "fs"], "env": {"K": "v"}},
                "web": {"type": "http", "url": "https://mcp.example/mcp", "headers": {"Authorization": "Bearer t"}},
                "off": {"enabled": false, "command": "x"}
            }}"#,
        );
        let servers: Vec<_> = session_mcp_servers(&e)
            .iter()
            .map(AcpMcpServer::to_acp_json)
            .collect();
        assert_eq!(
            servers,
            vec![
                json!({"name": "fs", "command": "npx", "args": ["-y", "fs"], "env": [{"name": "K", "value": "v"}]}),
                json!({"name": "web", "type": "http", "url": "https://mcp.example/mcp", "headers": [{"name": "Authorization", "value": "Bearer t"}]}),
            ]
        );
    }

    #[test]
    fn one_broken_server_leaves_the_session_none() {
        let e =
            extensions(r#"{"mcpServers": {"fs": {"command": "npx"}, "web": {"type": "http"}}}"#);
        assert!(session_mcp_servers(&e).is_empty());
    }
}
