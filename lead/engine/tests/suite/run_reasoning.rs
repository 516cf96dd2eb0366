//! A model's reasoning is shown and kept, never answered: the turn's `model_finished`
//! event carries the readable reasoning (what the inspector shows under the turn), the AI
//! message keeps it for the provider, and the final answer holds only the answer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use antler_engine::{ChatModel, Message, RunEvent, RunSettings, RunStatus, ScriptedModel};

use super::run_model_mistakes::drive;

#[tokio::test]
async fn reasoning_reaches_the_events_and_the_message_but_never_the_answer() {
    let model: Arc<dyn ChatModel> = Arc::new(
        ScriptedModel::from_yaml(
            "turns:\n  - reasoning: The user wants a greeting; keep it short.\n    content: Hello!\n",
            "inline",
        )
        .unwrap(),
    );
    let (outcome, messages, events) = drive(model, RunSettings::default()).await;
    assert_eq!(outcome.status, RunStatus::Success, "{outcome:?}");
    assert_eq!(outcome.final_answer.as_deref(), Some("Hello!"));
    let shown: Vec<Option<String>> = events
        .iter()
        .filter_map(|e| match e {
            RunEvent::ModelFinished { reasoning, .. } => Some(reasoning.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        shown,
        [Some("The user wants a greeting; keep it short.".to_owned())]
    );
    let kept = messages.iter().find_map(|m| match m {
        Message::Ai {
            reasoning, content, ..
        } => Some((reasoning.clone(), content.clone())),
        _ => None,
    });
    let (reasoning, content) = kept.unwrap();
    assert_eq!(content, "Hello!");
    assert_eq!(
        reasoning.unwrap().text,
        "The user wants a greeting; keep it short."
    );
}
