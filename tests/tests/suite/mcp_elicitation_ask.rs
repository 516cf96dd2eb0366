//! Elicitation asked of the run's user (`"elicitation": "ask"`), end to end against
//! server-everything's `trigger-elicitation-request` (a required `name`, typed optional
//! fields). A run started over the gateway calls the tool; its view lists the pending
//! elicitation with the requested schema; an answer that does not fit the schema is 400
//! and the elicitation stays pending; another user cannot answer it (404, as if it did not
//! exist); the run's user's answer completes the call and the tool result holds the
//! answered values; a decline gives the server's decline outcome; an unknown id is 404.
//! The same from the CLI: `antler run` following the run names the elicitation and the
//! command that answers it, and `antler run --resume RUN --elicitation ID --answer` does.
//! A subagent's call on a worker asks the parent run's user the same way.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::lead_support::{http_full, LeadCluster};
use crate::mcp_support::npm_bin;
use antler_tests::wait_for;
use serde_json::{json, Value};

const ALICE: &str = "alice-token-000000000001";
const BOB: &str = "bob-token-00000000000002";

fn playbook(call_id: &str) -> String {
    format!(
        "turns:\n  - tool_calls:\n      - {{id: {call_id}, name: everything_trigger-elicitation-request, args: {{}}}}\n  - content: Thanks for the details.\n"
    )
}

struct Gateway {
    cluster: LeadCluster,
    addr: String,
}

impl Gateway {
    fn up() -> Gateway {
        Self::up_with_workers(0)
    }

    fn up_with_workers(workers: u32) -> Gateway {
        let config = format!(
            "antler:\n  gateway:\n    tokens:\n      - {{token: {ALICE}, user: alice}}\n      - {{token: {BOB}, user: bob}}\n    allow_scripted_models: true\n"
        );
        let servers = json!({"mcpServers": {"everything": {
            "type": "stdio",
            "command": npm_bin("mcp-server-everything").display().to_string(),
            "args": ["stdio"],
            "elicitation": "ask",
        }}});
        let cluster = LeadCluster::up_with_workers(
            &config,
            &[("extensions_config.json", &servers.to_string())],
            &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")],
            workers,
        );
        // server-everything adds its eliciting tool once it knows the client can answer.
        let listed = wait_for(Duration::from_secs(30), || {
            let out = antler_tests::antler(&cluster.runtime(), &["mcp", "status", "--json"]);
            let list: Value = serde_json::from_slice(&out.stdout).ok()?;
            list.as_array()?
                .iter()
                .any(|s| s["name"] == "everything" && s["tools"] == 15)
                .then_some(())
        });
        assert!(
            listed.is_some(),
            "server-everything did not list its 15 tools"
        );
        let addr = cluster.gateway();
        Gateway { cluster, addr }
    }

