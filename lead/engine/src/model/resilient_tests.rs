#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Mutex;

use serde_json::json;

use super::*;
use crate::model::{ModelObserver, ScriptedModel};
use crate::thread::state::Message;

fn http(status: u16, attempts: u32, message: &str) -> ModelError {
    ModelError::Http {
        model: "m".into(),
        status,
        attempts,
        message: message.into(),
    }
}

#[test]
fn failures_are_classified_as_deerflow_does() {
    let cases = [
        (
            http(429, 1, "You exceeded your current quota"),
            FailureReason::Quota,
        ),
        (http(400, 1, "billing hard limit"), FailureReason::Quota),
        (http(401, 1, "bad key"), FailureReason::Auth),
        (
            http(400, 1, "Invalid API key provided"),
            FailureReason::Auth,
        ),
        (
            http(429, 1, "limit_burst_rate exceeded"),
            FailureReason::BurstRate,
        ),
        (http(500, 1, "boom"), FailureReason::Transient),
        (http(429, 1, "slow down"), FailureReason::Transient),
        (http(529, 1, "x"), FailureReason::Transient),
        (http(400, 1, "the model is overloaded"), FailureReason::Busy),
        (http(400, 1, "context too long"), FailureReason::Generic),
        (
            ModelError::Connection {
                model: "m".into(),
                url: "u".into(),
                attempts: 1,
                message: "refused".into(),
            },
            FailureReason::Transient,
        ),
        (
            ModelError::Timeout {
                model: "m".into(),
                what: "the request",
                secs: 1.0,
            },
            FailureReason::Transient,
        ),
    ];
    for (error, reason) in cases {
        assert_eq!(FailureReason::of_error(&error), reason, "{error}");
    }
    assert!(FailureReason::Busy.retriable() && !FailureReason::Quota.retriable());
    let notice = |reason: &str| RetryNotice {
        model: "m".into(),
        attempt: 1,
        max_attempts: 5,
        wait: Duration::from_millis(1500),
        reason: reason.into(),
    };
    assert_eq!(
        FailureReason::of_retry(&notice("HTTP 503: down")),
        FailureReason::Transient
    );
    assert_eq!(
        FailureReason::of_retry(&notice("connection failed: refused")),
        FailureReason::Transient
    );
    assert_eq!(
        FailureReason::of_retry(&notice("HTTP 429: burst rate too high")),
        FailureReason::BurstRate
    );
}

#[test]
fn retry_messages_are_deerflows() {
    assert_eq!(
        retry_message(1, 3, Duration::from_millis(1500), FailureReason::Busy),
        "LLM request retry 1/3: provider is busy. Retrying in 2s."
    );
    assert_eq!(
        retry_message(2, 2, Duration::from_millis(100), FailureReason::BurstRate),
        "LLM request retry 2/2: provider is throttling request burst rate. Retrying in 1s."
    );
    assert_eq!(
        retry_message(1, 5, Duration::from_secs(4), FailureReason::Transient),
        "LLM request retry 1/5: provider request failed temporarily. Retrying in 4s."
    );
}

#[test]
fn delays_use_decorrelated_jitter_within_the_cap() {
    let settings = LlmCall::default();
    let ms = |d: Duration| d.as_millis() as u64;
    assert_eq!(
        ms(settings.delay(FailureReason::Transient, None, 0.0)),
        1000
    );
    assert_eq!(
        ms(settings.delay(FailureReason::Transient, None, 1.0)),
        3000
    );
    let previous = Some(Duration::from_millis(3000));
    assert_eq!(ms(settings.delay(FailureReason::Busy, previous, 1.0)), 8000);
    assert_eq!(
        ms(settings.delay(FailureReason::BurstRate, None, 0.0)),
        5000
    );
    assert_eq!(
        ms(settings.delay(FailureReason::BurstRate, None, 1.0)),
        8000
    );
    let section = json!({"retry_max_attempts": 2, "retry_base_delay_ms": 10, "retry_cap_delay_ms": 20, "max_concurrent_calls": 0});
    let read = LlmCall::from_config(Some(&section)).unwrap();
    assert_eq!(read.retry_max_attempts, 2);
    assert_eq!(read.retry_cap_delay, Duration::from_millis(20));
    assert!(LlmCall::from_config(Some(&json!({"retry_max_attempts": 0}))).is_err());
    let breaker = BreakerSettings::from_config(Some(&json!({"failure_threshold": 2}))).unwrap();
    assert_eq!(breaker.failure_threshold, 2);
    assert_eq!(breaker.recovery_timeout, Duration::from_secs(60));
}

