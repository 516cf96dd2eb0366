//! The tool catalog: one built, immutable snapshot of the tools a run may use, with what
//! DeerFlow derives from them computed once at build time (deferred set, catalog hash,
//! search index, prompt sections, routing index; matched schemas are rendered on demand).
//! A `Catalog` is never changed after `build`; share it behind an `Arc` and rebuild on any
//! source change, which yields a new hash.

// `actor`, `assembly`, `hash` and `registry` stay public while the lead's `cluster/` and
// `commands/` still name items by these paths (everything they use is re-exported below
// too); `builtins` is the namespace of the builtin tool specs (`builtins::task()`).
pub(crate) mod actor;
pub(crate) mod assembly;
pub(crate) mod authz;
pub mod builtins;
mod casefold;
pub(crate) mod deferred;
pub(crate) mod hash;
mod matcher;
mod names;
mod prefilter;
pub(crate) mod promotion;
pub(crate) mod pyjson;
pub(crate) mod registry;
pub(crate) mod routing;
pub(crate) mod search;
pub(crate) mod tool;

pub use actor::{Assemble, CatalogActor, Crash, SetConfig, SetExtensions, SetMcpTools};
pub use assembly::{
    assemble, origins, skills_deferred_discovery, Assembled, AssemblyError, AssemblyRequest,
    McpSourceTool, McpTools, Sources,
};
pub use authz::Principal;
pub use casefold::casefold;
pub use deferred::{
    assemble_deferred_tools, build_deferred_setup, deferred_tools_prompt_section, tool_search_spec,
    DeferredError, DeferredSetup, FAIL_CLOSED_ERROR, TOOL_SEARCH_DESCRIPTION, TOOL_SEARCH_NAME,
};
pub use hash::{canonical_blob, entry_of, BlobHasher, CatalogHash};
pub use matcher::{compile_query_regex, count_matches, REGEX_SIZE_LIMIT};
pub use promotion::{
    merge_promoted, DeferredFilter, HiddenToolCall, Promoted, ToolSearchMessage, ToolSearchOutcome,
    ToolSearchUnavailable, DEFERRED_TOOL_ERROR, MISSING_TOOL_CALL_ID, NO_TOOLS_FOUND,
};
pub use registry::{closest, edit_distance, resolve, Resolution};
pub use routing::{
    clamp_top_k, latest_real_user_text, resolve_effective_routing, routing_hints_section,
    McpRouting, McpRoutingOverride, RoutingIndex, RoutingMode, UserTurn,
};
use search::Prepared;
pub use search::{SearchIndex, SearchMode, MAX_RESULTS, RENDER_CACHE_BYTES};
pub use tool::{openai_parameters, ToolSource, ToolSpec};

use deferred::{check_fail_closed, prompt_section_sorted};
use names::NameTable;

/// Why a catalog could not be built (an operator-facing error).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CatalogError {
    #[error(transparent)]
    Deferred(#[from] DeferredError),
    /// Two candidates share a name; assembly deduplicates before building a catalog.
    #[error(
        "duplicate tool name {0:?}: candidates must be deduplicated before a catalog is built"
    )]
    DuplicateToolName(String),
}

/// Marks a tool that is not deferred in `Catalog::deferred_of_tool`.
pub(crate) const NOT_DEFERRED: u32 = u32::MAX;

/// A built, immutable tool catalog.
pub struct Catalog {
    /// The final tools: the candidates, then `tool_search` when anything is deferred.
    tools: Vec<ToolSpec>,
    /// Tool name to index in `tools`.
    names: NameTable,
    /// Deferred position to index in `tools` (deferred tools in catalog order).
    deferred: Vec<u32>,
    /// Index in `tools` to deferred position, or `NOT_DEFERRED`.
    deferred_of_tool: Vec<u32>,
    /// `None` exactly when nothing is deferred.
    catalog_hash: Option<CatalogHash>,
    search: SearchIndex,
    prompt_section: String,
    routing_hints: String,
    routing_index: Option<RoutingIndex>,
}

