//! `ExtensionsConfig`: DeerFlow's `extensions_config.json` (spec §5.1) with every
//! `mcpServers` field and its default. Loading runs `build_server_params` on each enabled
//! server: one that cannot start is reported with DeerFlow's exact text and left out of
//! `mcp_servers`, and the other servers still load.

use std::path::Path;

use serde::Deserialize;

use super::diagnostics::{
    unknown_key_message, ConfigError, ConfigWarning, FieldPath, PathSegment, WarningKind,
};
use super::document::Document;
use super::env::EnvLookup;
use super::locate::Format;
use super::oauth::McpOAuthConfig;
use super::routing::{EffectiveRouting, McpRoutingConfig, McpToolConfig};
use super::server_params::build_server_params;
use super::shapes::{default_true, null_as_default, string_or_list, NamedMap};
use super::Loaded;

/// `session_init_timeout` default (`DEFAULT_MCP_SESSION_INIT_TIMEOUT`), in seconds.
pub const DEFAULT_MCP_SESSION_INIT_TIMEOUT: f64 = 60.0;

const TOP_LEVEL_KEYS: &[&str] = &["middlewares", "mcpServers", "skills", "mcpInterceptors"];
const SERVER_KEYS: &[&str] = &[
    "enabled",
    "type",
    "transport",
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "oauth",
    "description",
    "routing",
    "tools",
    "tool_name_prefix",
    "tool_call_timeout",
    "session_init_timeout",
    "task_toolsets",
    "elicitation",
    "protocol",
];

/// DeerFlow's `extensions_config.json`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(expecting = "a mapping with mcpServers, skills, middlewares, mcpInterceptors")]
pub struct ExtensionsConfig {
    /// Middleware class paths (legacy config-declared middlewares).
    #[serde(default, deserialize_with = "null_as_default")]
    pub middlewares: Vec<String>,
    /// MCP servers by name, in file order; servers that failed validation are left out.
    #[serde(rename = "mcpServers", default, deserialize_with = "null_as_default")]
    pub mcp_servers: NamedMap<McpServerConfig>,
    /// Skill switches by skill name.
    #[serde(default, deserialize_with = "null_as_default")]
    pub skills: NamedMap<SkillStateConfig>,
    /// Interceptor builder paths (`str | [str]` in the file).
    #[serde(
        rename = "mcpInterceptors",
        default,
        deserialize_with = "string_or_list"
    )]
    pub mcp_interceptors: Vec<String>,
}

impl ExtensionsConfig {
    /// The enabled servers, in file order.
    pub fn enabled_servers(&self) -> impl Iterator<Item = (&str, &McpServerConfig)> {
        self.mcp_servers.iter().filter(|(_, s)| s.enabled)
    }

    /// Whether a skill is enabled (skills not listed are).
    pub fn is_skill_enabled(&self, name: &str) -> bool {
        self.skills.get(name).is_none_or(|s| s.enabled)
    }
}

/// `skills.<name>`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(expecting = "a mapping with enabled")]
pub struct SkillStateConfig {
    /// Whether the skill is available.
    #[serde(default = "default_true")]
    pub enabled: bool,
}