#[test]
fn the_breaker_opens_at_the_threshold_and_lets_one_probe_through() {
    let breaker = Arc::new(CircuitBreaker::new(BreakerSettings {
        failure_threshold: 2,
        recovery_timeout: Duration::from_secs(60),
    }));
    let t0 = Instant::now();
    // Non-retriable and burst failures do not count.
    breaker.admit(t0).unwrap().failure(FailureReason::Auth, t0);
    breaker
        .admit(t0)
        .unwrap()
        .failure(FailureReason::BurstRate, t0);
    assert_eq!(breaker.circuit(), Circuit::Closed { failures: 0 });
    breaker
        .admit(t0)
        .unwrap()
        .failure(FailureReason::Transient, t0);
    assert_eq!(breaker.circuit(), Circuit::Closed { failures: 1 });
    breaker.admit(t0).unwrap().failure(FailureReason::Busy, t0);
    assert!(matches!(breaker.circuit(), Circuit::Open { .. }));
    assert!(breaker.admit(t0 + Duration::from_secs(59)).is_none());
    // Half-open: one probe, the others refused; a failed probe opens it again.
    let later = t0 + Duration::from_secs(61);
    let probe = breaker.admit(later).unwrap();
    assert!(breaker.admit(later).is_none());
    probe.failure(FailureReason::Transient, later);
    assert!(breaker.admit(later).is_none());
    // A cancelled probe frees its slot; a successful one closes the breaker.
    let after = later + Duration::from_secs(61);
    drop(breaker.admit(after).unwrap());
    breaker.admit(after).unwrap().success();
    assert_eq!(breaker.circuit(), Circuit::Closed { failures: 0 });
}

#[test]
fn breakers_are_per_configuration_and_process_wide() {
    let settings = BreakerSettings::default();
    let a = breaker_for("resilient-test-a", settings);
    let again = breaker_for("resilient-test-a", settings);
    let b = breaker_for("resilient-test-b", settings);
    assert!(Arc::ptr_eq(&a, &again));
    assert!(!Arc::ptr_eq(&a, &b));
}

/// What the observer heard.
#[derive(Default)]
struct Heard {
    events: Mutex<Vec<String>>,
}

impl ModelObserver for Heard {
    fn retry(&self, notice: &RetryNotice) {
        self.events.lock().unwrap().push(format!(
            "retry {} {}/{}",
            notice.model, notice.attempt, notice.max_attempts
        ));
    }
    fn fallback(&self, notice: &FallbackNotice) {
        self.events.lock().unwrap().push(format!(
            "fallback {} -> {} ({})",
            notice.from, notice.to, notice.reason
        ));
    }
    fn answered_by(&self, model: &str) {
        self.events
            .lock()
            .unwrap()
            .push(format!("answered by {model}"));
    }
}

fn scripted(name: &str, yaml: &str) -> Arc<dyn ChatModel> {
    Arc::new(ScriptedModel::from_yaml(yaml, name).unwrap().named(name))
}

fn link(model: Arc<dyn ChatModel>, threshold: u32) -> Link {
    Link {
        model,
        breaker: Arc::new(CircuitBreaker::new(BreakerSettings {
            failure_threshold: threshold,
            recovery_timeout: Duration::from_secs(60),
        })),
    }
}

fn fast() -> LlmCall {
    LlmCall {
        retry_base_delay: Duration::from_millis(1),
        retry_cap_delay: Duration::from_millis(2),
        burst_retry_base_delay: Duration::from_millis(1),
        ..LlmCall::default()
    }
}

async fn ask(model: &ResilientModel, heard: &Heard) -> Result<ModelReply, ModelError> {
    let messages = [Message::human("go")];
    let mut request = ModelRequest::new(&messages, &[], &[]);
    request.observer = Some(heard);
    model.complete(request).await
}

