//! A child that keeps crashing is restarted with backoff, then marked failed after 5
//! crashes within 60 s, and `antler status` shows the reason; the other processes stay up.
//! The crashing child is a stand-in script (a real host cannot be made to crash on start).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{os::unix::fs::PermissionsExt, time::Duration};

use antler_tests::{bin, wait_for, Cluster};

#[test]
fn a_crash_looping_child_is_marked_failed_with_the_reason() {
    let bins = tempfile::tempdir().expect("tmp");
    for b in ["antler", "antler-mcp-host", "antler-sandbox-host"] {
        std::os::unix::fs::symlink(bin(b), bins.path().join(b)).expect("link");
    }
    let stand_in = bins.path().join("antler-subagent");
    std::fs::write(
        &stand_in,
        "#!/bin/sh\n# crashing-subagent stand-in\necho 'worker cannot start' >&2\nexit 3\n",
    )
    .expect("script");
    std::fs::set_permissions(&stand_in, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let bin_dir = bins.path().to_string_lossy().to_string();
    let c = Cluster::up_with(1, &[("ANTLER_BIN_DIR", &bin_dir)]);
    let failed = wait_for(Duration::from_secs(20), || {
        let p = c.process("subagent", 0)?;
        (p["state"] == "failed").then_some(p)
    })
    .unwrap_or_else(|| panic!("never marked failed: {:?}", c.status()));
    let reason = failed["reason"].as_str().expect("reason");
    assert!(reason.contains("crashed 5 times within 60 s"), "{reason}");
    assert!(reason.contains("exited with status 3"), "{reason}");
    assert_eq!(failed["healthy"], false);
    assert_eq!(failed["restarts"], 4);
    // The table says so too, and the hosts are unaffected.
    let out = antler_tests::antler(&c.runtime_dir(), &["status"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("failed") && table.contains("crashed 5 times"),
        "{table}"
    );
    for role in ["mcp-host", "sandbox-host"] {
        let p = wait_for(Duration::from_secs(10), || {
            c.process(role, 0).filter(|p| p["healthy"] == true)
        });
        assert!(p.is_some(), "{role} should stay healthy");
    }
}
