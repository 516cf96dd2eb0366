//! `McpRoutingMiddleware` then `DeferredToolFilterMiddleware` (spec 2.5, 2.7), over the
//! catalog's own index and filter. Routing runs first by construction: `before_model`
//! returns its promotion, the run merges it, and only then is the filter built from the
//! merged state ([`RoutingBeforeFilter`] keeps that order in one value).

use crate::catalog::{latest_real_user_text, Catalog, Promoted, ToolSpec, UserTurn};
use crate::thread::state::Message;

/// The error DeerFlow raises when routing sits after the deferred filter (kept as the
/// spec's text: [`RoutingBeforeFilter`] fixes the order, so Antler never raises it).
#[allow(dead_code)]
pub const ROUTING_AFTER_FILTER: &str = "McpRoutingMiddleware must be installed before DeferredToolFilterMiddleware (routing index {i}, deferred filter index {j})";

/// MCP routing and the deferred filter, in that order, for one catalog.
#[derive(Clone, Copy)]
pub struct RoutingBeforeFilter<'c> {
    catalog: &'c Catalog,
    top_k: usize,
}

impl<'c> RoutingBeforeFilter<'c> {
    /// `top_k` is `tool_search.auto_promote_top_k`, already clamped (`clamp_top_k`).
    pub fn new(catalog: &'c Catalog, top_k: usize) -> RoutingBeforeFilter<'c> {
        RoutingBeforeFilter { catalog, top_k }
    }

    /// With DeerFlow's default `top_k` (3).
    #[cfg(test)]
    pub fn with_default_top_k(catalog: &'c Catalog) -> RoutingBeforeFilter<'c> {
        RoutingBeforeFilter::new(catalog, crate::catalog::routing::DEFAULT_AUTO_PROMOTE_TOP_K)
    }

    /// Routing's `before_model`: the promotion for the latest real user message, or
    /// `None` when the catalog routes nothing or no keyword matches.
    pub fn auto_promote(&self, messages: &[Message]) -> Option<Promoted> {
        let index = self.catalog.routing_index()?;
        let turns = messages.iter().filter_map(|m| match m {
            Message::Human {
                content,
                name,
                hide_from_ui,
                additional_kwargs,
            } => Some(UserTurn {
                text: content,
                name: name.as_deref(),
                hide_from_ui: *hide_from_ui,
                // The user's own text when the uploads block was prepended.
                original_text: additional_kwargs
                    .as_deref()
                    .and_then(|k| k.get(crate::middleware::uploads::ORIGINAL_USER_CONTENT))
                    .and_then(serde_json::Value::as_str),
            }),
            _ => None,
        });
        let turns: Vec<UserTurn<'_>> = turns.collect();
        let text = latest_real_user_text(turns.into_iter())?;
        index.auto_promote(text, self.top_k)
    }

    /// The filter's `wrap_model_call`: the tools the model may see under `promoted`.
    pub fn visible_tools(&self, promoted: Option<&Promoted>) -> Vec<&'c ToolSpec> {
        self.catalog
            .deferred_filter(promoted)
            .visible_tools()
            .collect()
    }

    /// The filter's `wrap_tool_call`: a call to a deferred tool not promoted under the
    /// current hash gets DeerFlow's error message.
    pub fn check_call(
        &self,
        promoted: Option<&Promoted>,
        name: &str,
        tool_call_id: &str,
    ) -> Result<(), Message> {
        self.catalog
            .deferred_filter(promoted)
            .check_call(name, Some(tool_call_id))
            .map_err(|hidden| {
                super::error_message(&hidden.tool_call_id, &hidden.name, hidden.content)
            })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::catalog::{McpRouting, RoutingMode};
    use crate::thread::state::ToolStatus;
    use serde_json::json;

    fn mcp(name: &str, keywords: &[&str], priority: i64) -> ToolSpec {
        let mut tool = ToolSpec::mcp(
            name,
            format!("The {name} tool."),
            json!({"type": "object", "properties": {}}),
            Some("srv".into()),
            name,
        );
        if !keywords.is_empty() {
            tool.routing = Some(McpRouting {
                mode: RoutingMode::Prefer,
                priority,
                keywords: keywords.iter().map(|k| (*k).to_owned()).collect(),
            });
        }
        tool
    }

    fn catalog() -> Catalog {
        Catalog::build(
            vec![
                mcp("mcp_a", &["orders"], 50),
                mcp("mcp_b", &["订单"], 100),
                ToolSpec::builtin("active_c", "Always there.", json!({"type": "object"})),
            ],
            true,
        )
        .unwrap()
    }

    fn names(tools: &[&ToolSpec]) -> Vec<String> {
        tools.iter().map(|t| t.name.clone()).collect()
    }

    #[test]
    fn unpromoted_deferred_tools_are_hidden_and_their_calls_refused() {
        let catalog = catalog();
        let chain = RoutingBeforeFilter::with_default_top_k(&catalog);
        let hash = catalog.hash().unwrap().as_str().to_owned();
        assert_eq!(
            names(&chain.visible_tools(None)),
            ["active_c", "tool_search"]
        );
        let promoted = Promoted {
            catalog_hash: hash,
            names: vec!["mcp_a".into()],
        };
        assert_eq!(
            names(&chain.visible_tools(Some(&promoted))),
            ["mcp_a", "active_c", "tool_search"]
        );
        let stale = Promoted {
            catalog_hash: "other".into(),
            names: vec!["mcp_a".into()],
        };
        assert_eq!(
            names(&chain.visible_tools(Some(&stale))),
            ["active_c", "tool_search"]
        );
        assert_eq!(
            chain.check_call(Some(&promoted), "mcp_b", "c1"),
            Err(Message::tool(
                "c1",
                "mcp_b",
                "Error: Tool 'mcp_b' is deferred and has not been promoted yet. Call tool_search first to expose and promote this tool's schema, then retry.",
                ToolStatus::Error
            ))
        );
        assert_eq!(chain.check_call(Some(&promoted), "mcp_a", "c2"), Ok(()));
        assert_eq!(chain.check_call(None, "active_c", "c3"), Ok(()));
    }

    #[test]
    fn routing_promotes_from_the_latest_real_user_message() {
        let catalog = catalog();
        let chain = RoutingBeforeFilter::new(&catalog, 1);
        let promoted = chain
            .auto_promote(&[Message::human("查订单 and orders")])
            .unwrap();
        assert_eq!(promoted.names, ["mcp_b"]);
        assert_eq!(
            Some(promoted.catalog_hash.as_str()),
            catalog.hash().map(|h| h.as_str())
        );
        let hidden = Message::Human {
            content: "orders".into(),
            name: None,
            hide_from_ui: true,
            additional_kwargs: None,
        };
        assert_eq!(
            chain.auto_promote(&[Message::human("no match now"), hidden]),
            None
        );
        assert_eq!(
            chain.auto_promote(&[Message::human("orders"), Message::human("no match now")]),
            None
        );
    }
}
