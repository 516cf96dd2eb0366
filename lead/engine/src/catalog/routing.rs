//! MCP routing (spec 2.7) from the settings each tool carries (`McpRouting`, defined in
//! `tool` and re-exported here): the auto-promotion index (deferred `prefer` tools with
//! keywords, matched by casefolded substring against the latest real user message, best
//! `top_k` by priority then name) and the `<mcp_routing_hints>` prompt block. The index is
//! built once per catalog and holds keywords already casefolded.

use super::casefold::casefold;
use super::deferred::{html_escape, DeferredSetup};
use super::hash::CatalogHash;
use super::search::py_strip;
use super::tool::ToolSpec;
// The routing settings live beside `ToolSpec`, which holds them; named here as before.
pub use super::tool::{resolve_effective_routing, McpRouting, McpRoutingOverride, RoutingMode};

/// Opening and closing tags of the hints block.
pub(crate) const ROUTING_HINTS_OPEN_TAG: &str = "<mcp_routing_hints>";
pub(crate) const ROUTING_HINTS_CLOSE_TAG: &str = "</mcp_routing_hints>";
/// First line of a hint; `{keywords}` is the escaped keyword list ("a, b, or c").
pub(crate) const ROUTING_HINT_WHEN: &str = "When the user's request involves {keywords}:";
/// Second line of a hint for a deferred tool.
pub(crate) const ROUTING_HINT_DEFERRED: &str =
    "  use `tool_search` to fetch `{name}`, then prefer that MCP tool.";
/// Second line of a hint for a tool bound directly.
pub(crate) const ROUTING_HINT_DIRECT: &str = "  prefer the `{name}` tool.";

/// `tool_search.auto_promote_top_k` when unset, and its bounds.
pub(crate) const DEFAULT_AUTO_PROMOTE_TOP_K: usize = 3;
pub(crate) const MIN_AUTO_PROMOTE_TOP_K: usize = 1;
pub(crate) const MAX_AUTO_PROMOTE_TOP_K: usize = 5;

/// The `name` DeerFlow gives summary messages, which are not real user turns.
pub(crate) const SUMMARY_MESSAGE_NAME: &str = "summary";

/// `tool_search.auto_promote_top_k`: 3 when unset, clamped to 1..=5.
pub fn clamp_top_k(top_k: Option<i64>) -> usize {
    match top_k {
        None => DEFAULT_AUTO_PROMOTE_TOP_K,
        Some(k) => usize::try_from(k.max(0))
            .unwrap_or(MAX_AUTO_PROMOTE_TOP_K)
            .clamp(MIN_AUTO_PROMOTE_TOP_K, MAX_AUTO_PROMOTE_TOP_K),
    }
}

/// One human message as auto-promotion looks at it.
#[derive(Clone, Copy, Debug, Default)]
pub struct UserTurn<'a> {
    pub text: &'a str,
    /// The message's `name` (`"summary"` marks a summary, not a user turn).
    pub name: Option<&'a str>,
    /// `additional_kwargs.hide_from_ui`.
    pub hide_from_ui: bool,
    /// The user's text before sanitisation, when it was stored.
    pub original_text: Option<&'a str>,
}

/// The text of the latest real user turn: the last one not named `summary` and not
/// hidden, preferring its original text.
pub fn latest_real_user_text<'a>(
    turns: impl DoubleEndedIterator<Item = UserTurn<'a>>,
) -> Option<&'a str> {
    turns
        .rev()
        .find(|turn| turn.name != Some(SUMMARY_MESSAGE_NAME) && !turn.hide_from_ui)
        .map(|turn| turn.original_text.unwrap_or(turn.text))
}

struct RoutingEntry {
    name: String,
    priority: i64,
    /// Stripped, non-empty, casefolded.
    keywords: Vec<String>,
}

/// The auto-promotion index of one catalog.
pub struct RoutingIndex {
    catalog_hash: CatalogHash,
    /// Sorted by (-priority, name), so matching stops after `top_k` hits.
    entries: Vec<RoutingEntry>,
}