impl Catalog {
    /// Builds a catalog from deduplicated candidates (config, builtins, MCP, ACP, in
    /// assembly order). With `tool_search_enabled`, MCP tools are deferred and
    /// `tool_search` is appended, exactly as `assemble_deferred_tools`.
    pub fn build(
        candidates: Vec<ToolSpec>,
        tool_search_enabled: bool,
    ) -> Result<Catalog, CatalogError> {
        let deferred = deferred_indices(candidates.iter(), tool_search_enabled);
        let refs: Vec<&ToolSpec> = deferred.iter().map(|&i| &candidates[i as usize]).collect();
        let derived = derive(&candidates, &refs);
        drop(refs);
        Self::finish(candidates, deferred, derived, tool_search_enabled)
    }

    /// [`Catalog::build`] from assembly's candidates: the ingested MCP tools come with
    /// their features, name ranks and hash entries, and are copied into the catalog while
    /// another thread hashes them. `speculation`, the hash of every ingested tool started
    /// when assembly began, is used when exactly those tools are deferred.
    pub(crate) fn build_assembled(
        candidates: Vec<Candidate<'_>>,
        tool_search_enabled: bool,
        speculation: Option<Speculation<'_, '_>>,
    ) -> Result<Catalog, CatalogError> {
        let deferred =
            deferred_indices(candidates.iter().map(Candidate::spec), tool_search_enabled);
        let refs: Vec<&ToolSpec> = deferred
            .iter()
            .map(|&i| candidates[i as usize].spec())
            .collect();
        let prepared_at = |p: usize| candidates[deferred[p] as usize].prepared();
        // Deferred tools are distinct ingested tools, so when they are as many as the
        // listing has, they are all of it, and the speculative hash is theirs.
        let all_ingested = (0..deferred.len()).all(|p| prepared_at(p).is_some());
        let speculation = speculation.and_then(|s| {
            (all_ingested && deferred.len() == s.tools)
                .then_some(s.hash)
                .or_else(|| {
                    s.cancel.store(true, std::sync::atomic::Ordering::Relaxed);
                    None
                })
        });
        let (tools, derived) = derive_assembled(&candidates, &refs, prepared_at, speculation);
        drop(refs);
        drop(candidates);
        Self::finish(tools, deferred, derived, tool_search_enabled)
    }

    /// What every build does once the tools, name table, index and hash exist.
    fn finish(
        tools: Vec<ToolSpec>,
        deferred: Vec<u32>,
        derived: Derived,
        tool_search_enabled: bool,
    ) -> Result<Catalog, CatalogError> {
        let Derived {
            names,
            search,
            hash: catalog_hash,
        } = derived;
        let mut names = names?;
        check_fail_closed(tool_search_enabled, catalog_hash.is_none(), &tools)?;
        let deferred_tools = || deferred.iter().map(|&i| &tools[i as usize]);
        let prompt_section = prompt_section_sorted(
            search
                .by_name()
                .iter()
                .map(|&p| tools[deferred[p as usize] as usize].name.as_str()),
        );
        let routing_index = catalog_hash
            .as_ref()
            .and_then(|hash| RoutingIndex::from_deferred(deferred_tools(), hash));
        let mut deferred_of_tool = vec![NOT_DEFERRED; tools.len() + 1];
        for (position, &tool) in deferred.iter().enumerate() {
            deferred_of_tool[tool as usize] = index_u32(position);
        }
        let routing_hints = routing_hints_section(&tools, |name| {
            names
                .get(name, |j| tools[j as usize].name.as_str())
                .is_some_and(|i| deferred_of_tool[i as usize] != NOT_DEFERRED)
        });

        let mut tools = tools;
        if catalog_hash.is_some() {
            tools.reserve_exact(1);
            tools.push(tool_search_spec());
            let last = index_u32(tools.len() - 1);
            if names
                .insert(last, |j| tools[j as usize].name.as_str())
                .is_err()
            {
                return Err(CatalogError::DuplicateToolName(TOOL_SEARCH_NAME.to_owned()));
            }
        }
        deferred_of_tool.truncate(tools.len());
        Ok(Catalog {
            tools,
            names,
            deferred,
            deferred_of_tool,
            catalog_hash,
            search,
            prompt_section,
            routing_hints,
            routing_index,
        })
    }