#[tokio::test]
async fn a_transient_failure_is_retried_and_a_final_one_falls_back() {
    let flaky = scripted(
        "primary",
        "turns:\n  - attempts:\n      - error: {status: 503, message: down}\n    content: Hello.\n",
    );
    let model = ResilientModel::new(vec![link(flaky, 5)], fast()).unwrap();
    let heard = Heard::default();
    assert_eq!(ask(&model, &heard).await.unwrap().content, "Hello.");
    assert_eq!(*heard.events.lock().unwrap(), ["retry primary 1/3"]);

    let down = scripted(
        "primary",
        "turns:\n  - error: {status: 500, message: boom}\n",
    );
    let quota = scripted(
        "second",
        "turns:\n  - error: {status: 429, message: insufficient_quota}\n",
    );
    let good = scripted("third", "turns:\n  - content: From the third.\n");
    let model =
        ResilientModel::new(vec![link(down, 5), link(quota, 5), link(good, 5)], fast()).unwrap();
    let heard = Heard::default();
    assert_eq!(
        ask(&model, &heard).await.unwrap().content,
        "From the third."
    );
    assert_eq!(
        *heard.events.lock().unwrap(),
        [
            "retry primary 1/3",
            "retry primary 2/3",
            "fallback primary -> second (transient)",
            "fallback second -> third (quota)",
            "answered by third",
        ]
    );
}

#[tokio::test]
async fn a_failure_the_client_retried_is_not_retried_again() {
    struct Retried;
    impl ChatModel for Retried {
        fn name(&self) -> &str {
            "retried"
        }
        fn complete<'a>(
            &'a self,
            _request: ModelRequest<'a>,
        ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
            Box::pin(async { Err(http(503, 5, "still down")) })
        }
    }
    let model = ResilientModel::new(vec![link(Arc::new(Retried), 5)], fast()).unwrap();
    let heard = Heard::default();
    let error = ask(&model, &heard).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "model `m`: HTTP 503 after 5 attempt(s): still down"
    );
    assert!(heard.events.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_open_breaker_skips_its_model_until_it_recovers() {
    let down = scripted(
        "primary",
        "turns:\n  - error: {status: 502, message: bad gateway}\n",
    );
    let good = scripted("backup", "turns:\n  - content: Backup.\n");
    let once = LlmCall {
        retry_max_attempts: 1,
        ..fast()
    };
    let model = ResilientModel::new(vec![link(down, 2), link(good, 5)], once).unwrap();
    for _ in 0..2 {
        assert_eq!(
            ask(&model, &Heard::default()).await.unwrap().content,
            "Backup."
        );
    }
    let heard = Heard::default();
    assert_eq!(ask(&model, &heard).await.unwrap().content, "Backup.");
    assert_eq!(
        *heard.events.lock().unwrap(),
        [
            "fallback primary -> backup (circuit_open)",
            "answered by backup"
        ]
    );
    // Alone, an open breaker fails the call at once with DeerFlow's text.
    let alone = ResilientModel::new(
        vec![Link {
            model: scripted("primary", "turns:\n  - content: never\n"),
            breaker: Arc::clone(&model.chain[0].breaker),
        }],
        once,
    )
    .unwrap();
    let error = ask(&alone, &Heard::default()).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("model `primary`: {CIRCUIT_OPEN}")
    );
}

#[test]
fn fallbacks_are_read_from_the_entry_and_built_in_order() {
    let yaml = r#"
models:
  - name: main
    use: langchain_openai:ChatOpenAI
    model: a
    base_url: http://127.0.0.1:9/v1
    fallback: [spare, main]
  - name: spare
    use: langchain_openai:ChatOpenAI
    model: b
    base_url: http://127.0.0.1:9/v1
"#;
    let app: AppConfig = serde_yaml::from_str(yaml).unwrap();
    let model = resilient_model_from_config(&app, Some("main"), &|_| None).unwrap();
    assert_eq!(model.name(), "main");
    let mut bad = app.clone();
    bad.models[0]
        .extra
        .insert(FALLBACK_KEY.into(), json!(["nope"]));
    let error = resilient_model_from_config(&bad, None, &|_| None)
        .err()
        .unwrap();
    assert_eq!(
        error.to_string(),
        "no model named `nope`; configured models: main, spare"
    );
}

