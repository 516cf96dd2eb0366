//! The catalog against DeerFlow's own answers: `shared/conformance/tool_search.json` was
//! produced by running DeerFlow's `tool_search.py` on its catalog. Hash, prompt section
//! and every query's result must match, in the default mode and in parity mode.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use antler_engine::catalog::{Catalog, SearchMode, ToolSpec, NO_TOOLS_FOUND};
use serde_json::Value;

const VECTORS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/conformance/tool_search.json"
);

struct Vectors {
    catalog: Catalog,
    tools: Vec<ToolSpec>,
    hash: String,
    prompt_section: String,
    cases: Vec<(String, Vec<String>)>,
}

fn load() -> Vectors {
    let text = std::fs::read_to_string(VECTORS).expect("conformance vectors are readable");
    let doc: Value = serde_json::from_str(&text).unwrap();
    let tools: Vec<ToolSpec> = doc["catalog"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let name = t["name"].as_str().unwrap();
            ToolSpec::mcp(
                name,
                t["description"].as_str().unwrap(),
                t["parameters"].clone(),
                None,
                name,
            )
        })
        .collect();
    let cases = doc["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let expect = c["expect"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_str().unwrap().to_owned())
                .collect();
            (c["query"].as_str().unwrap().to_owned(), expect)
        })
        .collect();
    Vectors {
        catalog: Catalog::build(tools.clone(), true).unwrap(),
        tools,
        hash: doc["catalog_hash"].as_str().unwrap().to_owned(),
        prompt_section: doc["prompt_section"].as_str().unwrap().to_owned(),
        cases,
    }
}

fn names(tools: Vec<&ToolSpec>) -> Vec<String> {
    tools.into_iter().map(|t| t.name.clone()).collect()
}

#[test]
fn catalog_hash_matches_deerflow() {
    let v = load();
    assert_eq!(v.catalog.hash().unwrap().as_str(), v.hash);
    assert_eq!(v.hash, "d50e9b53471f9328");
}

#[test]
fn prompt_section_matches_deerflow() {
    let v = load();
    assert_eq!(v.catalog.prompt_section(), v.prompt_section);
}

#[test]
fn every_query_matches_deerflow_in_the_default_mode() {
    let v = load();
    assert_eq!(v.cases.len(), 24);
    for (query, expect) in &v.cases {
        assert_eq!(&names(v.catalog.search(query)), expect, "query {query:?}");
    }
}

#[test]
fn every_query_matches_deerflow_in_parity_mode() {
    let v = load();
    for (query, expect) in &v.cases {
        assert_eq!(
            &names(v.catalog.search_with(query, SearchMode::Parity)),
            expect,
            "query {query:?}"
        );
    }
}

#[test]
fn tool_search_renders_matches_as_python_indent_2() {
    let v = load();
    // Printed by CPython: json.dumps([...], indent=2, ensure_ascii=False).
    let expected = "[\n  {\n    \"name\": \"slack_send_dm\",\n    \"description\": \"Send a direct message to a Slack user; send it now.\",\n    \"parameters\": {\n      \"type\": \"object\",\n      \"properties\": {\n        \"user\": {\n          \"type\": \"string\",\n          \"description\": \"User id\"\n        },\n        \"text\": {\n          \"type\": \"string\",\n          \"description\": \"Text\"\n        }\n      },\n      \"required\": [\n        \"user\",\n        \"text\"\n      ]\n    }\n  },\n  {\n    \"name\": \"calendar_create_event\",\n    \"description\": \"创建日历事件 — create a calendar event.\",\n    \"parameters\": {\n      \"type\": \"object\",\n      \"properties\": {\n        \"title\": {\n          \"type\": \"string\",\n          \"description\": \"标题\"\n        },\n        \"start\": {\n          \"type\": \"string\",\n          \"description\": \"ISO start\"\n        }\n      },\n      \"required\": [\n        \"title\",\n        \"start\"\n      ]\n    }\n  }\n]";
    let outcome = v
        .catalog
        .tool_search("select:calendar_create_event,slack_send_dm", "tc1")
        .unwrap();
    assert_eq!(outcome.message.content, expected);
    assert_eq!(
        outcome.promoted.names,
        ["slack_send_dm", "calendar_create_event"]
    );
    assert_eq!(outcome.promoted.catalog_hash, v.hash);
}

#[test]
fn every_case_renders_like_a_json_pretty_printer() {
    // For this catalog (no floats, no control characters) Python's indent=2 output is
    // what serde_json's pretty printer writes, which makes it an independent oracle.
    let v = load();
    for (query, expect) in &v.cases {
        let outcome = v.catalog.tool_search(query, "tc").unwrap();
        assert_eq!(&outcome.promoted.names, expect, "query {query:?}");
        if expect.is_empty() {
            assert_eq!(
                outcome.message.content,
                NO_TOOLS_FOUND.replace("{query}", query)
            );
            continue;
        }
        let functions: Vec<Value> = expect
            .iter()
            .map(|name| {
                v.tools
                    .iter()
                    .find(|t| &t.name == name)
                    .unwrap()
                    .openai_function()
            })
            .collect();
        assert_eq!(
            outcome.message.content,
            serde_json::to_string_pretty(&functions).unwrap(),
            "query {query:?}"
        );
    }
}
