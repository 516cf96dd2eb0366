//! Promotions (spec 2.4, 2.5): the `promoted` state and its `merge_promoted` reducer, the
//! deferred filter that hides unpromoted deferred tools from the model and refuses calls
//! to them, and the two producers of state updates: `tool_search` execution (the update
//! and its message) and MCP routing's auto-promotion (`RoutingIndex::auto_promote`).
//! Promotions count only under the catalog hash they were made for; the filter resolves
//! a state once into a bitset, so each later check is O(1).

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use super::deferred::TOOL_SEARCH_NAME;
use super::routing::RoutingIndex;
use super::search::SearchMode;
use super::tool::ToolSpec;
use super::{Catalog, NOT_DEFERRED};

/// The `tool_call_id` of a refused call that carried none.
pub const MISSING_TOOL_CALL_ID: &str = "missing_tool_call_id";

/// The error a call to a deferred, unpromoted tool gets; `{name}` is the tool name.
pub const DEFERRED_TOOL_ERROR: &str = "Error: Tool '{name}' is deferred and has not been promoted yet. Call tool_search first to expose and promote this tool's schema, then retry.";

/// The `tool_search` result when nothing matches; `{query}` is the query as sent.
pub const NO_TOOLS_FOUND: &str = "No tools found matching: {query}";

/// The thread-state value `promoted: {catalog_hash, names}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Promoted {
    pub catalog_hash: String,
    pub names: Vec<String>,
}

/// The `merge_promoted` reducer: no update keeps `existing`; an update under another
/// hash (or onto nothing) replaces it wholesale, dropping stale names even when the
/// update has none; under the same hash the names are unioned, first occurrence first.
pub fn merge_promoted(existing: Option<Promoted>, new: Option<Promoted>) -> Option<Promoted> {
    let Some(new) = new else {
        return existing;
    };
    let names = match existing {
        Some(existing) if existing.catalog_hash == new.catalog_hash => {
            dedupe(existing.names.into_iter().chain(new.names))
        }
        _ => dedupe(new.names),
    };
    Some(Promoted {
        catalog_hash: new.catalog_hash,
        names,
    })
}

fn dedupe(names: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut seen = HashSet::new();
    names
        .into_iter()
        .filter(|name| seen.insert(name.clone()))
        .collect()
}

// Here rather than in `routing`, so that `routing` does not depend on promotions.
impl RoutingIndex {
    /// The state update auto-promotion emits, or `None` when nothing matches.
    pub fn auto_promote(&self, user_text: &str, top_k: usize) -> Option<Promoted> {
        let names = self.matches(user_text, top_k);
        (!names.is_empty()).then(|| Promoted {
            catalog_hash: self.catalog_hash().as_str().to_owned(),
            names,
        })
    }
}

/// A refused call to a hidden tool: the error tool message to hand back, `status="error"`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{content}")]
pub struct HiddenToolCall {
    pub tool_call_id: String,
    pub name: String,
    pub content: String,
}

/// The deferred filter for one state: which deferred tools are promoted under this
/// catalog's hash. Built once per state; every check after that is O(1).
pub struct DeferredFilter<'c> {
    catalog: &'c Catalog,
    /// Bit per deferred position: promoted under the current hash.
    promoted: Vec<u64>,
}

impl<'c> DeferredFilter<'c> {
    pub(crate) fn new(catalog: &'c Catalog, state: Option<&Promoted>) -> Self {
        let mut promoted = vec![0u64; catalog.deferred.len().div_ceil(64)];
        let current = catalog.catalog_hash.as_ref().map(|h| h.as_str());
        if let Some(state) = state.filter(|s| Some(s.catalog_hash.as_str()) == current) {
            for name in &state.names {
                if let Some(position) = catalog.deferred_position(name) {
                    promoted[position / 64] |= 1 << (position % 64);
                }
            }
        }
        DeferredFilter { catalog, promoted }
    }

    /// Deferred and not promoted under the current hash.
    pub fn is_hidden(&self, name: &str) -> bool {
        self.catalog
            .deferred_position(name)
            .is_some_and(|p| self.promoted[p / 64] >> (p % 64) & 1 == 0)
    }