/// A model that counts the calls in flight, and the most at once.
#[derive(Default)]
struct Counting {
    now: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

impl ChatModel for Counting {
    fn name(&self) -> &str {
        "counting"
    }

    fn complete<'a>(
        &'a self,
        _request: ModelRequest<'a>,
    ) -> futures::future::BoxFuture<'a, Result<ModelReply, ModelError>> {
        use std::sync::atomic::Ordering::SeqCst;
        Box::pin(async move {
            let now = self.now.fetch_add(1, SeqCst) + 1;
            self.most.fetch_max(now, SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
            self.now.fetch_sub(1, SeqCst);
            Ok(ModelReply {
                content: "ok".into(),
                ..ModelReply::default()
            })
        })
    }
}

#[tokio::test]
async fn max_concurrent_calls_caps_calls_in_flight_across_runs() {
    let section = json!({"max_concurrent_calls": 2});
    let settings = LlmCall::from_config(Some(&section)).unwrap();
    assert_eq!(settings.max_concurrent_calls, 2);
    let counting = Arc::new(Counting::default());
    // Two runs' models built from the same config share the process's slots.
    let runs: Vec<Arc<ResilientModel>> = (0..2)
        .map(|_| {
            let model: Arc<dyn ChatModel> = counting.clone();
            Arc::new(ResilientModel::new(vec![link(model, 5)], settings).unwrap())
        })
        .collect();
    let calls = (0..8).map(|i| {
        let run = Arc::clone(&runs[i % 2]);
        tokio::spawn(async move {
            let heard = Heard::default();
            ask(&run, &heard).await.unwrap().content
        })
    });
    for call in futures::future::join_all(calls).await {
        assert_eq!(call.unwrap(), "ok");
    }
    assert_eq!(
        counting.most.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "never more than the cap in flight, and the cap is used"
    );
    assert!(LlmCall::from_config(Some(&json!({"max_concurrent_calls": -1}))).is_err());
}

/// A stand-in for an OpenAI-compatible server (`openai_standin`): every POST to
/// `/v1/chat/completions` gets one whole chat completion saying `answer`; the
/// `Authorization` header of each request is kept.
async fn openai_standin(answer: &'static str) -> (String, Arc<Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let auth = Arc::new(Mutex::new(Vec::new()));
    let heard = Arc::clone(&auth);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let heard = Arc::clone(&heard);
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut chunk = [0u8; 4096];
                let (head, start, length) = loop {
                    let n = stream.read(&mut chunk).await.unwrap();
                    assert!(n > 0, "the request ended early");
                    request.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&request).to_string();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let head = text[..end].to_lowercase();
                        let length = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .map_or(0, |n| n.trim().parse::<usize>().unwrap());
                        break (text[..end].to_owned(), end + 4, end + 4 + length);
                    }
                };
                while request.len() < length {
                    let n = stream.read(&mut chunk).await.unwrap();
                    assert!(n > 0, "the body ended early");
                    request.extend_from_slice(&chunk[..n]);
                }
                assert!(head.starts_with("POST /v1/chat/completions "), "{head}");
                let body: Value = serde_json::from_slice(&request[start..length]).unwrap();
                assert!(body["messages"].is_array(), "{body}");
                if let Some(line) = head
                    .lines()
                    .find(|l| l.to_lowercase().starts_with("authorization:"))
                {
                    heard.lock().unwrap().push(line[14..].trim().to_owned());
                }
                let reply = json!({
                    "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "b",
                    "choices": [{"index": 0, "finish_reason": "stop",
                        "message": {"role": "assistant", "content": answer}}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
                })
                .to_string();
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    reply.len()
                );
                stream.write_all(head.as_bytes()).await.unwrap();
                stream.write_all(reply.as_bytes()).await.unwrap();
                let _ = stream.shutdown().await;
            });
        }
    });
    (base, auth)
}

struct Task;

impl SubagentRequest for Task {
    fn description(&self) -> &str {
        "look it up"
    }
    fn subagent_type(&self) -> &str {
        "general-purpose"
    }
}