/// One `mcpServers` entry (`McpServerConfig`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(expecting = "an MCP server mapping")]
pub struct McpServerConfig {
    /// Whether the server is used.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// The transport as written under `type`; use `transport_name()`.
    #[serde(rename = "type", default)]
    pub type_: Option<String>,
    /// The transport as written under `transport` (an alias; `type` wins).
    #[serde(default)]
    pub transport: Option<String>,
    /// The stdio command.
    #[serde(default)]
    pub command: Option<String>,
    /// The stdio arguments.
    #[serde(default, deserialize_with = "null_as_default")]
    pub args: Vec<String>,
    /// Extra environment for a stdio server (`$VAR` reads the host's).
    #[serde(default, deserialize_with = "null_as_default")]
    pub env: NamedMap<String>,
    /// The stdio working directory; `None` means the thread workspace.
    #[serde(default)]
    pub cwd: Option<String>,
    /// The sse/http endpoint.
    #[serde(default)]
    pub url: Option<String>,
    /// HTTP headers for sse/http.
    #[serde(default, deserialize_with = "null_as_default")]
    pub headers: NamedMap<String>,
    /// OAuth token acquisition.
    #[serde(default)]
    pub oauth: Option<McpOAuthConfig>,
    /// What the server is for.
    #[serde(default, deserialize_with = "null_as_default")]
    pub description: String,
    /// Routing for every tool of the server.
    #[serde(default, deserialize_with = "null_as_default")]
    pub routing: McpRoutingConfig,
    /// Per-tool settings by original (unprefixed) tool name.
    #[serde(default, deserialize_with = "null_as_default")]
    pub tools: NamedMap<McpToolConfig>,
    /// Whether tools are named `{server}_{tool}`.
    #[serde(default = "default_true")]
    pub tool_name_prefix: bool,
    /// Per-call timeout in seconds (stdio only).
    #[serde(default)]
    pub tool_call_timeout: Option<f64>,
    /// Discovery and session start timeout in seconds.
    #[serde(default = "default_session_init_timeout")]
    pub session_init_timeout: f64,
    /// Background-task contracts.
    #[serde(default, deserialize_with = "null_as_default")]
    pub task_toolsets: Vec<McpTaskToolset>,
    /// How the server's `elicitation/create` requests are answered.
    #[serde(default, deserialize_with = "null_as_default")]
    pub elicitation: ElicitationPolicy,
    /// Which protocol lifecycle the server's sessions use.
    #[serde(default, deserialize_with = "null_as_default")]
    pub protocol: McpProtocol,
}

/// `elicitation`: how a server's request for user input is answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(
    rename_all = "snake_case",
    expecting = "one of decline, accept_defaults, ask"
)]
pub enum ElicitationPolicy {
    /// Every request is declined (the server goes on without the input).
    #[default]
    Decline,
    /// A form request is accepted with its schema's defaults when they fill every
    /// required field and fit the schema; otherwise it is declined.
    AcceptDefaults,
    /// A form request made during a run's tool call is asked of the run's user (the run
    /// inspector shows a form); unanswered within its deadline, or asked outside a run,
    /// it is declined.
    Ask,
}

/// `protocol`: whether a server's sessions may use the stateless `2026-07-28` lifecycle
/// (`server/discover`, no handshake, no server-initiated requests) or always `initialize`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case", expecting = "one of legacy, auto")]
pub enum McpProtocol {
    /// Always the `initialize` handshake, proposing `2025-11-25` (the server can elicit and
    /// ask for roots).
    #[default]
    Legacy,
    /// `server/discover` first; a server that does not answer it (an error, HTTP 400, no
    /// answer within 5 s) gets `initialize` on a fresh connection. The era that worked is
    /// kept for the server's reconnects.
    Auto,
}

fn default_session_init_timeout() -> f64 {
    DEFAULT_MCP_SESSION_INIT_TIMEOUT
}

impl McpServerConfig {
    /// The transport as configured: `type`, else `transport`, else `stdio`.
    pub fn transport_name(&self) -> &str {
        self.type_
            .as_deref()
            .or(self.transport.as_deref())
            .unwrap_or("stdio")
    }

    /// The routing of one tool: the server's routing with the tool's set fields on top.
    pub fn effective_routing(&self, original_tool_name: &str) -> EffectiveRouting {
        match self.tools.get(original_tool_name) {
            Some(tool) => self.routing.merged_with(&tool.routing).effective(),
            None => self.routing.effective(),
        }
    }
}

/// One `task_toolsets` entry: the raw tools behind a durable background task.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(expecting = "a task toolset with name, submit_tool, status_tool, cancel_tool")]
pub struct McpTaskToolset {
    /// The task name (at most 255 characters).
    pub name: String,
    /// The raw tool that starts a task.
    pub submit_tool: String,
    /// The raw tool that polls it.
    pub status_tool: String,
    /// The raw tool that cancels it.
    pub cancel_tool: String,
}

