//! Assembly: from the sources (config tools, builtins, MCP tools, ACP agents) to the
//! candidate list of one run, in DeerFlow's order (spec 1.1, 1.2, 1.3): groups filter,
//! host-bash gate, `use:` resolution, builtins by condition, MCP naming checks, ACP,
//! dedup (first name wins, one warning per dropped duplicate), the subagent name filter,
//! authorization layer 1, then the catalog build (deferral, hash, search index).
//! Deterministic: MCP tools are ordered by the server's place in the config, then by the
//! server's own listing order, whatever order they arrived in.

use std::sync::Arc;

use antler_protocol::config::{is_host_bash_allowed, AppConfig, ExtensionsConfig};
use serde_json::Value;

use super::{
    authz::{self, Decision, Principal},
    builtins::{self, BuiltinConditions},
    registry::{self, Resolution},
    routing::{McpRouting, RoutingMode},
    tool::{ToolSource, ToolSpec},
    Catalog, CatalogError,
};

/// DeerFlow's duplicate warning (spec 1.1 step 7), with `{name}` as Python's `%r`.
pub const DUPLICATE_WARNING: &str =
    "Duplicate tool name {name} detected and skipped — check your config.yaml and MCP server registrations (issue #1803).";

/// The `use:` id of DeerFlow's host bash tool, dropped by the host-bash gate.
pub const DEERFLOW_BASH_USE: &str = "deerflow.sandbox.tools:bash_tool";

/// One tool as mcp-host lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct McpSourceTool {
    pub server: String,
    /// The exposed name (`{server}_{tool}` when prefixing is on).
    pub name: String,
    pub original_name: String,
    pub description: String,
    pub input_schema: Value,
    /// The tool's place in its server's listing.
    pub position: u32,
}

/// Everything assembly reads; replaced as a whole when a source changes.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    pub config: Arc<AppConfig>,
    pub extensions: Option<Arc<ExtensionsConfig>>,
    pub mcp: Arc<Vec<McpSourceTool>>,
}

/// What one run asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct AssemblyRequest {
    /// `None`: every configured tool; `[]`: none (DeerFlow's semantics).
    pub groups: Option<Vec<String>>,
    pub include_mcp: bool,
    /// The model whose `supports_vision` decides `view_image` (first model when `None`).
    pub model_name: Option<String>,
    /// Builtin conditions; `vision` and `skill_evolution` are filled from the config.
    pub builtins: BuiltinConditions,
    pub principal: Principal,
    /// A subagent's allowlist (`None` = all) and denylist, applied before authorization.
    pub allowed_tools: Option<Vec<String>>,
    pub disallowed_tools: Vec<String>,
}

impl AssemblyRequest {
    /// A lead run's request: interactive, with MCP and uploads.
    pub fn lead() -> Self {
        AssemblyRequest {
            include_mcp: true,
            builtins: BuiltinConditions {
                interactive: true,
                include_upload_tool: true,
                ..BuiltinConditions::default()
            },
            ..AssemblyRequest::default()
        }
    }

    /// The request for a subagent of a run made with `parent` (spec 1.3): subagents off,
    /// no upload tool, the parent's groups and principal, plus the subagent's own lists.
    pub fn subagent_of(
        parent: &AssemblyRequest,
        allowed: Option<Vec<String>>,
        disallowed: Vec<String>,
    ) -> Self {
        AssemblyRequest {
            groups: parent.groups.clone(),
            include_mcp: parent.include_mcp,
            model_name: parent.model_name.clone(),
            builtins: BuiltinConditions {
                interactive: false,
                include_upload_tool: false,
                subagent_enabled: false,
                ..BuiltinConditions::default()
            },
            principal: parent.principal.clone(),
            allowed_tools: allowed,
            disallowed_tools: disallowed,
        }
    }
}

/// Why assembly failed (operator-facing: the run cannot start).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssemblyError {
    #[error("tool '{tool}': unknown use id `{use_id}`; closest known ids: {}", closest.join(", "))]
    UnknownUseId {
        tool: String,
        use_id: String,
        closest: Vec<&'static str>,
    },
    #[error(transparent)]
    Catalog(#[from] CatalogError),
}

/// Where a candidate came from, for `antler catalog show`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub name: String,
    pub source: String,
    pub group: Option<String>,
}

/// One assembled catalog and what assembly had to say about it.
pub struct Assembled {
    /// Shared by every run of this catalog version.
    pub catalog: Arc<Catalog>,
    pub warnings: Vec<String>,
    /// Tools authorization removed (never in the catalog, never searchable).
    pub denied: Vec<String>,
}

fn describe(source: &ToolSource) -> String {
    match source {
        ToolSource::Config { use_id } => format!("config ({use_id})"),
        ToolSource::Builtin => "builtin".into(),
        ToolSource::Mcp { server, .. } => match server.as_deref().filter(|s| !s.is_empty()) {
            Some(server) => format!("mcp ({server})"),
            None => "mcp".into(),
        },
        ToolSource::Acp => "acp".into(),
    }
}

/// A name the model may see (spec 5.2 step 7).
pub fn valid_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn python_repr(s: &str) -> String {
    if s.contains('\'') && !s.contains('"') {
        format!("\"{s}\"")
    } else {
        format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
    }
}

