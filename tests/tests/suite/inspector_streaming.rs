//! A reply shown as it is written: against a real cluster whose model is a stand-in for an
//! OpenAI-compatible endpoint that streams its answer a word at a time with pauses
//! (`slow_stream_server`), the run inspector in headless Chromium shows the turn's reply
//! growing (several partial texts, each a prefix of the answer) and then the final
//! message; the gateway's event stream carries the `model_delta` events, whose text adds
//! up to the answer; the runs store keeps the run's events without them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::sync::mpsc;
use std::time::Duration;

use crate::lead_support::{http_full, sql, LeadCluster};
use crate::model_support::standin::{chunk_frame, standin, start_event_stream, Serve};
use crate::suite::inspector_page::Browser;
use antler_tests::wait_for;
use serde_json::{json, Value};

const ALICE: &str = "alice-token-000000000001";

/// The answer, as the stand-in streams it.
const WORDS: [&str; 10] = [
    "The ", "reply ", "grows ", "one ", "word ", "at ", "a ", "time ", "on ", "screen.",
];

/// A stand-in OpenAI-compatible endpoint: the first request's answer is streamed a word at
/// a time, 250 ms apart, once `go` is sent; later requests get a short answer at once.
fn slow_stream_server(go: mpsc::Receiver<()>) -> String {
    let go = std::sync::Mutex::new(go);
    let base = standin(Serve::InOrder, move |request, stream| {
        start_event_stream(stream);
        let first = request.n == 0;
        let words: Vec<&str> = if first {
            let _ = go.lock().unwrap().recv_timeout(Duration::from_secs(60));
            WORDS.to_vec()
        } else {
            vec!["Noted."]
        };
        for (i, word) in words.iter().enumerate() {
            if first && i > 0 {
                std::thread::sleep(Duration::from_millis(250));
            }
            let delta = json!({"role": "assistant", "content": word});
            let _ = stream.write_all(chunk_frame("slow", delta, Value::Null).as_bytes());
            let _ = stream.flush();
        }
        let _ = stream.write_all(chunk_frame("slow", json!({}), json!("stop")).as_bytes());
        let _ = stream.write_all(b"data: [DONE]\n\n");
    });
    format!("{base}/v1")
}

#[test]
fn the_inspector_shows_a_reply_growing_while_it_streams() {
    let (go, gate) = mpsc::channel();
    let base_url = slow_stream_server(gate);
    let config = format!(
        "models:\n  - name: slow\n    use: langchain_openai:ChatOpenAI\n    model: slow\n    base_url: {base_url}\n    api_key: sk-x\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\nantler:\n  gateway:\n    tokens:\n      - {{token: {ALICE}, user: alice}}\n"
    );
    let cluster = LeadCluster::up(&config, &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")]);
    let addr = cluster.gateway();
    let body = json!({"task": "Say how the reply appears."});
    let (code, _, text) = http_full(&addr, ALICE, "POST", "/api/runs", Some(&body.to_string()));
    assert_eq!(code, 201, "{text}");
    let run_id = serde_json::from_str::<Value>(&text).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();

    let mut b = Browser::start();
    let base = format!("http://{addr}/");
    b.goto(&format!("{base}#token={ALICE}"));
    b.goto(&format!("{base}#/runs/{run_id}"));
    // The page follows the run live: turn 1 has started, its model waits for `go`.
    b.wait("!!document.querySelector('#timeline [data-turn=\"1\"]')");
    // What the page shows for the turn's reply, sampled as it changes.
    b.eval(
        "window.__seen = []; new MutationObserver(() => { \
           const r = document.querySelector('#timeline [data-turn=\"1\"] pre.reply'); \
           if (r) window.__seen.push([r.classList.contains('streaming'), r.textContent]); \
         }).observe(document.getElementById('timeline'), {childList: true, subtree: true, characterData: true}); true",
    );
    go.send(()).unwrap();
    let answer = WORDS.concat();
    b.wait("document.getElementById('run-status')?.textContent === 'success'");
    b.wait(&format!(
        "(() => {{ const r = document.querySelector('#timeline [data-turn=\"1\"] pre.reply'); \
           return !!r && !r.classList.contains('streaming') && r.textContent === {answer:?}; }})()"
    ));
    b.screenshot("streamed-reply");
    let seen = b.eval("window.__seen");
    let mut partials: Vec<String> = Vec::new();
    for sample in seen.as_array().unwrap() {
        let (streaming, text) = (sample[0].as_bool().unwrap(), sample[1].as_str().unwrap());
        if streaming {
            assert!(
                answer.starts_with(text),
                "a streamed text that is not a prefix of the answer: {text:?}"
            );
            // The whole answer may show a moment before the turn ends: not a partial.
            if text.len() < answer.len() && partials.last().map(String::as_str) != Some(text) {
                partials.push(text.to_owned());
            }
        }
    }
    partials.dedup();
    assert!(
        partials.len() >= 2,
        "the reply did not grow on the page: {partials:?}"
    );
    assert!(
        partials.windows(2).all(|w| w[0].len() < w[1].len()),
        "the reply shrank while it streamed: {partials:?}"
    );
    assert_eq!(
        b.send(json!({"op": "errors"})),
        json!([]),
        "the page logged errors"
    );
    drop(b);

    // The gateway's stream carries the deltas (`event: run`), adding up to the answer.
    let (code, _, events) = http_full(
        &addr,
        ALICE,
        "GET",
        &format!("/api/runs/{run_id}/events"),
        None,
    );
    assert_eq!(code, 200);
    // (The body is chunked: each server-sent event is one chunk, its lines whole.)
    let deltas: Vec<Value> = events
        .lines()
        .filter_map(|line| {
            let event: Value = serde_json::from_str(line.strip_prefix("data: ")?).ok()?;
            (event["event"] == "model_delta").then_some(event)
        })
        .collect();
    assert!(
        events.contains("event: run\ndata: {\"event\":\"model_delta\""),
        "{events}"
    );
    assert!(deltas.len() >= 2, "{events}");
    assert!(deltas
        .iter()
        .all(|d| d["turn"] == 1 && d["message_id"] == "ai-1"));
    let streamed: String = deltas
        .iter()
        .map(|d| d["text"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(streamed, answer);

    // The store keeps the run's events for later watchers, without the deltas.
    let store = cluster.runtime().join("runs.sqlite");
    let kept = wait_for(Duration::from_secs(20), || {
        let rows = sql(
            &store,
            "SELECT event FROM run_events WHERE run_id = ?1 ORDER BY seq",
            &run_id,
        );
        (rows.contains("model_finished")).then_some(rows)
    })
    .expect("the run's events were kept");
    assert!(!kept.contains("model_delta"), "{kept}");
}
