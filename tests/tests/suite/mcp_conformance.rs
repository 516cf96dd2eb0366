//! The official MCP conformance suite (npm `@modelcontextprotocol/conformance`, pinned in
//! `tests/package.json` with Node 22 from npm `node`) in client mode, against Antler's MCP
//! client: every client scenario the suite lists (`conformance list --client`: the ones
//! `--suite all` runs), one after another, through the adapter `tests/conformance/adapter.py`,
//! which only writes an extensions config for the scenario's server (with the credentials
//! the scenario hands over, `elicitation: accept_defaults`) and runs documented `antler`
//! commands (`up`, `mcp status`, `mcp tools`, `mcp call`, `down`) with a headless
//! `$BROWSER`. Every check of every scenario must pass: a failed or a warning check fails
//! the test, with the scenario's checks and the adapter's output.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{path::Path, process::Command};

use crate::mcp_support::{npm_bin, tests_dir};
use antler_tests::bin_dir;
use serde_json::Value;

/// Node 22 from npm `node` (the suite's runtime).
fn node() -> String {
    npm_bin("node").display().to_string()
}

fn conformance() -> String {
    npm_bin("conformance").display().to_string()
}

/// The client scenarios the suite has.
fn client_scenarios() -> Vec<String> {
    let out = Command::new(node())
        .args([&conformance(), "list", "--client"])
        .output()
        .expect("conformance list");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("- "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// Every check the suite wrote for one scenario under `out`.
fn checks_of(out: &Path, scenario: &str) -> Vec<Value> {
    let leaf = scenario.rsplit('/').next().unwrap();
    let parent = match scenario.rsplit_once('/') {
        Some((dir, _)) => out.join(dir),
        None => out.to_path_buf(),
    };
    let dir = std::fs::read_dir(&parent)
        .unwrap_or_else(|e| panic!("no results for {scenario} in {}: {e}", parent.display()))
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix(leaf))
                .is_some_and(|rest| rest.starts_with("-2"))
        })
        .unwrap_or_else(|| panic!("no results directory for {scenario}"));
    let checks = std::fs::read(dir.join("checks.json")).expect("checks.json");
    let stderr = std::fs::read_to_string(dir.join("stderr.txt")).unwrap_or_default();
    let mut checks: Vec<Value> = serde_json::from_slice(&checks).expect("checks.json parses");
    for c in &mut checks {
        c["adapter_stderr"] = Value::String(stderr.clone());
    }
    checks
}

#[test]
fn every_client_scenario_of_the_official_suite_passes() {
    let scenarios = client_scenarios();
    assert!(
        scenarios.len() >= 20 && scenarios.iter().any(|s| s == "initialize"),
        "the suite lists its client scenarios: {scenarios:?}"
    );
    let out = tempfile::tempdir().unwrap();
    let adapter = tests_dir().join("conformance/adapter.py");
    let mut failures = Vec::new();
    for scenario in &scenarios {
        let run = Command::new(node())
            .args([
                &conformance(),
                "client",
                "--scenario",
                scenario,
                "--timeout",
                "60000",
            ])
            .arg("--command")
            .arg(format!("python3 {}", adapter.display()))
            .arg("-o")
            .arg(out.path())
            .env("ANTLER_BIN_DIR", bin_dir())
            .output()
            .expect("conformance client");
        let checks = checks_of(out.path(), scenario);
        let bad: Vec<&Value> = checks
            .iter()
            .filter(|c| c["status"] == "FAILURE" || c["status"] == "WARNING")
            .collect();
        let passed = checks.iter().filter(|c| c["status"] == "SUCCESS").count();
        if !bad.is_empty() || passed == 0 || !run.status.success() {
            failures.push(format!(
                "{scenario}: {} passed; not passed: {}\n{}\nadapter:\n{}",
                passed,
                bad.iter()
                    .map(|c| format!(
                        "{} {} ({})",
                        c["status"].as_str().unwrap_or("?"),
                        c["id"].as_str().unwrap_or("?"),
                        c["errorMessage"].as_str().unwrap_or("")
                    ))
                    .collect::<Vec<_>>()
                    .join("; "),
                String::from_utf8_lossy(&run.stdout)
                    .lines()
                    .rev()
                    .take(6)
                    .collect::<Vec<_>>()
                    .join("\n"),
                checks
                    .first()
                    .and_then(|c| c["adapter_stderr"].as_str())
                    .unwrap_or("")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} scenarios did not pass:\n{}",
        failures.len(),
        scenarios.len(),
        failures.join("\n\n")
    );
}
