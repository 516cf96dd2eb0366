//! Context that never overflows, through the real run loop with a replaying model: a
//! 4,000-token window and 200 turns of tool calls, results and replies; every request
//! the model receives (counted as sent: messages, durable context, tool schemas) and
//! every summary prompt stays within the window, every tool call in every request keeps
//! its result, and the run ends with its answer. A summarizer that fails falls back to
//! trimming the oldest turns and is not asked on every call. The title comes from the
//! title model while the run goes on. A kept tail over the trigger is not summarized again
//! at every call.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use antler_engine::{
    count_request_tokens, Auxiliary, ChatModel, Message, ModelError, ModelReply, ModelRequest,
    Playbook, RunEvent, RunSettings, RunStatus, ScriptedCall, ScriptedModel, ScriptedTurn,
    Summarization, Titling, TokenCounter,
};
use antler_protocol::config::{ContextSize, SummarizationConfig, TitleConfig};
use futures::future::BoxFuture;
use serde_json::json;

use super::run_model_mistakes::drive;

const WINDOW: u64 = 4000;
const TURNS: usize = 200;

/// The scripted model, with what it was sent: each request's counted tokens and whether
/// every call in it had its result, and each summary prompt's tokens.
struct Measured {
    inner: ScriptedModel,
    requests: Mutex<Vec<(u64, Vec<String>)>>,
    summaries: Mutex<Vec<u64>>,
}

/// The calls of `messages` without a result, and the results without a call.
fn unpaired(messages: &[Message]) -> Vec<String> {
    let calls: HashSet<&str> = messages
        .iter()
        .flat_map(|m| m.tool_calls().iter().map(|c| c.id.as_str()))
        .collect();
    let results: HashSet<&str> = messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool { tool_call_id, .. } => Some(tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    calls
        .symmetric_difference(&results)
        .map(|id| (*id).to_owned())
        .collect()
}

impl ChatModel for Measured {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn complete<'a>(
        &'a self,
        request: ModelRequest<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        let tokens = count_request_tokens(request.messages, request.tools, request.images.len());
        // The last reply's calls are answered by the next request, not this one.
        self.requests
            .lock()
            .unwrap()
            .push((tokens, unpaired(request.messages)));
        self.inner.complete(request)
    }

    fn auxiliary<'a>(
        &'a self,
        purpose: Auxiliary,
        prompt: &'a str,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        if purpose == Auxiliary::Summary {
            let tokens = TokenCounter::default().request(&[Message::human(prompt)], &[], 0);
            self.summaries.lock().unwrap().push(tokens);
        }
        self.inner.auxiliary(purpose, prompt)
    }

    fn reads_prompt(&self) -> bool {
        false
    }
}

/// 200 turns that each look a skill up and say so at some length, then the answer.
fn playbook(summaries: bool) -> Playbook {
    let mut turns: Vec<ScriptedTurn> = (1..=TURNS)
        .map(|i| ScriptedTurn {
            content: format!(
                "Turn {i}: looking up the next skill. {}",
                "Notes. ".repeat(20)
            ),
            tool_calls: vec![ScriptedCall {
                name: "describe_skill".into(),
                args: json!({"name": format!("skill-{i}")}),
                id: None,
            }],
            ..ScriptedTurn::default()
        })
        .collect();
    turns.push(ScriptedTurn {
        content: "All 200 skills were looked up.".into(),
        ..ScriptedTurn::default()
    });
    Playbook {
        turns,
        summaries: if summaries {
            vec![ScriptedTurn {
                content: format!(
                    "## SESSION INTENT\nLook up 200 skills.\n\n## SUMMARY\n{}\n\n## ARTIFACTS\nNone\n\n## NEXT STEPS\nKeep going.",
                    "Skills were looked up one by one. ".repeat(10)
                ),
                ..ScriptedTurn::default()
            }]
        } else {
            Vec::new()
        },
        titles: vec![ScriptedTurn {
            // Slower than a turn: the run goes on while the title is made.
            delay_ms: 400,
            content: "<think>short</think> \"Skill survey\"".into(),
            ..ScriptedTurn::default()
        }],
        ..Playbook::default()
    }
}

fn settings(model: &Arc<Measured>) -> RunSettings {
    let config = SummarizationConfig {
        enabled: true,
        trigger: vec![ContextSize::Fraction(0.75)],
        keep: ContextSize::Messages(10),
        ..SummarizationConfig::default()
    };
    let summarization = Summarization::new(
        config,
        "scripted",
        Some(WINDOW),
        None,
        TokenCounter::default(),
    )
    .unwrap();
    RunSettings {
        max_turns: TURNS + 10,
        summarization: Some(Arc::new(summarization)),
        title: Some(Arc::new(Titling {
            config: TitleConfig {
                model_name: Some("scripted".into()),
                ..TitleConfig::default()
            },
            model: Some(Arc::clone(model) as Arc<dyn ChatModel>),
        })),
        ..RunSettings::default()
    }
}

fn measured(summaries: bool) -> Arc<Measured> {
    Arc::new(Measured {
        inner: ScriptedModel::new(playbook(summaries)),
        requests: Mutex::new(Vec::new()),
        summaries: Mutex::new(Vec::new()),
    })
}