    fn http(&self, token: &str, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
        let (code, _, text) = http_full(&self.addr, token, method, path, body);
        (
            code,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// Starts a run as alice that calls the eliciting tool as `call_id`; its id.
    fn start(&self, call_id: &str) -> String {
        let body = json!({"task": "Collect my details", "playbook_yaml": playbook(call_id)});
        let (code, reply) = self.http(ALICE, "POST", "/api/runs", Some(&body.to_string()));
        assert_eq!(code, 201, "{reply}");
        reply["run_id"].as_str().unwrap().to_owned()
    }

    fn view(&self, run_id: &str) -> Value {
        let (code, view) = self.http(ALICE, "GET", &format!("/api/runs/{run_id}"), None);
        assert_eq!(code, 200, "{view}");
        view
    }

    /// The run's first pending elicitation, once there is one.
    fn pending(&self, run_id: &str) -> Value {
        wait_for(Duration::from_secs(60), || {
            self.view(run_id)["elicitations"]
                .as_array()
                .and_then(|e| e.first().cloned())
        })
        .unwrap_or_else(|| panic!("no pending elicitation: {}", self.view(run_id)))
    }

    fn answer(&self, token: &str, run_id: &str, id: &str, body: Value) -> (u16, Value) {
        let path = format!("/api/runs/{run_id}/elicitations/{id}");
        self.http(token, "POST", &path, Some(&body.to_string()))
    }

    /// The run's view once it ended.
    fn ended(&self, run_id: &str) -> Value {
        wait_for(Duration::from_secs(60), || {
            let view = self.view(run_id);
            (view["status"] != "running").then_some(view)
        })
        .expect("the run ends")
    }

    /// The text of the tool message answering `call_id`.
    fn tool_result(&self, run_id: &str, call_id: &str) -> String {
        let (code, messages) =
            self.http(ALICE, "GET", &format!("/api/runs/{run_id}/messages"), None);
        assert_eq!(code, 200, "{messages}");
        messages["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| m["tool_call_id"] == call_id)
            .and_then(|m| m["content"].as_str().map(str::to_owned))
            .unwrap_or_else(|| panic!("no tool message for {call_id}: {messages}"))
    }
}

#[test]
fn the_runs_user_answers_an_elicitation_from_the_run_view() {
    let g = Gateway::up();

    let run_id = g.start("ask-1");
    let asked = g.pending(&run_id);
    assert_eq!(asked["server"], "everything");
    assert_eq!(
        asked["message"],
        "Please provide inputs for the following fields:"
    );
    assert_eq!(asked["requested_schema"]["required"], json!(["name"]));
    assert_eq!(
        asked["requested_schema"]["properties"]["integer"]["type"],
        "integer"
    );
    let id = asked["id"].as_str().unwrap().to_owned();
    assert_eq!(g.view(&run_id)["status"], "running");

    // Content that does not fit the schema: 400, and it is still pending.
    let (code, reply) = g.answer(
        ALICE,
        &run_id,
        &id,
        json!({"action": "accept", "content": {"integer": 7}}),
    );
    assert_eq!(code, 400, "{reply}");
    assert!(
        reply
            .to_string()
            .contains("required field `name` is missing"),
        "{reply}"
    );
    let (code, reply) = g.answer(
        ALICE,
        &run_id,
        &id,
        json!({"action": "accept", "content": {"name": "Ada", "integer": 500}}),
    );
    assert_eq!(code, 400, "{reply}");
    assert!(
        reply.to_string().contains("`integer`: out of range"),
        "{reply}"
    );
    assert_eq!(g.view(&run_id)["elicitations"][0]["id"], id.as_str());

    // Another user may not answer it, nor see that the run exists.
    let (code, reply) = g.answer(BOB, &run_id, &id, json!({"action": "decline"}));
    assert_eq!(code, 404, "{reply}");
    assert_eq!(g.view(&run_id)["elicitations"][0]["id"], id.as_str());

    // An id the run does not wait on.
    let (code, reply) = g.answer(ALICE, &run_id, "e999", json!({"action": "decline"}));
    assert_eq!(code, 404, "{reply}");

    // The run's user answers: the call completes with the answered values.
    let (code, reply) = g.answer(
        ALICE,
        &run_id,
        &id,
        json!({"action": "accept", "content": {"name": "Ada Lovelace", "check": true, "integer": 7}}),
    );
    assert_eq!(code, 200, "{reply}");
    let view = g.ended(&run_id);
    assert_eq!(view["status"], "success", "{view}");
    assert_eq!(view["elicitations"], json!([]), "{view}");
    let result = g.tool_result(&run_id, "ask-1");
    assert!(
        result.contains("User provided the requested information"),
        "{result}"
    );
    assert!(result.contains("- Name: Ada Lovelace"), "{result}");
    assert!(result.contains("- Favorite Integer: 7"), "{result}");
    // Answered once: a second answer finds nothing pending.
    let (code, _) = g.answer(ALICE, &run_id, &id, json!({"action": "decline"}));
    assert_eq!(code, 404);

    // A decline gives the server's decline outcome.
    let run_id = g.start("ask-2");
    let id = g.pending(&run_id)["id"].as_str().unwrap().to_owned();
    let (code, reply) = g.answer(ALICE, &run_id, &id, json!({"action": "decline"}));
    assert_eq!(code, 200, "{reply}");
    assert_eq!(g.ended(&run_id)["status"], "success");
    let result = g.tool_result(&run_id, "ask-2");
    assert!(
        result.contains("User declined to provide the requested information"),
        "{result}"
    );
}

#[test]
fn antler_run_names_the_elicitation_and_answers_it() {
    use std::io::BufRead;
    let g = Gateway::up();
    let runtime = g.cluster.runtime();
    let playbook_path = g.cluster.dir.path().join("ask.yaml");
    std::fs::write(&playbook_path, playbook("ask-cli")).unwrap();
    let out = antler_tests::antler(
        &runtime,
        &[
            "run",
            "Collect my details",
            "--detach",
            "--json",
            "--user",
            "alice",
            "--playbook",
            &playbook_path.display().to_string(),
        ],
    );
    let submitted: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let run_id = submitted["run_id"].as_str().unwrap().to_owned();

    // A follower without a terminal shows the question and how to answer it.
    let mut follower = std::process::Command::new(antler_tests::bin("antler"))
        .arg("--runtime-dir")
        .arg(&runtime)
        .args(["run", "--resume", &run_id])
        .env("RUST_LOG", "error")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(follower.stderr.take().unwrap()).lines();
    let mut shown = Vec::new();
    let id = loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("the follower ended: {shown:?}"))
            .unwrap();
        shown.push(line.clone());
        if let Some(rest) = line.split("(elicitation ").nth(1) {
            assert!(
                line.contains("everything asks: Please provide inputs"),
                "{line}"
            );
            break rest.trim_end_matches(')').to_owned();
        }
    };
    let hint = lines.next().unwrap().unwrap();
    assert!(
        hint.contains(&format!(
            "antler run --resume {run_id} --elicitation {id} --answer"
        )),
        "{hint}"
    );

    // An answer that is no answer, and one that does not fit: refused, still pending.
    let answer = |text: &str| {
        antler_tests::antler(
            &runtime,
            &[
                "run",
                "--resume",
                &run_id,
                "--elicitation",
                &id,
                "--answer",
                text,
                "--json",
            ],
        )
    };
    let out = answer("maybe");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("decline, cancel, or a JSON object"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = answer(r#"{"integer": 7}"#);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("required field `name` is missing"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(g.pending(&run_id)["id"], id.as_str());

    // The answer completes the call; the command follows the run to its end.
    let out = answer(r#"{"name": "Grace Hopper", "integer": 9}"#);
    let view: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(view["status"], "success", "{view}");
    let result = g.tool_result(&run_id, "ask-cli");
    assert!(result.contains("Grace Hopper"), "{result}");
    assert!(follower.wait().unwrap().success());
}

#[test]
fn antler_run_on_a_terminal_asks_the_fields_and_answers() {
    use std::io::{Read, Write};
    let g = Gateway::up();
    let runtime = g.cluster.runtime();
    let run_id = g.start("ask-tty");
    g.pending(&run_id);
    // `script` gives `antler run` a terminal; what is typed: Enter (answer it), a name,
    // then Enter for every other field (left out).
    let command = format!(
        "'{}' --runtime-dir '{}' run --resume {run_id}",
        antler_tests::bin("antler").display(),
        runtime.display()
    );
    let mut follower = std::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env("RUST_LOG", "error")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = follower.stdin.take().unwrap();
    stdin.write_all(b"\nAda Byron\n").unwrap();
    stdin.write_all(&[b'\n'; 40]).unwrap();
    stdin.flush().unwrap();
    let view = g.ended(&run_id);
    drop(stdin);
    let mut shown = String::new();
    follower
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut shown)
        .unwrap();
    let _ = follower.wait();
    assert_eq!(view["status"], "success", "{view}\n{shown}");
    assert!(
        shown.contains("everything asks: Please provide inputs"),
        "{shown}"
    );
    assert!(shown.contains("(answered)"), "{shown}");
    let result = g.tool_result(&run_id, "ask-tty");
    assert!(result.contains("Ada Byron"), "{result}");
}

#[test]
fn a_subagents_call_asks_the_parent_runs_user() {
    let g = Gateway::up_with_workers(1);
    let playbook = "turns:\n  - tool_calls:\n      - {id: delegate, name: task, args: {description: details, prompt: Collect the details., subagent_type: general-purpose}}\n  - content: Delegated.\nsubagents:\n  details:\n    turns:\n      - tool_calls:\n          - {id: ask-sub, name: everything_trigger-elicitation-request, args: {}}\n      - content: Collected.\n";
    let body = json!({"task": "Delegate it", "playbook_yaml": playbook, "subagents": true});
    let (code, reply) = g.http(ALICE, "POST", "/api/runs", Some(&body.to_string()));
    assert_eq!(code, 201, "{reply}");
    let run_id = reply["run_id"].as_str().unwrap().to_owned();
    // The worker's call waits on the parent run's user, who sees it in the parent's view.
    let asked = g.pending(&run_id);
    assert_eq!(asked["server"], "everything");
    assert_eq!(asked["requested_schema"]["required"], json!(["name"]));
    let id = asked["id"].as_str().unwrap().to_owned();
    let (code, reply) = g.answer(BOB, &run_id, &id, json!({"action": "decline"}));
    assert_eq!(code, 404, "{reply}");
    let (code, reply) = g.answer(
        ALICE,
        &run_id,
        &id,
        json!({"action": "accept", "content": {"name": "Katherine Johnson"}}),
    );
    assert_eq!(code, 200, "{reply}");
    let view = g.ended(&run_id);
    assert_eq!(view["status"], "success", "{view}");
    // The parent's events carry the task's elicitation, then the subagent's call
    // completing with the answer, and nothing waits any more.
    let (code, events) = g.http(ALICE, "GET", &format!("/api/runs/{run_id}/events"), None);
    assert_eq!(code, 200, "{events}");
    let text = events.to_string();
    assert!(text.contains(r#"\"type\":\"task_elicitation\""#), "{text}");
    assert!(
        text.contains(r#"\"call_id\":\"ask-sub\",\"error\":false"#),
        "{text}"
    );
    assert_eq!(view["elicitations"], json!([]), "{view}");
}