    /// All tools, in catalog order (`tool_search` last when present).
    pub fn tools(&self) -> &[ToolSpec] {
        &self.tools
    }

    /// The tool named `name`.
    pub fn get(&self, name: &str) -> Option<&ToolSpec> {
        self.index_of(name).map(|i| &self.tools[i])
    }

    fn index_of(&self, name: &str) -> Option<usize> {
        self.names
            .get(name, |i| self.tools[i as usize].name.as_str())
            .map(|i| i as usize)
    }

    /// The catalog hash, when anything is deferred.
    pub fn hash(&self) -> Option<&CatalogHash> {
        self.catalog_hash.as_ref()
    }

    /// The deferred names and the hash, as `assemble_deferred_tools` reports them
    /// (built on each call; use [`Catalog::is_deferred`] for membership).
    pub fn setup(&self) -> DeferredSetup {
        DeferredSetup {
            deferred_names: self.deferred_tools().map(|t| t.name.clone()).collect(),
            catalog_hash: self.catalog_hash.clone(),
        }
    }

    /// Whether `name` is deferred (hidden until promoted).
    pub fn is_deferred(&self, name: &str) -> bool {
        self.deferred_position(name).is_some()
    }

    /// The deferred tools, in catalog order.
    pub fn deferred_tools(&self) -> impl Iterator<Item = &ToolSpec> + '_ {
        self.deferred.iter().map(|&i| &self.tools[i as usize])
    }

    /// The `<available-deferred-tools>` section, or `""`.
    pub fn prompt_section(&self) -> &str {
        &self.prompt_section
    }

    /// The `<mcp_routing_hints>` block, or `""`.
    pub fn routing_hints_section(&self) -> &str {
        &self.routing_hints
    }

    /// The auto-promotion index, when any deferred tool routes by keyword.
    pub fn routing_index(&self) -> Option<&RoutingIndex> {
        self.routing_index.as_ref()
    }

    /// `DeferredToolCatalog.search` (with the default mode's extension).
    pub fn search(&self, query: &str) -> Vec<&ToolSpec> {
        self.search_with(query, SearchMode::default())
    }

    /// `DeferredToolCatalog.search` in the given mode.
    pub fn search_with(&self, query: &str, mode: SearchMode) -> Vec<&ToolSpec> {
        self.search
            .search(query, mode)
            .into_iter()
            .map(|p| self.deferred_tool(p))
            .collect()
    }

    /// Heap bytes of everything the catalog derives from its tools (not the tools).
    pub fn derived_heap_bytes(&self) -> DerivedBytes {
        DerivedBytes {
            search: self.search.heap_bytes(),
            maps: self.names.heap_bytes()
                + (self.deferred.capacity() + self.deferred_of_tool.capacity()) * 4,
            prompt: self.prompt_section.capacity() + self.routing_hints.capacity(),
        }
    }

    pub(crate) fn deferred_position(&self, name: &str) -> Option<usize> {
        let tool = self.index_of(name)?;
        match self.deferred_of_tool[tool] {
            NOT_DEFERRED => None,
            position => Some(position as usize),
        }
    }

    pub(crate) fn deferred_tool(&self, position: usize) -> &ToolSpec {
        &self.tools[self.deferred[position] as usize]
    }

    pub(crate) fn render(&self, positions: &[usize]) -> String {
        self.search.render(positions, |p| self.deferred_tool(p))
    }
}

