//! Deferral (spec 2.1, 2.4, 2.6): which tools are deferred (MCP-tagged ones, when
//! `tool_search` is enabled), fail-closed assembly, the `tool_search` tool's own spec, and
//! the `<available-deferred-tools>` prompt section.
//! Invariant: the deferred set is empty exactly when there is no catalog hash and no
//! `tool_search` tool.

use std::collections::HashSet;

use serde_json::json;

use super::hash::CatalogHash;
use super::tool::ToolSpec;

/// The name of the search tool.
pub const TOOL_SEARCH_NAME: &str = "tool_search";

/// DeerFlow's `tool_search` description: its docstring after langchain's
/// `textwrap.dedent(...).strip()`, which keeps the 8-space indentation because the first
/// line is not indented (CPython 3.12; 3.13+ would dedent docstrings at compile time).
pub const TOOL_SEARCH_DESCRIPTION: &str =
    "Fetches full schema definitions for deferred tools so they can be called.\n\
\n\
\x20       Deferred tools appear by name in <available-deferred-tools> in the system\n\
\x20       prompt. Until fetched, only the name is known. This tool matches a query\n\
\x20       against the deferred tools and returns the matched tools complete schemas;\n\
\x20       once returned, a tool becomes callable.\n\
\n\
\x20       Query forms:\n\
\x20         - \"select:Read,Edit\" -- fetch these exact tools by name\n\
\x20         - \"notebook jupyter\" -- keyword search, up to max_results best matches\n\
\x20         - \"+slack send\" -- require \"slack\" in the name, rank by remaining terms";

/// The `RuntimeError` DeerFlow raises rather than bind MCP schemas it should have hidden.
pub const FAIL_CLOSED_ERROR: &str = "tool_search enabled and MCP candidates exist, but no deferred set was recovered - refusing to bind MCP schemas (fail-closed).";

/// Opening and closing tags of the prompt section.
pub(crate) const DEFERRED_TOOLS_OPEN_TAG: &str = "<available-deferred-tools>";
pub(crate) const DEFERRED_TOOLS_CLOSE_TAG: &str = "</available-deferred-tools>";

/// What deferral produced for one catalog build (DeerFlow's `DeferredToolSetup` without
/// the tool object, which is [`tool_search_spec`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeferredSetup {
    pub deferred_names: HashSet<String>,
    /// `None` exactly when `deferred_names` is empty.
    pub catalog_hash: Option<CatalogHash>,
}

impl DeferredSetup {
    /// Whether nothing is deferred (deferral disabled, or no MCP tool among candidates).
    pub fn is_empty(&self) -> bool {
        self.deferred_names.is_empty()
    }
}

/// Assembly refused to continue.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeferredError {
    /// Deferral is enabled and MCP tools are present, but no deferred set came out.
    #[error("{FAIL_CLOSED_ERROR}")]
    FailClosed,
}

/// The `tool_search` tool as the model sees it.
pub fn tool_search_spec() -> ToolSpec {
    ToolSpec::builtin(
        TOOL_SEARCH_NAME,
        TOOL_SEARCH_DESCRIPTION,
        json!({
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
            "type": "object"
        }),
    )
}

/// DeerFlow's `build_deferred_tool_setup`: empty when disabled or when no candidate is
/// MCP-tagged; otherwise the MCP tools' names and their catalog hash.
pub fn build_deferred_setup(candidates: &[ToolSpec], enabled: bool) -> DeferredSetup {
    if !enabled {
        return DeferredSetup::default();
    }
    let deferred: Vec<&ToolSpec> = candidates.iter().filter(|t| t.is_mcp()).collect();
    if deferred.is_empty() {
        return DeferredSetup::default();
    }
    DeferredSetup {
        deferred_names: deferred.iter().map(|t| t.name.clone()).collect(),
        catalog_hash: Some(CatalogHash::of_tools(deferred)),
    }
}

/// The fail-closed guard of `assemble_deferred_tools`.
pub(crate) fn check_fail_closed(
    enabled: bool,
    nothing_deferred: bool,
    candidates: &[ToolSpec],
) -> Result<(), DeferredError> {
    if enabled && nothing_deferred && candidates.iter().any(ToolSpec::is_mcp) {
        return Err(DeferredError::FailClosed);
    }
    Ok(())
}

/// DeerFlow's `assemble_deferred_tools`: the final tools are the candidates (MCP tools
/// stay, so they can still run once promoted) plus `tool_search` when anything is
/// deferred.
pub fn assemble_deferred_tools(
    candidates: Vec<ToolSpec>,
    enabled: bool,
) -> Result<(Vec<ToolSpec>, DeferredSetup), DeferredError> {
    let setup = build_deferred_setup(&candidates, enabled);
    check_fail_closed(enabled, setup.is_empty(), &candidates)?;
    let mut tools = candidates;
    if !setup.is_empty() {
        tools.push(tool_search_spec());
    }
    Ok((tools, setup))
}

/// `get_deferred_tools_prompt_section`: the sorted, HTML-escaped deferred names, or `""`.
pub fn deferred_tools_prompt_section<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let mut names: Vec<&str> = names.into_iter().collect();
    names.sort_unstable();
    prompt_section_sorted(names)
}

/// The same, for names already sorted.
pub(crate) fn prompt_section_sorted<'a>(sorted: impl IntoIterator<Item = &'a str>) -> String {
    let mut section = String::new();
    for name in sorted {
        if section.is_empty() {
            section.push_str(DEFERRED_TOOLS_OPEN_TAG);
        }
        section.push('\n');
        html_escape(&mut section, name);
    }
    if !section.is_empty() {
        section.push('\n');
        section.push_str(DEFERRED_TOOLS_CLOSE_TAG);
    }
    section
}

/// Python's `html.escape(text, quote=False)`: `&`, `<` and `>` only.
pub(crate) fn html_escape(out: &mut String, text: &str) {
    if !text.bytes().any(|b| matches!(b, b'&' | b'<' | b'>')) {
        out.push_str(text);
        return;
    }
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            other => out.push(other),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn description_keeps_the_docstring_layout() {
        let lines: Vec<&str> = TOOL_SEARCH_DESCRIPTION.lines().collect();
        assert_eq!(lines.len(), 11);
        assert_eq!(
            lines[0],
            "Fetches full schema definitions for deferred tools so they can be called."
        );
        assert_eq!(lines[1], "");
        assert_eq!(
            lines[2],
            "        Deferred tools appear by name in <available-deferred-tools> in the system"
        );
        assert_eq!(
            lines[10],
            "          - \"+slack send\" -- require \"slack\" in the name, rank by remaining terms"
        );
    }

    #[test]
    fn prompt_section_is_empty_without_names_and_escapes_quote_false() {
        assert_eq!(deferred_tools_prompt_section([]), "");
        assert_eq!(
            deferred_tools_prompt_section(["b\"'", "a&<>"]),
            "<available-deferred-tools>\na&amp;&lt;&gt;\nb\"'\n</available-deferred-tools>"
        );
    }
}
