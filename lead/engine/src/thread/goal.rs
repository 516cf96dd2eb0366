//! A thread's goal (spec A.6 "Goals", DeerFlow's `agents/goal_state.py` and
//! `runtime/goal.py`): the objective the run keeps working towards, kept in the thread's
//! state across runs, and the pure parts of its loop: the evaluator's prompt and how its
//! answer is read, whether another hidden turn runs, and that turn's message. A goal is
//! active while it is set; met, it is cleared.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Digest as _;

use super::state::Message;

/// The most hidden continuation turns a goal may ask for (and the default).
pub const MAX_GOAL_CONTINUATIONS: u32 = 8;
/// How many evaluations in a row that see no new visible answer stop the goal.
pub const MAX_NO_PROGRESS_CONTINUATIONS: u32 = 2;
/// The longest objective, in characters.
pub const MAX_GOAL_OBJECTIVE_CHARS: usize = 4000;
const MAX_REASON_CHARS: usize = 1000;
const MAX_EVIDENCE_CHARS: usize = 1000;
const MAX_CONVERSATION_CHARS: usize = 12_000;
const MAX_CONVERSATION_MESSAGES: usize = 30;

/// DeerFlow's refusal of an empty objective.
pub const OBJECTIVE_EMPTY: &str = "Goal objective must not be empty.";

/// The evaluator's system message (DeerFlow's `evaluate_goal_completion`).
pub const EVALUATOR_SYSTEM: &str = "You are a strict completion evaluator for an AI coding assistant.\n\
Decide whether the active goal is fully satisfied using ONLY the visible conversation evidence.\n\
Do not assume files, commands, tests, or external state changed unless the conversation explicitly shows it.\n\
If the visible evidence is too weak to prove progress, fail closed with blocker missing_evidence.\n\
Use blocker needs_user_input when the assistant is waiting on the user, run_failed when the turn failed, \
external_wait when work is waiting on an outside system, goal_not_met_yet when useful autonomous work can continue, \
and none only when satisfied is true.\n\
Output exactly one JSON object: {\"satisfied\": boolean, \"blocker\": string, \"reason\": string, \"evidence_summary\": string}.";

/// The evaluator's user message: `{objective}`, `{conversation}`.
const EVALUATOR_USER: &str = "Active goal:\n{objective}\n\nVisible conversation evidence:\n{conversation}\n\nIs the active goal fully satisfied?";

/// The hidden continuation message: `{objective}`, `{blocker}`, `{reason}`, `{evidence}`.
const CONTINUATION: &str = "<goal_continuation>\n\
Active goal: {objective}\n\
Evaluator result: not satisfied. Blocker: {blocker}. Reason: {reason}\n\
Visible evidence: {evidence}\n\
Continue working toward the active goal. Use the available tools and conversation context. \
Do not ask the user to continue unless you are genuinely blocked.\n\
</goal_continuation>";

/// The evaluation when the conversation has no visible answer yet.
const NO_EVIDENCE: &str = "No visible assistant evidence is available yet.";

/// Why the evaluator says the goal is not met.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GoalBlocker {
    None,
    MissingEvidence,
    NeedsUserInput,
    RunFailed,
    ExternalWait,
    GoalNotMetYet,
}

impl GoalBlocker {
    fn as_str(self) -> &'static str {
        match self {
            GoalBlocker::None => "none",
            GoalBlocker::MissingEvidence => "missing_evidence",
            GoalBlocker::NeedsUserInput => "needs_user_input",
            GoalBlocker::RunFailed => "run_failed",
            GoalBlocker::ExternalWait => "external_wait",
            GoalBlocker::GoalNotMetYet => "goal_not_met_yet",
        }
    }
}

/// The evaluator's verdict.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GoalEvaluation {
    pub satisfied: bool,
    pub blocker: GoalBlocker,
    pub reason: String,
    #[serde(default)]
    pub evidence_summary: String,
}

/// The last evaluation kept on the goal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastEvaluation {
    #[serde(flatten)]
    pub evaluation: GoalEvaluation,
    pub run_id: String,
    pub evaluated_at: String,
    /// What a later evaluation is compared with to see no progress.
    pub progress_key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stand_down_reason: Option<String>,
}

/// A thread's active goal (DeerFlow's `GoalState`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GoalState {
    pub objective: String,
    /// Always `active` (a goal met or cleared is gone).
    pub status: String,
    pub created_at: String,
    pub updated_at: String,
    pub continuation_count: u32,
    pub max_continuations: u32,
    pub no_progress_count: u32,
    pub max_no_progress_continuations: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_evaluation: Option<LastEvaluation>,
}

