//! The catalog cases of the DeerFlow spec, section 10 (cases 1 to 10, and 13 for MCP
//! routing), with the exact texts the model sees, plus the places a Rust port must do
//! better: a hash that follows every schema change, and model-written regexes that can
//! neither hang the process nor grow without bound.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use antler_engine::catalog::{
    assemble_deferred_tools, compile_query_regex, latest_real_user_text, merge_promoted, Catalog,
    CatalogHash, DeferredError, McpRouting, Promoted, RoutingMode, SearchMode, ToolSpec, UserTurn,
    FAIL_CLOSED_ERROR, TOOL_SEARCH_NAME,
};
use serde_json::json;

fn mcp(name: &str, description: &str) -> ToolSpec {
    ToolSpec::mcp(
        name,
        description,
        json!({"type": "object", "properties": {}}),
        None,
        name,
    )
}

fn catalog(tools: &[(&str, &str)]) -> Catalog {
    Catalog::build(tools.iter().map(|(n, d)| mcp(n, d)).collect(), true).unwrap()
}

fn search(catalog: &Catalog, query: &str) -> Vec<String> {
    catalog
        .search(query)
        .into_iter()
        .map(|t| t.name.clone())
        .collect()
}

fn eight_tools() -> Catalog {
    let names = [
        "tool_a", "tool_b", "tool_c", "tool_d", "tool_e", "tool_f", "tool_g", "tool_h",
    ];
    catalog(&names.map(|n| (n, "A searchable deferred tool.")))
}

fn slack_catalog() -> Catalog {
    catalog(&[
        ("send_mail", "slack slack slack"),
        ("slack_post", "post a message"),
        ("slack_send", "send send send message to slack"),
        ("other", "mentions slack"),
    ])
}

fn promoted(hash: &str, names: &[&str]) -> Option<Promoted> {
    Some(Promoted {
        catalog_hash: hash.to_owned(),
        names: names.iter().map(|n| (*n).to_owned()).collect(),
    })
}

#[test]
fn case_01_select_is_uncapped_in_catalog_order_and_tolerates_spaces() {
    let catalog = eight_tools();
    assert_eq!(
        search(
            &catalog,
            "select:tool_f, tool_a ,tool_b,tool_c,tool_d,tool_e,nope"
        ),
        ["tool_a", "tool_b", "tool_c", "tool_d", "tool_e", "tool_f"]
    );
}

#[test]
fn case_02_ranked_modes_are_capped_at_5() {
    let catalog = eight_tools();
    assert_eq!(
        search(&catalog, "+tool_"),
        ["tool_a", "tool_b", "tool_c", "tool_d", "tool_e"]
    );
    assert_eq!(search(&catalog, "searchable").len(), 5);
}

#[test]
fn case_03_keyword_scoring_puts_name_matches_first_with_stable_ties() {
    assert_eq!(
        search(&slack_catalog(), "slack"),
        ["slack_post", "slack_send", "send_mail", "other"]
    );
}

#[test]
fn case_04_plus_required_rest() {
    let catalog = slack_catalog();
    assert_eq!(
        search(&catalog, "+SLACK send"),
        ["slack_send", "slack_post"]
    );
    assert_eq!(
        search(&catalog, "+slack send"),
        ["slack_send", "slack_post"]
    );
    assert_eq!(
        search(&catalog, "select: slack_post , other ,nope"),
        ["slack_post", "other"]
    );
}

#[test]
fn case_05_degenerate_queries() {
    let catalog = catalog(&[("calc", "Compute sum(a, b) style expressions.")]);
    for query in ["", "   ", "+", " + ", "+   "] {
        assert!(search(&catalog, query).is_empty(), "{query:?}");
    }
    assert_eq!(search(&catalog, "sum("), ["calc"]);
    assert!(search(&catalog, "zzz(").is_empty());
}

#[test]
fn case_06_hash_is_order_free_and_follows_membership() {
    let alpha = ToolSpec::mcp(
        "alpha_search",
        "Search alpha records by query.",
        json!({"properties": {"query": {"type": "string"}}, "required": ["query"], "type": "object"}),
        None,
        "alpha_search",
    );
    let beta = ToolSpec::mcp(
        "beta_translate",
        "Translate beta text.",
        json!({"properties": {"text": {"type": "string"}}, "required": ["text"], "type": "object"}),
        None,
        "beta_translate",
    );
    let forward = Catalog::build(vec![alpha.clone(), beta.clone()], true).unwrap();
    let backward = Catalog::build(vec![beta.clone(), alpha.clone()], true).unwrap();
    assert_eq!(forward.hash().unwrap().as_str(), "d412c5eaf716041f");
    assert_eq!(backward.hash().unwrap().as_str(), "d412c5eaf716041f");
    let alone = Catalog::build(vec![alpha], true).unwrap();
    assert_ne!(alone.hash().unwrap().as_str(), "d412c5eaf716041f");
}

