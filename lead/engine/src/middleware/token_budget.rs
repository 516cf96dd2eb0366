//! `TokenBudgetMiddleware` (spec D.2), `after_model`: the run's token use, as the provider
//! reported it, against `token_budget` (off by default). At `warn_threshold` one warning goes
//! to the next request (`HumanMessage(name="budget_warning")`, the request only); at
//! `hard_stop_threshold` the reply's tool calls are dropped, the EXCEEDED note is appended and
//! the run stops as `token_capped`. Better than DeerFlow: the total is the provider's
//! `total_tokens` summed per call, not the whole context re-added at every call.

use serde::Deserialize;
use serde_json::Value;

use crate::model::ModelReply;
use crate::thread::state::{StopReason, TokenUsage};

/// `STR"[TOKEN BUDGET EXCEEDED] The {reason} token usage ({used:,}) has exceeded the safety limit ({budget:,}). Producing final answer with results collected so far."`
pub const BUDGET_EXCEEDED: &str = "[TOKEN BUDGET EXCEEDED] The {reason} token usage ({used}) has exceeded the safety limit ({budget}). Producing final answer with results collected so far.";
/// `STR"[TOKEN BUDGET WARNING] You have used {used:,} of your {budget:,} {reason} token budget ({percent:.0f}%). Wrap up ..."`
pub const BUDGET_WARNING: &str = "[TOKEN BUDGET WARNING] You have used {used} of your {budget} {reason} token budget ({percent}%). Wrap up your current work and produce a final answer. Avoid starting new tool calls unless absolutely necessary.";
/// The name of the warning's user message.
pub const BUDGET_WARNING_NAME: &str = "budget_warning";

/// `token_budget:` (DeerFlow's `TokenBudgetConfig`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TokenBudget {
    pub enabled: bool,
    pub max_tokens: u64,
    pub max_input_tokens: Option<u64>,
    pub max_output_tokens: Option<u64>,
    pub warn_threshold: f64,
    pub hard_stop_threshold: f64,
}

impl Default for TokenBudget {
    fn default() -> Self {
        TokenBudget {
            enabled: false,
            max_tokens: 200_000,
            max_input_tokens: None,
            max_output_tokens: None,
            warn_threshold: 0.8,
            hard_stop_threshold: 1.0,
        }
    }
}

/// What the budget decided about one reply.
#[derive(Clone, Debug, PartialEq)]
pub enum BudgetVerdict {
    Pass,
    /// Send this warning with the next request.
    Warn(String),
    /// The reply was rewritten; the run stops.
    HardStop(StopReason),
}