/// Assembles the catalog of one run.
pub fn assemble(sources: &Sources, req: &AssemblyRequest) -> Result<Assembled, AssemblyError> {
    let config = &sources.config;
    let mut warnings = Vec::new();
    let mut candidates: Vec<ToolSpec> = Vec::new();

    // 1-3: configured tools, groups filter, host-bash gate, resolution.
    let host_bash = is_host_bash_allowed(config);
    for tc in &config.tools {
        if let Some(groups) = &req.groups {
            if !groups.contains(&tc.group) {
                continue;
            }
        }
        let resolution = registry::resolve(&tc.use_);
        if !host_bash {
            let is_bash = tc.group == "bash"
                || tc.use_ == DEERFLOW_BASH_USE
                || matches!(&resolution, Resolution::Found(i) if i.name == "bash");
            if is_bash {
                continue;
            }
        }
        let implementation = match resolution {
            Resolution::Found(i) => i,
            Resolution::Unknown { closest } => {
                return Err(AssemblyError::UnknownUseId {
                    tool: tc.name.clone(),
                    use_id: tc.use_.clone(),
                    closest,
                })
            }
        };
        if !implementation.available {
            warnings.push(format!(
                "Tool '{}' (use: {}) is known but not available in Antler yet; it is left out.",
                tc.name, tc.use_
            ));
            continue;
        }
        if tc.name != implementation.name {
            warnings.push(format!(
                "Tool name mismatch: config name '{}' differs from the tool's own name '{}' for use '{}'; the tool's name '{}' is used (issue #1803).",
                tc.name, implementation.name, tc.use_, implementation.name
            ));
        }
        candidates.push(ToolSpec {
            name: implementation.name.to_string(),
            description: implementation.description.to_string(),
            parameters: (implementation.parameters)(),
            source: ToolSource::Config {
                use_id: tc.use_.clone(),
            },
            group: Some(tc.group.clone()),
            routing: None,
        });
    }

    // 4: builtins.
    let mut cond = req.builtins.clone();
    cond.skill_evolution = config.skill_evolution.enabled;
    cond.vision = config
        .model(req.model_name.as_deref())
        .is_some_and(|m| m.supports_vision);
    candidates.extend(builtins::builtins(&cond));

    // 5: MCP tools, in a deterministic order.
    if req.include_mcp {
        let server_rank = |server: &str| -> (usize, String) {
            let pos = sources
                .extensions
                .as_ref()
                .and_then(|e| e.mcp_servers.keys().position(|k| k == server));
            (pos.unwrap_or(usize::MAX), server.to_string())
        };
        let mut mcp: Vec<&McpSourceTool> = sources.mcp.iter().collect();
        mcp.sort_by_cached_key(|t| (server_rank(&t.server), t.position, t.name.clone()));
        for t in mcp {
            if !valid_tool_name(&t.name) {
                warnings.push(format!(
                    "Skipping MCP tool {} from server '{}': tool names must match ^[A-Za-z0-9_-]+$",
                    python_repr(&t.name),
                    t.server
                ));
                continue;
            }
            let mut spec = ToolSpec::mcp(
                t.name.clone(),
                t.description.clone(),
                t.input_schema.clone(),
                Some(t.server.clone()),
                t.original_name.clone(),
            );
            spec.routing = sources
                .extensions
                .as_ref()
                .and_then(|e| e.mcp_servers.get(&t.server))
                .map(|server| server.effective_routing(&t.original_name))
                .filter(|r| r.mode != antler_protocol::config::RoutingMode::Off)
                .map(|r| McpRouting {
                    mode: RoutingMode::Prefer,
                    priority: i64::from(r.priority),
                    keywords: r.keywords,
                });
            candidates.push(spec);
        }
    }

    // 6: ACP.
    if !config.acp_agents.is_empty() {
        candidates.push(builtins::invoke_acp_agent(
            config
                .acp_agents
                .iter()
                .map(|(n, a)| (n, a.description.as_str())),
        ));
    }

    // 7: dedup, first wins.
    let mut seen: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    let mut unique = Vec::with_capacity(candidates.len());
    for c in candidates {
        match seen.get(&c.name) {
            Some(kept) => warnings.push(format!(
                "{} (kept: {kept}; dropped: {})",
                DUPLICATE_WARNING.replace("{name}", &python_repr(&c.name)),
                describe(&c.source)
            )),
            None => {
                seen.insert(c.name.clone(), describe(&c.source));
                unique.push(c);
            }
        }
    }

    // Subagent name filter (spec 1.3), then authorization layer 1.
    if let Some(allowed) = &req.allowed_tools {
        unique.retain(|t| allowed.contains(&t.name));
    }
    unique.retain(|t| !req.disallowed_tools.contains(&t.name));
    let decision = authz::decide(&config.authorization, &req.principal);
    if let Decision::DenyAll { reason } = &decision {
        warnings.push(format!("authorization denies every tool: {reason}"));
    }
    let mut denied = Vec::new();
    unique.retain(|t| {
        let ok = decision.allows(&t.name);
        if !ok {
            denied.push(t.name.clone());
        }
        ok
    });

    let catalog = Catalog::build(unique, config.tool_search.enabled)?;
    Ok(Assembled {
        catalog: Arc::new(catalog),
        warnings,
        denied,
    })
}

/// Where each tool of a catalog came from, in catalog order.
pub fn origins(catalog: &Catalog) -> Vec<Origin> {
    catalog
        .tools()
        .iter()
        .map(|t| Origin {
            name: t.name.clone(),
            source: describe(&t.source),
            group: t.group.clone(),
        })
        .collect()
}
