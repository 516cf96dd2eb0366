//! Traces over OTLP (docs/telemetry.md): this process's tracer (one per process, with its
//! own `service.name`), the trace a task runs in ([`within`], read by
//! [`TraceContext::current`] for every request the task sends), and [`OtelSpan`], a span
//! held by whoever owns the work it measures (a run, a model call, a tool call, a served
//! request), ended when dropped. Off unless an endpoint is configured: then no exporter
//! exists and a span is `None` (no allocation, no clock read).
//!
//! A request's [`TraceContext`] is the W3C trace context: the trace id and the sender's
//! span as the parent, so the spans of a sandbox call on sandbox-host, an MCP call on
//! mcp-host and a subagent's turns on a worker nest under the lead's.

use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
    TraceState, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

use crate::config::TelemetrySection;
use crate::envelope::TraceContext;

/// The standard variable of the collector's base address (also given to the hosts the
/// lead starts).
pub const ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// The standard variable of the service name (the lead's; the hosts append their role).
pub const SERVICE_NAME_ENV: &str = "OTEL_SERVICE_NAME";
/// The service name when none is configured.
pub const DEFAULT_SERVICE_NAME: &str = "antler";
/// The path of OTLP/HTTP traces under the endpoint.
const TRACES_PATH: &str = "/v1/traces";

tokio::task_local! {
    static CURRENT: TraceContext;
}

/// The exporting tracer, when telemetry is on.
static TRACER: OnceLock<Exporting> = OnceLock::new();

struct Exporting {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    /// Runs the batch exporter, apart from the process's own runtimes.
    _runtime: tokio::runtime::Runtime,
}

/// Where and as whom this process exports, when telemetry is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The OTLP/HTTP base address.
    pub endpoint: String,
    /// The lead's service name (the hosts append their role).
    pub service_name: String,
}

impl Settings {
    /// From `antler.telemetry` first, then the standard variables; `None` (off) without an
    /// endpoint.
    pub fn resolve(section: &TelemetrySection) -> Option<Settings> {
        let given = |v: &Option<String>| v.clone().filter(|v| !v.trim().is_empty());
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let endpoint = given(&section.otlp_endpoint).or_else(|| env(ENDPOINT_ENV))?;
        let service_name = given(&section.service_name)
            .or_else(|| env(SERVICE_NAME_ENV))
            .unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_owned());
        Some(Settings {
            endpoint,
            service_name,
        })
    }

    /// The environment a child process of the lead reads them from.
    pub fn child_env(&self) -> [(&'static str, String); 2] {
        [
            (ENDPOINT_ENV, self.endpoint.clone()),
            (SERVICE_NAME_ENV, self.service_name.clone()),
        ]
    }
}

/// Why the exporter could not be made (the process runs on without traces).
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("cannot build the OTLP exporter: {0}")]
    Exporter(String),
    #[error("cannot start the exporter's runtime: {0}")]
    Runtime(#[from] std::io::Error),
}

