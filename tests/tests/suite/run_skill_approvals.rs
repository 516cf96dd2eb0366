//! Skills carrying approval rules (issue 37): an enabled skill's `approvals:` front matter
//! joins the run's policy as the layer `skill NAME`. With the skill installed a call its
//! `deny` rule matches is answered with the rule's justification and never runs, and a call
//! its `ask` rule matches stops the run with the skill named as the rule's origin; with the
//! skill disabled in extensions_config.json the same call runs. A skill whose rule's
//! examples fail is refused at load, so its rules do not apply.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use antler_tests::{antler, wait_for};
use serde_json::Value;

use crate::lead_support::LeadCluster;

const CONFIG: &str = r#"tools:
  - {name: bash, group: bash, use: deerflow.sandbox.tools:bash_tool}
sandbox:
  use: deerflow.community.aio_sandbox:AioSandboxProvider
tool_search:
  enabled: false
approvals:
  defaults: false
  deadline_seconds: 3600
"#;

const SHIPPING: &str = r#"---
name: shipping
description: Ships releases.
approvals:
  - name: release-lock
    tool: bash
    command: [mkdir, released]
    decision: deny
    justification: releases are frozen this week
    examples:
      match: ["mkdir released"]
      not_match: ["mkdir notes"]
  - name: tag-push
    tool: bash
    command: [git, tag]
    decision: ask
    justification: tags are public
---
# Shipping
"#;

/// A skill whose rule's example does not hold: refused at load.
const BROKEN: &str = r#"---
name: broken
description: Its example fails.
approvals:
  - name: no-notes
    tool: bash
    command: [mkdir, notes]
    decision: deny
    examples:
      match: ["mkdir other"]
---
# Broken
"#;

const RELEASE: &str = r#"
turns:
  - tool_calls:
      - {name: bash, id: rel-1, args: {description: release, command: "cd /mnt/user-data/workspace && mkdir released"}}
      - {name: bash, id: notes-1, args: {description: notes, command: "cd /mnt/user-data/workspace && mkdir notes"}}
  - content: Released.
"#;

const TAG: &str = r#"
turns:
  - tool_calls:
      - {name: bash, id: tag-1, args: {description: tag, command: "git tag v1"}}
  - content: Tagged.
"#;

fn install(c: &LeadCluster, name: &str, text: &str) {
    let dir = c.base().join("skills/public").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("SKILL.md"), text).unwrap();
}

fn workspace(c: &LeadCluster, thread: &str) -> PathBuf {
    c.base()
        .join("users/default/threads")
        .join(thread)
        .join("user-data/workspace")
}

fn run_json(runtime: &Path, args: &[&str]) -> Value {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    all.push("--json");
    let out = antler(runtime, &all);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The content of the tool message answering `call` in the run's last state.
fn tool_result(c: &LeadCluster, run_id: &str, call: &str) -> String {
    let state = c.run_state(run_id);
    state["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["tool_call_id"] == call)
        .and_then(|m| m["content"].as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("no result for {call}: {state}"))
}

#[test]
fn an_enabled_skills_rules_join_the_runs_policy() {
    let c = LeadCluster::up_with_files(
        CONFIG,
        &[("extensions_config.json", r#"{"mcpServers": {}}"#)],
        &[],
    );
    install(&c, "shipping", SHIPPING);
    install(&c, "broken", BROKEN);
    let release = c.write("release.yaml", RELEASE);

    // The skill's deny rule answers the call; the broken skill's rule is not applied.
    let done = run_json(
        &c.runtime(),
        &["Release", "--playbook", &release, "--thread", "t-on"],
    );
    assert_eq!(done["status"], "success", "{done}");
    let run_id = done["run_id"].as_str().unwrap();
    assert_eq!(
        tool_result(&c, run_id, "rel-1"),
        "denied by policy: releases are frozen this week (rule release-lock)"
    );
    let ws = workspace(&c, "t-on");
    assert!(!ws.join("released").exists(), "a denied call ran");
    assert!(
        ws.join("notes").exists(),
        "the rule of a skill refused at load applied"
    );

    // Its ask rule stops the run, the skill named as the rule's origin.
    let tag = c.write("tag.yaml", TAG);
    let run_id = c.submit("Tag", &tag, &["--thread", "t-tag"]);
    let asked = wait_for(Duration::from_secs(90), || {
        (c.run_status(&run_id) == "interrupted").then_some(())
    });
    assert!(asked.is_some(), "the run is {}", c.run_status(&run_id));
    let view = run_json(&c.runtime(), &["--resume", &run_id]);
    assert_eq!(view["approvals"][0]["rule"], "tag-push", "{view}");
    assert_eq!(view["approvals"][0]["origin"], "skill shipping", "{view}");
    let done = run_json(&c.runtime(), &["--resume", &run_id, "--deny", "tag-1"]);
    assert_eq!(done["status"], "success", "{done}");

    // Disabled, the skill's rules leave the policy: the same call runs.
    std::fs::write(
        c.dir.path().join("extensions_config.json"),
        r#"{"mcpServers": {}, "skills": {"shipping": {"enabled": false}}}"#,
    )
    .unwrap();
    let done = run_json(
        &c.runtime(),
        &["Release", "--playbook", &release, "--thread", "t-off"],
    );
    assert_eq!(done["status"], "success", "{done}");
    assert!(workspace(&c, "t-off").join("released").exists(), "{done}");
}
