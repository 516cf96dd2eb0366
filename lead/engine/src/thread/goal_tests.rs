#![allow(clippy::unwrap_used)]

use super::*;

fn ai(text: &str) -> Message {
    Message::Ai {
        id: "ai-1".into(),
        content: text.into(),
        tool_calls: Vec::new(),
        reasoning: None,
    }
}

fn not_yet() -> GoalEvaluation {
    GoalEvaluation {
        satisfied: false,
        blocker: GoalBlocker::GoalNotMetYet,
        reason: "Two of three done.".into(),
        evidence_summary: String::new(),
    }
}

#[test]
fn an_objective_is_collapsed_and_bounded() {
    let goal = GoalState::new("  write   the\nreport ", 20, "t0").unwrap();
    assert_eq!(goal.objective, "write the report");
    assert_eq!(goal.max_continuations, MAX_GOAL_CONTINUATIONS);
    assert!(goal.is_active());
    assert_eq!(
        GoalState::new(" \n ", 1, "t0").unwrap_err(),
        OBJECTIVE_EMPTY
    );
    assert_eq!(
        GoalState::new(&"x".repeat(4001), 1, "t0").unwrap_err(),
        "Goal objective must be at most 4000 characters."
    );
}

#[test]
fn the_evaluators_answer_is_read_as_deerflow_reads_it() {
    let parsed = GoalEvaluation::parse(
        "<think>hmm {}</think>```json\n{\"satisfied\": false, \"blocker\": \"goal_not_met_yet\", \"reason\": \" not \\n yet \"}\n```",
    )
    .unwrap();
    assert_eq!(parsed.blocker, GoalBlocker::GoalNotMetYet);
    assert_eq!(parsed.reason, "not yet");
    let met = GoalEvaluation::parse(r#"{"satisfied": true, "blocker": "run_failed"}"#).unwrap();
    assert_eq!(met.blocker, GoalBlocker::None);
    let odd = GoalEvaluation::parse(r#"{"satisfied": false, "blocker": "none"}"#).unwrap();
    assert_eq!(odd.blocker, GoalBlocker::MissingEvidence);
    assert!(GoalEvaluation::parse("no json").is_err());
    assert!(GoalEvaluation::parse(r#"{"satisfied": "yes"}"#).is_err());
}

#[test]
fn a_goal_continues_only_while_unmet_under_its_caps_and_making_progress() {
    let mut goal = GoalState::new("ship it", 2, "t0").unwrap();
    assert!(should_continue(&goal, &not_yet(), 0));
    assert!(!should_continue(&goal, &GoalEvaluation::no_evidence(), 0));
    assert_eq!(
        goal.stand_down_reason(&GoalEvaluation::no_evidence(), 0)
            .as_deref(),
        Some("blocked:missing_evidence")
    );
    assert!(!should_continue(&goal, &not_yet(), 2));
    assert_eq!(
        goal.stand_down_reason(&not_yet(), 2).as_deref(),
        Some("no_progress_detected")
    );
    goal.continuation_count = 2;
    assert!(!should_continue(&goal, &not_yet(), 0));
    assert_eq!(
        goal.stand_down_reason(&not_yet(), 0).as_deref(),
        Some("max_continuations_reached")
    );
}

#[test]
fn the_same_answer_twice_is_no_progress() {
    let goal = GoalState::new("ship it", 8, "t0").unwrap();
    let record = |signature| EvaluationRecord {
        run_id: "run-1",
        now: "t1",
        signature,
        continuation_count: 1,
        no_progress_count: 0,
        stand_down_reason: None,
    };
    let evaluated = goal.evaluated(&not_yet(), record("same"));
    assert_eq!(evaluated.no_progress_after(&not_yet(), "same"), 1);
    assert_eq!(evaluated.no_progress_after(&not_yet(), "new"), 0);
    assert_eq!(evaluated.continuation_count, 1);
}

#[test]
fn the_prompt_holds_the_visible_conversation_and_the_continuation_is_hidden() {
    let goal = GoalState::new("ship it", 8, "t0").unwrap();
    assert!(goal.evaluator_prompt(&[Message::human("go")]).is_none());
    let mut hidden = goal.continuation(&not_yet());
    let user = goal
        .evaluator_prompt(&[Message::human("go"), ai("done one"), hidden.clone()])
        .unwrap();
    assert!(EVALUATOR_SYSTEM.starts_with("You are a strict completion evaluator"));
    assert_eq!(
        user,
        "Active goal:\nship it\n\nVisible conversation evidence:\nUser: go\n\nAssistant: done one\n\nIs the active goal fully satisfied?"
    );
    let Message::Human {
        content,
        hide_from_ui,
        ..
    } = &mut hidden
    else {
        panic!()
    };
    assert!(*hide_from_ui);
    assert_eq!(
        content,
        "<goal_continuation>\nActive goal: ship it\nEvaluator result: not satisfied. Blocker: goal_not_met_yet. Reason: Two of three done.\nVisible evidence: No evidence summary provided.\nContinue working toward the active goal. Use the available tools and conversation context. Do not ask the user to continue unless you are genuinely blocked.\n</goal_continuation>"
    );
    assert_eq!(latest_answer_signature(&[Message::human("go")]), "");
    assert_eq!(latest_answer_signature(&[ai("a")]).len(), 64);
}