#[tokio::test]
async fn a_subagent_gets_the_whole_chain_and_its_model_falls_back_on_the_worker() {
    let (spare_url, auth) = openai_standin("From the spare.").await;
    let yaml = r#"
models:
  - name: sub-main
    use: langchain_openai:ChatOpenAI
    model: a
    base_url: http://127.0.0.1:1/v1
    api_key: $SUB_MAIN_KEY
    max_retries: 0
    fallback: sub-spare
  - name: sub-spare
    use: langchain_openai:ChatOpenAI
    model: b
    base_url: $SUB_SPARE_URL
    api_key: $SUB_SPARE_KEY
    max_retries: 0
llm_call: {retry_max_attempts: 2, retry_base_delay_ms: 1, retry_cap_delay_ms: 2}
circuit_breaker: {failure_threshold: 7, recovery_timeout_sec: 9}
"#;
    let app: AppConfig = serde_yaml::from_str(yaml).unwrap();
    let lead_env = move |name: &str| match name {
        "SUB_MAIN_KEY" => Some("sk-main".to_owned()),
        "SUB_SPARE_KEY" => Some("sk-spare".to_owned()),
        "SUB_SPARE_URL" => Some(spare_url.clone()),
        _ => None,
    };
    let lead = resilient_model_from_config(&app, Some("sub-main"), &lead_env).unwrap();
    let wire = lead.for_subagent(&Task).unwrap();
    let WireModel::Resilient {
        entry,
        fallbacks,
        llm_call,
        circuit_breaker,
    } = &wire
    else {
        panic!("not the chain: {wire:?}");
    };
    // Each entry written out: endpoint and key, nothing left to the worker's environment.
    assert_eq!(entry.name, "sub-main");
    assert_eq!(entry.api_key.as_deref(), Some("sk-main"));
    assert_eq!(entry.base_url.as_deref(), Some("http://127.0.0.1:1/v1"));
    assert_eq!(fallbacks.len(), 1);
    assert_eq!(fallbacks[0].name, "sub-spare");
    assert_eq!(fallbacks[0].api_key.as_deref(), Some("sk-spare"));
    assert!(fallbacks[0]
        .base_url
        .as_deref()
        .is_some_and(|u| u.starts_with("http://127.0.0.1:")));
    assert_eq!(llm_call.retry_max_attempts, 2);
    assert_eq!(llm_call.retry_base_delay, Duration::from_millis(1));
    // (No `max_concurrent_calls`: the process's slots are another test's.)
    assert_eq!(
        *circuit_breaker,
        BreakerSettings {
            failure_threshold: 7,
            recovery_timeout: Duration::from_secs(9),
        }
    );
    assert_eq!(wire.name(), "sub-main");
    let shown = format!("{wire:?}");
    assert!(!shown.contains("sk-"), "{shown}");
    assert!(shown.contains("sub-spare"), "{shown}");

    // The worker's model: the primary is unreachable, retried once, then the spare answers.
    let worker = wire.build().unwrap();
    assert_eq!(worker.name(), "sub-main");
    let heard = Heard::default();
    let messages = [Message::human("go")];
    let mut request = ModelRequest::new(&messages, &[], &[]);
    request.observer = Some(&heard);
    let reply = worker.complete(request).await.unwrap();
    assert_eq!(reply.content, "From the spare.");
    assert_eq!(
        *heard.events.lock().unwrap(),
        [
            "retry sub-main 1/2",
            "fallback sub-main -> sub-spare (transient)",
            "answered by sub-spare"
        ]
    );
    assert_eq!(*auth.lock().unwrap(), ["Bearer sk-spare"]);
    // The primary's final failure counted on its configuration's breaker in this process.
    assert_eq!(
        breaker_for(&breaker_key(entry), *circuit_breaker).circuit(),
        Circuit::Closed { failures: 1 }
    );
}

#[test]
fn a_playbook_primary_travels_as_its_playbook() {
    let playbook =
        "turns:\n  - content: hi\nsubagents:\n  default:\n    turns:\n      - content: sub\n";
    let model = ResilientModel::new(
        vec![
            link(scripted("primary", playbook), 5),
            link(scripted("backup", playbook), 5),
        ],
        fast(),
    )
    .unwrap();
    assert!(matches!(
        model.for_subagent(&Task),
        Some(WireModel::Scripted { .. })
    ));
}
