//! DeerFlow's `build_server_params` checks (spec §5.1) for one enabled MCP server: the
//! transport must be stdio, sse or http, stdio needs `command`, sse and http need `url`;
//! plus the task-toolset rules of §5.1. Error texts are DeerFlow's, byte for byte, so an
//! operator can search for them; `place` says which field is wrong and what is accepted.

use super::diagnostics::FieldPath;
use super::extensions::{McpServerConfig, McpTaskToolset};

/// What `type` accepts.
pub const ACCEPTED_TRANSPORTS: &str = "expected one of: stdio, sse, http, streamable_http";

/// A transport `build_server_params` accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// A child process on stdin/stdout.
    Stdio,
    /// Server-sent events.
    Sse,
    /// Streamable HTTP (`http` or `streamable_http`).
    Http,
}

/// Why an enabled server cannot start; the texts are DeerFlow's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServerParamsError {
    /// A stdio server without `command`.
    #[error("MCP server '{name}' with stdio transport requires 'command' field")]
    MissingCommand {
        /// The server.
        name: String,
    },
    /// An sse or http server without `url`.
    #[error("MCP server '{name}' with {transport} transport requires 'url' field")]
    MissingUrl {
        /// The server.
        name: String,
        /// The transport as written.
        transport: String,
    },
    /// A transport that is not stdio, sse or http.
    #[error("MCP server '{name}' has unsupported transport type: {transport}")]
    UnsupportedTransport {
        /// The server.
        name: String,
        /// The transport as written.
        transport: String,
    },
    /// A server with task toolsets whose name is empty or longer than 128 characters.
    #[error("MCP server '{name}' has task_toolsets, so its name must be 1 to 128 characters")]
    TaskServerName {
        /// The server.
        name: String,
    },
    /// A task toolset whose name is empty or longer than 255 characters.
    #[error("MCP server '{name}' has a task toolset whose name is not 1 to 255 characters")]
    TaskToolsetName {
        /// The server.
        name: String,
        /// The toolset's index.
        index: usize,
    },
    /// A raw tool used in more than one task-toolset role.
    #[error("MCP server '{name}' uses raw tool '{tool}' in more than one task toolset role")]
    TaskToolReused {
        /// The server.
        name: String,
        /// The raw tool name.
        tool: String,
        /// The index of the toolset that reuses it.
        index: usize,
    },
}

/// DeerFlow's `build_server_params` checks, plus the task-toolset rules, for one server.
pub fn build_server_params(
    name: &str,
    server: &McpServerConfig,
) -> Result<Transport, ServerParamsError> {
    let transport = server.transport_name();
    let kind = match transport {
        "stdio" => Transport::Stdio,
        "sse" => Transport::Sse,
        "http" | "streamable_http" => Transport::Http,
        other => {
            return Err(ServerParamsError::UnsupportedTransport {
                name: name.to_owned(),
                transport: other.to_owned(),
            })
        }
    };
    let blank = |v: &Option<String>| v.as_deref().is_none_or(str::is_empty);
    if kind == Transport::Stdio && blank(&server.command) {
        return Err(ServerParamsError::MissingCommand {
            name: name.to_owned(),
        });
    }
    if kind != Transport::Stdio && blank(&server.url) {
        return Err(ServerParamsError::MissingUrl {
            name: name.to_owned(),
            transport: transport.to_owned(),
        });
    }
    check_task_toolsets(name, &server.task_toolsets)?;
    Ok(kind)
}

fn check_task_toolsets(name: &str, toolsets: &[McpTaskToolset]) -> Result<(), ServerParamsError> {
    if toolsets.is_empty() {
        return Ok(());
    }
    if !(1..=128).contains(&name.chars().count()) {
        return Err(ServerParamsError::TaskServerName {
            name: name.to_owned(),
        });
    }
    let mut seen: Vec<&str> = Vec::new();
    for (index, toolset) in toolsets.iter().enumerate() {
        if !(1..=255).contains(&toolset.name.chars().count()) {
            return Err(ServerParamsError::TaskToolsetName {
                name: name.to_owned(),
                index,
            });
        }
        for tool in [
            &toolset.submit_tool,
            &toolset.status_tool,
            &toolset.cancel_tool,
        ] {
            if seen.contains(&tool.as_str()) {
                return Err(ServerParamsError::TaskToolReused {
                    name: name.to_owned(),
                    tool: tool.clone(),
                    index,
                });
            }
            seen.push(tool);
        }
    }
    Ok(())
}

impl ServerParamsError {
    /// Where in the server the problem is (relative to the server), and what is accepted.
    pub(crate) fn place(&self, server: &McpServerConfig) -> (FieldPath, Option<String>) {
        let here = FieldPath::root();
        match self {
            Self::MissingCommand { .. } => (here.key("command"), None),
            Self::MissingUrl { .. } => (here.key("url"), None),
            Self::UnsupportedTransport { .. } => {
                let field = if server.type_.is_some() {
                    "type"
                } else {
                    "transport"
                };
                (here.key(field), Some(ACCEPTED_TRANSPORTS.to_owned()))
            }
            Self::TaskServerName { .. } => (here, None),
            Self::TaskToolsetName { index, .. } => (
                here.key("task_toolsets").index(*index).key("name"),
                Some("expected a name of 1 to 255 characters".to_owned()),
            ),
            Self::TaskToolReused { index, .. } => (
                here.key("task_toolsets").index(*index),
                Some("expected each raw tool in one role only".to_owned()),
            ),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn server(json: &str) -> McpServerConfig {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn build_server_params_gives_deerflow_texts() {
        let err = build_server_params("x", &server("{}")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "MCP server 'x' with stdio transport requires 'command' field"
        );
        let err = build_server_params("x", &server(r#"{"type": "sse"}"#)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "MCP server 'x' with sse transport requires 'url' field"
        );
        let err = build_server_params("x", &server(r#"{"type": "ws"}"#)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "MCP server 'x' has unsupported transport type: ws"
        );
        let ok = build_server_params("x", &server(r#"{"type": "streamable_http", "url": "u"}"#));
        assert_eq!(ok, Ok(Transport::Http));
    }

    #[test]
    fn task_toolset_raw_names_must_be_unique() {
        let s = server(
            r#"{"command": "c", "task_toolsets": [
                {"name": "a", "submit_tool": "s", "status_tool": "t", "cancel_tool": "c"},
                {"name": "b", "submit_tool": "s2", "status_tool": "t", "cancel_tool": "c2"}]}"#,
        );
        let err = build_server_params("srv", &s).unwrap_err();
        assert_eq!(
            err,
            ServerParamsError::TaskToolReused {
                name: "srv".into(),
                tool: "t".into(),
                index: 1
            }
        );
    }
}
