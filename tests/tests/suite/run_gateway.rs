//! Runs over the lead's HTTP gateway: `POST /api/runs` starts a run in the lead,
//! `GET /api/runs/{id}/events` streams its events as server-sent events and ends with its
//! view, `GET /api/runs/{id}` shows it, `POST /api/runs/{id}/answer` answers a
//! clarification (only while the run waits for one: 409 otherwise), `/metrics` counts runs
//! and tool calls; bad requests get 4xx with a reason. Every route but `/health` needs the
//! bearer token; bound beyond loopback the gateway refuses to start without one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use antler_tests::{antler, bin, http, wait_for, Cluster};
use serde_json::{json, Value};

const PLAYBOOK: &str = r#"
turns:
  - tool_calls:
      - name: present_files
        args: {filepaths: ["/mnt/user-data/outputs/missing.md"]}
  - content: Nothing to present after all.
"#;

const CLARIFY: &str = r#"
turns:
  - tool_calls:
      - name: ask_clarification
        args: {question: "Which year?", clarification_type: missing_info, options: ["2024", "2025"]}
  - content: The report covers the year you chose.
"#;

/// Starts a cluster with these gateway settings and waits until it is healthy.
fn cluster(env: &[(&str, &str)]) -> Cluster {
    let c = Cluster::up_with(0, env);
    let ok = wait_for(Duration::from_secs(30), || {
        let st = c.status()?;
        (st.len() == 3 && st.iter().all(|p| p["healthy"] == true)).then_some(())
    });
    assert!(ok.is_some(), "cluster not healthy: {:?}", c.status());
    c
}

/// The `event: NAME` / `data: JSON` pairs of a server-sent event stream.
fn events(stream: &str) -> Vec<(String, Value)> {
    stream
        .split("\n\n")
        .filter_map(|block| {
            let name = block.lines().find_map(|l| l.strip_prefix("event: "))?;
            let data = block.lines().find_map(|l| l.strip_prefix("data: "))?;
            Some((name.to_owned(), serde_json::from_str(data).ok()?))
        })
        .collect()
}

