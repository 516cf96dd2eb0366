//! The goal loop of a run (spec A.6 "Goals", DeerFlow's `_prepare_goal_continuation_input`
//! in `runtime/runs/worker.py`): after each visible turn that ends in an answer, a thread
//! with an active goal has the run's model, thinking off, judge it from the visible
//! conversation. Met: the goal is cleared. Unmet, not blocked, not stalled and under its
//! `max_continuations`: another turn runs on the hidden `<goal_continuation>` message.
//! Otherwise the goal stands down with the reason kept on it. Every outcome is
//! checkpointed with the state, so the thread keeps it.

use crate::run::run_loop::{RunError, RunLoop};
use crate::thread::goal::{
    latest_answer_signature, should_continue, EvaluationRecord, GoalEvaluation, EVALUATOR_SYSTEM,
};
use crate::thread::state::StateUpdate;

impl RunLoop {
    /// After a turn that answered: whether another (hidden) turn runs for the thread's
    /// goal, its message then added to the state.
    pub(super) async fn continue_goal(&mut self) -> Result<bool, RunError> {
        let Some(goal) = self.state.goal.clone().filter(|g| g.is_active()) else {
            return Ok(false);
        };
        // A playbook answers what its author wrote: it is never asked to judge.
        if self.model.is_scripted() || self.cancel.as_ref().is_some_and(|c| c.is_cancelled()) {
            return Ok(false);
        }
        let signature = latest_answer_signature(&self.state.messages);
        let evaluation = match goal.evaluator_prompt(&self.state.messages) {
            None => GoalEvaluation::no_evidence(),
            Some(prompt) => {
                // Thinking off, no tools, nothing streamed (`ChatModel::moderate`).
                let answer = self.model.moderate(EVALUATOR_SYSTEM, &prompt).await;
                match answer
                    .map_err(|e| e.to_string())
                    .and_then(|reply| GoalEvaluation::parse(&reply.content))
                {
                    Ok(evaluation) => evaluation,
                    Err(why) => {
                        // DeerFlow: an evaluator that fails leaves the goal as it is.
                        tracing::warn!(run = %self.context.run_id, "goal evaluator failed: {why}");
                        return Ok(false);
                    }
                }
            }
        };
        let now = crate::tools::skill_manage::rfc3339_now();
        if evaluation.satisfied {
            self.state.goal = None;
            self.merge(StateUpdate::default()).await?;
            return Ok(false);
        }
        let no_progress = goal.no_progress_after(&evaluation, &signature);
        let stand_down = goal.stand_down_reason(&evaluation, no_progress);
        let continues = stand_down.is_none() && should_continue(&goal, &evaluation, no_progress);
        let next = goal.evaluated(
            &evaluation,
            EvaluationRecord {
                run_id: &self.context.run_id,
                now: &now,
                signature: &signature,
                continuation_count: goal.continuation_count + u32::from(continues),
                no_progress_count: no_progress,
                stand_down_reason: stand_down,
            },
        );
        let message = continues.then(|| next.continuation(&evaluation));
        self.state.goal = Some(next);
        self.merge(StateUpdate::messages(message)).await?;
        Ok(continues)
    }
}