/// Heap use of what a [`Catalog`] derives, by part.
#[derive(Clone, Copy, Debug, Default)]
pub struct DerivedBytes {
    pub search: search::IndexBytes,
    /// Name table and position tables.
    pub maps: usize,
    /// Prompt section and routing hints.
    pub prompt: usize,
}

/// From this many deferred tools on, the build uses a second thread (the work takes
/// milliseconds; spawning a scoped thread takes microseconds).
const PARALLEL_FROM: usize = 512;

/// One candidate of an assembled catalog: a tool the build owns, or an ingested MCP tool
/// it borrows until the catalog copies it (with this build's routing).
pub(crate) enum Candidate<'s> {
    /// Boxed: owned candidates are few, ingested ones many, and they share the vector.
    Owned(Box<ToolSpec>),
    Ingested {
        spec: &'s ToolSpec,
        routing: Option<McpRouting>,
        prepared: Prepared<'s>,
    },
}

impl<'s> Candidate<'s> {
    pub(crate) fn owned(spec: ToolSpec) -> Self {
        Candidate::Owned(Box::new(spec))
    }

    /// The tool (for an ingested tool, as ingested: without this build's routing).
    pub(crate) fn spec(&self) -> &ToolSpec {
        match self {
            Candidate::Owned(spec) => spec,
            Candidate::Ingested { spec, .. } => spec,
        }
    }

    fn prepared(&self) -> Option<Prepared<'s>> {
        match self {
            Candidate::Owned(_) => None,
            Candidate::Ingested { prepared, .. } => Some(*prepared),
        }
    }

    /// The tool as the catalog holds it.
    fn to_spec(&self) -> ToolSpec {
        match self {
            Candidate::Owned(spec) => (**spec).clone(),
            Candidate::Ingested { spec, routing, .. } => ToolSpec {
                routing: routing.clone(),
                ..(*spec).clone()
            },
        }
    }
}

/// The hash of every tool of an MCP listing, computed on a scoped thread while assembly
/// decides which tools a run gets (see [`McpTools::hash_all`]).
pub(crate) struct Speculation<'scope, 'env> {
    pub(crate) hash: std::thread::ScopedJoinHandle<'scope, Option<CatalogHash>>,
    /// Set when the hash will not be used; the thread then stops early.
    pub(crate) cancel: &'env std::sync::atomic::AtomicBool,
    /// Tools in the listing.
    pub(crate) tools: usize,
}

/// Indices of the deferred tools: the MCP tools, when tool search is on.
fn deferred_indices<'a>(tools: impl Iterator<Item = &'a ToolSpec>, enabled: bool) -> Vec<u32> {
    if !enabled {
        return Vec::new();
    }
    tools
        .enumerate()
        .filter(|(_, tool)| tool.is_mcp())
        .map(|(i, _)| index_u32(i))
        .collect()
}

/// What a build derives from its candidates before the cheap parts.
struct Derived {
    /// The name table, or the first duplicate name.
    names: Result<NameTable, CatalogError>,
    search: SearchIndex,
    hash: Option<CatalogHash>,
}

/// The name table over `candidates`, or the first duplicate name.
fn name_table(candidates: &[ToolSpec]) -> Result<NameTable, CatalogError> {
    let mut names = NameTable::with_capacity(candidates.len() + 1);
    for (i, tool) in candidates.iter().enumerate() {
        if names
            .insert(index_u32(i), |j| candidates[j as usize].name.as_str())
            .is_err()
        {
            return Err(CatalogError::DuplicateToolName(tool.name.clone()));
        }
    }
    Ok(names)
}

/// The positions of `deferred` in name order: by the listing's ranks when every tool
/// has one (an integer sort), else by comparing names.
fn deferred_order<'p>(
    deferred: &[&ToolSpec],
    prepared_at: impl Fn(usize) -> Option<Prepared<'p>>,
) -> Vec<u32> {
    let ranks: Option<Vec<u64>> = (0..deferred.len())
        .map(|p| prepared_at(p).map(|prep| u64::from(prep.name_rank) << 32 | p as u64))
        .collect();
    match ranks {
        Some(mut keyed) => {
            keyed.sort_unstable();
            // The low half is the position (below 2^32 by construction).
            keyed.into_iter().map(|key| key as u32).collect()
        }
        None => search::name_order(deferred),
    }
}

