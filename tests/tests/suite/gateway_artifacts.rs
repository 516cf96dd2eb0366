//! Downloading a run's artifacts through the gateway, against a real cluster and a real
//! bubblewrap sandbox: `GET /api/runs/{id}/artifact?path=...` sends a file the run
//! presented, as an attachment that a browser will not run (`nosniff`, a sandbox CSP);
//! a file the run wrote but did not present, a path that climbs out of the outputs, a
//! presented link that points out of them, and another user's run are all 404.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::lead_support::{http_full, LeadCluster};
use antler_tests::wait_for;
use serde_json::{json, Value};

const ALICE: &str = "alice-token-000000000001";
const BOB: &str = "bob-token-00000000000002";

const PLAYBOOK: &str = r##"
turns:
  - tool_calls:
      - name: write_file
        args: {description: report, path: /mnt/user-data/outputs/report.md, content: "# Report\n\nAll good.\n"}
      - name: write_file
        args: {description: draft, path: /mnt/user-data/outputs/draft.md, content: "not presented"}
      - name: bash
        args: {description: link, command: "ln -s /etc/hostname /mnt/user-data/outputs/escape.md"}
  - tool_calls:
      - name: present_files
        args: {filepaths: ["/mnt/user-data/outputs/report.md"]}
      - name: present_files
        args: {filepaths: ["/mnt/user-data/outputs/escape.md"]}
  - content: Done.
"##;

fn encode(path: &str) -> String {
    path.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[test]
fn only_presented_files_of_ones_own_runs_are_downloaded() {
    let config = format!(
        "{}antler:\n  gateway:\n    tokens:\n      - {{token: {ALICE}, user: alice}}\n      - {{token: {BOB}, user: bob}}\n    allow_scripted_models: true\n",
        "tools:\n  - {name: write_file, group: file, use: \"deerflow.sandbox.tools:write_file_tool\"}\n  - {name: bash, group: bash, use: \"deerflow.sandbox.tools:bash_tool\"}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n  bash_command_timeout: 20\n"
    );
    let cluster = LeadCluster::up(&config, &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")]);
    let addr = cluster.gateway();
    let call = |token: &str, method: &str, path: &str, body: Option<&Value>| {
        let body = body.map(Value::to_string);
        http_full(&addr, token, method, path, body.as_deref())
    };
    let (code, _, body) = call(
        ALICE,
        "POST",
        "/api/runs",
        Some(&json!({"task": "Write and present a report", "playbook_yaml": PLAYBOOK})),
    );
    assert_eq!(code, 201, "{body}");
    let run_id = serde_json::from_str::<Value>(&body).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let view = wait_for(Duration::from_secs(90), || {
        let (code, _, body) = call(ALICE, "GET", &format!("/api/runs/{run_id}"), None);
        let view: Value = serde_json::from_str(&body).ok()?;
        (code == 200 && view["status"] != "running").then_some(view)
    })
    .expect("the run stopped");
    assert_eq!(view["status"], "success", "{view}");
    let artifacts = view["artifacts"].as_array().unwrap();
    assert!(
        artifacts.contains(&json!("/mnt/user-data/outputs/report.md")),
        "{view}"
    );
    let download = |token: &str, path: &str| {
        call(
            token,
            "GET",
            &format!("/api/runs/{run_id}/artifact?path={}", encode(path)),
            None,
        )
    };

    let (code, head, body) = download(ALICE, "/mnt/user-data/outputs/report.md");
    assert_eq!(code, 200, "{body} {view}");
    assert_eq!(body, "# Report\n\nAll good.\n");
    assert!(
        head.contains("content-type: application/octet-stream"),
        "{head}"
    );
    assert!(head.contains("x-content-type-options: nosniff"), "{head}");
    assert!(
        head.contains("content-disposition: attachment; filename=\"report.md\""),
        "{head}"
    );
    assert!(head.contains("content-security-policy: sandbox"), "{head}");

    let hostname = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
    for (who, token, path) in [
        (
            "a file not presented",
            ALICE,
            "/mnt/user-data/outputs/draft.md",
        ),
        (
            "a climb out of the outputs",
            ALICE,
            "/mnt/user-data/outputs/../../../../../../etc/hostname",
        ),
        (
            "a presented link out of the outputs",
            ALICE,
            "/mnt/user-data/outputs/escape.md",
        ),
        ("a path outside the outputs", ALICE, "/etc/hostname"),
        (
            "another user's run",
            BOB,
            "/mnt/user-data/outputs/report.md",
        ),
    ] {
        let (code, _, body) = download(token, path);
        assert_eq!(code, 404, "{who}: {body}");
        assert!(
            hostname.trim().is_empty() || !body.contains(hostname.trim()),
            "{who}: the reply quotes a host file: {body}"
        );
    }
    let (code, _, _) = call(ALICE, "GET", &format!("/api/runs/{run_id}/artifact"), None);
    assert_eq!(code, 400);
}
