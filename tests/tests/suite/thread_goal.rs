//! Thread goals on the LangGraph-compatible API (`tests/peers/langgraph_branches.py goal`,
//! langgraph-sdk) against the real gateway: a goal set with `PUT …/goal` makes the run's
//! model get hidden `<goal_continuation>` turns after its answer, each judged by the
//! evaluator (the same model, DeerFlow's prompt), until the evaluator says met (the goal
//! is then cleared) or `max_continuations` is reached (the goal stays, standing down);
//! DeerFlow's validation and busy texts; bob gets alice's thread's 404.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::thread_branches::{drive, last_user_text};
use crate::model_support::{is_memory_update, recording_server_by, Reply};
use serde_json::{json, Value};

/// The opening of DeerFlow's evaluator system message.
const EVALUATOR: &str = "You are a strict completion evaluator for an AI coding assistant.";

fn is_evaluation(request: &Value) -> bool {
    request["messages"][0]["content"]
        .as_str()
        .is_some_and(|s| s.starts_with(EVALUATOR))
}

fn verdict(satisfied: bool) -> Reply {
    Reply::text(&if satisfied {
        json!({"satisfied": true, "blocker": "none", "reason": "Done.", "evidence_summary": "All parts."})
    } else {
        json!({"satisfied": false, "blocker": "goal_not_met_yet", "reason": "Not finished yet.", "evidence_summary": "Step done."})
    }
    .to_string())
}

/// The hidden message DeerFlow's loop sends for `objective` after the verdict above.
fn continuation(objective: &str) -> String {
    format!(
        "<goal_continuation>\nActive goal: {objective}\nEvaluator result: not satisfied. Blocker: goal_not_met_yet. Reason: Not finished yet.\nVisible evidence: Step done.\nContinue working toward the active goal. Use the available tools and conversation context. Do not ask the user to continue unless you are genuinely blocked.\n</goal_continuation>"
    )
}

#[test]
fn a_goal_gets_hidden_turns_until_met_or_capped() {
    // Goal A is met at the third evaluation; goal B never is.
    let a_evaluations = Arc::new(AtomicUsize::new(0));
    let turns = Arc::new(AtomicUsize::new(0));
    let (a_seen, turn_count) = (a_evaluations.clone(), turns.clone());
    let model = recording_server_by(move |request, _| {
        if is_memory_update(request) {
            return Reply::text(r#"{"user": {}, "history": {}, "newFacts": []}"#);
        }
        if is_evaluation(request) {
            let about_a = last_user_text(request).contains("Active goal:\nFinish A");
            return verdict(about_a && a_seen.fetch_add(1, Ordering::SeqCst) == 2);
        }
        if last_user_text(request) == "Take your time." {
            // Keeps its run in flight while the goal routes are tried.
            std::thread::sleep(std::time::Duration::from_secs(3));
        }
        let n = turn_count.fetch_add(1, Ordering::SeqCst);
        Reply::text(&format!("Progress {n}."))
    });
    let r = drive("goal", &model.base_url);
    let requests = model.requests.lock().unwrap().clone();

    // Set, read back, DeerFlow's fields.
    assert_eq!(r["empty"], json!({"goal": null}));
    let goal = &r["set"]["goal"];
    assert_eq!(goal["objective"], "Finish A");
    assert_eq!(goal["status"], "active");
    assert_eq!(goal["continuation_count"], 0);
    assert_eq!(goal["max_continuations"], 8);
    assert_eq!(goal["no_progress_count"], 0);
    assert_eq!(goal["max_no_progress_continuations"], 2);
    assert_eq!(r["got"], r["set"]);

    // Goal A: the answer, then two hidden turns, then met: cleared.
    let of_a: Vec<&Value> = requests
        .iter()
        .filter(|q| !is_evaluation(q) && q["messages"].to_string().contains("Do part A."))
        .collect();
    assert_eq!(of_a.len(), 3, "{of_a:?}");
    assert_eq!(last_user_text(of_a[0]), "Do part A.");
    for turn in &of_a[1..] {
        assert_eq!(last_user_text(turn), continuation("Finish A"));
    }
    let evaluations: Vec<&Value> = requests.iter().filter(|q| is_evaluation(q)).collect();
    let first = last_user_text(evaluations[0]);
    assert!(
        first.starts_with("Active goal:\nFinish A\n\nVisible conversation evidence:\nUser: Do part A.\n\nAssistant: Progress 0.")
            && first.ends_with("\n\nIs the active goal fully satisfied?"),
        "{first}"
    );
    assert_eq!(r["met_goal"], json!({"goal": null}));
    let messages = r["met_state"]["messages"].as_array().unwrap();
    let hidden: Vec<&Value> = messages
        .iter()
        .filter(|m| m["additional_kwargs"]["hide_from_ui"] == true)
        .collect();
    assert_eq!(hidden.len(), 2);
    assert_eq!(
        hidden[0]["additional_kwargs"]["deerflow_goal_continuation"],
        true
    );
    assert_eq!(messages.last().unwrap()["content"], "Progress 2.");

    // Goal B: one hidden turn (its cap), then it stands down and stays.
    let of_b = requests
        .iter()
        .filter(|q| !is_evaluation(q) && last_user_text(q) != "Take your time.")
        .filter(|q| q["messages"].to_string().contains("Do part B."))
        .count();
    assert_eq!(of_b, 2);
    let capped = &r["capped_goal"]["goal"];
    assert_eq!(capped["continuation_count"], 1);
    assert_eq!(capped["max_continuations"], 1);
    assert_eq!(
        capped["last_evaluation"]["stand_down_reason"],
        "max_continuations_reached"
    );
    assert_eq!(capped["last_evaluation"]["blocker"], "goal_not_met_yet");
    assert_eq!(r["capped_state"]["goal"], *capped);
    assert_eq!(
        r["edit_with_goal"],
        json!([409, "Cannot edit while a goal is active"])
    );
    assert_eq!(
        r["busy_put"],
        json!([
            409,
            "Thread has a run in flight. Set the goal after the run finishes."
        ])
    );
    assert_eq!(
        r["busy_delete"],
        json!([
            409,
            "Thread has a run in flight. Clear the goal after the run finishes."
        ])
    );
    assert_eq!(r["cleared"], json!({"goal": null}));
    assert_eq!(r["cleared_goal"], json!({"goal": null}));

    // DeerFlow's validation texts.
    assert_eq!(
        r["too_long"],
        json!([422, "Goal objective must be at most 4000 characters."])
    );
    assert_eq!(
        r["blank"],
        json!([422, "Goal objective must not be empty."])
    );
    assert_eq!(
        r["too_many"],
        json!([422, "Input should be less than or equal to 8"])
    );

    // Bob: alice's thread is not there for him.
    let tid = r["met_thread"].as_str().unwrap();
    let not_found = json!([404, format!("Thread {tid} not found")]);
    for key in ["bob_get", "bob_put", "bob_delete"] {
        assert_eq!(r[key], not_found, "{key}");
    }
}