    /// The catalog's tools the model may see, in catalog order.
    pub fn visible_tools(&self) -> impl Iterator<Item = &'c ToolSpec> + '_ {
        self.catalog
            .tools
            .iter()
            .enumerate()
            .filter(|(i, _)| match self.catalog.deferred_of_tool[*i] {
                NOT_DEFERRED => true,
                p => self.promoted[p as usize / 64] >> (p as usize % 64) & 1 == 1,
            })
            .map(|(_, tool)| tool)
    }

    /// `wrap_model_call`: `tools` without the hidden ones (any tool type, by name).
    pub fn retain_visible<'t, T>(&self, tools: &'t [T], name: impl Fn(&T) -> &str) -> Vec<&'t T> {
        tools
            .iter()
            .filter(|tool| !self.is_hidden(name(tool)))
            .collect()
    }

    /// `wrap_tool_call`: a call to a hidden tool is refused with DeerFlow's message; a
    /// missing or empty id becomes [`MISSING_TOOL_CALL_ID`].
    pub fn check_call(&self, name: &str, tool_call_id: Option<&str>) -> Result<(), HiddenToolCall> {
        if !self.is_hidden(name) {
            return Ok(());
        }
        Err(HiddenToolCall {
            tool_call_id: tool_call_id
                .filter(|id| !id.is_empty())
                .unwrap_or(MISSING_TOOL_CALL_ID)
                .to_owned(),
            name: name.to_owned(),
            content: DEFERRED_TOOL_ERROR.replacen("{name}", name, 1),
        })
    }
}

/// The `ToolMessage` a `tool_search` call answers with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolSearchMessage {
    pub content: String,
    pub tool_call_id: String,
    /// Always [`TOOL_SEARCH_NAME`].
    pub name: &'static str,
}

/// What a `tool_search` call returns: the `promoted` update (for the reducer) and the
/// message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolSearchOutcome {
    pub promoted: Promoted,
    pub message: ToolSearchMessage,
}

/// `tool_search` was called on a catalog that defers nothing (so it offers no such tool).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("tool_search is not available: this catalog defers no tools")]
pub struct ToolSearchUnavailable;

impl Catalog {
    /// Resolves `promoted` state against this catalog, once per state.
    pub fn deferred_filter(&self, promoted: Option<&Promoted>) -> DeferredFilter<'_> {
        DeferredFilter::new(self, promoted)
    }

    /// Executes `tool_search(query)` with the default search mode.
    pub fn tool_search(
        &self,
        query: &str,
        tool_call_id: &str,
    ) -> Result<ToolSearchOutcome, ToolSearchUnavailable> {
        self.tool_search_with(query, tool_call_id, SearchMode::default())
    }

    /// Executes `tool_search(query)`: the matched names are promoted under this
    /// catalog's hash (an empty list when nothing matches) and the message carries
    /// their rendered schemas or `No tools found matching: {query}`.
    pub fn tool_search_with(
        &self,
        query: &str,
        tool_call_id: &str,
        mode: SearchMode,
    ) -> Result<ToolSearchOutcome, ToolSearchUnavailable> {
        let hash = self.catalog_hash.as_ref().ok_or(ToolSearchUnavailable)?;
        let positions = self.search.search(query, mode);
        let content = if positions.is_empty() {
            NO_TOOLS_FOUND.replacen("{query}", query, 1)
        } else {
            self.render(&positions)
        };
        let names = positions
            .iter()
            .map(|&p| self.deferred_tool(p).name.clone())
            .collect();
        Ok(ToolSearchOutcome {
            promoted: Promoted {
                catalog_hash: hash.as_str().to_owned(),
                names,
            },
            message: ToolSearchMessage {
                content,
                tool_call_id: tool_call_id.to_owned(),
                name: TOOL_SEARCH_NAME,
            },
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn promoted(hash: &str, names: &[&str]) -> Option<Promoted> {
        Some(Promoted {
            catalog_hash: hash.to_owned(),
            names: names.iter().map(|n| (*n).to_owned()).collect(),
        })
    }

    #[test]
    fn same_hash_unions_in_order_without_duplicates() {
        assert_eq!(
            merge_promoted(
                promoted("h1", &["a", "b"]),
                promoted("h1", &["c", "a", "c"])
            ),
            promoted("h1", &["a", "b", "c"])
        );
        assert_eq!(
            merge_promoted(None, promoted("h1", &["a", "a"])),
            promoted("h1", &["a"])
        );
    }
}