#[test]
fn case_07_tool_search_result_shape() {
    let catalog = catalog(&[("mcp_calc", "Calculator.")]);
    let outcome = catalog.tool_search("select:nonexistent", "tc2").unwrap();
    assert_eq!(
        outcome.promoted,
        Promoted {
            catalog_hash: catalog.hash().unwrap().as_str().to_owned(),
            names: vec![],
        }
    );
    assert_eq!(
        outcome.message.content,
        "No tools found matching: select:nonexistent"
    );
    assert_eq!(outcome.message.name, "tool_search");
    assert_eq!(outcome.message.tool_call_id, "tc2");
}

#[test]
fn case_08_promotion_reducer() {
    assert_eq!(
        merge_promoted(promoted("h1", &["a"]), promoted("h1", &["b", "a"])),
        promoted("h1", &["a", "b"])
    );
    assert_eq!(
        merge_promoted(promoted("h1", &["a"]), promoted("h2", &[])),
        promoted("h2", &[])
    );
    assert_eq!(
        merge_promoted(promoted("h1", &["a"]), None),
        promoted("h1", &["a"])
    );
}

#[test]
fn case_09_deferred_filter() {
    let active = ToolSpec::builtin("active_c", "Always bound.", json!({"type": "object"}));
    let catalog =
        Catalog::build(vec![mcp("mcp_a", "A."), mcp("mcp_b", "B."), active], true).unwrap();
    let h1 = catalog.hash().unwrap().as_str().to_owned();
    let request = ["mcp_a", "mcp_b", "active_c"];
    let visible = |state: Option<Promoted>| {
        let filter = catalog.deferred_filter(state.as_ref());
        let kept: Vec<&str> = filter
            .retain_visible(&request, |name| name)
            .into_iter()
            .copied()
            .collect();
        let tools: Vec<String> = filter.visible_tools().map(|t| t.name.clone()).collect();
        (kept, tools)
    };

    let (kept, tools) = visible(None);
    assert_eq!(kept, ["active_c"]);
    assert_eq!(tools, ["active_c", TOOL_SEARCH_NAME]);
    let (kept, tools) = visible(promoted(&h1, &["mcp_a"]));
    assert_eq!(kept, ["mcp_a", "active_c"]);
    assert_eq!(tools, ["mcp_a", "active_c", TOOL_SEARCH_NAME]);
    let (kept, _) = visible(promoted("OTHER", &["mcp_a"]));
    assert_eq!(kept, ["active_c"]);

    let state = promoted(&h1, &["mcp_a"]);
    let filter = catalog.deferred_filter(state.as_ref());
    let refused = filter.check_call("mcp_b", Some("c1")).unwrap_err();
    assert_eq!(
        refused.content,
        "Error: Tool 'mcp_b' is deferred and has not been promoted yet. Call tool_search first to expose and promote this tool's schema, then retry."
    );
    assert_eq!(refused.name, "mcp_b");
    assert_eq!(refused.tool_call_id, "c1");
    assert_eq!(
        filter.check_call("mcp_b", None).unwrap_err().tool_call_id,
        "missing_tool_call_id"
    );
    assert!(filter.check_call("active_c", Some("c2")).is_ok());
    assert!(filter.check_call("mcp_a", Some("c3")).is_ok());
}

#[test]
fn case_10_fail_closed_assembly_and_the_prompt_section() {
    let candidates = vec![mcp("b_tool", "B."), mcp("a<x>", "A.")];
    let (tools, setup) = assemble_deferred_tools(candidates.clone(), true).unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["b_tool", "a<x>", "tool_search"]);
    let catalog = Catalog::build(candidates.clone(), true).unwrap();
    assert_eq!(catalog.setup(), setup);
    assert_eq!(
        catalog.prompt_section(),
        "<available-deferred-tools>\na&lt;x&gt;\nb_tool\n</available-deferred-tools>"
    );

    let (tools, setup) = assemble_deferred_tools(candidates.clone(), false).unwrap();
    assert_eq!(tools.len(), 2);
    assert!(setup.deferred_names.is_empty() && setup.catalog_hash.is_none());
    let disabled = Catalog::build(candidates, false).unwrap();
    assert_eq!(disabled.prompt_section(), "");
    assert!(disabled.hash().is_none());
    assert!(disabled.tool_search("select:b_tool", "tc").is_err());
    assert_eq!(disabled.tools().len(), 2);

    assert_eq!(
        DeferredError::FailClosed.to_string(),
        "tool_search enabled and MCP candidates exist, but no deferred set was recovered - refusing to bind MCP schemas (fail-closed)."
    );
    assert_eq!(FAIL_CLOSED_ERROR, DeferredError::FailClosed.to_string());
}