/// The objective with its whitespace collapsed, or why it is refused.
pub fn normalize_objective(objective: &str) -> Result<String, String> {
    let normalized = objective.split_whitespace().collect::<Vec<_>>().join(" ");
    if normalized.is_empty() {
        return Err(OBJECTIVE_EMPTY.to_owned());
    }
    if normalized.chars().count() > MAX_GOAL_OBJECTIVE_CHARS {
        return Err(format!(
            "Goal objective must be at most {MAX_GOAL_OBJECTIVE_CHARS} characters."
        ));
    }
    Ok(normalized)
}

impl GoalState {
    /// A new active goal set at `now` (ISO 8601).
    pub fn new(objective: &str, max_continuations: u32, now: &str) -> Result<GoalState, String> {
        Ok(GoalState {
            objective: normalize_objective(objective)?,
            status: "active".to_owned(),
            created_at: now.to_owned(),
            updated_at: now.to_owned(),
            continuation_count: 0,
            max_continuations: max_continuations.min(MAX_GOAL_CONTINUATIONS),
            no_progress_count: 0,
            max_no_progress_continuations: MAX_NO_PROGRESS_CONTINUATIONS,
            last_evaluation: None,
        })
    }

    pub fn is_active(&self) -> bool {
        self.status == "active"
    }

    /// The evaluator's user message (its system message is [`EVALUATOR_SYSTEM`]) for the
    /// conversation `messages`, or `None` when it holds no visible answer (the evaluation
    /// is then [`GoalEvaluation::no_evidence`]).
    pub fn evaluator_prompt(&self, messages: &[Message]) -> Option<String> {
        let conversation = visible_conversation(messages);
        let answered = visible(messages).any(|(human, text)| !human && !text.trim().is_empty());
        if conversation.is_empty() || !answered {
            return None;
        }
        Some(
            EVALUATOR_USER
                .replace("{objective}", &self.objective)
                .replace("{conversation}", &conversation),
        )
    }

    /// The no-progress count after `evaluation` of a conversation whose latest visible
    /// answer has `signature`: one more when the last evaluation saw the same.
    pub fn no_progress_after(&self, evaluation: &GoalEvaluation, signature: &str) -> u32 {
        if evaluation.satisfied {
            return 0;
        }
        let key = progress_key(evaluation, signature);
        match &self.last_evaluation {
            Some(last) if last.progress_key == key => self.no_progress_count + 1,
            _ => 0,
        }
    }

    /// Why the goal stands down after `evaluation` (`None`: it goes on, or it is met).
    pub fn stand_down_reason(
        &self,
        evaluation: &GoalEvaluation,
        no_progress: u32,
    ) -> Option<String> {
        if evaluation.satisfied {
            return None;
        }
        if evaluation.blocker != GoalBlocker::GoalNotMetYet {
            return Some(format!("blocked:{}", evaluation.blocker.as_str()));
        }
        if self.continuation_count >= self.max_continuations {
            return Some("max_continuations_reached".to_owned());
        }
        if no_progress >= self.max_no_progress_continuations {
            return Some("no_progress_detected".to_owned());
        }
        None
    }

    /// The goal with `evaluation` recorded (and its counts set).
    pub fn evaluated(
        &self,
        evaluation: &GoalEvaluation,
        record: EvaluationRecord<'_>,
    ) -> GoalState {
        let mut next = self.clone();
        next.continuation_count = record.continuation_count;
        next.no_progress_count = record.no_progress_count;
        next.updated_at = record.now.to_owned();
        next.last_evaluation = Some(LastEvaluation {
            evaluation: evaluation.clone(),
            run_id: record.run_id.to_owned(),
            evaluated_at: record.now.to_owned(),
            progress_key: progress_key(evaluation, record.signature),
            stand_down_reason: record.stand_down_reason,
        });
        next
    }

    /// The hidden user message of the next continuation turn.
    pub fn continuation(&self, evaluation: &GoalEvaluation) -> Message {
        let or = |text: &str, fallback: &str| {
            if text.is_empty() {
                fallback.to_owned()
            } else {
                text.to_owned()
            }
        };
        let content = CONTINUATION
            .replace("{objective}", &self.objective)
            .replace("{blocker}", evaluation.blocker.as_str())
            .replace("{reason}", &or(&evaluation.reason, "No reason provided."))
            .replace(
                "{evidence}",
                &or(
                    &evaluation.evidence_summary,
                    "No evidence summary provided.",
                ),
            );
        Message::Human {
            content,
            name: None,
            hide_from_ui: true,
            additional_kwargs: Some(Box::new(
                serde_json::json!({"deerflow_goal_continuation": true}),
            )),
        }
    }
}

