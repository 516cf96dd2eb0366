//! Two runs of one user, each creating a different skill at once: the locks are per
//! skill, so both actions, their security scans included, are in flight together, and
//! both skills are written.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::skill_manage_support::{
    run_with, runtime, skill_md, CountingScans, Data, ScanGauge, ALLOW,
};
use antler_engine::ScriptedModel;
use serde_json::json;

#[test]
fn two_skills_are_written_in_parallel() {
    let data = Data::new();
    let gauge = Arc::new(ScanGauge::default());
    let wait = Duration::from_secs(5);
    let model = |name: &str| {
        let playbook = json!({
            "turns": [
                {"tool_calls": [{"name": "skill_manage", "args": {"action": "create", "name": name, "content": skill_md(name, "A skill.")}}]},
                {"content": "Done."}
            ],
            "security_scan": [{"content": ALLOW}]
        });
        Arc::new(CountingScans {
            model: ScriptedModel::from_yaml(&playbook.to_string(), "inline").unwrap(),
            gauge: Arc::clone(&gauge),
            peers: 2,
            wait,
        })
    };
    let started = Instant::now();
    let (a, b) = runtime().block_on(async {
        tokio::join!(
            run_with(&data, "alice", "t1", model("alpha")),
            run_with(&data, "alice", "t2", model("beta")),
        )
    });
    assert_eq!(a[0].1, "Created custom skill 'alpha'.");
    assert_eq!(b[0].1, "Created custom skill 'beta'.");
    assert_eq!(
        gauge.most.load(Ordering::SeqCst),
        2,
        "the scans did not overlap"
    );
    // Each scan waited for the other instead of its full 5 s.
    assert!(started.elapsed() < wait, "{:?}", started.elapsed());
    for name in ["alpha", "beta"] {
        assert!(data.custom("alice", name).join("SKILL.md").is_file());
    }
}