/// Every request within the window, and every call in it with its result (the last
/// request answers the previous reply's calls, so none is pending).
fn assert_requests_fit(model: &Measured) {
    let requests = model.requests.lock().unwrap();
    assert_eq!(requests.len(), TURNS + 1, "one request a turn");
    for (i, (tokens, unpaired)) in requests.iter().enumerate() {
        assert!(*tokens <= WINDOW, "request {} sends {tokens} tokens", i + 1);
        assert!(
            unpaired.is_empty(),
            "request {}: unpaired {unpaired:?}",
            i + 1
        );
    }
}

#[tokio::test]
async fn two_hundred_turns_stay_within_the_window_with_every_call_answered() {
    let model = measured(true);
    let heard = Arc::new(Mutex::new(0usize));
    let hook = Arc::clone(&heard);
    let settings = RunSettings {
        before_summarization: Some(Arc::new(move |removed: &[Message], _kept: &[Message]| {
            *hook.lock().unwrap() += removed.len();
        })),
        ..settings(&model)
    };
    let (outcome, messages, events) =
        drive(Arc::clone(&model) as Arc<dyn ChatModel>, settings).await;
    assert_eq!(outcome.status, RunStatus::Success, "{outcome:?}");
    assert_eq!(
        outcome.final_answer.as_deref(),
        Some("All 200 skills were looked up.")
    );
    assert_requests_fit(&model);
    let summaries = model.summaries.lock().unwrap().clone();
    assert!(summaries.len() >= 5, "{} summaries", summaries.len());
    assert!(summaries.iter().all(|t| *t <= WINDOW), "{summaries:?}");
    let summarized = events
        .iter()
        .filter(|e| matches!(e, RunEvent::ContextSummarized { .. }))
        .count();
    assert_eq!(summarized, summaries.len());
    // What each summary removed was heard first (memory's flush).
    let removed: usize = events
        .iter()
        .map(|e| match e {
            RunEvent::ContextSummarized { removed, .. } => *removed,
            _ => 0,
        })
        .sum();
    assert_eq!(*heard.lock().unwrap(), removed);
    // The request is kept; AI messages keep distinct ids after every compaction.
    assert_eq!(messages[0], Message::human("go"));
    let ids: Vec<&str> = messages
        .iter()
        .filter_map(|m| match m {
            Message::Ai { id, .. } => Some(id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        ids.iter().collect::<HashSet<_>>().len(),
        ids.len(),
        "{ids:?}"
    );
    assert_eq!(ids.last(), Some(&"ai-201"));
    // The title arrived from the title model while the run went on.
    let title_at = events
        .iter()
        .position(|e| matches!(e, RunEvent::TitleSet { .. }))
        .expect("a title");
    assert_eq!(
        events[title_at],
        RunEvent::TitleSet {
            title: "Skill survey".into()
        }
    );
    let second_turn = events
        .iter()
        .position(|e| matches!(e, RunEvent::ModelStarted { turn: 2 }))
        .unwrap();
    assert!(second_turn < title_at, "the run waited for its title");
}

#[tokio::test]
async fn a_failing_summarizer_falls_back_to_trimming_and_is_not_asked_every_call() {
    let model = measured(false);
    let (outcome, _messages, events) =
        drive(Arc::clone(&model) as Arc<dyn ChatModel>, settings(&model)).await;
    assert_eq!(outcome.status, RunStatus::Success, "{outcome:?}");
    assert_requests_fit(&model);
    let trimmed = events
        .iter()
        .filter(|e| matches!(e, RunEvent::ContextTrimmed { .. }))
        .count();
    assert!(trimmed > 0);
    assert!(!events
        .iter()
        .any(|e| matches!(e, RunEvent::ContextSummarized { .. })));
    let asked = model.summaries.lock().unwrap().len();
    assert!(asked > 1, "the summary is retried later");
    assert!(
        asked <= TURNS / 4 + 1,
        "asked {asked} times in {TURNS} turns"
    );
}

#[tokio::test]
async fn a_kept_tail_over_the_trigger_is_not_summarized_again_at_every_call() {
    let model = measured(true);
    // Ten kept messages are far over 300 tokens: DeerFlow would summarize before every
    // call from the first on.
    let config = SummarizationConfig {
        enabled: true,
        trigger: vec![ContextSize::Tokens(300)],
        keep: ContextSize::Messages(10),
        ..SummarizationConfig::default()
    };
    let summarization =
        Summarization::new(config, "scripted", None, None, TokenCounter::default()).unwrap();
    let settings = RunSettings {
        max_turns: TURNS + 10,
        summarization: Some(Arc::new(summarization)),
        ..RunSettings::default()
    };
    let (outcome, _messages, events) =
        drive(Arc::clone(&model) as Arc<dyn ChatModel>, settings).await;
    assert_eq!(outcome.status, RunStatus::Success, "{outcome:?}");
    let summaries = model.summaries.lock().unwrap().len();
    assert!(summaries > 1, "{summaries}");
    assert!(
        summaries <= TURNS / 4 + 1,
        "{summaries} summaries in {TURNS} turns"
    );
    assert_eq!(
        summaries,
        events
            .iter()
            .filter(|e| matches!(e, RunEvent::ContextSummarized { .. }))
            .count()
    );
}