/// Whether a build of `deferred` tools hashes on a second thread.
pub(crate) fn parallel(deferred: usize) -> bool {
    deferred >= PARALLEL_FROM && std::thread::available_parallelism().is_ok_and(|n| n.get() > 1)
}

/// Builds the name table, the search index and the catalog hash of owned candidates, on
/// two threads for large catalogs: the second builds the name table and the index while
/// this one streams the canonical schemas through sha256, which is the longest part.
/// The scoped thread is joined before returning; a panic in it is resumed here.
fn derive(candidates: &[ToolSpec], deferred: &[&ToolSpec]) -> Derived {
    if deferred.is_empty() {
        return Derived {
            names: name_table(candidates),
            search: SearchIndex::build(deferred),
            hash: None,
        };
    }
    let order = search::name_order(deferred);
    let tool_at = |p: &u32| deferred[*p as usize];
    if !parallel(deferred.len()) {
        let hash = CatalogHash::of_sorted(order.iter().map(tool_at));
        return Derived {
            names: name_table(candidates),
            search: SearchIndex::with_order(deferred, order, |_| None),
            hash: Some(hash),
        };
    }
    std::thread::scope(|scope| {
        let worker = scope.spawn(|| {
            // Schemas not yet in canonical form are written from the end of the name
            // order while this thread hashes from the start; each is written once, by
            // whichever thread reaches it first.
            for &p in order[order.len() / 2..].iter().rev() {
                deferred[p as usize].parameters.canonical();
            }
            let names = name_table(candidates);
            (
                names,
                SearchIndex::with_order(deferred, order.clone(), |_| None),
            )
        });
        let hash = CatalogHash::of_sorted(order.iter().map(tool_at));
        let (names, search) = joined(worker);
        Derived {
            names,
            search,
            hash: Some(hash),
        }
    })
}

/// [`derive`] for assembled candidates, which also copies them into the catalog's tools:
/// for large catalogs a second thread hashes the (ingested) entries, or has been hashing
/// them since assembly began (`speculation`), while this one copies the tools and builds
/// the name table and the index from the features ingestion computed.
fn derive_assembled<'p>(
    candidates: &[Candidate<'p>],
    deferred: &[&ToolSpec],
    prepared_at: impl Fn(usize) -> Option<Prepared<'p>> + Sync,
    speculation: Option<std::thread::ScopedJoinHandle<'_, Option<CatalogHash>>>,
) -> (Vec<ToolSpec>, Derived) {
    let copy_and_index = |order: Option<Vec<u32>>| {
        let tools: Vec<ToolSpec> = candidates.iter().map(Candidate::to_spec).collect();
        let names = name_table(&tools);
        let search = match order {
            Some(order) => SearchIndex::with_order(deferred, order, |p| {
                prepared_at(p).map(|prepared| prepared.features)
            }),
            None => SearchIndex::build(deferred),
        };
        (tools, names, search)
    };
    if deferred.is_empty() {
        let (tools, names, search) = copy_and_index(None);
        let hash = None;
        return (
            tools,
            Derived {
                names,
                search,
                hash,
            },
        );
    }
    let order = deferred_order(deferred, &prepared_at);
    // Every deferred tool was ingested when the order came from ranks; hash their entries
    // as written then.
    let hash_of = |order: &[u32]| {
        let entries: Option<Vec<&str>> = order
            .iter()
            .map(|&p| prepared_at(p as usize).map(|prepared| prepared.hash_entry))
            .collect();
        match entries {
            Some(entries) => {
                let mut blob = hash::BlobHasher::new();
                blob.written_entries(entries);
                blob.finish()
            }
            None => CatalogHash::of_sorted(order.iter().map(|&p| deferred[p as usize])),
        }
    };
    let (tools, names, search, hash) = if let Some(speculative) = speculation {
        let (tools, names, search) = copy_and_index(Some(order.clone()));
        // Not cancelled, so the thread ran to the end.
        let hash = joined(speculative).unwrap_or_else(|| hash_of(&order));
        (tools, names, search, hash)
    } else if parallel(deferred.len()) {
        std::thread::scope(|scope| {
            let order = &order;
            let hash_of = &hash_of;
            // The hash allocates nothing: it runs on the new thread, and the allocations
            // stay on this one.
            let hasher = scope.spawn(move || hash_of(order));
            let (tools, names, search) = copy_and_index(Some(order.clone()));
            (tools, names, search, joined(hasher))
        })
    } else {
        let hash = hash_of(&order);
        let (tools, names, search) = copy_and_index(Some(order));
        (tools, names, search, hash)
    };
    let hash = Some(hash);
    (
        tools,
        Derived {
            names,
            search,
            hash,
        },
    )
}

