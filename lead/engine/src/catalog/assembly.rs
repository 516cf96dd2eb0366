//! Assembly: from the sources (config tools, builtins, MCP tools, ACP agents) to the
//! candidate list of one run, in DeerFlow's order (spec 1.1, 1.2, 1.3): groups filter,
//! host-bash gate, `use:` resolution, builtins by condition, MCP naming checks, ACP,
//! dedup (first name wins, one warning per dropped duplicate), the subagent name filter,
//! authorization layer 1, then the catalog build (deferral, hash, search index).
//! Deterministic: MCP tools are ordered by the server's place in the config, then by the
//! server's own listing order, whatever order they arrived in.

use std::collections::hash_map::{Entry, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use antler_protocol::config::{is_host_bash_allowed, AppConfig, ExtensionsConfig};
use serde_json::Value;

use super::{
    authz::{self, Decision, Principal},
    builtins::{self, BuiltinConditions},
    hash,
    prefilter::ToolFeatures,
    registry::{self, Resolution},
    routing::{McpRouting, RoutingMode},
    search::Prepared,
    tool::{ToolSource, ToolSpec},
    Candidate, Catalog, CatalogError, CatalogHash, Speculation,
};

/// DeerFlow's duplicate warning (spec 1.1 step 7), with `{name}` as Python's `%r`.
pub(crate) const DUPLICATE_WARNING: &str =
    "Duplicate tool name {name} detected and skipped — check your config.yaml and MCP server registrations (issue #1803).";

/// The `use:` id of DeerFlow's host bash tool, dropped by the host-bash gate.
pub(crate) const DEERFLOW_BASH_USE: &str = "deerflow.sandbox.tools:bash_tool";

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

/// The MCP tools of the sources, ingested: each listed tool is converted to its catalog
/// form once, when the listing arrives (OpenAI parameters; its entry of the catalog-hash
/// blob, canonical schema included; its search features; its rank by name), so a catalog
/// build shares the schemas and streams the entries instead of converting, serialising
/// and indexing them again. Cloning is a reference count.
#[derive(Debug, Clone, Default)]
pub struct McpTools(Arc<[IngestedMcp]>);

#[derive(Debug, Clone)]
struct IngestedMcp {
    server: String,
    position: u32,
    /// The tool as the catalog holds it (routing is set per build, from the extensions).
    spec: ToolSpec,
    /// Its search features, computed once here instead of in every catalog build.
    features: ToolFeatures,
    /// Its place among the listing's names (set when the listing is ordered).
    name_rank: u32,
    /// Its entry of the catalog-hash blob (the canonical schema, name and description).
    hash_entry: Box<str>,
    /// Whether the name is one a model may see ([`valid_tool_name`]).
    valid_name: bool,
}

impl IngestedMcp {
    fn new(tool: McpSourceTool) -> Self {
        let spec = ToolSpec::mcp(
            tool.name,
            tool.description,
            tool.input_schema,
            Some(tool.server.clone()),
            tool.original_name,
        );
        // Written now, so no catalog build serialises this schema or escapes these texts.
        let hash_entry = hash::entry_of(&spec);
        let features = ToolFeatures::of_tool(&spec.name, &spec.description);
        let valid_name = valid_tool_name(&spec.name);
        IngestedMcp {
            server: tool.server,
            position: tool.position,
            spec,
            features,
            name_rank: 0,
            hash_entry,
            valid_name,
        }
    }
}

impl McpTools {
    /// Ingests a listing.
    pub fn new(mut tools: Vec<McpSourceTool>) -> Self {
        let ingest = |tools: Vec<McpSourceTool>| -> Vec<IngestedMcp> {
            tools.into_iter().map(IngestedMcp::new).collect()
        };
        let parallel = tools.len() >= INGEST_PARALLEL_FROM
            && std::thread::available_parallelism().is_ok_and(|n| n.get() > 1);
        if !parallel {
            return Self::sorted(ingest(tools));
        }
        // Large listings are converted on two threads (a scoped thread, joined here).
        let tail = tools.split_off(tools.len() / 2);
        let all = std::thread::scope(|scope| {
            let worker = scope.spawn(|| ingest(tail));
            let mut head = ingest(tools);
            match worker.join() {
                Ok(tail) => {
                    head.extend(tail);
                    head
                }
                Err(panic) => std::panic::resume_unwind(panic),
            }
        });
        Self::sorted(all)
    }

    /// Kept ordered by (server, position, name), so a build only orders servers by their
    /// place in the extensions config (a stable sort on one integer), and ranked by name,
    /// so a build orders its deferred tools by name with an integer sort.
    fn sorted(mut tools: Vec<IngestedMcp>) -> Self {
        tools.sort_by(|a, b| {
            a.server
                .cmp(&b.server)
                .then_with(|| a.position.cmp(&b.position))
                .then_with(|| a.spec.name.cmp(&b.spec.name))
        });
        // One shared server name per server: a build's copies of its tools then all
        // count references on the same (cached) allocation.
        let mut shared: Option<Arc<str>> = None;
        for tool in &mut tools {
            if let ToolSource::Mcp {
                server: Some(server),
                ..
            } = &mut tool.spec.source
            {
                match &shared {
                    Some(same) if **same == **server => *server = Arc::clone(same),
                    _ => shared = Some(Arc::clone(server)),
                }
            }
        }
        let mut by_name: Vec<u32> = (0..index_u32(tools.len())).collect();
        by_name.sort_by(|&a, &b| {
            tools[a as usize]
                .spec
                .name
                .cmp(&tools[b as usize].spec.name)
        });
        for (rank, &i) in by_name.iter().enumerate() {
            tools[i as usize].name_rank = index_u32(rank);
        }
        McpTools(tools.into())
    }

    /// These tools with those of `server` (all of them, with `None`) replaced by `tools`;
    /// the tools kept are not ingested again.
    pub fn replaced(&self, server: Option<&str>, tools: Vec<McpSourceTool>) -> Self {
        let kept = self
            .0
            .iter()
            .filter(|t| server.is_some_and(|s| t.server != s))
            .cloned();
        Self::sorted(
            kept.chain(tools.into_iter().map(IngestedMcp::new))
                .collect(),
        )
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The catalog hash of every listed tool, from the entries written at ingestion, in
    /// name order; `None` when `cancel` is set before it is done.
    fn hash_all(&self, cancel: &AtomicBool) -> Option<CatalogHash> {
        let mut by_name = vec![0u32; self.0.len()];
        for (i, tool) in self.0.iter().enumerate() {
            by_name[tool.name_rank as usize] = index_u32(i);
        }
        let mut blob = hash::BlobHasher::new();
        for chunk in by_name.chunks(256) {
            if cancel.load(Ordering::Relaxed) {
                return None;
            }
            blob.written_entries(chunk.iter().map(|&i| &*self.0[i as usize].hash_entry));
        }
        Some(blob.finish())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The ingested tools with their servers, by server, then place in its listing.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &ToolSpec)> {
        self.0.iter().map(|t| (t.server.as_str(), &t.spec))
    }
}

impl From<Vec<McpSourceTool>> for McpTools {
    fn from(tools: Vec<McpSourceTool>) -> Self {
        McpTools::new(tools)
    }
}

/// From this many listed tools on, ingestion uses a second thread.
const INGEST_PARALLEL_FROM: usize = 512;

/// Listings are far below `u32::MAX` tools; saturating keeps the conversion total.
fn index_u32(index: usize) -> u32 {
    u32::try_from(index).unwrap_or(u32::MAX)
}

/// Everything assembly reads; replaced as a whole when a source changes.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    pub config: Arc<AppConfig>,
    pub extensions: Option<Arc<ExtensionsConfig>>,
    pub mcp: McpTools,
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
    /// Unlike DeerFlow, a subagent is never offered `skill_manage` (skill writes are the
    /// lead's, whose per-(user, skill) lock serialises them, and a worker has neither that
    /// lock nor, in a cluster, the skills volume) nor `invoke_acp_agent` (a worker's task
    /// does not carry the lead's ACP settings: the session's MCP servers and deadlines).
    pub fn subagent_of(
        parent: &AssemblyRequest,
        allowed: Option<Vec<String>>,
        mut disallowed: Vec<String>,
    ) -> Self {
        for lead_only in [
            super::builtins::SKILL_MANAGE,
            super::builtins::INVOKE_ACP_AGENT,
        ] {
            if !disallowed.iter().any(|t| t == lead_only) {
                disallowed.push(lead_only.to_owned());
            }
        }
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
pub(crate) fn valid_tool_name(name: &str) -> bool {
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
///
/// With tool search on and a large listing, the hash of the whole listing starts on a
/// second thread at once: most runs defer every listed tool, and then the hash is ready
/// when the catalog is; otherwise it is cancelled and the deferred tools are hashed.
/// `skills.deferred_discovery` (off by default): skills are listed by name only and
/// `describe_skill` tells the model more.
pub fn skills_deferred_discovery(config: &antler_protocol::config::AppConfig) -> bool {
    config
        .other
        .get("skills")
        .and_then(|s| s.get("deferred_discovery"))
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false)
}

pub fn assemble(sources: &Sources, req: &AssemblyRequest) -> Result<Assembled, AssemblyError> {
    let speculate =
        sources.config.tool_search.enabled && req.include_mcp && super::parallel(sources.mcp.len());
    if !speculate {
        return assemble_with(sources, req, None);
    }
    let cancel = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let hash = scope.spawn(|| sources.mcp.hash_all(&cancel));
        let speculation = Speculation {
            hash,
            cancel: &cancel,
            tools: sources.mcp.len(),
        };
        let assembled = assemble_with(sources, req, Some(speculation));
        // Unused when assembly failed; the scope joins the thread, so stop it first.
        cancel.store(true, Ordering::Relaxed);
        assembled
    })
}

fn assemble_with(
    sources: &Sources,
    req: &AssemblyRequest,
    speculation: Option<Speculation<'_, '_>>,
) -> Result<Assembled, AssemblyError> {
    let config = &sources.config;
    let mut warnings = Vec::new();
    // Ingested MCP tools are borrowed until the catalog copies them.
    let mut candidates: Vec<Candidate<'_>> = Vec::new();

    // 1-3: configured tools, groups filter, host-bash gate, resolution.
    push_configured(config, req, &mut candidates, &mut warnings)?;

    // 4: builtins.
    let mut cond = req.builtins.clone();
    cond.skill_evolution = config.skill_evolution.enabled;
    cond.vision = config
        .model(req.model_name.as_deref())
        .is_some_and(|m| m.supports_vision);
    candidates.extend(builtins::builtins(&cond).into_iter().map(Candidate::owned));

    // 5: MCP tools, in a deterministic order.
    if req.include_mcp {
        push_mcp(sources, &mut candidates, &mut warnings);
    }

    // 6: ACP.
    if !config.acp_agents.is_empty() {
        candidates.push(Candidate::owned(builtins::invoke_acp_agent(
            config
                .acp_agents
                .iter()
                .map(|(n, a)| (n, a.description.as_str())),
        )));
    }

    // 6b: late tools: describe_skill with skills.deferred_discovery (lead runs).
    if req.builtins.include_upload_tool && skills_deferred_discovery(config) {
        candidates.push(Candidate::owned(builtins::describe_skill()));
    }

    // 7: dedup, first wins.
    let mut keep = first_of_each_name(&candidates, &mut warnings);

    // Subagent name filter (spec 1.3), then authorization layer 1.
    let denied = authorize(config, req, &candidates, &mut keep, &mut warnings);
    if !keep.iter().all(|&k| k) {
        let mut kept = keep.into_iter();
        candidates.retain(|_| kept.next().unwrap_or(false));
    }

    let catalog = Catalog::build_assembled(candidates, config.tool_search.enabled, speculation)?;
    Ok(Assembled {
        catalog: Arc::new(catalog),
        warnings,
        denied,
    })
}

/// Steps 1-3: the configured tools the request's groups select, without bash where host
/// bash is not allowed, each resolved to its implementation (an unknown `use:` id fails
/// the assembly; a known one Antler does not have yet is left out with a warning).
fn push_configured(
    config: &AppConfig,
    req: &AssemblyRequest,
    candidates: &mut Vec<Candidate<'_>>,
    warnings: &mut Vec<String>,
) -> Result<(), AssemblyError> {
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
        candidates.push(Candidate::owned(ToolSpec {
            name: implementation.name.to_string(),
            description: implementation.description.to_string(),
            parameters: (implementation.parameters)().into(),
            source: ToolSource::Config {
                use_id: tc.use_.clone(),
            },
            group: Some(tc.group.clone()),
            routing: None,
        }));
    }
    Ok(())
}

