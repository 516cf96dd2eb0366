//! MCP routing (spec 2.7): per-server `routing` settings with per-tool overrides, the
//! auto-promotion index (deferred `prefer` tools with keywords, matched by casefolded
//! substring against the latest real user message, best `top_k` by priority then name),
//! and the `<mcp_routing_hints>` prompt block. The index is built once per catalog and
//! holds keywords already casefolded.

use serde::{Deserialize, Serialize};

use super::casefold::casefold;
use super::deferred::{html_escape, DeferredSetup};
use super::hash::CatalogHash;
use super::promotion::Promoted;
use super::search::py_strip;
use super::tool::ToolSpec;

/// Opening and closing tags of the hints block.
pub const ROUTING_HINTS_OPEN_TAG: &str = "<mcp_routing_hints>";
pub const ROUTING_HINTS_CLOSE_TAG: &str = "</mcp_routing_hints>";
/// First line of a hint; `{keywords}` is the escaped keyword list ("a, b, or c").
pub const ROUTING_HINT_WHEN: &str = "When the user's request involves {keywords}:";
/// Second line of a hint for a deferred tool.
pub const ROUTING_HINT_DEFERRED: &str =
    "  use `tool_search` to fetch `{name}`, then prefer that MCP tool.";
/// Second line of a hint for a tool bound directly.
pub const ROUTING_HINT_DIRECT: &str = "  prefer the `{name}` tool.";

/// `tool_search.auto_promote_top_k` when unset, and its bounds.
pub const DEFAULT_AUTO_PROMOTE_TOP_K: usize = 3;
pub const MIN_AUTO_PROMOTE_TOP_K: usize = 1;
pub const MAX_AUTO_PROMOTE_TOP_K: usize = 5;

/// The `name` DeerFlow gives summary messages, which are not real user turns.
pub const SUMMARY_MESSAGE_NAME: &str = "summary";

/// Whether routing hints and auto-promotion apply to a tool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RoutingMode {
    #[default]
    Off,
    Prefer,
}

/// A server's `routing` section, or a tool's effective routing. `priority` is clamped to
/// 0..=100 when read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "RawRouting")]
pub struct McpRouting {
    pub mode: RoutingMode,
    pub priority: i64,
    pub keywords: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRouting {
    #[serde(default)]
    mode: RoutingMode,
    #[serde(default)]
    priority: i64,
    #[serde(default)]
    keywords: Vec<String>,
}

impl From<RawRouting> for McpRouting {
    fn from(raw: RawRouting) -> Self {
        McpRouting {
            mode: raw.mode,
            priority: clamp_priority(raw.priority),
            keywords: raw.keywords,
        }
    }
}

/// A tool's `routing` override: only the fields it sets replace the server's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "RawOverride")]
pub struct McpRoutingOverride {
    pub mode: Option<RoutingMode>,
    pub priority: Option<i64>,
    pub keywords: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOverride {
    mode: Option<RoutingMode>,
    priority: Option<i64>,
    keywords: Option<Vec<String>>,
}

impl From<RawOverride> for McpRoutingOverride {
    fn from(raw: RawOverride) -> Self {
        McpRoutingOverride {
            mode: raw.mode,
            priority: raw.priority.map(clamp_priority),
            keywords: raw.keywords,
        }
    }
}

/// Clamps a routing priority to 0..=100, with DeerFlow's warnings.
pub fn clamp_priority(priority: i64) -> i64 {
    if priority < 0 {
        tracing::warn!("MCP routing priority {priority} is below 0; clamping to 0.");
        0
    } else if priority > 100 {
        tracing::warn!("MCP routing priority {priority} is above 100; clamping to 100.");
        100
    } else {
        priority
    }
}

/// `resolve_effective_mcp_routing`: the server's routing (defaults without a server) with
/// the fields the tool's override sets.
pub fn resolve_effective_routing(
    server: Option<&McpRouting>,
    tool_override: Option<&McpRoutingOverride>,
) -> McpRouting {
    let mut effective = server.cloned().unwrap_or_default();
    if let Some(over) = tool_override {
        if let Some(mode) = over.mode {
            effective.mode = mode;
        }
        if let Some(priority) = over.priority {
            effective.priority = priority;
        }
        if let Some(keywords) = &over.keywords {
            effective.keywords = keywords.clone();
        }
    }
    effective
}

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

    /// The state update auto-promotion emits, or `None` when nothing matches.
    pub fn auto_promote(&self, user_text: &str, top_k: usize) -> Option<Promoted> {
        let names = self.matches(user_text, top_k);
        (!names.is_empty()).then(|| Promoted {
            catalog_hash: self.catalog_hash.as_str().to_owned(),
            names,
        })
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
    use serde_json::json;

    #[test]
    fn routing_reads_with_defaults_clamps_and_forbids_extra_fields() {
        let routing: McpRouting =
            serde_json::from_value(json!({"mode": "prefer", "priority": 250})).unwrap();
        assert_eq!(routing.priority, 100);
        assert_eq!(routing.mode, RoutingMode::Prefer);
        let low: McpRouting = serde_json::from_value(json!({"priority": -3})).unwrap();
        assert_eq!((low.mode, low.priority), (RoutingMode::Off, 0));
        assert!(serde_json::from_value::<McpRouting>(json!({"mode": "prefer", "x": 1})).is_err());
        assert!(serde_json::from_value::<McpRouting>(json!({"mode": "always"})).is_err());
    }

    #[test]
    fn override_replaces_only_the_fields_it_sets() {
        let server: McpRouting =
            serde_json::from_value(json!({"mode": "prefer", "priority": 10, "keywords": ["sql"]}))
                .unwrap();
        let over: McpRoutingOverride = serde_json::from_value(json!({"priority": 900})).unwrap();
        let effective = resolve_effective_routing(Some(&server), Some(&over));
        assert_eq!(effective.mode, RoutingMode::Prefer);
        assert_eq!(effective.priority, 100);
        assert_eq!(effective.keywords, ["sql"]);
        assert_eq!(resolve_effective_routing(None, None), McpRouting::default());
    }

    #[test]
    fn top_k_defaults_to_3_and_clamps() {
        assert_eq!(clamp_top_k(None), 3);
        assert_eq!(clamp_top_k(Some(0)), 1);
        assert_eq!(clamp_top_k(Some(-7)), 1);
        assert_eq!(clamp_top_k(Some(9)), 5);
        assert_eq!(clamp_top_k(Some(4)), 4);
    }
}
