//! The chaos suite's short schedule in CI (`scripts/chaos.sh` with a fixed seed, in local
//! mode, against this build's binaries): every fault kind fires under concurrent runs
//! that use builtins, sandbox tools, MCP tools behind tool_search, clarifications and
//! subagent tasks, the disk faults among them (the runs database read-only, the sandbox
//! volume full) and one actor of each kind stopped as if it crashed; the report (its last line) says every invariant held and every fault
//! recovered; the command exits 0; nothing of the cluster is left running.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

use antler_tests::bin_dir;
use serde_json::Value;

#[test]
fn a_short_seeded_schedule_keeps_every_invariant() {
    let dir = tempfile::Builder::new()
        .prefix("antler-chaos")
        .tempdir_in("/tmp")
        .unwrap();
    let out = Command::new("bash")
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/chaos.sh"))
        .args([
            "--seed",
            "20261201",
            "--runs",
            "6",
            "--minutes",
            "1.5",
            "--mode",
            "local",
        ])
        .arg("--dir")
        .arg(dir.path().join("cluster"))
        .env("ANTLER_BIN_DIR", bin_dir())
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stdout.lines().last().unwrap_or_default();
    let report: Value = serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("the last line is not the report ({e}):\n{stdout}\n{stderr}"));
    assert!(stderr.contains("seed 20261201"), "{stderr}");
    let broken: Vec<&Value> = report["invariants"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["held"] != true)
        .collect();
    assert!(broken.is_empty(), "{broken:#?}\n{stdout}");
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(report["ok"], true);
    assert_eq!(report["runs"]["ended"], 6, "{:#}", report["runs"]);
    // Every kind of fault was injected at least once and survived.
    let kinds = report["faults"].as_array().unwrap();
    for kind in [
        "kill9:lead",
        "kill9:mcp-host",
        "kill9:sandbox-host",
        "kill9:worker",
        "kill9:mcp-server",
        "kill9:sandbox-supervisor",
        "sigterm:lead",
        "sigterm:mcp-host",
        "sigterm:sandbox-host",
        "sigterm:worker",
        "sigstop:lead",
        "sigstop:mcp-host",
        "sigstop:sandbox-host",
        "sigstop:worker",
        "readonly:runs-db",
        "full:sandbox-volume",
        "actor:mcp-server",
        "actor:sandbox",
        "actor:task-graph",
        "actor:catalog",
        "actor:peer-link",
        "actor:run",
    ] {
        let k = kinds
            .iter()
            .find(|k| k["kind"] == kind)
            .unwrap_or_else(|| panic!("{kind} never fired: {kinds:#?}"));
        let fired = k["injected"].as_u64().unwrap() + k["skipped"].as_u64().unwrap();
        assert!(fired >= 1, "{k:#}");
        assert_eq!(k["injected"], k["survived"], "{k:#}");
    }
    assert!(stdout.contains("INVARIANT"), "no table: {stdout}");
}
