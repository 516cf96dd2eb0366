//! The chaos suite's short schedule in CI in multi-host mode (`scripts/chaos.sh --mode
//! multi-host` with a fixed seed, against this build's binaries): every host in a network
//! namespace of its own, over mutual TLS, each behind a TCP fault proxy (PyPI `faulty`);
//! every fault kind fires under concurrent runs, the process faults (this command restarts
//! a remote host, as Kubernetes would), the network faults (delay, drop, throttle,
//! corruption, a cut link) and the disk faults; the report says every invariant held and
//! every fault recovered; the command exits 0; no process and no namespace is left.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

use antler_tests::bin_dir;
use serde_json::Value;

fn namespaces() -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("antler-chaos-"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_short_seeded_multi_host_schedule_keeps_every_invariant() {
    let dir = tempfile::Builder::new()
        .prefix("antler-chaos-mh")
        .tempdir_in("/tmp")
        .unwrap();
    let before = namespaces();
    let out = Command::new("bash")
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/chaos.sh"))
        .args([
            "--seed",
            "20261201",
            "--runs",
            "8",
            "--minutes",
            "2.5",
            "--mode",
            "multi-host",
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
    assert_eq!(report["mode"], "multi-host");
    let broken: Vec<&Value> = report["invariants"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["held"] != true)
        .collect();
    assert!(broken.is_empty(), "{broken:#?}\n{stdout}");
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(report["runs"]["ended"], 8, "{:#}", report["runs"]);
    let kinds = report["faults"].as_array().unwrap();
    let mut expected = Vec::new();
    for signal in ["kill9", "sigterm", "sigstop"] {
        for target in ["lead", "mcp-host", "sandbox-host", "worker"] {
            expected.push(format!("{signal}:{target}"));
        }
    }
    for network in ["delay", "drop", "throttle", "corrupt", "cut"] {
        for target in ["mcp-host", "sandbox-host", "worker"] {
            expected.push(format!("{network}:{target}"));
        }
    }
    expected.extend(
        [
            "kill9:mcp-server",
            "kill9:sandbox-supervisor",
            "readonly:runs-db",
            "full:sandbox-volume",
        ]
        .map(String::from),
    );
    for kind in &expected {
        let k = kinds
            .iter()
            .find(|k| &k["kind"] == kind)
            .unwrap_or_else(|| panic!("{kind} never fired: {kinds:#?}"));
        let fired = k["injected"].as_u64().unwrap() + k["skipped"].as_u64().unwrap();
        assert!(fired >= 1, "{k:#}");
        assert_eq!(k["injected"], k["survived"], "{k:#}");
    }
    // The namespaces are gone with the schedule.
    let left: Vec<String> = namespaces()
        .into_iter()
        .filter(|n| !before.contains(n))
        .collect();
    assert!(left.is_empty(), "namespaces left: {left:?}");
}
