//! Loop detection through the real run loop (spec C.7): five identical tool-calling
//! replies from a scripted model; the third queues DeerFlow's warning, which the fourth
//! request carries last (after the tool results) as a hidden `loop_warning` message that
//! is never stored; the fifth has its calls stripped, DeerFlow's forced-stop text
//! appended, and the run ends `loop_capped` with it as the answer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use antler_engine::{ChatModel, Message, RunSettings, RunStatus, ScriptedModel, StopReason};

use super::run_model_mistakes::{drive, Recording};

const WARNING: &str = "[LOOP DETECTED] You are repeating the same tool calls. Stop calling tools and produce your final answer now. If you cannot complete the task, summarize what you accomplished so far.";
const FORCED: &str = "[FORCED STOP] Repeated tool calls exceeded the safety limit. Producing final answer with results collected so far.";

#[tokio::test]
async fn repeated_calls_are_warned_in_the_next_request_then_stopped() {
    let turns: String = (1..=5)
        .map(|n| format!("  - content: Checking again.\n    tool_calls:\n      - {{id: call-{n}, name: weather_get, args: {{city: Paris}}}}\n"))
        .collect();
    let yaml = format!("turns:\n{turns}  - content: never played\n");
    let model = Arc::new(Recording {
        inner: Arc::new(ScriptedModel::from_yaml(&yaml, "inline").unwrap()),
        requests: Mutex::new(Vec::new()),
    });
    let (outcome, messages, _) =
        drive(model.clone() as Arc<dyn ChatModel>, RunSettings::default()).await;
    assert_eq!(outcome.status, RunStatus::Success, "{outcome:?}");
    assert_eq!(outcome.stop_reason, Some(StopReason::LoopCapped));
    assert_eq!(
        outcome.final_answer,
        Some(format!("Checking again.\n\n{FORCED}"))
    );
    let requests = model.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 5);
    let warned = |request: &[Message]| {
        request.iter().any(|m| {
            matches!(m, Message::Human { content, name: Some(name), hide_from_ui: true, .. }
                if content == WARNING && name == "loop_warning")
        })
    };
    // Only the request after the third reply carries it, as its last message, after
    // the third call's result.
    let carried: Vec<bool> = requests.iter().map(|r| warned(r)).collect();
    assert_eq!(carried, [false, false, false, true, false]);
    let fourth = &requests[3];
    assert!(warned(&fourth[fourth.len() - 1..]));
    assert!(matches!(
        &fourth[fourth.len() - 2],
        Message::Tool { tool_call_id, .. } if tool_call_id == "call-3"
    ));
    // Never stored; the stripped reply is.
    assert!(!messages.iter().any(|m| warned(std::slice::from_ref(m))));
    assert!(matches!(
        messages.last(),
        Some(Message::Ai { tool_calls, content, .. }) if tool_calls.is_empty() && content.ends_with(FORCED)
    ));
}
