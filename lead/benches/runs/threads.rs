//! Section 6 of the runs benchmark: threads. The cost of starting a run on a thread of
//! 1,000 messages (claim the thread in the runs store, load its state, continue it,
//! journal step 0 and build the first model request, up to the model being asked),
//! against a run on a fresh thread measured in the same rounds, interleaved; and the heap
//! the lead holds for idle threads (1,000 threads whose runs have ended, kept in the runs
//! store, none in memory).

use super::*;
use antler_engine::{Message, ThreadState, ToolCall};

/// Messages in the long thread.
const THREAD_MESSAGES: usize = 1_000;
/// Interleaved rounds (one fresh-thread run and one long-thread run each), after warm-up.
const THREAD_ROUNDS: usize = 40;
const THREAD_WARMUP: usize = 3;
/// Idle threads counted for the heap figure.
const IDLE_THREADS: usize = 1_000;

const ANSWER_PLAYBOOK: &str = "turns:\n  - content: Done.\n";

pub struct ThreadFigures {
    pub fresh_p50: Duration,
    pub long_p50: Duration,
    pub long_p90: Duration,
    pub state_bytes: usize,
    pub idle_heap_per_thread: f64,
    pub idle_ok: usize,
}

/// A conversation of `n` messages shaped like a working thread: a user turn, a reply
/// calling a tool, its result, an answer, repeated (a few hundred characters each).
fn long_state(n: usize) -> ThreadState {
    let mut messages = Vec::with_capacity(n);
    let mut i = 0;
    while messages.len() < n {
        messages.push(Message::human(format!(
            "Question {i}: summarise the quarterly figures in /mnt/user-data/uploads/report-{i}.pdf and compare them with the previous quarter, noting anything unusual."
        )));
        messages.push(Message::Ai {
            id: format!("ai-{}", 2 * i + 1),
            content: String::new(),
            tool_calls: vec![ToolCall {
                id: format!("call-{i}"),
                name: "read_file".into(),
                args: json!({"description": "read the report", "path": format!("/mnt/user-data/uploads/report-{i}.md"), "start_line": 1, "end_line": 200}),
            }],
            reasoning: None,
        });
        messages.push(Message::tool(
            format!("call-{i}"),
            "read_file",
            "Revenue 4.2M (+8% q/q); costs 3.1M (+2%); headcount 41; churn 2.1%. ".repeat(4),
            antler_engine::ToolStatus::Success,
        ));
        messages.push(Message::Ai {
            id: format!("ai-{}", 2 * i + 2),
            content: "Revenue grew 8% quarter on quarter while costs rose 2%; churn is steady at 2.1%. Nothing unusual beyond a one-off consulting cost.".into(),
            tool_calls: Vec::new(),
            reasoning: None,
        });
        i += 1;
    }
    messages.truncate(n);
    ThreadState {
        messages,
        title: Some("Quarterly figures".into()),
        ..ThreadState::default()
    }
}

/// One run on `thread`, from submission to the first model call: the thread claimed and
/// its state loaded from the store, the run started on it and driven up to the model.
#[allow(clippy::too_many_arguments)]
async fn first_request(
    base: &Path,
    store: &CheckpointStore,
    catalog: &Arc<Catalog>,
    hosts: &Arc<dyn ToolHosts>,
    thread: &str,
    run_id: String,
) -> Duration {
    let calls = Arc::new(Mutex::new(Vec::with_capacity(1)));
    let model = TimedModel {
        inner: ScriptedModel::from_yaml(ANSWER_PLAYBOOK, "bench").unwrap(),
        calls: calls.clone(),
    };
    let context = RunContext::local(base, "bench", thread, &run_id);
    let started = Instant::now();
    let (name, id) = (thread.to_owned(), run_id.clone());
    let state = store
        .call(move |store| {
            store.create_thread("bench", &name, &Default::default())?;
            store.claim_thread("bench", &name, &id)
        })
        .await
        .unwrap()
        .expect("the thread is idle");
    let builder = RunLoop::builder(context, Arc::new(model), catalog.clone(), hosts.clone())
        .journal(Arc::new(store.clone()))
        .model_label("scripted:bench")
        .settings(RunSettings::default());
    let mut run = match state {
        Some(state) if !state.messages.is_empty() => builder.start_on(state, "And now?").await,
        _ => builder.start("And now?").await,
    }
    .unwrap();
    let outcome = run.drive().await;
    assert_eq!(outcome.status, RunStatus::Success, "{:?}", outcome.error);
    let first = calls.lock().unwrap()[0];
    first - started
}