#[test]
fn a_run_over_http_streams_its_events_and_is_counted() {
    let c = cluster(&[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")]);
    let body = json!({"task": "Present the report", "playbook_yaml": PLAYBOOK, "user": "alice"});
    let (status, text) = c.gateway_http("POST", "/api/runs", Some(&body.to_string()));
    assert_eq!(status, 201, "{text}");
    let run_id = serde_json::from_str::<Value>(&text).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();

    let (status, stream) = c.gateway_http("GET", &format!("/api/runs/{run_id}/events"), None);
    assert_eq!(status, 200);
    let events = events(&stream);
    let (last, view) = events.last().expect("events");
    assert_eq!(last, "end", "{stream}");
    assert_eq!(view["status"], "success", "{view}");
    assert_eq!(view["user"], "alice");
    let names: Vec<&str> = events
        .iter()
        .filter(|(kind, _)| kind == "run")
        .filter_map(|(_, e)| e["event"].as_str())
        .collect();
    for expected in [
        "model_started",
        "tool_started",
        "lifecycle",
        "tool_finished",
    ] {
        assert!(names.contains(&expected), "{expected} missing: {names:?}");
    }
    let finished = events
        .iter()
        .find(|(_, e)| e["event"] == "tool_finished")
        .unwrap();
    assert_eq!(finished.1["name"], "present_files");
    assert_eq!(finished.1["error"], true, "a missing file is an error");

    let (status, text) = c.gateway_http("GET", &format!("/api/runs/{run_id}"), None);
    assert_eq!(status, 200);
    let view: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(view["final_answer"], "Nothing to present after all.");

    let (status, metrics) = c.gateway_http("GET", "/metrics", None);
    assert_eq!(status, 200);
    for line in [
        "antler_runs_started_total 1",
        "antler_runs_active 0",
        "antler_runs_total{status=\"success\"} 1",
        "antler_tool_calls_total{source=\"builtin\",outcome=\"error\"} 1",
        "antler_tool_states_total{source=\"builtin\",state=\"executed\"} 1",
        "antler_step_duration_seconds_count 2",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "{line} missing:\n{metrics}"
        );
    }
}

#[test]
fn a_clarification_is_answered_over_http() {
    let c = cluster(&[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")]);
    let body = json!({"task": "Write a report", "playbook_yaml": CLARIFY, "clarification": true});
    let (status, text) = c.gateway_http("POST", "/api/runs", Some(&body.to_string()));
    assert_eq!(status, 201, "{text}");
    let run_id = serde_json::from_str::<Value>(&text).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let events_path = format!("/api/runs/{run_id}/events");
    let (_, stream) = c.gateway_http("GET", &events_path, None);
    let (_, view) = events(&stream).pop().unwrap();
    assert_eq!(view["status"], "interrupted", "{view}");
    assert!(
        view["question"].as_str().unwrap().contains("Which year?"),
        "{view}"
    );

    let answer_path = format!("/api/runs/{run_id}/answer");
    let (status, text) = c.gateway_http("POST", &answer_path, Some(r#"{"answer": "2025"}"#));
    assert_eq!(status, 202, "{text}");
    let (_, stream) = c.gateway_http("GET", &events_path, None);
    let (_, view) = events(&stream).pop().unwrap();
    assert_eq!(view["status"], "success", "{view}");
    assert_eq!(
        view["final_answer"],
        "The report covers the year you chose."
    );

    // A finished run takes no answer and is not driven again.
    let (status, text) = c.gateway_http("POST", &answer_path, Some(r#"{"answer": "2024"}"#));
    assert_eq!(status, 409, "{text}");
    assert!(
        text.contains("is success, not waiting for an answer"),
        "{text}"
    );
    let (_, text) = c.gateway_http("GET", &format!("/api/runs/{run_id}"), None);
    let view: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(view["status"], "success", "{view}");
    assert_eq!(
        view["final_answer"],
        "The report covers the year you chose."
    );
}

#[test]
fn a_run_that_never_asked_takes_no_answer() {
    let c = cluster(&[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")]);
    let body = json!({"task": "Present", "playbook_yaml": PLAYBOOK});
    let (status, text) = c.gateway_http("POST", "/api/runs", Some(&body.to_string()));
    assert_eq!(status, 201, "{text}");
    let run_id = serde_json::from_str::<Value>(&text).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (_, stream) = c.gateway_http("GET", &format!("/api/runs/{run_id}/events"), None);
    let (_, view) = events(&stream).pop().unwrap();
    assert_eq!(view["status"], "success", "{view}");
    let (status, text) = c.gateway_http(
        "POST",
        &format!("/api/runs/{run_id}/answer"),
        Some(r#"{"answer": "x"}"#),
    );
    assert_eq!(status, 409, "{text}");
    let (_, text) = c.gateway_http("GET", &format!("/api/runs/{run_id}"), None);
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["status"],
        "success"
    );
}

#[test]
fn bad_requests_get_a_reason_and_start_nothing() {
    let c = cluster(&[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")]);
    let playbook = PLAYBOOK;
    let cases = [
        ("{not json".to_owned(), 400, "JSON object with a `task`"),
        (json!({"playbook_yaml": playbook}).to_string(), 400, "task"),
        (
            json!({"task": "x", "playbook_yaml": playbook, "colour": "red"}).to_string(),
            400,
            "unknown field",
        ),
        (
            json!({"task": "  ", "playbook_yaml": playbook}).to_string(),
            400,
            "empty",
        ),
        (
            json!({"task": "x", "playbook_yaml": playbook, "user": "../../etc"}).to_string(),
            400,
            "invalid user",
        ),
        (
            json!({"task": "x", "playbook_yaml": playbook, "thread": "a/b"}).to_string(),
            400,
            "invalid thread",
        ),
        (
            json!({"task": "x", "playbook": "/nonexistent/playbook.yaml"}).to_string(),
            400,
            "relative path",
        ),
        (
            json!({"task": "x", "playbook_yaml": "turns: []"}).to_string(),
            422,
            "at least one turn",
        ),
    ];
    for (body, want, reason) in cases {
        let (status, text) = c.gateway_http("POST", "/api/runs", Some(&body));
        assert_eq!(status, want, "{body}: {text}");
        assert!(text.contains(reason), "{body}: {text}");
    }
    let (status, text) = c.gateway_http("GET", "/api/runs/run-nope", None);
    assert_eq!(status, 404, "{text}");
    // A run the caller cannot see is 404 before its body is read.
    let (status, _) = c.gateway_http("POST", "/api/runs/run-nope/answer", Some("{}"));
    assert_eq!(status, 404);
    let (_, metrics) = c.gateway_http("GET", "/metrics", None);
    assert!(
        metrics.contains("antler_runs_started_total 0\n"),
        "{metrics}"
    );
    let escaped = c.dir.path().join("base");
    assert!(!escaped.join("etc").exists());
}

#[test]
fn beyond_loopback_the_gateway_needs_a_bearer_token() {
    let c = cluster(&[
        ("ANTLER_GATEWAY_ADDR", "0.0.0.0:0"),
        ("ANTLER_GATEWAY_TOKEN", "s3cret-token"),
    ]);
    let addr = c.gateway_addr().expect("the gateway listens");
    let (status, _) = http(&addr, "GET", "/metrics", &[], None);
    assert_eq!(status, 401);
    let (status, _) = http(
        &addr,
        "GET",
        "/metrics",
        &[("Authorization", "Bearer wrong-token!")],
        None,
    );
    assert_eq!(status, 401);
    let (status, _) = http(&addr, "POST", "/api/runs", &[], Some(r#"{"task": "x"}"#));
    assert_eq!(status, 401);
    let (status, text) = http(
        &addr,
        "GET",
        "/metrics",
        &[("Authorization", "Bearer s3cret-token")],
        None,
    );
    assert_eq!(status, 200, "{text}");
    let (status, _) = http(&addr, "GET", "/health", &[], None);
    assert_eq!(status, 200, "health needs no token");

    assert!(
        !c.runtime_dir().join("gateway.token").exists(),
        "the token was given: none is written"
    );

    // No token, no gateway beyond loopback: the cluster does not start.
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(bin("antler"))
        .arg("--runtime-dir")
        .arg(dir.path())
        .args(["up", "--workers", "0"])
        .env("ANTLER_GATEWAY_ADDR", "0.0.0.0:0")
        .env_remove("ANTLER_GATEWAY_TOKEN")
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ANTLER_GATEWAY_TOKEN"), "{stderr}");
    assert_eq!(antler(dir.path(), &["status", "--json"]).stdout, b"[]\n");
}

/// A run's events are kept with it: after the lead restarts, `GET /api/runs/{id}/events`
/// still streams them before the view (the lead keeps only recent runs in memory).
#[test]
fn a_finished_runs_events_are_streamed_again_after_a_lead_restart() {
    let env = [("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")];
    let mut c = cluster(&env);
    let body = json!({"task": "Present the report", "playbook_yaml": PLAYBOOK, "user": "alice"});
    let (status, text) = c.gateway_http("POST", "/api/runs", Some(&body.to_string()));
    assert_eq!(status, 201, "{text}");
    let run_id = serde_json::from_str::<Value>(&text).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/api/runs/{run_id}/events");
    let (_, first) = c.gateway_http("GET", &path, None);
    let first = events(&first);
    assert_eq!(first.last().map(|(k, _)| k.as_str()), Some("end"));
    let run_events = |all: &[(String, Value)]| -> Vec<Value> {
        all.iter()
            .filter(|(k, _)| k == "run")
            .map(|(_, e)| e.clone())
            .collect()
    };
    assert!(!run_events(&first).is_empty());

    antler_tests::signal(c.lead.id(), libc::SIGTERM);
    let stopped = wait_for(Duration::from_secs(30), || {
        c.lead.try_wait().ok().flatten().map(|_| ())
    });
    assert!(stopped.is_some(), "the lead did not stop");
    c.lead = std::process::Command::new(bin("antler"))
        .arg("--runtime-dir")
        .arg(c.runtime_dir())
        .args(["up", "--workers", "0"])
        .envs(env)
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let back = wait_for(Duration::from_secs(30), || {
        let st = c.status()?;
        (st.len() == 3 && st.iter().all(|p| p["healthy"] == true)).then_some(())
    });
    assert!(
        back.is_some(),
        "the lead did not come back: {:?}",
        c.status()
    );

    let (status, again) = c.gateway_http("GET", &path, None);
    assert_eq!(status, 200, "{again}");
    let again = events(&again);
    let (last, view) = again.last().expect("events");
    assert_eq!(last, "end");
    assert_eq!(view["status"], "success", "{view}");
    assert_eq!(run_events(&again), run_events(&first));
}
