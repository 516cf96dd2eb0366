//! `SubagentLimitMiddleware` (spec 4.6), `after_model`: at most `max_concurrent` `task`
//! calls per reply and `max_total` delegations per run; extra `task` calls are dropped
//! (other calls kept) and, once the run's total is reached, the reply says so and the
//! run's stop reason becomes `subagent_limit_capped`.

use std::collections::HashSet;

use crate::catalog::builtins::TASK;
use crate::model::ModelReply;
use crate::thread::state::{Delegation, StopReason};

/// Appended to the reply when the run's delegation total is reached.
pub const SUBAGENT_LIMIT_REACHED: &str = "\n\n[SUBAGENT LIMIT REACHED] The subagent delegation limit for this run has been reached. Continue using the subagent results already collected, execute remaining simple work directly, or summarize the remaining work instead of launching more subagents.";

pub const DEFAULT_MAX_CONCURRENT: usize = 3;
pub const DEFAULT_MAX_TOTAL: usize = 6;

/// The limits, clamped as DeerFlow clamps them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubagentLimit {
    max_concurrent: usize,
    max_total: usize,
}

impl Default for SubagentLimit {
    fn default() -> Self {
        SubagentLimit::new(DEFAULT_MAX_CONCURRENT, DEFAULT_MAX_TOTAL)
    }
}

impl SubagentLimit {
    /// `max_concurrent` is clamped to 1..=4, `max_total` to 1..=50.
    pub fn new(max_concurrent: usize, max_total: usize) -> SubagentLimit {
        SubagentLimit {
            max_concurrent: max_concurrent.clamp(1, 4),
            max_total: max_total.clamp(1, 50),
        }
    }

    pub fn max_concurrent(&self) -> usize {
        self.max_concurrent
    }

    pub fn max_total(&self) -> usize {
        self.max_total
    }

    /// Applies the limits to `reply`; returns the stop reason when the total is reached.
    /// Prior delegations are the distinct ids of this run's entries.
    pub fn after_model(
        &self,
        reply: &mut ModelReply,
        delegations: &[Delegation],
        run_id: &str,
    ) -> Option<StopReason> {
        let prior = delegations
            .iter()
            .filter(|d| d.run_id == run_id)
            .map(|d| d.id.as_str())
            .collect::<HashSet<_>>()
            .len();
        let remaining = self.max_total.saturating_sub(prior);
        let allowed = self.max_concurrent.min(remaining);
        let tasks = reply.tool_calls.iter().filter(|c| c.name == TASK).count();
        if tasks <= allowed {
            return None;
        }
        let mut kept_tasks = 0;
        reply.tool_calls.retain(|call| {
            if call.name != TASK {
                return true;
            }
            kept_tasks += 1;
            kept_tasks <= allowed
        });
        if remaining == 0 {
            reply.content.push_str(SUBAGENT_LIMIT_REACHED);
            return Some(StopReason::SubagentLimitCapped);
        }
        None
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::thread::state::ToolCall;
    use serde_json::json;

    fn call(id: &str, name: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            args: json!({}),
        }
    }

    fn delegation(id: &str, run_id: &str) -> Delegation {
        Delegation {
            id: id.into(),
            run_id: run_id.into(),
            status: None,
        }
    }

    fn ids(reply: &ModelReply) -> Vec<&str> {
        reply.tool_calls.iter().map(|c| c.id.as_str()).collect()
    }

    #[test]
    fn the_total_cap_drops_task_calls_and_stops_with_deerflows_text() {
        let mut reply = ModelReply {
            id: "ai-1".into(),
            content: "Delegating.".into(),
            tool_calls: vec![call("blocked-task", "task"), call("allowed-bash", "bash")],
            ..ModelReply::default()
        };
        let stop = SubagentLimit::new(3, 1).after_model(
            &mut reply,
            &[delegation("already-used", "run-1")],
            "run-1",
        );
        assert_eq!(stop, Some(StopReason::SubagentLimitCapped));
        assert_eq!(ids(&reply), ["allowed-bash"]);
        assert_eq!(
            reply.content,
            "Delegating.\n\n[SUBAGENT LIMIT REACHED] The subagent delegation limit for this run has been reached. Continue using the subagent results already collected, execute remaining simple work directly, or summarize the remaining work instead of launching more subagents."
        );
    }

    #[test]
    fn only_as_many_task_calls_as_remain_are_kept() {
        let mut reply = ModelReply {
            tool_calls: vec![call("t1", "task"), call("t2", "task"), call("t3", "task")],
            ..ModelReply::default()
        };
        let prior = [
            delegation("a", "run-1"),
            delegation("b", "run-1"),
            delegation("c", "run-1"),
            delegation("c", "run-1"),
            delegation("x", "other-run"),
        ];
        let stop = SubagentLimit::new(3, 4).after_model(&mut reply, &prior, "run-1");
        assert_eq!(stop, None);
        assert_eq!(ids(&reply), ["t1"]);
        assert!(reply.content.is_empty());
    }

    #[test]
    fn limits_are_clamped() {
        let limit = SubagentLimit::new(0, 100);
        assert_eq!((limit.max_concurrent(), limit.max_total()), (1, 50));
        let limit = SubagentLimit::new(9, 0);
        assert_eq!((limit.max_concurrent(), limit.max_total()), (4, 1));
        assert_eq!(SubagentLimit::default(), SubagentLimit::new(3, 6));
    }
}
