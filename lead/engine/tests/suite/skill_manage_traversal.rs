//! Supporting-file paths that would leave their directory, through a run: absolute,
//! `..`, outside the four support directories, a directory only, or through a symlink
//! out of the skill; each gets DeerFlow's text and nothing is written anywhere.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::skill_manage_support::{failed, run_blocking, skill_md, Data, ALLOW};
use serde_json::json;

#[test]
fn paths_out_of_the_support_directories_are_refused() {
    let data = Data::new();
    let dir = data.custom("alice", "tool");
    std::fs::create_dir_all(dir.join("scripts")).unwrap();
    std::fs::write(dir.join("SKILL.md"), skill_md("tool", "A tool.")).unwrap();
    let outside = data.dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, dir.join("scripts/linked")).unwrap();
    std::os::unix::fs::symlink(&outside, dir.join("templates")).unwrap();
    let paths = [
        "/tmp/evil.sh",
        "scripts/../../../evil.sh",
        "../public/x/SKILL.md",
        "SKILL.md",
        "bin/evil",
        "scripts/",
        "scripts/linked/evil.sh",
        "templates/evil.md",
    ];
    let calls: Vec<serde_json::Value> = paths
        .iter()
        .map(|p| json!({"name": "skill_manage", "args": {"action": "write_file", "name": "tool", "path": p, "content": "echo hi\n"}}))
        .collect();
    let playbook = json!({
        "turns": [{"tool_calls": calls}, {"content": "Done."}],
        "security_scan": [{"content": ALLOW}]
    });
    let results = run_blocking(&data, "alice", &playbook.to_string());
    let texts: Vec<&str> = results.iter().map(|r| r.1.as_str()).collect();
    let expected: Vec<String> = [
        "Supporting file path must be relative.",
        "Supporting file path must not contain parent-directory traversal.",
        "Supporting file path must not contain parent-directory traversal.",
        "Supporting files must live under one of: assets, references, scripts, templates.",
        "Supporting files must live under one of: assets, references, scripts, templates.",
        "Supporting file path must include a filename.",
        "Supporting file path must stay within the selected support directory.",
        "Supporting file path must stay within the selected support directory.",
    ]
    .iter()
    .map(|t| failed("ValueError", t))
    .collect();
    assert_eq!(texts, expected);
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "nothing escaped"
    );
    assert!(!std::path::Path::new("/tmp/evil.sh").exists());
    assert_eq!(
        std::fs::read_to_string(dir.join("SKILL.md")).unwrap(),
        skill_md("tool", "A tool.")
    );
}