#[test]
fn case_13_auto_promotion_matching_and_routing_hints() {
    let routed = |name: &str, priority: i64, keywords: &[&str]| {
        let mut tool = mcp(name, "Routed.");
        tool.routing = Some(McpRouting {
            mode: RoutingMode::Prefer,
            priority,
            keywords: keywords.iter().map(|k| (*k).to_owned()).collect(),
        });
        tool
    };
    let tools = vec![
        routed("z_tool", 50, &["订单"]),
        routed("a_tool", 50, &["orders"]),
        routed("top_tool", 100, &["ORDERS"]),
    ];
    let catalog = Catalog::build(tools.clone(), true).unwrap();
    let index = catalog.routing_index().unwrap();
    assert_eq!(
        index.matches("查订单 and orders", 2),
        ["top_tool", "a_tool"]
    );

    let turns = [
        UserTurn {
            text: "orders",
            ..UserTurn::default()
        },
        UserTurn {
            text: "no match now",
            ..UserTurn::default()
        },
    ];
    let latest = latest_real_user_text(turns.into_iter()).unwrap();
    assert!(index.auto_promote(latest, 3).is_none());
    let ignored = [
        UserTurn {
            text: "orders",
            ..UserTurn::default()
        },
        UserTurn {
            text: "nothing",
            hide_from_ui: true,
            ..UserTurn::default()
        },
        UserTurn {
            text: "nothing",
            name: Some("summary"),
            ..UserTurn::default()
        },
    ];
    let latest = latest_real_user_text(ignored.into_iter()).unwrap();
    let update = index.auto_promote(latest, 3).unwrap();
    assert_eq!(update.names, ["top_tool", "a_tool"]);
    assert_eq!(update.catalog_hash, catalog.hash().unwrap().as_str());

    assert_eq!(
        catalog.routing_hints_section(),
        "<mcp_routing_hints>\n\
         When the user's request involves ORDERS:\n  use `tool_search` to fetch `top_tool`, then prefer that MCP tool.\n\
         When the user's request involves orders:\n  use `tool_search` to fetch `a_tool`, then prefer that MCP tool.\n\
         When the user's request involves 订单:\n  use `tool_search` to fetch `z_tool`, then prefer that MCP tool.\n\
         </mcp_routing_hints>"
    );
    // Not deferred: the hint names the tool directly; keywords join with ", or".
    let direct = Catalog::build(vec![routed("top_tool", 90, &["top", "SQL"])], false).unwrap();
    assert_eq!(
        direct.routing_hints_section(),
        "<mcp_routing_hints>\nWhen the user's request involves top, or SQL:\n  prefer the `top_tool` tool.\n</mcp_routing_hints>"
    );
    assert!(direct.routing_index().is_none());
}

#[test]
fn hash_changes_when_one_schema_changes() {
    let build = |kind: &str| {
        let tools = vec![
            mcp("alpha", "Alpha."),
            ToolSpec::mcp(
                "beta",
                "Beta.",
                json!({"type": "object", "properties": {"n": {"type": kind}}}),
                None,
                "beta",
            ),
        ];
        Catalog::build(tools, true)
            .unwrap()
            .hash()
            .cloned()
            .unwrap()
    };
    let before: CatalogHash = build("string");
    assert_eq!(before, build("string"));
    assert_ne!(before, build("integer"));
}

#[test]
fn redos_shaped_query_returns_promptly() {
    let long = format!("{}!", "a".repeat(200_000));
    let catalog = catalog(&[("victim", &long), ("other", "nothing here")]);
    let started = Instant::now();
    // Python's backtracking `re` takes exponential time on this; `regex` is linear.
    let hits = search(&catalog, "(a+)+$");
    assert!(hits.is_empty());
    let hits = search(&catalog, "+victim (a+)+b");
    assert_eq!(hits, ["victim"]);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn oversized_or_unsupported_regex_falls_back_to_a_literal() {
    // Valid for Python's `re`, but compiles past the 1 MiB size limit here.
    let huge = "(?:a{1000}){1000}";
    assert!(regex::RegexBuilder::new(huge)
        .size_limit(1 << 20)
        .build()
        .is_err());
    assert!(compile_query_regex(huge)
        .unwrap()
        .is_match("x (?:A{1000}){1000} y"));
    let catalog = catalog(&[
        ("many_a", &"a".repeat(5_000)),
        ("literal", "mentions (?:a{1000}){1000} verbatim"),
        ("lookahead", "uses (?=slack) literally"),
        ("slack_post", "Post to slack."),
    ]);
    assert_eq!(search(&catalog, huge), ["literal"]);
    // Look-around is not supported by `regex`: matched literally, never an error.
    assert_eq!(search(&catalog, "(?=slack)"), ["lookahead"]);
    assert_eq!(
        catalog
            .search_with("(?=slack)", SearchMode::Parity)
            .into_iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>(),
        ["lookahead"]
    );
}
