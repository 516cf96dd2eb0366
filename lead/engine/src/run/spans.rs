//! The spans of a run (docs/telemetry.md): the run's own, one per model call with the
//! GenAI semantic conventions' attributes, one per tool call with its lifecycle states as
//! span events. They are `None` inside when telemetry is off (`antler_protocol::telemetry`).

use antler_protocol::telemetry::OtelSpan;
use antler_protocol::TraceContext;
use opentelemetry::trace::SpanKind;
use opentelemetry::KeyValue;

use crate::model::ModelReply;

/// `gen_ai.operation.name` of a run.
pub const OPERATION_INVOKE_AGENT: &str = "invoke_agent";
/// `gen_ai.operation.name` of a model call.
pub const OPERATION_CHAT: &str = "chat";
/// `gen_ai.operation.name` of a tool call.
pub const OPERATION_EXECUTE_TOOL: &str = "execute_tool";

/// The run's span, under the trace the run was started in (a subagent's: its parent's
/// `task` call), and the trace its steps run in.
pub fn run_span(run_id: &str, agent: &str) -> (OtelSpan, TraceContext) {
    let parent =
        antler_protocol::telemetry::current().unwrap_or_else(|| TraceContext::for_run(run_id));
    let span = OtelSpan::start(
        format!("{OPERATION_INVOKE_AGENT} {agent}"),
        SpanKind::Internal,
        &parent,
        || {
            vec![
                KeyValue::new("gen_ai.operation.name", OPERATION_INVOKE_AGENT),
                KeyValue::new("gen_ai.agent.name", agent.to_owned()),
                KeyValue::new("antler.run_id", run_id.to_owned()),
            ]
        },
    );
    let mut trace = span.child_of(&parent);
    trace.run_id = Some(run_id.to_owned());
    (span, trace)
}

/// A model call's span, in the current trace. `provider` is the vendor of the model's
/// configured entry (`ChatModel::provider_name`), under the conventions' current name
/// (`gen_ai.provider.name`) and its earlier one (`gen_ai.system`); when a fallback
/// answers, `gen_ai.response.model` names it.
pub fn model_span(model: &str, provider: &'static str) -> OtelSpan {
    OtelSpan::in_current(
        format!("{OPERATION_CHAT} {model}"),
        SpanKind::Client,
        || {
            vec![
                KeyValue::new("gen_ai.operation.name", OPERATION_CHAT),
                KeyValue::new("gen_ai.system", provider),
                KeyValue::new("gen_ai.provider.name", provider),
                KeyValue::new("gen_ai.request.model", model.to_owned()),
            ]
        },
    )
}

/// What the model answered: the model that did, the tokens, why it stopped.
pub fn record_reply(
    span: &mut OtelSpan,
    reply: &ModelReply,
    answered_by: Option<&str>,
    model: &str,
) {
    span.set(|| {
        let finish = reply.finish_reason.clone().unwrap_or_else(|| {
            if reply.tool_calls.is_empty() {
                "stop"
            } else {
                "tool_calls"
            }
            .to_owned()
        });
        let mut attributes = vec![
            KeyValue::new(
                "gen_ai.response.model",
                answered_by.unwrap_or(model).to_owned(),
            ),
            KeyValue::new(
                "gen_ai.response.finish_reasons",
                opentelemetry::Value::Array(vec![opentelemetry::StringValue::from(finish)].into()),
            ),
        ];
        if let Some(usage) = &reply.usage {
            attributes.push(KeyValue::new(
                "gen_ai.usage.input_tokens",
                usage.input_tokens as i64,
            ));
            attributes.push(KeyValue::new(
                "gen_ai.usage.output_tokens",
                usage.output_tokens as i64,
            ));
        }
        attributes
    });
}

/// A tool call's span, in the current trace, and the trace its work runs in.
pub fn tool_span(tool: &str, call_id: &str) -> (OtelSpan, Option<TraceContext>) {
    let span = OtelSpan::in_current(
        format!("{OPERATION_EXECUTE_TOOL} {tool}"),
        SpanKind::Internal,
        || {
            vec![
                KeyValue::new("gen_ai.operation.name", OPERATION_EXECUTE_TOOL),
                KeyValue::new("gen_ai.tool.name", tool.to_owned()),
                KeyValue::new("gen_ai.tool.call.id", call_id.to_owned()),
            ]
        },
    );
    let trace = span
        .is_recording()
        .then(|| span.child_of(&antler_protocol::telemetry::current().unwrap_or_default()));
    (span, trace)
}