/// Parses `extensions_config.json` text; `file` is only used in diagnostics.
pub fn parse_extensions_config(
    file: &Path,
    text: &str,
    env: EnvLookup<'_>,
) -> Result<Loaded<ExtensionsConfig>, ConfigError> {
    let doc = Document {
        file,
        text,
        format: Format::Json,
    };
    let (mut config, unknown) = doc.load::<ExtensionsConfig>(env)?;
    let mut warnings: Vec<ConfigWarning> = unknown
        .into_iter()
        .map(|path| {
            let known = match path.segments() {
                [_] => TOP_LEVEL_KEYS,
                [PathSegment::Key(top), _, _] if top == "mcpServers" => SERVER_KEYS,
                _ => &[],
            };
            let message = unknown_key_message(&path, known);
            doc.warning(WarningKind::UnknownKey, path, message)
        })
        .collect();
    // Read, but nothing in Antler acts on them yet.
    let inert = [
        ("mcpInterceptors", !config.mcp_interceptors.is_empty()),
        ("middlewares", !config.middlewares.is_empty()),
    ];
    for (key, set) in inert {
        if set {
            let path = FieldPath::root().key(key);
            warnings.push(doc.warning(WarningKind::Ignored, path, super::app::IGNORED_SETTING));
        }
    }
    let servers = FieldPath::root().key("mcpServers");
    let mut skipped = Vec::new();
    for (name, server) in config.mcp_servers.iter() {
        let at = servers.key(name);
        warnings.extend(priority_warnings(&doc, &at, server));
        if !server.enabled {
            continue;
        }
        if let Err(problem) = build_server_params(name, server) {
            let (field, expected) = problem.place(server);
            warnings.push(doc.warning_expecting(
                WarningKind::ServerSkipped,
                at.join(&field),
                problem.to_string(),
                expected,
            ));
            skipped.push(name.to_owned());
        }
    }
    for name in skipped {
        config.mcp_servers.remove(&name);
    }
    warnings.sort_by_key(|w| w.location.map(|l| (l.line, l.column)));
    Ok(Loaded {
        value: config,
        path: Some(file.to_path_buf()),
        warnings,
    })
}

/// A warning for each routing priority outside 0..=100 (it is used clamped).
fn priority_warnings(
    doc: &Document<'_>,
    at: &FieldPath,
    server: &McpServerConfig,
) -> Vec<ConfigWarning> {
    let server_level = std::iter::once((at.key("routing"), &server.routing));
    let tool_level = server
        .tools
        .iter()
        .map(|(tool, cfg)| (at.key("tools").key(tool).key("routing"), &cfg.routing));
    server_level
        .chain(tool_level)
        .filter_map(|(path, routing)| {
            let priority = routing.priority?;
            let clamped = super::routing::clamp_priority(priority);
            (i64::from(clamped) != priority).then(|| {
                doc.warning(
                    WarningKind::Clamped,
                    path.key("priority"),
                    format!("priority {priority} is outside 0..=100; {clamped} is used"),
                )
            })
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn server(json: &str) -> McpServerConfig {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn defaults_follow_the_table_in_spec_5_1() {
        let s = server("{}");
        assert!(s.enabled);
        assert_eq!(s.transport_name(), "stdio");
        assert!(s.args.is_empty() && s.env.is_empty() && s.headers.is_empty());
        assert_eq!(s.description, "");
        assert!(s.tool_name_prefix);
        assert_eq!(s.tool_call_timeout, None);
        assert_eq!(s.session_init_timeout, 60.0);
        assert!(s.task_toolsets.is_empty() && s.tools.is_empty() && s.oauth.is_none());
        assert_eq!(s.protocol, McpProtocol::Legacy);
    }

    #[test]
    fn protocol_is_legacy_or_auto_and_nothing_else() {
        assert_eq!(
            server(r#"{"protocol": "auto"}"#).protocol,
            McpProtocol::Auto
        );
        assert_eq!(
            server(r#"{"protocol": "legacy"}"#).protocol,
            McpProtocol::Legacy
        );
        assert_eq!(
            server(r#"{"protocol": null}"#).protocol,
            McpProtocol::Legacy
        );
        let e = serde_json::from_str::<McpServerConfig>(r#"{"protocol": "stateless"}"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown variant `stateless`, expected `legacy` or `auto`"),
            "{e}"
        );
    }

    #[test]
    fn type_wins_over_transport() {
        assert_eq!(server(r#"{"transport": "sse"}"#).transport_name(), "sse");
        assert_eq!(
            server(r#"{"type": "http", "transport": "sse"}"#).transport_name(),
            "http"
        );
    }

    #[test]
    fn skills_not_listed_are_enabled() {
        let c: ExtensionsConfig =
            serde_json::from_str(r#"{"skills": {"a": {"enabled": false}, "b": {}}}"#).unwrap();
        assert!(!c.is_skill_enabled("a"));
        assert!(c.is_skill_enabled("b"));
        assert!(c.is_skill_enabled("c"));
    }
}