/// The thread's result; its panic, if it panicked, continues here.
fn joined<T>(handle: std::thread::ScopedJoinHandle<'_, T>) -> T {
    match handle.join() {
        Ok(value) => value,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Tool counts are bounded far below `u32::MAX` (a catalog that large could not be
/// shown to a model); saturating keeps the conversion total.
fn index_u32(index: usize) -> u32 {
    u32::try_from(index).unwrap_or(u32::MAX)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tools(n: usize) -> Vec<ToolSpec> {
        (0..n)
            .map(|i| {
                let name = format!("srv{}_tool_{i}", i % 7);
                let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
                ToolSpec::mcp(
                    name.clone(),
                    format!("Tool number {i}."),
                    schema,
                    None,
                    name,
                )
            })
            .collect()
    }

    #[test]
    fn parallel_and_sequential_builds_agree() {
        for n in [PARALLEL_FROM - 1, PARALLEL_FROM, 3 * PARALLEL_FROM] {
            let candidates = tools(n);
            let catalog =
                Catalog::build(candidates.clone(), true).unwrap_or_else(|e| panic!("{e}"));
            let expected = CatalogHash::of_tools(&candidates);
            assert_eq!(catalog.hash(), Some(&expected), "{n} tools");
            assert_eq!(catalog.setup(), build_deferred_setup(&candidates, true));
            assert_eq!(catalog.search("select:srv3_tool_3").len(), 1);
        }
    }

    #[test]
    fn a_catalog_can_be_shared_across_threads() {
        fn shareable<T: Send + Sync>() {}
        shareable::<Catalog>();
        let catalog = std::sync::Arc::new(Catalog::build(tools(600), true).unwrap());
        let handles: Vec<_> = (0..4)
            .map(|i| {
                let catalog = std::sync::Arc::clone(&catalog);
                std::thread::spawn(move || {
                    let query = format!("select:srv{i}_tool_{i}");
                    catalog.tool_search(&query, "c").unwrap().message.content
                })
            })
            .collect();
        for handle in handles {
            assert!(handle
                .join()
                .unwrap()
                .starts_with("[\n  {\n    \"name\": \"srv"));
        }
    }

    #[test]
    fn duplicate_names_are_refused() {
        let mut candidates = tools(3);
        candidates.push(candidates[1].clone());
        assert_eq!(
            Catalog::build(candidates, true).err(),
            Some(CatalogError::DuplicateToolName("srv1_tool_1".into()))
        );
        let mut clash = tools(2);
        clash.push(ToolSpec::builtin(TOOL_SEARCH_NAME, "mine", json!({})));
        assert_eq!(
            Catalog::build(clash, true).err(),
            Some(CatalogError::DuplicateToolName(TOOL_SEARCH_NAME.into()))
        );
    }
}
