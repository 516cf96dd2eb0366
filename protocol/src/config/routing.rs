//! MCP routing config (spec §2.7): a server's `routing` and the per-tool overrides under
//! `tools.<original_name>.routing`. Fields stay `Option` as written, because a per-tool
//! override merges only the fields it sets (`resolve_effective_mcp_routing`). Unknown keys
//! are errors here, as DeerFlow's `extra="forbid"` makes them.

use serde::Deserialize;

/// Whether a tool takes part in routing auto-promotion.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RoutingMode {
    /// Not routed (the default).
    #[default]
    Off,
    /// Promoted when a keyword matches the user's message.
    Prefer,
}

/// `routing: {mode, priority, keywords}` as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[serde(expecting = "a routing mapping with mode, priority, keywords")]
pub struct McpRoutingConfig {
    /// `off` or `prefer`.
    pub mode: Option<RoutingMode>,
    /// Higher is promoted first; clamped to 0..=100.
    pub priority: Option<i64>,
    /// Case-insensitive substrings of the user's message.
    pub keywords: Option<Vec<String>>,
}

impl McpRoutingConfig {
    /// This config with `over`'s explicitly set fields laid on top.
    pub fn merged_with(&self, over: &McpRoutingConfig) -> McpRoutingConfig {
        McpRoutingConfig {
            mode: over.mode.or(self.mode),
            priority: over.priority.or(self.priority),
            keywords: over.keywords.clone().or_else(|| self.keywords.clone()),
        }
    }

    /// The values used at run time: unset fields take their defaults, priority is clamped.
    pub fn effective(&self) -> EffectiveRouting {
        EffectiveRouting {
            mode: self.mode.unwrap_or_default(),
            priority: clamp_priority(self.priority.unwrap_or(0)),
            keywords: self.keywords.clone().unwrap_or_default(),
        }
    }
}

/// Routing as the routing middleware uses it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EffectiveRouting {
    /// `off` or `prefer`.
    pub mode: RoutingMode,
    /// 0..=100.
    pub priority: u8,
    /// The keywords as written; the index keeps only stripped, non-blank ones.
    pub keywords: Vec<String>,
}

/// `priority` clamped to 0..=100.
pub fn clamp_priority(priority: i64) -> u8 {
    // Clamped to 0..=100 first, so the cast cannot truncate.
    priority.clamp(0, 100) as u8
}

/// One `tools.<original_name>:` entry of a server.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, expecting = "a mapping with routing")]
pub struct McpToolConfig {
    /// Routing fields that override the server's.
    pub routing: McpRoutingConfig,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn per_tool_routing_merges_only_the_fields_it_sets() {
        let server: McpRoutingConfig =
            serde_json::from_str(r#"{"mode": "prefer", "priority": 50, "keywords": ["database"]}"#)
                .unwrap();
        let tool: McpRoutingConfig = serde_json::from_str(r#"{"priority": 100}"#).unwrap();
        let effective = server.merged_with(&tool).effective();
        assert_eq!(effective.mode, RoutingMode::Prefer);
        assert_eq!(effective.priority, 100);
        assert_eq!(effective.keywords, vec!["database"]);
    }

    #[test]
    fn default_is_off_and_priority_clamps() {
        assert_eq!(
            McpRoutingConfig::default().effective().mode,
            RoutingMode::Off
        );
        assert_eq!(clamp_priority(-3), 0);
        assert_eq!(clamp_priority(250), 100);
    }

    #[test]
    fn unknown_routing_keys_are_rejected_with_the_accepted_ones() {
        let err = serde_json::from_str::<McpRoutingConfig>(r#"{"mod": "prefer"}"#)
            .err()
            .unwrap();
        assert!(err
            .to_string()
            .contains("unknown field `mod`, expected one of `mode`, `priority`, `keywords`"));
        let err = serde_json::from_str::<McpRoutingConfig>(r#"{"mode": "always"}"#)
            .err()
            .unwrap();
        assert!(err
            .to_string()
            .contains("unknown variant `always`, expected `off` or `prefer`"));
    }
}
