//! The catalog commands scripts use to check Antler against DeerFlow: `antler catalog
//! hash` and `antler catalog search --json` over the conformance catalog give DeerFlow's
//! hash and DeerFlow's result for every query; bad input gets a clear error.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use antler_tests::bin;
use serde_json::Value;

const VECTORS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/conformance/tool_search.json"
);

fn catalog_file(dir: &tempfile::TempDir) -> (std::path::PathBuf, Value) {
    let vectors: Value = serde_json::from_str(&std::fs::read_to_string(VECTORS).unwrap()).unwrap();
    let path = dir.path().join("catalog.json");
    std::fs::write(&path, serde_json::to_string(&vectors["catalog"]).unwrap()).unwrap();
    (path, vectors)
}

fn antler(args: &[&str]) -> std::process::Output {
    Command::new(bin("antler"))
        .args(args)
        .env("RUST_LOG", "error")
        .output()
        .unwrap()
}

#[test]
fn hash_and_every_query_match_deerflow() {
    let dir = tempfile::tempdir().unwrap();
    let (path, vectors) = catalog_file(&dir);
    let p = path.to_str().unwrap();
    let out = antler(&["catalog", "hash", "--catalog", p]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        vectors["catalog_hash"].as_str().unwrap()
    );
    for case in vectors["cases"].as_array().unwrap() {
        let query = case["query"].as_str().unwrap();
        let out = antler(&["catalog", "search", query, "--catalog", p, "--json"]);
        assert!(
            out.status.success(),
            "{query}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(got, case["expect"], "query {query:?}");
    }
}

#[test]
fn search_without_json_prints_the_schemas_or_deerflows_no_match_text() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = catalog_file(&dir);
    let p = path.to_str().unwrap();
    let out = antler(&["catalog", "search", "select:slack_send_dm", "--catalog", p]);
    let text = String::from_utf8_lossy(&out.stdout);
    let rendered: Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(rendered[0]["name"], "slack_send_dm");
    assert!(rendered[0]["parameters"].is_object());
    let out = antler(&["catalog", "search", "zzz_nothing", "--catalog", p]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "No tools found matching: zzz_nothing"
    );
}

#[test]
fn a_malformed_catalog_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.json");
    std::fs::write(&path, "{\"not\": \"an array\"}").unwrap();
    let out = antler(&["catalog", "hash", "--catalog", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is not a JSON array of {name, description, parameters}"),
        "{err}"
    );
}
