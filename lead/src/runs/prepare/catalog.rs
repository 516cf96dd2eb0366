//! A run's catalog: the lead's [`CatalogActor`] (fed with the config, the extensions and
//! mcp-host's tool list whenever one of them changes, and caching one catalog per sources
//! version and request), or one assembled for a run with its own config; the assembly
//! request a run makes; and mcp-host's discovery (a server not ready is a warning).

use std::sync::Arc;
use std::time::Instant;

use antler_engine::catalog::{
    assemble, Assemble, AssemblyRequest, Catalog, McpSourceTool, SetConfig, SetExtensions,
    SetMcpTools, Sources,
};
use antler_engine::ToolHosts;
use antler_protocol::config::AppConfig;
use antler_protocol::messages::{McpDiscovery, McpServerStatus, McpTool};
use antler_protocol::Role;

use super::{PrepareError, RunEnv, MCP_HOST_UNREACHABLE_WARNING, SETUP_TIMEOUT};
use crate::runs::readiness::{wait_linked, HOSTS_START_WAIT};
use antler_protocol::calls::McpCalls;

impl RunEnv {
    /// The catalog for a run with `app`: the actor's (cached per sources version) when
    /// the run uses the cluster's config, else one assembled for this run alone.
    pub(crate) async fn catalog(
        &self,
        app: &Arc<AppConfig>,
        own_config: bool,
        request: AssemblyRequest,
        warnings: &mut Vec<String>,
    ) -> Result<(Arc<Catalog>, Vec<String>), PrepareError> {
        let extensions = self.load_extensions(warnings).await?;
        let any_server = extensions
            .as_ref()
            .is_some_and(|e| e.mcp_servers.values().any(|s| s.enabled));
        let mcp = if any_server {
            // mcp-host may still be starting (a run submitted with the cluster): wait
            // for its link; one that does not come leaves the run without MCP tools.
            let until = Instant::now() + HOSTS_START_WAIT;
            wait_linked(self.hosts.as_ref(), Role::McpHost, until).await;
            match discover_mcp(self.hosts.as_ref()).await {
                Ok(discovery) => {
                    if let Some(warning) = not_ready_warning(&discovery.not_ready) {
                        warnings.push(warning);
                    }
                    mcp_tools(discovery.tools)
                }
                // DeerFlow falls back to no MCP tools; the run says so and goes on.
                Err(e) => {
                    tracing::warn!("mcp-host cannot be reached; a run goes without MCP tools: {e}");
                    warnings.push(MCP_HOST_UNREACHABLE_WARNING.to_owned());
                    Vec::new()
                }
            }
        } else {
            Vec::new()
        };
        if own_config {
            let sources = Sources {
                config: app.clone(),
                extensions,
                mcp: antler_engine::catalog::McpTools::new(mcp),
            };
            let assembled = assemble(&sources, &request)?;
            for warning in &assembled.warnings {
                tracing::warn!("{warning}");
            }
            return Ok((assembled.catalog, assembled.denied));
        }
        let (new_config, new_extensions, new_mcp) = {
            let feed = self.feed();
            (
                feed.config.as_ref() != Some(app),
                feed.extensions.as_ref() != Some(&extensions),
                feed.mcp.as_ref() != Some(&mcp),
            )
        };
        if new_config {
            self.catalog
                .send(SetConfig(app.clone()))
                .await
                .map_err(|_| PrepareError::CatalogGone)?;
            self.feed().config = Some(app.clone());
        }
        if new_extensions {
            self.catalog
                .send(SetExtensions(extensions.clone()))
                .await
                .map_err(|_| PrepareError::CatalogGone)?;
            self.feed().extensions = Some(extensions);
        }
        if new_mcp {
            self.catalog
                .send(SetMcpTools {
                    server: None,
                    tools: mcp.clone(),
                })
                .await
                .map_err(|_| PrepareError::CatalogGone)?;
            self.feed().mcp = Some(mcp);
        }
        // The actor caches one catalog per (sources version, request): every run of a
        // version shares it.
        let built = self
            .catalog
            .send(Assemble(request))
            .await
            .map_err(|_| PrepareError::CatalogGone)??;
        let mut feed = self.feed();
        if feed.warned != built.version {
            feed.warned = built.version;
            for warning in &built.assembled.warnings {
                tracing::warn!("{warning}");
            }
        }
        Ok((
            built.assembled.catalog.clone(),
            built.assembled.denied.clone(),
        ))
    }
}

/// The lead's assembly request for a run: the model decides `view_image`, a custom
/// agent's chat offers `update_agent` and its `tool_groups` filter the tools, a bootstrap
/// run offers `setup_agent`, a non-interactive one no `ask_clarification`.
pub(super) fn assembly_request(
    model: Option<String>,
    agent: Option<String>,
    bootstrap: bool,
    interactive: bool,
    groups: Option<Vec<String>>,
) -> AssemblyRequest {
    let mut request = AssemblyRequest::lead();
    request.model_name = model;
    request.builtins.agent_name = agent;
    request.builtins.bootstrap = bootstrap;
    request.builtins.interactive = interactive;
    request.groups = groups;
    request
}

/// mcp-host's discovery: the tools of the ready servers and the servers that are not
/// ready. It answers promptly (a server is waited for only just after its start).
pub(super) async fn discover_mcp(hosts: &dyn ToolHosts) -> Result<McpDiscovery, PrepareError> {
    Ok(hosts.discover(SETUP_TIMEOUT).await?)
}

/// The run's warning naming the MCP servers it goes without (their errors go to the
/// lead's log: a server's stderr may say more than the submitter should read).
pub(super) fn not_ready_warning(not_ready: &[McpServerStatus]) -> Option<String> {
    if not_ready.is_empty() {
        return None;
    }
    for s in not_ready {
        tracing::warn!(
            server = %s.name,
            state = %s.state,
            "MCP server not ready; runs go without its tools: {}",
            s.last_error.as_deref().unwrap_or("no error yet")
        );
    }
    let names: Vec<String> = not_ready
        .iter()
        .map(|s| format!("'{}' ({})", s.name, s.state))
        .collect();
    Some(format!(
        "MCP servers not ready, this run goes without their tools: {}",
        names.join(", ")
    ))
}

/// mcp-host's tools, in its order, with each server's positions.
pub(super) fn mcp_tools(tools: Vec<McpTool>) -> Vec<McpSourceTool> {
    let mut positions = std::collections::HashMap::<String, u32>::new();
    let mut out = Vec::with_capacity(tools.len());
    for tool in tools {
        let position = positions.entry(tool.server.clone()).or_default();
        out.push(McpSourceTool {
            input_schema: tool.input_schema.into(),
            server: tool.server,
            name: tool.name,
            original_name: tool.original_name,
            description: tool.description,
            position: *position,
        });
        *position += 1;
    }
    out
}