/// What an evaluation recorded on the goal carries besides the verdict.
pub struct EvaluationRecord<'a> {
    pub run_id: &'a str,
    pub now: &'a str,
    pub signature: &'a str,
    pub continuation_count: u32,
    pub no_progress_count: u32,
    pub stand_down_reason: Option<String>,
}

impl GoalEvaluation {
    /// The verdict when there is nothing visible to judge.
    pub fn no_evidence() -> GoalEvaluation {
        GoalEvaluation {
            satisfied: false,
            blocker: GoalBlocker::MissingEvidence,
            reason: NO_EVIDENCE.to_owned(),
            evidence_summary: String::new(),
        }
    }

    /// The evaluator's answer read: the JSON object in it (after any `<think>` block or
    /// code fence); texts cut to their limits, an unknown blocker `missing_evidence`.
    pub fn parse(text: &str) -> Result<GoalEvaluation, String> {
        let text = match text.rfind("</think>") {
            Some(end) => &text[end + "</think>".len()..],
            None => text,
        };
        let (Some(start), Some(end)) = (text.find('{'), text.rfind('}')) else {
            return Err("Goal evaluator response did not contain a JSON object.".to_owned());
        };
        if end <= start {
            return Err("Goal evaluator response did not contain a JSON object.".to_owned());
        }
        let payload: Value = serde_json::from_str(&text[start..=end])
            .map_err(|_| "Goal evaluator response was not valid JSON.".to_owned())?;
        let Some(satisfied) = payload["satisfied"].as_bool() else {
            return Err("Goal evaluator JSON must include boolean 'satisfied'.".to_owned());
        };
        let blocker = if satisfied {
            GoalBlocker::None
        } else {
            serde_json::from_value(payload["blocker"].clone())
                .ok()
                .filter(|b| *b != GoalBlocker::None)
                .unwrap_or(GoalBlocker::MissingEvidence)
        };
        let clip = |v: &Value, max: usize| -> String {
            let text = v.as_str().unwrap_or("");
            let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
            joined.chars().take(max).collect()
        };
        Ok(GoalEvaluation {
            satisfied,
            blocker,
            reason: clip(&payload["reason"], MAX_REASON_CHARS),
            evidence_summary: clip(&payload["evidence_summary"], MAX_EVIDENCE_CHARS),
        })
    }
}

/// Whether another hidden turn runs (DeerFlow's `should_continue_goal`).
pub fn should_continue(goal: &GoalState, evaluation: &GoalEvaluation, no_progress: u32) -> bool {
    !evaluation.satisfied
        && evaluation.blocker == GoalBlocker::GoalNotMetYet
        && goal.continuation_count < goal.max_continuations
        && no_progress < goal.max_no_progress_continuations
}

fn progress_key(evaluation: &GoalEvaluation, signature: &str) -> String {
    serde_json::json!({
        "blocker": evaluation.blocker,
        "evidence_signature": signature,
        "satisfied": evaluation.satisfied,
    })
    .to_string()
}

/// The visible messages: (is it the user's, its text).
fn visible(messages: &[Message]) -> impl Iterator<Item = (bool, String)> + '_ {
    messages.iter().filter_map(|m| match m {
        Message::Human {
            content,
            hide_from_ui: false,
            ..
        } => Some((true, content.clone())),
        Message::Ai { content, .. } => Some((false, content.clone())),
        _ => None,
    })
}

/// The last visible messages as `User: …` / `Assistant: …`, at most the last 12 000
/// characters.
fn visible_conversation(messages: &[Message]) -> String {
    let all: Vec<(bool, String)> = visible(messages).collect();
    let from = all.len().saturating_sub(MAX_CONVERSATION_MESSAGES);
    let lines: Vec<String> = all[from..]
        .iter()
        .filter(|(_, text)| !text.trim().is_empty())
        .map(|(human, text)| {
            let role = if *human { "User" } else { "Assistant" };
            format!("{role}: {}", text.trim())
        })
        .collect();
    let conversation = lines.join("\n\n");
    let count = conversation.chars().count();
    if count > MAX_CONVERSATION_CHARS {
        conversation
            .chars()
            .skip(count - MAX_CONVERSATION_CHARS)
            .collect()
    } else {
        conversation
    }
}

/// A signature of the latest visible answer (the no-progress breaker's key).
pub fn latest_answer_signature(messages: &[Message]) -> String {
    let last = messages.iter().rev().find_map(|m| match m {
        Message::Ai { content, .. } if !content.trim().is_empty() => Some(content),
        _ => None,
    });
    match last {
        Some(text) => {
            let digest = sha2::Sha256::digest(text.trim().as_bytes());
            digest.iter().map(|b| format!("{b:02x}")).collect()
        }
        None => String::new(),
    }
}

#[cfg(test)]
#[path = "goal_tests.rs"]
mod tests;
