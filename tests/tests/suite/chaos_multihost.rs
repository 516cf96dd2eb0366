//! The chaos suite's short schedule in CI in multi-host mode (`scripts/chaos.sh --mode
//! multi-host` with a fixed seed, against this build's binaries): every host in a network
//! namespace of its own, over mutual TLS, each behind a TCP fault proxy (PyPI `faulty`);
//! every fault kind fires under concurrent runs, the process faults (this command restarts
//! a remote host, as Kubernetes would), the network faults (delay, drop, throttle,
//! corruption, a cut link) and the disk faults; the report says every invariant held and
//! every fault recovered; the command exits 0; no process and no namespace is left.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use antler_tests::chaos;

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
    let schedule = chaos::run(
        &[
            "--seed",
            "20261201",
            "--runs",
            "8",
            "--minutes",
            "2.5",
            "--mode",
            "multi-host",
        ],
        &dir.path().join("cluster"),
    );
    assert_eq!(schedule.report["mode"], "multi-host");
    schedule.assert_held(8);
    let mut expected = chaos::common_kinds();
    expected.extend(chaos::kinds(
        &["delay", "drop", "throttle", "corrupt", "cut"],
        &["mcp-host", "sandbox-host", "worker"],
    ));
    schedule.assert_survived(&expected);
    // The namespaces are gone with the schedule.
    let left: Vec<String> = namespaces()
        .into_iter()
        .filter(|n| !before.contains(n))
        .collect();
    assert!(left.is_empty(), "namespaces left: {left:?}");
}