/// `1234567` as `1,234,567` (Python's `{:,}`).
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl TokenBudget {
    /// The enabled budget of `token_budget:` in config.yaml's other sections; an invalid
    /// section is an error naming what is wrong.
    pub fn from_config(section: Option<&Value>) -> Result<Option<TokenBudget>, String> {
        let Some(section) = section else {
            return Ok(None);
        };
        let budget: TokenBudget =
            serde_json::from_value(section.clone()).map_err(|e| format!("token_budget: {e}"))?;
        if budget.max_tokens < 1000 {
            return Err("token_budget.max_tokens: expected an integer of at least 1000".into());
        }
        if budget.hard_stop_threshold < budget.warn_threshold {
            return Err("token_budget.hard_stop_threshold: must be at least warn_threshold".into());
        }
        Ok(budget.enabled.then_some(budget))
    }

    /// The highest fraction over a limit: (fraction, reason, used, budget); ties go to
    /// total, then input, then output.
    fn worst(&self, used: TokenUsage) -> (f64, &'static str, u64, u64) {
        let mut worst = (
            used.total_tokens as f64 / self.max_tokens as f64,
            "total",
            used.total_tokens,
            self.max_tokens,
        );
        for (limit, reason, value) in [
            (self.max_input_tokens, "input", used.input_tokens),
            (self.max_output_tokens, "output", used.output_tokens),
        ] {
            if let Some(limit) = limit.filter(|l| *l > 0) {
                let fraction = value as f64 / limit as f64;
                if fraction > worst.0 {
                    worst = (fraction, reason, value, limit);
                }
            }
        }
        worst
    }

    /// Checks the run's use after this reply (`used` includes it). `warned`: a warning was
    /// sent already in this run.
    pub fn after_model(
        &self,
        used: TokenUsage,
        reply: &mut ModelReply,
        warned: bool,
    ) -> BudgetVerdict {
        let (fraction, reason, used, budget) = self.worst(used);
        if fraction >= self.hard_stop_threshold {
            let note = BUDGET_EXCEEDED
                .replacen("{reason}", reason, 1)
                .replacen("{used}", &thousands(used), 1)
                .replacen("{budget}", &thousands(budget), 1);
            reply.content = format!("{}\n\n{note}", reply.content);
            reply.tool_calls.clear();
            if reply.finish_reason.as_deref() == Some("tool_calls") {
                reply.finish_reason = Some("stop".to_owned());
            }
            return BudgetVerdict::HardStop(StopReason::TokenCapped);
        }
        if fraction >= self.warn_threshold && !warned {
            return BudgetVerdict::Warn(
                BUDGET_WARNING
                    .replacen("{used}", &thousands(used), 1)
                    .replacen("{budget}", &thousands(budget), 1)
                    .replacen("{reason}", reason, 1)
                    .replacen("{percent}", &format!("{:.0}", fraction * 100.0), 1),
            );
        }
        BudgetVerdict::Pass
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::thread::state::ToolCall;
    use serde_json::json;

    fn used(total: u64) -> TokenUsage {
        TokenUsage {
            input_tokens: total - total / 4,
            output_tokens: total / 4,
            total_tokens: total,
            ..TokenUsage::default()
        }
    }

    #[test]
    fn warns_once_then_stops_with_deerflows_texts() {
        let budget = TokenBudget::from_config(Some(&json!({"enabled": true, "max_tokens": 10000})))
            .unwrap()
            .unwrap();
        let mut reply = ModelReply::default();
        assert_eq!(
            budget.after_model(used(5000), &mut reply, false),
            BudgetVerdict::Pass
        );
        assert_eq!(
            budget.after_model(used(8500), &mut reply, false),
            BudgetVerdict::Warn("[TOKEN BUDGET WARNING] You have used 8,500 of your 10,000 total token budget (85%). Wrap up your current work and produce a final answer. Avoid starting new tool calls unless absolutely necessary.".into())
        );
        assert_eq!(
            budget.after_model(used(8600), &mut reply, true),
            BudgetVerdict::Pass
        );
        let mut reply = ModelReply {
            content: "Next step.".into(),
            tool_calls: vec![ToolCall {
                id: "c".into(),
                name: "bash".into(),
                args: json!({}),
            }],
            finish_reason: Some("tool_calls".into()),
            ..ModelReply::default()
        };
        assert_eq!(
            budget.after_model(used(12345), &mut reply, true),
            BudgetVerdict::HardStop(StopReason::TokenCapped)
        );
        assert!(reply.tool_calls.is_empty());
        assert_eq!(reply.finish_reason.as_deref(), Some("stop"));
        assert_eq!(reply.content, "Next step.\n\n[TOKEN BUDGET EXCEEDED] The total token usage (12,345) has exceeded the safety limit (10,000). Producing final answer with results collected so far.");
    }

    #[test]
    fn off_by_default_and_invalid_sections_are_named() {
        assert_eq!(TokenBudget::from_config(None), Ok(None));
        assert_eq!(
            TokenBudget::from_config(Some(&json!({"max_tokens": 5000}))),
            Ok(None)
        );
        let err = TokenBudget::from_config(Some(&json!({"enabled": true, "max_tokens": 10})))
            .unwrap_err();
        assert!(err.starts_with("token_budget.max_tokens"), "{err}");
        let err = TokenBudget::from_config(Some(
            &json!({"enabled": true, "warn_threshold": 0.9, "hard_stop_threshold": 0.5}),
        ))
        .unwrap_err();
        assert!(err.contains("hard_stop_threshold"), "{err}");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }
}