/// Step 5: the ingested MCP tools, ranked by their server's place in the extensions
/// file (stable within a server), each with its server's routing; a tool whose name is
/// not valid is skipped with a warning.
fn push_mcp<'s>(
    sources: &'s Sources,
    candidates: &mut Vec<Candidate<'s>>,
    warnings: &mut Vec<String>,
) {
    let server_rank = |server: &str| -> usize {
        sources
            .extensions
            .as_ref()
            .and_then(|e| e.mcp_servers.keys().position(|k| k == server))
            .unwrap_or(usize::MAX)
    };
    // Servers are ranked once each, not once per tool: the ingested tools are
    // grouped by server, so the previous tool's rank is reused.
    let mut last: Option<(&str, usize)> = None;
    let mut mcp: Vec<(usize, &IngestedMcp)> = sources
        .mcp
        .0
        .iter()
        .map(|t| {
            let rank = match last {
                Some((server, rank)) if server == t.server => rank,
                _ => server_rank(&t.server),
            };
            last = Some((t.server.as_str(), rank));
            (rank, t)
        })
        .collect();
    // Stable: within a rank, the ingested (server, position, name) order stays.
    mcp.sort_by_key(|(rank, _)| *rank);
    candidates.reserve(mcp.len() + 1);
    // The server's settings, looked up once per run of its tools.
    let mut server_config: Option<(&str, Option<&antler_protocol::config::McpServerConfig>)> = None;
    for (_, t) in mcp {
        if !t.valid_name {
            warnings.push(format!(
                "Skipping MCP tool {} from server '{}': tool names must match ^[A-Za-z0-9_-]+$",
                python_repr(&t.spec.name),
                t.server
            ));
            continue;
        }
        let server = match server_config {
            Some((name, server)) if name == t.server => server,
            _ => {
                let server = sources
                    .extensions
                    .as_ref()
                    .and_then(|e| e.mcp_servers.get(&t.server));
                server_config = Some((t.server.as_str(), server));
                server
            }
        };
        let spec = &t.spec;
        let routing = server
            .map(|server| match &spec.source {
                ToolSource::Mcp { original_name, .. } => server.effective_routing(original_name),
                _ => server.effective_routing(&spec.name),
            })
            .filter(|r| r.mode != antler_protocol::config::RoutingMode::Off)
            .map(|r| McpRouting {
                mode: RoutingMode::Prefer,
                priority: i64::from(r.priority),
                keywords: r.keywords,
            });
        candidates.push(Candidate::Ingested {
            spec,
            routing,
            prepared: Prepared {
                features: &t.features,
                name_rank: t.name_rank,
                hash_entry: &t.hash_entry,
            },
        });
    }
}