pub fn bench_threads() -> ThreadFigures {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("data");
    let store = CheckpointStore::open(&dir.path().join("checkpoints.sqlite")).unwrap();
    let catalog = step_catalog();
    let hosts: Arc<dyn ToolHosts> = Arc::new(ZeroLatencyHosts {
        base_dir: base.clone(),
    });
    let long = long_state(THREAD_MESSAGES);
    let state_bytes = serde_json::to_string(&long).unwrap().len();
    let system = actix::System::new();
    let (fresh, mut long_samples) = system.block_on(async {
        store
            .create_thread("bench", "long", &Default::default())
            .unwrap();
        let mut fresh = Vec::new();
        let mut long_samples = Vec::new();
        for round in 0..THREAD_WARMUP + THREAD_ROUNDS {
            // The long thread back at 1,000 messages (a run appends two).
            store
                .put_thread_state("bench", "long", &long, None)
                .unwrap()
                .unwrap();
            let took_fresh = first_request(
                &base,
                &store,
                &catalog,
                &hosts,
                &format!("fresh-{round}"),
                format!("fresh-run-{round}"),
            )
            .await;
            let took_long = first_request(
                &base,
                &store,
                &catalog,
                &hosts,
                "long",
                format!("long-run-{round}"),
            )
            .await;
            if round >= THREAD_WARMUP {
                fresh.push(took_fresh);
                long_samples.push(took_long);
            }
        }
        (fresh, long_samples)
    });
    let (idle_heap_per_thread, idle_ok) = bench_idle_threads();
    ThreadFigures {
        fresh_p50: median(fresh),
        long_p50: percentile(&mut long_samples, 0.5),
        long_p90: percentile(&mut long_samples, 0.9),
        state_bytes,
        idle_heap_per_thread,
        idle_ok,
    }
}

/// The heap the lead holds for idle threads: 1,000 runs through the `RunManager`, each
/// on a thread of its own, all ended; counted after a warm-up thread.
fn bench_idle_threads() -> (f64, usize) {
    let system = actix::System::new();
    system.block_on(async {
        let lead = Lead::start();
        let playbook = lead.playbook("answer.yaml", ANSWER_PLAYBOOK);
        let on_threads = |range: std::ops::Range<usize>| {
            let submissions = range.map(|i| {
                lead.manager.send(SubmitRun(RunSubmission {
                    task: format!("hello {i}"),
                    user: "bench".into(),
                    thread: Some(format!("idle-{i}")),
                    playbook: Some(PlaybookSource::File(playbook.clone())),
                    model: None,
                    clarification: false,
                    config: None,
                    agent: None,
                    bootstrap: false,
                    interactive: true,
                    subagents: None,
                    role: None,
                    idempotency_key: None,
                    files: Vec::new(),
                }))
            });
            futures::future::join_all(submissions)
        };
        let wait = |run_ids: Vec<String>| {
            let manager = lead.manager.clone();
            async move {
                let views = run_ids.into_iter().map(|run_id| {
                    let manager = manager.clone();
                    async move {
                        let log = manager.send(WatchRun(run_id)).await.unwrap().unwrap();
                        let view = log.follow(|_| async { true }).await.unwrap();
                        view.contains("\"status\":\"success\"")
                    }
                });
                futures::future::join_all(views).await
            }
        };
        let warm: Vec<String> = on_threads(0..1)
            .await
            .into_iter()
            .map(|r| r.unwrap().unwrap())
            .collect();
        wait(warm).await;
        let before = live();
        let run_ids: Vec<String> = on_threads(1..IDLE_THREADS + 1)
            .await
            .into_iter()
            .map(|r| r.unwrap().unwrap())
            .collect();
        let ok = wait(run_ids).await.into_iter().filter(|ok| *ok).count();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let per_thread = (live() - before) as f64 / IDLE_THREADS as f64;
        (per_thread, ok)
    })
}
