//! [`Metrics`]: the lead's run metrics in Prometheus' text format (`GET /metrics`): runs
//! started and ended by status, runs being driven, tool lifecycle states and tool calls
//! by source and outcome, histograms of model-step and tool-call latencies, and approvals
//! (issue 37): asks, their answers by decision and the time to decision.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds (seconds) of the latency histograms' buckets.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0,
];

/// Upper bounds (seconds) of the time-to-decision histogram's buckets: a person answers in
/// seconds to hours.
const DECISION_BUCKETS: [f64; 9] = [1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 14400.0, 86400.0];

/// The answers to asks, by the decision label they are counted under.
pub const APPROVAL_DECISIONS: [&str; 4] = ["approve", "approve_for_thread", "deny", "expired"];

/// A latency histogram with the upper bounds `bounds`.
struct Histogram {
    bounds: &'static [f64],
    counts: Box<[AtomicU64]>,
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::with_bounds(&BUCKETS)
    }
}

impl Histogram {
    fn with_bounds(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_micros: AtomicU64::new(0),
        }
    }

    fn observe(&self, took: Duration) {
        let seconds = took.as_secs_f64();
        for (bound, count) in self.bounds.iter().zip(&self.counts) {
            if seconds <= *bound {
                count.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} histogram");
        for (bound, count) in self.bounds.iter().zip(&self.counts) {
            let _ = writeln!(
                out,
                "{name}_bucket{{le=\"{bound}\"}} {}",
                count.load(Ordering::Relaxed)
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}");
        let _ = writeln!(out, "{name}_count {count}");
    }
}

/// One metric with one value (a counter or a gauge), with its help and type lines.
fn single(out: &mut String, name: &str, help: &str, kind: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    let _ = writeln!(out, "{name} {value}");
}

/// Counters keyed by label values.
#[derive(Default)]
struct Family(Mutex<BTreeMap<Vec<String>, u64>>);

impl Family {
    fn add(&self, labels: &[&str]) {
        let mut map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *map.entry(labels.iter().map(|l| (*l).to_owned()).collect())
            .or_default() += 1;
    }

    fn render(&self, out: &mut String, name: &str, help: &str, kind: &str, labels: &[&str]) {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        let map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (values, count) in map.iter() {
            let pairs: Vec<String> = labels
                .iter()
                .zip(values)
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            let _ = writeln!(out, "{name}{{{}}} {count}", pairs.join(","));
        }
    }
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The time-to-decision histogram ([`DECISION_BUCKETS`]).
struct DecisionHistogram(Histogram);

impl Default for DecisionHistogram {
    fn default() -> Self {
        Self(Histogram::with_bounds(&DECISION_BUCKETS))
    }
}

/// The lead's run metrics.
#[derive(Default)]
pub struct Metrics {
    runs_started: AtomicU64,
    runs_active: AtomicI64,
    runs_ended: Family,
    tool_states: Family,
    tool_calls: Family,
    step_latency: Histogram,
    tool_latency: Histogram,
    mcp_direct_calls: AtomicU64,
    input_tokens: AtomicU64,
    output_tokens: AtomicU64,
    total_tokens: AtomicU64,
    approvals_requested: AtomicU64,
    approvals_decided: Family,
    approval_wait: DecisionHistogram,
}

impl Metrics {
    /// A model call used these tokens (as its provider reported them).
    pub fn tokens(&self, usage: antler_engine::TokenUsage) {
        self.input_tokens
            .fetch_add(usage.input_tokens, Ordering::Relaxed);
        self.output_tokens
            .fetch_add(usage.output_tokens, Ordering::Relaxed);
        self.total_tokens
            .fetch_add(usage.total_tokens, Ordering::Relaxed);
    }

    /// A drive of a run began.
    pub fn drive_started(&self, new_run: bool) {
        if new_run {
            self.runs_started.fetch_add(1, Ordering::Relaxed);
        }
        self.runs_active.fetch_add(1, Ordering::Relaxed);
    }

    /// A drive stopped with `status` (`success`, `error`, `interrupted`).
    pub fn drive_stopped(&self, status: &str) {
        self.runs_active.fetch_sub(1, Ordering::Relaxed);
        self.runs_ended.add(&[status]);
    }

    /// A tool reached a lifecycle state.
    pub fn tool_state(&self, source: &str, state: &str) {
        self.tool_states.add(&[source, state]);
    }

    /// A tool call came back: `ok`, `error`, or `refused` by a middleware.
    pub fn tool_call(&self, source: &str, outcome: &str, took: Duration) {
        self.tool_calls.add(&[source, outcome]);
        self.tool_latency.observe(took);
    }

    /// An approval rule asked a person about a call.
    pub fn approval_requested(&self) {
        self.approvals_requested.fetch_add(1, Ordering::Relaxed);
    }

    /// An ask was answered with `decision` (one of [`APPROVAL_DECISIONS`]) `waited` after it
    /// was asked.
    pub fn approval_decided(&self, decision: &str, waited: Duration) {
        self.approvals_decided.add(&[decision]);
        self.approval_wait.0.observe(waited);
    }

    /// One model step (model call, its tool calls, the merge) took `took`.
    /// An MCP `tools/call` answered without rmcp's session worker (`mcp_server::direct`).
    pub fn mcp_direct_call(&self) {
        self.mcp_direct_calls.fetch_add(1, Ordering::Relaxed);
    }

    pub fn step(&self, took: Duration) {
        self.step_latency.observe(took);
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        single(
            &mut out,
            "antler_runs_started_total",
            "Runs started.",
            "counter",
            self.runs_started.load(Ordering::Relaxed),
        );
        single(
            &mut out,
            "antler_runs_active",
            "Runs being driven now.",
            "gauge",
            self.runs_active.load(Ordering::Relaxed),
        );
        self.runs_ended.render(
            &mut out,
            "antler_runs_total",
            "Run drives that stopped, by status.",
            "counter",
            &["status"],
        );
        self.tool_states.render(
            &mut out,
            "antler_tool_states_total",
            "Tools reaching a lifecycle state, by source and state.",
            "counter",
            &["source", "state"],
        );
        self.tool_calls.render(
            &mut out,
            "antler_tool_calls_total",
            "Tool calls by source and outcome (ok, error, refused).",
            "counter",
            &["source", "outcome"],
        );
        self.step_latency.render(
            &mut out,
            "antler_step_duration_seconds",
            "Duration of one model step with its tool calls.",
        );
        self.tool_latency.render(
            &mut out,
            "antler_tool_call_duration_seconds",
            "Duration of one tool call through the middlewares and its host.",
        );
        single(
            &mut out,
            "antler_approvals_requested_total",
            "Tool calls an approval rule asked a person about.",
            "counter",
            self.approvals_requested.load(Ordering::Relaxed),
        );
        self.approvals_decided.render(
            &mut out,
            "antler_approvals_decided_total",
            "Asks answered, by decision (approve, approve_for_thread, deny, expired).",
            "counter",
            &["decision"],
        );
        self.approval_wait.0.render(
            &mut out,
            "antler_approval_decision_seconds",
            "Time from an ask to its answer (a person's, or its deadline's).",
        );
        single(&mut out, "antler_mcp_direct_calls_total", "MCP tools/call requests the gateway answered without rmcp's session worker (plain calls of clients that cannot be asked mid-call).", "counter", self.mcp_direct_calls.load(Ordering::Relaxed));
        single(&mut out, "antler_http_clients_built_total", "HTTP clients (model endpoints, web backends) this lead built; one per client configuration, not per run.", "counter", antler_engine::clients_built());
        let _ = writeln!(
            out,
            "# HELP antler_model_tokens_total Tokens model providers reported, by kind."
        );
        let _ = writeln!(out, "# TYPE antler_model_tokens_total counter");
        for (kind, count) in [
            ("input", &self.input_tokens),
            ("output", &self.output_tokens),
            ("total", &self.total_tokens),
        ] {
            let _ = writeln!(
                out,
                "antler_model_tokens_total{{kind=\"{kind}\"}} {}",
                count.load(Ordering::Relaxed)
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposition_counts_runs_calls_and_latencies() {
        let m = Metrics::default();
        m.drive_started(true);
        m.tool_state("mcp", "executed");
        m.tool_call("mcp", "error", Duration::from_millis(3));
        m.step(Duration::from_micros(700));
        m.drive_stopped("success");
        let text = m.render();
        assert!(text.contains("antler_runs_started_total 1\n"), "{text}");
        assert!(text.contains("antler_runs_active 0\n"), "{text}");
        assert!(text.contains("antler_runs_total{status=\"success\"} 1\n"));
        assert!(text.contains("antler_tool_states_total{source=\"mcp\",state=\"executed\"} 1\n"));
        assert!(text.contains("antler_tool_calls_total{source=\"mcp\",outcome=\"error\"} 1\n"));
        assert!(text.contains("antler_step_duration_seconds_bucket{le=\"0.001\"} 1\n"));
        assert!(text.contains("antler_step_duration_seconds_bucket{le=\"0.0005\"} 0\n"));
        assert!(text.contains("antler_tool_call_duration_seconds_count 1\n"));
    }

    #[test]
    fn approvals_are_counted_by_decision_with_their_time_to_decision() {
        let m = Metrics::default();
        m.approval_requested();
        m.approval_requested();
        m.approval_decided("approve", Duration::from_secs(3));
        m.approval_decided("expired", Duration::from_secs(600));
        let text = m.render();
        assert!(
            text.contains("antler_approvals_requested_total 2\n"),
            "{text}"
        );
        assert!(text.contains("antler_approvals_decided_total{decision=\"approve\"} 1\n"));
        assert!(text.contains("antler_approvals_decided_total{decision=\"expired\"} 1\n"));
        assert!(text.contains("antler_approval_decision_seconds_bucket{le=\"1\"} 0\n"));
        assert!(text.contains("antler_approval_decision_seconds_bucket{le=\"5\"} 1\n"));
        assert!(text.contains("antler_approval_decision_seconds_bucket{le=\"900\"} 2\n"));
        assert!(
            text.contains("antler_approval_decision_seconds_sum 603\n"),
            "{text}"
        );
        assert!(text.contains("antler_approval_decision_seconds_count 2\n"));
    }
}
