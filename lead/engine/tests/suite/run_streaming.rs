//! Streamed tokens through the real run loop: a model that streams its reply token by
//! token (a stand-in for a provider's stream, `StreamingStandIn`) is reported as
//! `model_delta` events whose text concatenates to the final message, few of them however
//! many tokens came, each naming the id the AI message has in the state.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use antler_engine::{
    ChatModel, Message, ModelError, ModelReply, ModelRequest, RunEvent, RunSettings, RunStatus,
};
use futures::future::BoxFuture;

use super::run_model_mistakes::drive;

/// Streams `tokens` to the request's observer, then replies with them joined (under an id
/// of its own, which the run loop replaces with the state's).
struct StreamingStandIn {
    reasoning: Vec<String>,
    tokens: Vec<String>,
}

impl ChatModel for StreamingStandIn {
    fn name(&self) -> &str {
        "streaming-stand-in"
    }

    fn complete<'a>(
        &'a self,
        request: ModelRequest<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(async move {
            let observer = request
                .observer
                .expect("the run loop listens to the stream");
            for piece in &self.reasoning {
                observer.reasoning_delta(piece);
                tokio::task::yield_now().await;
            }
            for token in &self.tokens {
                observer.text_delta(token);
                tokio::task::yield_now().await;
            }
            Ok(ModelReply {
                id: "provider-chatcmpl-1".into(),
                content: self.tokens.concat(),
                finish_reason: Some("stop".into()),
                ..ModelReply::default()
            })
        })
    }

    fn reads_prompt(&self) -> bool {
        false
    }
}

#[tokio::test]
async fn a_streamed_reply_is_a_few_deltas_that_add_up_to_the_message() {
    let tokens: Vec<String> = (0..2000).map(|i| format!("w{i} ")).collect();
    let model: Arc<dyn ChatModel> = Arc::new(StreamingStandIn {
        reasoning: vec!["Think".into(), "ing.".into()],
        tokens: tokens.clone(),
    });
    let (outcome, messages, events) = drive(model, RunSettings::default()).await;
    assert_eq!(outcome.status, RunStatus::Success, "{outcome:?}");
    let (mut text, mut reasoning, mut ids, mut count) =
        (String::new(), String::new(), Vec::new(), 0);
    for event in &events {
        if let RunEvent::ModelDelta {
            turn,
            message_id,
            text: t,
            reasoning: r,
        } = event
        {
            assert_eq!(*turn, 1);
            ids.push(message_id.clone());
            text.push_str(t);
            reasoning.push_str(r);
            count += 1;
        }
    }
    assert_eq!(
        text,
        tokens.concat(),
        "the deltas add up to the streamed text"
    );
    assert_eq!(reasoning, "Thinking.");
    assert!(
        (1..=200).contains(&count),
        "{count} delta events for 2,000 tokens"
    );
    // The deltas come before the turn's end, which names the same message.
    let finished = events
        .iter()
        .position(|e| matches!(e, RunEvent::ModelFinished { .. }))
        .unwrap();
    let last_delta = events
        .iter()
        .rposition(|e| matches!(e, RunEvent::ModelDelta { .. }))
        .unwrap();
    assert!(last_delta < finished);
    let RunEvent::ModelFinished { message_id, .. } = &events[finished] else {
        unreachable!()
    };
    assert_eq!(message_id.as_deref(), Some("ai-1"));
    ids.dedup();
    assert_eq!(ids, ["ai-1"]);
    let ai = messages
        .iter()
        .find_map(|m| match m {
            Message::Ai { id, content, .. } => Some((id.clone(), content.clone())),
            _ => None,
        })
        .unwrap();
    assert_eq!(ai, ("ai-1".to_owned(), tokens.concat()));
    assert_eq!(outcome.final_answer, Some(tokens.concat()));
}
