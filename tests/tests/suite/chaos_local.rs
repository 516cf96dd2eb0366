//! The chaos suite's short schedule in CI (`scripts/chaos.sh` with a fixed seed, in local
//! mode, against this build's binaries): every fault kind fires under concurrent runs
//! that use builtins, sandbox tools, MCP tools behind tool_search, clarifications and
//! subagent tasks, the disk faults among them (the runs database read-only, the sandbox
//! volume full) and one actor of each kind stopped as if it crashed; the report (its last
//! line) says every invariant held and every fault recovered; the command exits 0;
//! nothing of the cluster is left running.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use antler_tests::chaos;

#[test]
fn a_short_seeded_schedule_keeps_every_invariant() {
    let dir = tempfile::Builder::new()
        .prefix("antler-chaos")
        .tempdir_in("/tmp")
        .unwrap();
    let schedule = chaos::run(
        &[
            "--seed",
            "20261201",
            "--runs",
            "6",
            "--minutes",
            "1.5",
            "--mode",
            "local",
        ],
        &dir.path().join("cluster"),
    );
    assert!(
        schedule.stderr.contains("seed 20261201"),
        "{}",
        schedule.stderr
    );
    schedule.assert_held(6);
    let mut expected = chaos::common_kinds();
    expected.extend(chaos::kinds(
        &["actor"],
        &[
            "mcp-server",
            "sandbox",
            "task-graph",
            "catalog",
            "peer-link",
            "run",
        ],
    ));
    schedule.assert_survived(&expected);
}