impl RoutingIndex {
    /// `build_mcp_routing_middleware`: `None` without a deferred set, or when no deferred
    /// tool is `prefer` with a non-blank keyword.
    pub fn build<'a>(
        tools: impl IntoIterator<Item = &'a ToolSpec>,
        setup: &DeferredSetup,
    ) -> Option<RoutingIndex> {
        let catalog_hash = setup.catalog_hash.as_ref()?;
        let deferred = tools
            .into_iter()
            .filter(|tool| setup.deferred_names.contains(&tool.name));
        Self::from_deferred(deferred, catalog_hash)
    }

    /// The same over tools already known to be deferred under `catalog_hash`.
    pub(crate) fn from_deferred<'a>(
        deferred: impl IntoIterator<Item = &'a ToolSpec>,
        catalog_hash: &CatalogHash,
    ) -> Option<RoutingIndex> {
        let mut entries: Vec<RoutingEntry> = deferred
            .into_iter()
            .filter_map(|tool| {
                let routing = tool.routing.as_ref()?;
                if routing.mode != RoutingMode::Prefer {
                    return None;
                }
                let keywords: Vec<String> = routing
                    .keywords
                    .iter()
                    .map(|k| py_strip(k))
                    .filter(|k| !k.is_empty())
                    .map(casefold)
                    .collect();
                (!keywords.is_empty()).then(|| RoutingEntry {
                    name: tool.name.clone(),
                    priority: routing.priority,
                    keywords,
                })
            })
            .collect();
        if entries.is_empty() {
            return None;
        }
        entries.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.name.cmp(&b.name)));
        Some(RoutingIndex {
            catalog_hash: catalog_hash.clone(),
            entries,
        })
    }

    pub fn catalog_hash(&self) -> &CatalogHash {
        &self.catalog_hash
    }

    /// The tools whose keyword occurs in `user_text` (casefolded), best `top_k` first.
    pub fn matches(&self, user_text: &str, top_k: usize) -> Vec<String> {
        let haystack = casefold(user_text);
        self.entries
            .iter()
            .filter(|entry| entry.keywords.iter().any(|k| haystack.contains(k.as_str())))
            .take(top_k)
            .map(|entry| entry.name.clone())
            .collect()
    }
}

/// `get_mcp_routing_hints_prompt_section`: one hint per `prefer` tool with keywords,
/// sorted by (-priority, name); names and keywords HTML-escaped; `""` when none.
pub fn routing_hints_section<'a>(
    tools: impl IntoIterator<Item = &'a ToolSpec>,
    is_deferred: impl Fn(&str) -> bool,
) -> String {
    let mut hints: Vec<(&McpRouting, &str)> = tools
        .into_iter()
        .filter_map(|tool| {
            let routing = tool.routing.as_ref()?;
            (routing.mode == RoutingMode::Prefer && !routing.keywords.is_empty())
                .then_some((routing, tool.name.as_str()))
        })
        .collect();
    if hints.is_empty() {
        return String::new();
    }
    hints.sort_by(|a, b| b.0.priority.cmp(&a.0.priority).then(a.1.cmp(b.1)));
    let mut block = String::from(ROUTING_HINTS_OPEN_TAG);
    for (routing, name) in hints {
        let mut keywords = String::new();
        let count = routing.keywords.len();
        for (i, keyword) in routing.keywords.iter().enumerate() {
            if i + 1 == count && count > 1 {
                keywords.push_str(", or ");
            } else if i > 0 {
                keywords.push_str(", ");
            }
            html_escape(&mut keywords, keyword);
        }
        let mut escaped_name = String::new();
        html_escape(&mut escaped_name, name);
        block.push('\n');
        block.push_str(&ROUTING_HINT_WHEN.replacen("{keywords}", &keywords, 1));
        block.push('\n');
        let line = if is_deferred(name) {
            ROUTING_HINT_DEFERRED
        } else {
            ROUTING_HINT_DIRECT
        };
        block.push_str(&line.replacen("{name}", &escaped_name, 1));
    }
    block.push('\n');
    block.push_str(ROUTING_HINTS_CLOSE_TAG);
    block
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn top_k_defaults_to_3_and_clamps() {
        assert_eq!(clamp_top_k(None), 3);
        assert_eq!(clamp_top_k(Some(0)), 1);
        assert_eq!(clamp_top_k(Some(-7)), 1);
        assert_eq!(clamp_top_k(Some(9)), 5);
        assert_eq!(clamp_top_k(Some(4)), 4);
    }
}
