//! A run's model with retries and fallbacks ([`ResilientModel`]) through the real run
//! loop: a transient failure is retried and reported as `llm_retry` in DeerFlow's words,
//! a final one is answered by the next model of the fallback list (a `model_fallback`
//! event, and the turn's `model_finished` names the model that answered), and a model
//! whose breaker is open is skipped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use antler_engine::{
    BreakerSettings, ChatModel, CircuitBreaker, LlmCall, ResilientModel, RunEvent, RunSettings,
    RunStatus, ScriptedModel,
};

use super::run_model_mistakes::drive;

fn scripted(name: &str, yaml: &str) -> Arc<dyn ChatModel> {
    Arc::new(ScriptedModel::from_yaml(yaml, name).unwrap().named(name))
}

fn link(model: Arc<dyn ChatModel>, threshold: u32) -> antler_engine::ResilientLink {
    antler_engine::ResilientLink {
        model,
        breaker: Arc::new(CircuitBreaker::new(BreakerSettings {
            failure_threshold: threshold,
            recovery_timeout: Duration::from_secs(60),
        })),
    }
}

fn quick() -> LlmCall {
    LlmCall {
        retry_max_attempts: 2,
        retry_base_delay: Duration::from_millis(1),
        retry_cap_delay: Duration::from_millis(1),
        burst_retry_base_delay: Duration::from_millis(1),
        ..LlmCall::default()
    }
}

#[tokio::test]
async fn a_failing_model_is_retried_then_its_fallback_answers() {
    let primary = scripted(
        "primary",
        "turns:\n  - error: {status: 503, message: overloaded}\n  - error: {status: 503, message: overloaded}\n  - content: never asked\n",
    );
    let backup = scripted(
        "backup",
        "turns:\n  - tool_calls:\n      - name: describe_skill\n        args: {name: x}\n  - tool_calls:\n      - name: describe_skill\n        args: {name: y}\n  - content: From the backup.\n",
    );
    let model = ResilientModel::new(vec![link(primary, 2), link(backup, 5)], quick()).unwrap();
    let (outcome, _, events) = drive(Arc::new(model), RunSettings::default()).await;
    assert_eq!(outcome.status, RunStatus::Success, "{outcome:?}");
    assert_eq!(outcome.final_answer.as_deref(), Some("From the backup."));
    let seen: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            RunEvent::LlmRetry {
                model,
                attempt,
                max_attempts,
                reason,
                message,
                ..
            } => Some(format!(
                "retry {model} {attempt}/{max_attempts} {reason}: {message}"
            )),
            RunEvent::ModelFallback {
                from, to, reason, ..
            } => Some(format!("fallback {from} -> {to} ({reason})")),
            RunEvent::ModelFinished { turn, model, .. } => {
                Some(format!("turn {turn} answered by {model:?}"))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        seen,
        [
            "retry primary 1/2 transient: LLM request retry 1/2: provider request failed temporarily. Retrying in 1s.",
            "fallback primary -> backup (transient)",
            "turn 1 answered by Some(\"backup\")",
            "retry primary 1/2 transient: LLM request retry 1/2: provider request failed temporarily. Retrying in 1s.",
            "fallback primary -> backup (transient)",
            "turn 2 answered by Some(\"backup\")",
            // Two final failures opened the primary's breaker: it is skipped.
            "fallback primary -> backup (circuit_open)",
            "turn 3 answered by Some(\"backup\")",
        ]
    );
}

#[tokio::test]
async fn an_open_breaker_skips_the_model() {
    let primary = scripted(
        "primary",
        "turns:\n  - error: {status: 500, message: boom}\n",
    );
    let backup = scripted("backup", "turns:\n  - content: Backup.\n");
    let primary = link(primary, 1);
    // Another run already opened this configuration's breaker.
    primary
        .breaker
        .admit(std::time::Instant::now())
        .unwrap()
        .failure(
            antler_engine::FailureReason::Transient,
            std::time::Instant::now(),
        );
    let model = ResilientModel::new(vec![primary, link(backup, 5)], quick()).unwrap();
    let (outcome, _, events) = drive(Arc::new(model), RunSettings::default()).await;
    assert_eq!(outcome.final_answer.as_deref(), Some("Backup."));
    assert!(events
        .iter()
        .any(|e| matches!(e, RunEvent::ModelFallback { reason, .. } if reason == "circuit_open")));
    assert!(!events
        .iter()
        .any(|e| matches!(e, RunEvent::LlmRetry { .. })));
}
