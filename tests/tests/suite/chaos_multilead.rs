//! The multi-lead chaos schedule in CI (`scripts/chaos.sh --mode multi-lead` with a fixed
//! seed, against this build's binaries): three `antler up` leads on a throwaway PostgreSQL
//! of the command's own, runs submitted round robin through their gateways, and each lead
//! fault fired at a lead holding running runs: `kill -9`, SIGSTOP past the lease's time to
//! live, and a partition from PostgreSQL. The report (its last line) says every invariant
//! held, among them that at most one epoch acted for each run and that every takeover is in
//! the run's events; every fault left a trace and was recovered from, and its runs were
//! taken over (timed); the command exits as its verdict says; nothing is left running and
//! the PostgreSQL directory is gone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use antler_tests::chaos;

#[test]
fn a_short_seeded_multi_lead_schedule_keeps_every_invariant() {
    let dir = tempfile::Builder::new()
        .prefix("antler-chaos-ml")
        .tempdir_in("/tmp")
        .unwrap();
    let cluster = dir.path().join("cluster");
    let schedule = chaos::run(
        &[
            "--seed",
            "20261205",
            "--runs",
            "9",
            "--minutes",
            "0.8",
            "--mode",
            "multi-lead",
            "--leads",
            "3",
            "--workers",
            "1",
        ],
        &cluster,
    );
    assert!(
        schedule.stderr.contains("seed 20261205"),
        "{}",
        schedule.stderr
    );
    schedule.assert_held(9);
    let kinds = chaos::kinds(&["kill9", "sigstop", "partition"], &["lead"]);
    schedule.assert_survived(&kinds);
    let report = &schedule.report;
    assert_eq!(report["mode"], "multi-lead");
    assert_eq!(report["leads"], 3);

    // Each lead fault hit a lead that held running runs (none was only skipped), and the
    // runs it held were taken over by a newer epoch, each timed.
    let faults = report["faults"].as_array().unwrap();
    for kind in &kinds {
        let k = faults.iter().find(|k| k["kind"] == kind.as_str()).unwrap();
        assert!(
            k["injected"].as_u64().unwrap() >= 1,
            "{kind} never hit a lead: {k:#}"
        );
    }
    let lead_faults = report["lead_faults"].as_array().unwrap();
    for f in lead_faults {
        let held = f["held"].as_array().unwrap();
        assert!(!held.is_empty(), "{f:#}");
        assert!(
            !f["taken_over_ms"].as_array().unwrap().is_empty(),
            "no run of the lead was taken over: {f:#}"
        );
    }
    let taken_over = report["recovery"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "a lead fault's runs under a new epoch (from the fault)")
        .unwrap();
    assert!(
        taken_over["samples"].as_u64().unwrap() >= 3,
        "{taken_over:#}"
    );

    // The multi-lead invariants are among those that held.
    for name in [
        "at most one epoch acts for a run",
        "every takeover is visible in the run's events",
        "every lead serves again",
        "no orphan process once the cluster stops",
        "no PostgreSQL left once the schedule ends",
    ] {
        let found = report["invariants"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["name"] == name)
            .unwrap_or_else(|| panic!("no invariant {name}: {report:#}"));
        assert_eq!(found["held"], true, "{found:#}");
    }

    // Nothing is left: no process names the cluster's or the database's directory, and the
    // database's directory is gone.
    let pg_dir = report["postgres_dir"].as_str().unwrap();
    assert!(!std::path::Path::new(pg_dir).exists(), "{pg_dir} is left");
    let needles = [cluster.display().to_string(), pg_dir.to_owned()];
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        for needle in &needles {
            assert!(
                !cmdline.contains(needle.as_str()),
                "left running: {cmdline}"
            );
        }
    }
}
