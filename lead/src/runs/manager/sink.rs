//! A run's event sink: each event goes to the run's [`EventLog`] as JSON (stamped with
//! when the lead saw it; a streamed delta for live watchers only), into the [`Metrics`] (steps, tokens, tool states and calls, approvals),
//! and the questions a run's MCP calls ask into its pending elicitations.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::runs::elicitations::{PendingElicitation, PendingElicitations};
use crate::runs::events::EventLog;
use crate::runs::metrics::{Metrics, APPROVAL_DECISIONS};
use antler_engine::catalog::{Catalog, ToolSource};
use antler_engine::{RunEvent, ToolState};

/// Per-run timing for the latency metrics.
#[derive(Default)]
pub(super) struct Timing {
    pub(super) step_started: Option<Instant>,
    calls: HashMap<String, (Instant, bool)>,
}

pub(super) fn source_label(catalog: &Catalog, tool: &str) -> &'static str {
    match catalog.get(tool).map(|t| &t.source) {
        Some(ToolSource::Builtin) => "builtin",
        Some(ToolSource::Config { .. }) => "config",
        Some(ToolSource::Mcp { .. }) => "mcp",
        Some(ToolSource::Acp) => "acp",
        None => "unknown",
    }
}

fn state_label(state: ToolState) -> &'static str {
    match state {
        ToolState::Available => "available",
        ToolState::Authorized => "authorized",
        ToolState::Visible => "visible",
        ToolState::Executed => "executed",
        ToolState::Returned => "returned",
        ToolState::Delivered => "delivered",
    }
}

/// The run's events go to its log as JSON and into the metrics.
pub(super) fn event_sink(
    log: Arc<EventLog>,
    metrics: Arc<Metrics>,
    catalog: Arc<Catalog>,
    timing: Arc<Mutex<Timing>>,
    elicitations: Arc<PendingElicitations>,
) -> impl Fn(&RunEvent) + Send + 'static {
    move |event| {
        // Each event carries when the lead saw it (Unix ms), for timelines.
        match serde_json::to_value(event) {
            Ok(mut json) => {
                if let Some(object) = json.as_object_mut() {
                    let at = antler_protocol::sys::unix_ms();
                    object.insert("at_ms".into(), at.into());
                }
                if event.is_transient() {
                    log.push_transient(json.to_string());
                } else {
                    log.push(json.to_string());
                }
            }
            Err(e) => tracing::warn!("run event does not encode: {e}"),
        }
        let mut timing = timing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match event {
            RunEvent::ModelStarted { .. } => {
                if let Some(started) = timing.step_started.replace(Instant::now()) {
                    metrics.step(started.elapsed());
                }
            }
            RunEvent::ModelFinished {
                usage: Some(usage), ..
            } => metrics.tokens(*usage),
            // An ask answered (by a person or its deadline): its decision and time to it.
            RunEvent::ApprovalDecided {
                decision,
                waited_ms: Some(waited),
                ..
            } if APPROVAL_DECISIONS.contains(&decision.as_str()) => {
                metrics.approval_decided(decision, std::time::Duration::from_millis(*waited));
            }
            RunEvent::ModelFinished { .. }
            | RunEvent::ModelDelta { .. }
            | RunEvent::LlmRetry { .. }
            | RunEvent::ModelFallback { .. }
            | RunEvent::EmptyReplyRetried { .. }
            | RunEvent::AssistantMessage { .. }
            | RunEvent::AcpActivity { .. }
            | RunEvent::ContextSummarized { .. }
            | RunEvent::ContextTrimmed { .. }
            | RunEvent::TitleSet { .. }
            | RunEvent::ApprovalDecided { .. } => {}
            RunEvent::ApprovalRequested { .. } => metrics.approval_requested(),
            // A subagent's MCP call asks the parent run's user.
            RunEvent::Task {
                tool_call_id,
                task:
                    antler_engine::TaskEvent::TaskElicitation {
                        run_id,
                        id,
                        server,
                        message,
                        requested_schema,
                        ..
                    },
            } => elicitations.asked(PendingElicitation {
                id: id.clone(),
                server: server.clone(),
                message: message.clone(),
                requested_schema: requested_schema.clone(),
                tool_call_id: tool_call_id.clone(),
                mcp_run_id: Some(run_id.clone()),
            }),
            RunEvent::Task { .. } => {}
            RunEvent::Elicitation {
                tool_call_id,
                id,
                server,
                message,
                requested_schema,
            } => elicitations.asked(PendingElicitation {
                id: id.clone(),
                server: server.clone(),
                message: message.clone(),
                requested_schema: requested_schema.clone(),
                tool_call_id: tool_call_id.clone(),
                mcp_run_id: None,
            }),
            RunEvent::ToolStarted { tool_call_id, .. } => {
                timing
                    .calls
                    .insert(tool_call_id.clone(), (Instant::now(), false));
            }
            RunEvent::Lifecycle {
                state,
                tool,
                tool_call_id,
            } => {
                metrics.tool_state(source_label(&catalog, tool), state_label(*state));
                if let (ToolState::Executed, Some(id)) = (state, tool_call_id) {
                    if let Some(call) = timing.calls.get_mut(id) {
                        call.1 = true;
                    }
                }
            }
            RunEvent::ToolFinished {
                name,
                tool_call_id,
                error,
                ..
            } => {
                elicitations.call_ended(tool_call_id);
                if let Some((started, executed)) = timing.calls.remove(tool_call_id) {
                    let outcome = match (executed, error) {
                        (false, _) => "refused",
                        (true, true) => "error",
                        (true, false) => "ok",
                    };
                    metrics.tool_call(source_label(&catalog, name), outcome, started.elapsed());
                }
            }
            // Logged where the set-up noticed it.
            RunEvent::Warning { .. } => {}
        }
    }
}
