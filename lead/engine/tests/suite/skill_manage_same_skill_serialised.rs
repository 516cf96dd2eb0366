//! Two runs of one user patching the same skill at once: the skill's lock holds each
//! action for its whole length (the security scan included), so the second patch waits
//! for the first, never overlaps its scan, and reads what the first wrote: both changes
//! are in the file, none is lost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::skill_manage_support::{run_with, runtime, CountingScans, Data, ScanGauge, ALLOW};
use antler_engine::ScriptedModel;
use serde_json::json;

#[test]
fn two_patches_of_one_skill_run_one_after_the_other() {
    let data = Data::new();
    let dir = data.custom("alice", "notes");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        "---\nname: notes\ndescription: Notes.\n---\n# Notes\n\nfirst: TODO\nsecond: TODO\n",
    )
    .unwrap();
    let gauge = Arc::new(ScanGauge::default());
    let model = |find: &str, replace: &str| {
        let playbook = json!({
            "turns": [
                {"tool_calls": [{"name": "skill_manage", "args": {"action": "patch", "name": "notes", "find": find, "replace": replace}}]},
                {"content": "Done."}
            ],
            "security_scan": [{"content": ALLOW}]
        });
        Arc::new(CountingScans {
            model: ScriptedModel::from_yaml(&playbook.to_string(), "inline").unwrap(),
            gauge: Arc::clone(&gauge),
            peers: 2,
            wait: Duration::from_millis(700),
        })
    };
    let (a, b) = runtime().block_on(async {
        tokio::join!(
            run_with(&data, "alice", "t1", model("first: TODO", "first: done")),
            run_with(&data, "alice", "t2", model("second: TODO", "second: done")),
        )
    });
    for results in [&a, &b] {
        assert_eq!(
            results[0].1,
            "Patched custom skill 'notes' (1 replacement(s) applied, 1 match(es) found)."
        );
    }
    assert_eq!(gauge.done.load(Ordering::SeqCst), 2);
    assert_eq!(
        gauge.most.load(Ordering::SeqCst),
        1,
        "the two scans overlapped"
    );
    let text = std::fs::read_to_string(dir.join("SKILL.md")).unwrap();
    assert!(
        text.contains("first: done\nsecond: done\n"),
        "a patch was lost: {text}"
    );
}