/// Step 7: which candidates are kept when duplicates are dropped, first wins, each drop
/// a warning naming both sources (names are borrowed, not copied; a source is described
/// only for a duplicate's warning).
fn first_of_each_name(candidates: &[Candidate<'_>], warnings: &mut Vec<String>) -> Vec<bool> {
    let mut first_of: HashMap<&str, usize, foldhash::fast::RandomState> =
        HashMap::with_capacity_and_hasher(candidates.len(), Default::default());
    let mut keep = vec![true; candidates.len()];
    for (i, c) in candidates.iter().enumerate() {
        let c = c.spec();
        match first_of.entry(c.name.as_str()) {
            Entry::Occupied(kept) => {
                keep[i] = false;
                warnings.push(format!(
                    "{} (kept: {}; dropped: {})",
                    DUPLICATE_WARNING.replace("{name}", &python_repr(&c.name)),
                    describe(&candidates[*kept.get()].spec().source),
                    describe(&c.source)
                ));
            }
            Entry::Vacant(slot) => {
                slot.insert(i);
            }
        }
    }
    keep
}

/// The subagent name filter (spec 1.3), then authorization layer 1: drops from `keep`
/// what the subagent may not use or the principal may not see, and returns the names
/// the policy denied.
fn authorize(
    config: &AppConfig,
    req: &AssemblyRequest,
    candidates: &[Candidate<'_>],
    keep: &mut [bool],
    warnings: &mut Vec<String>,
) -> Vec<String> {
    let decision = authz::decide(&config.authorization, &req.principal);
    if let Decision::DenyAll { reason } = &decision {
        warnings.push(format!("authorization denies every tool: {reason}"));
    }
    let mut denied = Vec::new();
    for (c, k) in candidates.iter().zip(keep.iter_mut()) {
        if !*k {
            continue;
        }
        let c = c.spec();
        let subagent_may = req
            .allowed_tools
            .as_ref()
            .is_none_or(|a| a.contains(&c.name))
            && !req.disallowed_tools.contains(&c.name);
        if !subagent_may {
            *k = false;
        } else if !decision.allows(&c.name) {
            *k = false;
            denied.push(c.name.clone());
        }
    }
    denied
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