/// Starts exporting this process's spans as `service_name` (the lead's name, with `-role`
/// for a host); nothing when `settings` is `None`. Whether an exporter now exists.
pub fn init(settings: Option<&Settings>, role: Option<&str>) -> Result<bool, TelemetryError> {
    let Some(settings) = settings else {
        return Ok(false);
    };
    if TRACER.get().is_some() {
        return Ok(true);
    }
    let service_name = match role {
        Some(role) => format!("{}-{role}", settings.service_name),
        None => settings.service_name.clone(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("otlp-export")
        .enable_all()
        .build()?;
    let endpoint = format!("{}{TRACES_PATH}", settings.endpoint.trim_end_matches('/'));
    let provider = {
        let _entered = runtime.enter();
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(endpoint)
            .with_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        let processor =
            opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor::builder(
                exporter,
                opentelemetry_sdk::runtime::Tokio,
            )
            .build();
        SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(
                opentelemetry_sdk::Resource::builder()
                    .with_service_name(service_name)
                    .build(),
            )
            .build()
    };
    let tracer = provider.tracer("antler");
    let _ = TRACER.set(Exporting {
        provider,
        tracer,
        _runtime: runtime,
    });
    Ok(true)
}

/// Whether this process exports spans.
pub fn enabled() -> bool {
    TRACER.get().is_some()
}

/// Exports the spans not sent yet and stops the exporter (at the process's end), waiting
/// at most `deadline`: the export runs on a thread of its own, so a collector that does
/// not answer cannot hold the exit. Whether it finished in time (`true` when off).
pub fn shutdown(deadline: Duration) -> bool {
    let Some(exporting) = TRACER.get() else {
        return true;
    };
    let provider = exporting.provider.clone();
    let (done, finished) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("otlp-flush".into())
        .spawn(move || {
            // Shutting down flushes the batch first; the second shutdown of a process
            // (an error path after an orderly one) has nothing left to send.
            let _ = provider.shutdown_with_timeout(deadline);
            let _ = done.send(());
        });
    spawned.is_ok() && finished.recv_timeout(deadline).is_ok()
}

/// The trace the current task runs in, if it runs in one.
pub fn current() -> Option<TraceContext> {
    CURRENT.try_with(Clone::clone).ok()
}

/// Runs `work` in `trace`: the requests it sends carry it ([`TraceContext::current`]) and
/// the spans it starts are its children.
pub async fn within<F: std::future::Future>(trace: TraceContext, work: F) -> F::Output {
    CURRENT.scope(trace, work).await
}

/// One span, ended when dropped; `None` inside when telemetry is off.
#[derive(Debug, Default)]
pub struct OtelSpan(Option<opentelemetry_sdk::trace::Span>);

impl OtelSpan {
    /// A span named `name` under `parent` (its trace, its parent span); attributes are
    /// only made when telemetry is on.
    pub fn start(
        name: impl Into<std::borrow::Cow<'static, str>>,
        kind: SpanKind,
        parent: &TraceContext,
        attributes: impl FnOnce() -> Vec<KeyValue>,
    ) -> OtelSpan {
        let Some(exporting) = TRACER.get() else {
            return OtelSpan(None);
        };
        let cx = if parent.parent_span_id != 0 && parent.trace_id != 0 {
            Context::new().with_remote_span_context(SpanContext::new(
                TraceId::from(parent.trace_id),
                SpanId::from(parent.parent_span_id),
                TraceFlags::SAMPLED,
                true,
                TraceState::default(),
            ))
        } else {
            Context::new()
        };
        let span = exporting
            .tracer
            .span_builder(name)
            .with_kind(kind)
            .with_attributes(attributes())
            .start_with_context(&exporting.tracer, &cx);
        OtelSpan(Some(span))
    }

    /// A span under the current task's trace ([`current`]); a root without one.
    pub fn in_current(
        name: impl Into<std::borrow::Cow<'static, str>>,
        kind: SpanKind,
        attributes: impl FnOnce() -> Vec<KeyValue>,
    ) -> OtelSpan {
        if !enabled() {
            return OtelSpan(None);
        }
        let parent = current().unwrap_or_default();
        OtelSpan::start(name, kind, &parent, attributes)
    }

    /// `base` with this span as the parent of what it starts and sends: the span's trace
    /// id and span id. `base` itself when telemetry is off.
    pub fn child_of(&self, base: &TraceContext) -> TraceContext {
        let mut trace = base.clone();
        if let Some(span) = &self.0 {
            let sc = span.span_context();
            trace.trace_id = u128::from_be_bytes(sc.trace_id().to_bytes());
            trace.parent_span_id = u64::from_be_bytes(sc.span_id().to_bytes());
        }
        trace
    }

    /// Whether the span records (telemetry is on).
    pub fn is_recording(&self) -> bool {
        self.0.is_some()
    }

    /// Sets attributes, made only when the span records.
    pub fn set(&mut self, attributes: impl FnOnce() -> Vec<KeyValue>) {
        if let Some(span) = &mut self.0 {
            span.set_attributes(attributes());
        }
    }

    /// A span event (a lifecycle state).
    pub fn event(&mut self, name: &'static str, attributes: impl FnOnce() -> Vec<KeyValue>) {
        if let Some(span) = &mut self.0 {
            span.add_event(name, attributes());
        }
    }

    /// Marks the span failed with `message`.
    pub fn fail(&mut self, message: impl Into<String>) {
        if let Some(span) = &mut self.0 {
            span.set_status(Status::error(message.into()));
        }
    }
}

impl Drop for OtelSpan {
    fn drop(&mut self) {
        if let Some(span) = &mut self.0 {
            span.end();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_an_endpoint_no_exporter_is_made_and_spans_are_empty() {
        // Neither the section nor the environment of this test names an endpoint.
        if std::env::var_os(ENDPOINT_ENV).is_some() {
            return;
        }
        let settings = Settings::resolve(&TelemetrySection::default());
        assert_eq!(settings, None);
        assert!(!init(settings.as_ref(), None).unwrap());
        assert!(!enabled());
        let span = OtelSpan::in_current("run", SpanKind::Internal, || {
            panic!("attributes are not made when telemetry is off")
        });
        assert!(!span.is_recording());
        let base = TraceContext::for_run("r");
        assert_eq!(span.child_of(&base), base);
    }

    #[test]
    fn the_section_wins_over_the_environment_and_names_the_service() {
        let section = TelemetrySection {
            otlp_endpoint: Some("http://127.0.0.1:4318".into()),
            service_name: Some("prod".into()),
        };
        let settings = Settings::resolve(&section).unwrap();
        assert_eq!(settings.endpoint, "http://127.0.0.1:4318");
        assert_eq!(settings.service_name, "prod");
        assert_eq!(
            settings.child_env()[1],
            (SERVICE_NAME_ENV, "prod".to_owned())
        );
    }
}
