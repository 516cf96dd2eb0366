//! A model's `fallback:` list and its circuit breaker through `antler run`: the primary,
//! a stand-in that answers every request `500` (`failing_standin`), is retried by its
//! client (an `llm_retry` event in DeerFlow's words), then the next model of its list
//! (the suites' `recording_server`) answers (a `model_fallback` event, and the turn's
//! `model_finished` names it). After `circuit_breaker.failure_threshold` final failures
//! the primary's breaker opens and the next turn skips it without a request
//! (`model_fallback` with reason `circuit_open`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::model_support::standin::{respond, standin, Serve};
use crate::model_support::{self, Reply};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};

/// A stand-in for a provider that is down: every request is answered `500` with an
/// OpenAI error body. Its base URL and the number of requests it got.
fn failing_standin() -> (String, Arc<AtomicUsize>) {
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    let base = standin(Serve::InOrder, move |_, stream| {
        seen.fetch_add(1, Ordering::SeqCst);
        let error = json!({"error": {"message": "The server had an error while processing your request.", "type": "server_error"}}).to_string();
        respond(
            stream,
            "500 Internal Server Error",
            "application/json",
            &error,
        );
    });
    (format!("{base}/v1"), count)
}

/// The run's model events, as short lines.
fn model_events(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|l| l["event"].clone())
        .filter_map(|e| match e["event"].as_str()? {
            "llm_retry" => Some(format!(
                "retry {} {}/{} {}: {}",
                e["model"].as_str()?,
                e["attempt"],
                e["max_attempts"],
                e["reason"].as_str()?,
                e["message"].as_str()?
            )),
            "model_fallback" => Some(format!(
                "fallback {} -> {} ({})",
                e["from"].as_str()?,
                e["to"].as_str()?,
                e["reason"].as_str()?
            )),
            "model_finished" => Some(format!(
                "turn {} answered by {}",
                e["turn"],
                e["model"].as_str().unwrap_or("the run's model")
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn a_failing_primary_falls_back_and_its_breaker_opens_at_the_threshold() {
    let (primary, primary_requests) = failing_standin();
    let backup = model_support::recording_server(vec![
        Reply::call("made_up_tool", json!({})),
        Reply::call("made_up_tool", json!({"again": true})),
        Reply::text("Answered by the backup."),
    ]);
    let dir = tempfile::Builder::new()
        .prefix("antler-fallback")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::write(
        dir.path().join("config.yaml"),
        format!(
            "models:\n  - name: primary\n    use: langchain_openai:ChatOpenAI\n    model: m\n    base_url: {primary}\n    max_retries: 1\n    fallback: [backup]\n  - name: backup\n    use: langchain_openai:ChatOpenAI\n    model: m\n    base_url: {}\ncircuit_breaker:\n  failure_threshold: 2\ntool_search:\n  enabled: false\n",
            backup.base_url
        ),
    )
    .unwrap();
    let (view, stderr) =
        model_support::antler_run(dir.path(), &["Go.", "--model", "primary", "--trace"]);
    assert_eq!(view["status"], "success", "{view}\n{stderr}");
    assert_eq!(view["final_answer"], "Answered by the backup.");
    let turn = |n: usize| {
        [
            "retry primary 1/2 transient: LLM request retry 1/2: provider request failed temporarily. Retrying in 1s.".to_owned(),
            "fallback primary -> backup (transient)".to_owned(),
            format!("turn {n} answered by backup"),
        ]
    };
    let mut expected: Vec<String> = turn(1).into_iter().chain(turn(2)).collect();
    // Two final failures: the breaker is open, the primary is not asked again.
    expected.push("fallback primary -> backup (circuit_open)".to_owned());
    expected.push("turn 3 answered by backup".to_owned());
    assert_eq!(model_events(&stderr), expected, "{stderr}");
    assert_eq!(primary_requests.load(Ordering::SeqCst), 4);
    assert_eq!(backup.requests.lock().unwrap().len(), 3);
}
