//! [`ResilientModel`]: DeerFlow's `LLMErrorHandlingMiddleware` (spec D.5) as a
//! [`ChatModel`] around a run's model and the models of its `fallback:` list. A failure
//! is classified (quota, auth, burst_rate, transient, busy, generic); a retriable one the
//! client did not already retry is tried again (`llm_call:`), each retry told to the
//! request's observer; a final failure asks the next model of the list (every final
//! failure does: a fallback is usually another provider or account, so quota and auth
//! failures are where it helps most). Each model configuration has one
//! [`CircuitBreaker`] for the whole process (`circuit_breaker:`), shared by every run and
//! model built from it: retriable, non-burst final failures open it, and while open the
//! model is skipped (or the call fails at once when it is the last), until one half-open
//! probe succeeds. Retries do not stack: a failure the HTTP client already retried (its
//! `attempts` > 1) is final here.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use antler_protocol::config::{AppConfig, ModelConfig};
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::entry::select_model_config;
use super::provider::shared_model_from_entry;
use super::{
    ChatModel, ModelError, ModelReply, ModelRequest, RetryNotice, SubagentRequest, WireModel,
};

/// DeerFlow's words for a retry: `{attempt}`, `{max}`, `{why}` and `{seconds}`.
pub const RETRY_MESSAGE: &str = "LLM request retry {attempt}/{max}: {why}. Retrying in {seconds}s.";
/// `{why}` of a busy provider.
pub const WHY_BUSY: &str = "provider is busy";
/// `{why}` of a burst-rate limit.
pub const WHY_BURST: &str = "provider is throttling request burst rate";
/// `{why}` of any other retry.
pub const WHY_TRANSIENT: &str = "provider request failed temporarily";
/// A call to a model whose circuit breaker is open.
pub const CIRCUIT_OPEN: &str = "The configured LLM provider is currently unavailable due to continuous failures. Circuit breaker is engaged to protect the system. Please wait a moment before trying again.";

/// The `models:` key that lists a model's fallbacks, by name.
pub const FALLBACK_KEY: &str = "fallback";

/// Words of a quota or billing failure (DeerFlow's list).
const QUOTA_WORDS: &[&str] = &[
    "insufficient_quota",
    "quota",
    "billing",
    "credit",
    "payment",
    "余额不足",
    "超出限额",
    "额度不足",
    "欠费",
];
/// Words of an authentication failure.
const AUTH_WORDS: &[&str] = &[
    "authentication",
    "unauthorized",
    "invalid api key",
    "invalid_api_key",
    "permission",
    "forbidden",
    "access denied",
    "无权",
    "未授权",
];
/// Words of a burst-rate limit.
const BURST_WORDS: &[&str] = &[
    "limit_burst_rate",
    "rate increased too quickly",
    "burst rate",
    "请求速率增长过快",
    "突发速率",
];
/// Words of a busy provider.
const BUSY_WORDS: &[&str] = &[
    "server busy",
    "temporarily unavailable",
    "try again later",
    "please retry",
    "please try again",
    "overloaded",
    "high demand",
    "rate limit",
    "负载较高",
    "服务繁忙",
    "稍后重试",
    "请稍后重试",
];
/// HTTP statuses DeerFlow treats as transient.
const TRANSIENT_STATUSES: &[u16] = &[408, 409, 425, 429, 500, 502, 503, 504];

/// Why a model call failed, as DeerFlow classifies it (first match wins).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailureReason {
    Quota,
    Auth,
    BurstRate,
    Transient,
    Busy,
    Generic,
    /// The model's circuit breaker is open: it was not called.
    CircuitOpen,
}

impl FailureReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureReason::Quota => "quota",
            FailureReason::Auth => "auth",
            FailureReason::BurstRate => "burst_rate",
            FailureReason::Transient => "transient",
            FailureReason::Busy => "busy",
            FailureReason::Generic => "generic",
            FailureReason::CircuitOpen => "circuit_open",
        }
    }

    /// The class of a failed call.
    pub fn of_error(error: &ModelError) -> FailureReason {
        let text = error.to_string();
        let status = match error {
            ModelError::Http { status, .. } => Some(*status),
            ModelError::EndpointNotFound { .. } => Some(404),
            _ => None,
        };
        if let Some(reason) = FailureReason::of_words(&text, status) {
            return reason;
        }
        match error {
            ModelError::Connection { .. } | ModelError::Timeout { .. } => FailureReason::Transient,
            ModelError::Http { status, .. }
                if TRANSIENT_STATUSES.contains(status) || *status >= 500 =>
            {
                FailureReason::Transient
            }
            _ if FailureReason::has_any(&text, BUSY_WORDS) => FailureReason::Busy,
            _ => FailureReason::Generic,
        }
    }

    /// The class of a retry a client reports (`RetryNotice::reason`: `HTTP {status}:
    /// {text}`, or a connection error): transient unless its words say otherwise.
    pub fn of_retry(notice: &RetryNotice) -> FailureReason {
        let status = http_status(&notice.reason);
        FailureReason::of_words(&notice.reason, status).unwrap_or_else(|| {
            if status.is_none_or(|s| TRANSIENT_STATUSES.contains(&s) || s >= 500) {
                FailureReason::Transient
            } else if FailureReason::has_any(&notice.reason, BUSY_WORDS) {
                FailureReason::Busy
            } else {
                FailureReason::Transient
            }
        })
    }

    /// Quota, auth and burst words (and 401/403), which come before the status.
    fn of_words(text: &str, status: Option<u16>) -> Option<FailureReason> {
        if FailureReason::has_any(text, QUOTA_WORDS) {
            Some(FailureReason::Quota)
        } else if FailureReason::has_any(text, AUTH_WORDS) || matches!(status, Some(401 | 403)) {
            Some(FailureReason::Auth)
        } else if FailureReason::has_any(text, BURST_WORDS) {
            Some(FailureReason::BurstRate)
        } else {
            None
        }
    }

    fn has_any(text: &str, words: &[&str]) -> bool {
        let lower = text.to_lowercase();
        words.iter().any(|w| lower.contains(w))
    }

    /// Whether another attempt may help.
    pub fn retriable(self) -> bool {
        matches!(
            self,
            FailureReason::BurstRate | FailureReason::Transient | FailureReason::Busy
        )
    }

    /// `{why}` of the retry message.
    pub fn why(self) -> &'static str {
        match self {
            FailureReason::Busy => WHY_BUSY,
            FailureReason::BurstRate => WHY_BURST,
            _ => WHY_TRANSIENT,
        }
    }
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The status of a text that names `HTTP {status}`.
fn http_status(text: &str) -> Option<u16> {
    let at = text.find("HTTP ")?;
    text[at + 5..].get(..3)?.parse().ok()
}

/// DeerFlow's retry message.
pub fn retry_message(
    attempt: u32,
    max_attempts: u32,
    wait: Duration,
    reason: FailureReason,
) -> String {
    let seconds = ((wait.as_millis() as f64 / 1000.0).round() as u64).max(1);
    RETRY_MESSAGE
        .replacen("{attempt}", &attempt.to_string(), 1)
        .replacen("{max}", &max_attempts.to_string(), 1)
        .replacen("{why}", reason.why(), 1)
        .replacen("{seconds}", &seconds.to_string(), 1)
}

/// `llm_call:` (spec D.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LlmCall {
    /// Attempts per call, the first included.
    pub retry_max_attempts: u32,
    pub retry_base_delay: Duration,
    pub retry_cap_delay: Duration,
    pub burst_retry_base_delay: Duration,
    /// Model calls in flight at once in this process, every run and model together
    /// (`max_concurrent_calls`; 0: no cap).
    pub max_concurrent_calls: usize,
}

impl Default for LlmCall {
    fn default() -> Self {
        LlmCall {
            retry_max_attempts: 3,
            retry_base_delay: Duration::from_millis(1000),
            retry_cap_delay: Duration::from_millis(8000),
            burst_retry_base_delay: Duration::from_millis(5000),
            max_concurrent_calls: 0,
        }
    }
}

/// The process-wide cap on model calls in flight (DeerFlow's `max_concurrent_calls`):
/// one semaphore per cap value, so runs whose configs agree share it, and a config that
/// changes the cap takes effect for the runs built from it.
fn call_slots(cap: usize) -> Option<Arc<tokio::sync::Semaphore>> {
    type Slots = std::sync::Mutex<Option<(usize, Arc<tokio::sync::Semaphore>)>>;
    static SLOTS: std::sync::LazyLock<Slots> = std::sync::LazyLock::new(Slots::default);
    if cap == 0 {
        return None;
    }
    let mut slots = SLOTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match &*slots {
        Some((n, semaphore)) if *n == cap => Some(Arc::clone(semaphore)),
        _ => {
            let semaphore = Arc::new(tokio::sync::Semaphore::new(cap));
            *slots = Some((cap, Arc::clone(&semaphore)));
            Some(semaphore)
        }
    }
}

impl LlmCall {
    /// From config.yaml's `llm_call:` section (absent: DeerFlow's defaults).
    pub fn from_config(section: Option<&Value>) -> Result<LlmCall, String> {
        let mut settings = LlmCall::default();
        let Some(section) = section.filter(|s| !s.is_null()) else {
            return Ok(settings);
        };
        if !section.is_object() {
            return Err("llm_call must be a mapping".to_owned());
        }
        if let Some(n) = whole(section, "llm_call", "max_concurrent_calls", 0)? {
            settings.max_concurrent_calls = usize::try_from(n).unwrap_or(usize::MAX);
        }
        if let Some(n) = whole(section, "llm_call", "retry_max_attempts", 1)? {
            settings.retry_max_attempts = u32::try_from(n).unwrap_or(u32::MAX);
        }
        for (key, field) in [
            ("retry_base_delay_ms", &mut settings.retry_base_delay),
            ("retry_cap_delay_ms", &mut settings.retry_cap_delay),
            (
                "burst_retry_base_delay_ms",
                &mut settings.burst_retry_base_delay,
            ),
        ] {
            if let Some(ms) = whole(section, "llm_call", key, 0)? {
                *field = Duration::from_millis(ms);
            }
        }
        Ok(settings)
    }

    /// The attempts a failure of `reason` gets: at most 2 for a burst-rate limit and a
    /// stalled stream (DeerFlow's budgets).
    fn max_attempts(&self, reason: FailureReason, error: &ModelError) -> u32 {
        let mut most = self.retry_max_attempts.max(1);
        let stalled = matches!(error, ModelError::Timeout { what, .. } if what.contains("stream"));
        if reason == FailureReason::BurstRate || stalled {
            most = most.min(2);
        }
        most
    }

    /// The wait before the next attempt: `random(base, min(cap, max(base, previous·3)))`
    /// (decorrelated jitter), seeded with the reason's base; `jitter` in [0, 1).
    pub fn delay(
        &self,
        reason: FailureReason,
        previous: Option<Duration>,
        jitter: f64,
    ) -> Duration {
        let base = if reason == FailureReason::BurstRate {
            self.burst_retry_base_delay
        } else {
            self.retry_base_delay
        };
        let cap = self.retry_cap_delay;
        let seed = previous.unwrap_or(base);
        let high = cap.min(base.max(seed.saturating_mul(3)));
        if high < base {
            return cap;
        }
        base + (high - base).mul_f64(jitter.clamp(0.0, 1.0))
    }
}

/// A whole number at `key` of `section`, at least `min`.
fn whole(section: &Value, name: &str, key: &str, min: u64) -> Result<Option<u64>, String> {
    match section.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => match value.as_u64() {
            Some(n) if n >= min => Ok(Some(n)),
            _ => Err(format!(
                "{name}.{key} must be a whole number of at least {min}, not {value}"
            )),
        },
    }
}

/// `circuit_breaker:` (spec D.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BreakerSettings {
    pub failure_threshold: u32,
    pub recovery_timeout: Duration,
}

impl Default for BreakerSettings {
    fn default() -> Self {
        BreakerSettings {
            failure_threshold: 5,
            recovery_timeout: Duration::from_secs(60),
        }
    }
}

impl BreakerSettings {
    /// From config.yaml's `circuit_breaker:` section (absent: the defaults).
    pub fn from_config(section: Option<&Value>) -> Result<BreakerSettings, String> {
        let mut settings = BreakerSettings::default();
        let Some(section) = section.filter(|s| !s.is_null()) else {
            return Ok(settings);
        };
        if !section.is_object() {
            return Err("circuit_breaker must be a mapping".to_owned());
        }
        if let Some(n) = whole(section, "circuit_breaker", "failure_threshold", 1)? {
            settings.failure_threshold = u32::try_from(n).unwrap_or(u32::MAX);
        }
        if let Some(s) = whole(section, "circuit_breaker", "recovery_timeout_sec", 0)? {
            settings.recovery_timeout = Duration::from_secs(s);
        }
        Ok(settings)
    }
}

/// Where a circuit breaker is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Circuit {
    Closed { failures: u32 },
    Open { until: Instant },
    HalfOpen { probe_in_flight: bool },
}

/// One model configuration's breaker, shared by the whole process ([`breaker_for`]).
/// Its lock is held for a few instructions, never across an `.await`.
#[derive(Debug)]
pub struct CircuitBreaker {
    state: Mutex<(Circuit, BreakerSettings)>,
}

/// A call the breaker let through; a half-open probe dropped unsettled (the call was
/// cancelled) frees the probe slot.
pub struct Admission {
    breaker: Arc<CircuitBreaker>,
    probe: bool,
    settled: bool,
}

impl Admission {
    /// The call answered: the breaker closes.
    pub fn success(mut self) {
        self.settled = true;
        self.breaker
            .update(|circuit, _| *circuit = Circuit::Closed { failures: 0 });
    }

    /// The call failed for good with `reason`: a retriable, non-burst failure counts.
    pub fn failure(mut self, reason: FailureReason, now: Instant) {
        self.settled = true;
        if !reason.retriable() || reason == FailureReason::BurstRate {
            self.release();
            return;
        }
        self.breaker.update(|circuit, settings| {
            let open = Circuit::Open {
                until: now + settings.recovery_timeout,
            };
            *circuit = match *circuit {
                Circuit::HalfOpen { .. } => open,
                Circuit::Closed { failures } if failures + 1 >= settings.failure_threshold => open,
                Circuit::Closed { failures } => Circuit::Closed {
                    failures: failures + 1,
                },
                other @ Circuit::Open { .. } => other,
            };
        });
    }

    fn release(&self) {
        if self.probe {
            self.breaker.update(|circuit, _| {
                if let Circuit::HalfOpen { .. } = circuit {
                    *circuit = Circuit::HalfOpen {
                        probe_in_flight: false,
                    };
                }
            });
        }
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        if !self.settled {
            self.release();
        }
    }
}

impl CircuitBreaker {
    pub fn new(settings: BreakerSettings) -> CircuitBreaker {
        CircuitBreaker {
            state: Mutex::new((Circuit::Closed { failures: 0 }, settings)),
        }
    }

    pub fn circuit(&self) -> Circuit {
        self.lock().0
    }

    /// The settings it opens and recovers by.
    pub fn settings(&self) -> BreakerSettings {
        self.lock().1
    }

    /// A call at `now`: admitted while closed, and as the one probe once the recovery
    /// timeout has passed; `None` while open.
    pub fn admit(self: &Arc<Self>, now: Instant) -> Option<Admission> {
        let mut probe = false;
        let admitted = self.update(|circuit, _| {
            if let Circuit::Open { until } = *circuit {
                if now < until {
                    return false;
                }
                *circuit = Circuit::HalfOpen {
                    probe_in_flight: false,
                };
            }
            match circuit {
                Circuit::HalfOpen { probe_in_flight } if *probe_in_flight => false,
                Circuit::HalfOpen { probe_in_flight } => {
                    *probe_in_flight = true;
                    probe = true;
                    true
                }
                _ => true,
            }
        });
        admitted.then(|| Admission {
            breaker: Arc::clone(self),
            probe,
            settled: false,
        })
    }

    fn set_settings(&self, settings: BreakerSettings) {
        self.update(|_, current| *current = settings);
    }

    fn update<T>(&self, f: impl FnOnce(&mut Circuit, &mut BreakerSettings) -> T) -> T {
        let mut state = self.lock();
        let (circuit, settings) = &mut *state;
        f(circuit, settings)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Circuit, BreakerSettings)> {
        // A panic while holding the lock leaves a valid state (plain values).
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The process's breaker of the model configuration `key` (a `models:` entry's name,
/// model id and endpoint), with `settings` from now on.
pub fn breaker_for(key: &str, settings: BreakerSettings) -> Arc<CircuitBreaker> {
    static BREAKERS: OnceLock<Mutex<HashMap<String, Arc<CircuitBreaker>>>> = OnceLock::new();
    let mut breakers = BREAKERS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let breaker = breakers
        .entry(key.to_owned())
        .or_insert_with(|| Arc::new(CircuitBreaker::new(settings)));
    breaker.set_settings(settings);
    Arc::clone(breaker)
}

/// The breaker key of an entry: its name, model id and endpoint as written.
pub fn breaker_key(entry: &ModelConfig) -> String {
    format!(
        "{}\u{1f}{}\u{1f}{}",
        entry.name,
        entry.model,
        entry.base_url.as_deref().unwrap_or("")
    )
}

/// A model tried after the one before it failed for good (each attempt an event).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FallbackNotice {
    pub from: String,
    pub to: String,
    pub reason: FailureReason,
    /// Why `from` failed (its error, or the open breaker).
    pub detail: String,
}

/// One model of the chain and its breaker.
pub struct Link {
    pub model: Arc<dyn ChatModel>,
    pub breaker: Arc<CircuitBreaker>,
}

/// A run's model with its retries, breakers and fallbacks.
pub struct ResilientModel {
    chain: Vec<Link>,
    llm_call: LlmCall,
    slots: Option<Arc<tokio::sync::Semaphore>>,
}

impl ResilientModel {
    /// `chain`: the model first, then its fallbacks in order (at least one).
    pub fn new(chain: Vec<Link>, llm_call: LlmCall) -> Result<ResilientModel, ModelError> {
        if chain.is_empty() {
            return Err(ModelError::NoModelConfigured {
                hint: "a models: entry".to_owned(),
            });
        }
        Ok(ResilientModel {
            slots: call_slots(llm_call.max_concurrent_calls),
            chain,
            llm_call,
        })
    }

    fn primary(&self) -> &Arc<dyn ChatModel> {
        // `new` refuses an empty chain.
        &self.chain[0].model
    }

    async fn call(&self, request: ModelRequest<'_>) -> Result<ModelReply, ModelError> {
        // Held for the whole call, fallbacks included: one call of the run, one slot.
        let _slot = match &self.slots {
            Some(slots) => Some(Arc::clone(slots).acquire_owned().await.map_err(|_| {
                ModelError::InvalidConfig {
                    model: self.primary().name().to_owned(),
                    message: "the model call slots were closed".to_owned(),
                }
            })?),
            None => None,
        };
        let mut failures: Vec<(String, ModelError)> = Vec::new();
        for (at, link) in self.chain.iter().enumerate() {
            let name = link.model.name().to_owned();
            if let (Some(observer), Some((from, error))) = (request.observer, failures.last()) {
                observer.fallback(&FallbackNotice {
                    from: from.clone(),
                    to: name.clone(),
                    reason: reason_of(error),
                    detail: error.to_string(),
                });
            }
            let Some(admission) = link.breaker.admit(Instant::now()) else {
                failures.push((name.clone(), ModelError::CircuitOpen { model: name }));
                continue;
            };
            match self.attempts(link, request).await {
                Ok(reply) => {
                    admission.success();
                    if at > 0 {
                        if let Some(observer) = request.observer {
                            observer.answered_by(&name);
                        }
                    }
                    return Ok(reply);
                }
                Err(error) => {
                    admission.failure(FailureReason::of_error(&error), Instant::now());
                    failures.push((name, error));
                }
            }
        }
        match failures.len() {
            0 | 1 => Err(failures
                .pop()
                .map(|(_, e)| e)
                .unwrap_or(ModelError::NoModelConfigured {
                    hint: "a models: entry".to_owned(),
                })),
            _ => Err(ModelError::AllModelsFailed {
                failures: failures.into_iter().map(|(_, e)| e.to_string()).collect(),
            }),
        }
    }

    /// One model's attempts: a retriable failure its client did not retry is tried
    /// again, up to `llm_call`'s budget, each retry told to the observer.
    async fn attempts(
        &self,
        link: &Link,
        request: ModelRequest<'_>,
    ) -> Result<ModelReply, ModelError> {
        let mut attempt = 1u32;
        let mut previous = None;
        loop {
            let error = match link.model.complete(request).await {
                Ok(reply) => return Ok(reply),
                Err(error) => error,
            };
            let reason = FailureReason::of_error(&error);
            let max_attempts = self.llm_call.max_attempts(reason, &error);
            if !reason.retriable() || client_retried(&error) || attempt >= max_attempts {
                return Err(error);
            }
            let wait = self.llm_call.delay(reason, previous, fastrand::f64());
            previous = Some(wait);
            tracing::warn!(model = %link.model.name(), attempt, max_attempts, wait_ms = wait.as_millis() as u64, "model call failed; retrying: {error}");
            if let Some(observer) = request.observer {
                observer.retry(&RetryNotice {
                    model: link.model.name().to_owned(),
                    attempt,
                    max_attempts,
                    wait,
                    reason: error.to_string(),
                });
            }
            tokio::time::sleep(wait).await;
            attempt += 1;
        }
    }
}

fn reason_of(error: &ModelError) -> FailureReason {
    match error {
        ModelError::CircuitOpen { .. } => FailureReason::CircuitOpen,
        other => FailureReason::of_error(other),
    }
}

/// Whether the HTTP client already spent its own retries on this failure.
fn client_retried(error: &ModelError) -> bool {
    match error {
        ModelError::Http { attempts, .. } | ModelError::Connection { attempts, .. } => {
            *attempts > 1
        }
        _ => false,
    }
}

impl ChatModel for ResilientModel {
    fn name(&self) -> &str {
        self.primary().name()
    }

    fn provider_name(&self) -> &'static str {
        self.primary().provider_name()
    }

    fn complete<'a>(
        &'a self,
        request: ModelRequest<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(self.call(request))
    }

    fn reads_prompt(&self) -> bool {
        self.primary().reads_prompt()
    }

    fn is_scripted(&self) -> bool {
        self.primary().is_scripted()
    }

    /// The chain as it travels: the primary's entry and each fallback's, written out by
    /// its own client, with this model's `llm_call:` and its breakers' settings, so the
    /// worker builds the same [`ResilientModel`] ([`WireModel::Resilient`]). A primary
    /// that does not travel as an entry (a playbook) travels as it is; a fallback that
    /// cannot be delegated as an entry is left out of the chain.
    fn for_subagent(&self, task: &dyn SubagentRequest) -> Option<WireModel> {
        let entry = match self.primary().for_subagent(task)? {
            WireModel::Entry { entry } => entry,
            other => return Some(other),
        };
        let fallbacks = self.chain[1..]
            .iter()
            .filter_map(|link| match link.model.for_subagent(task) {
                Some(WireModel::Entry { entry }) => Some(entry),
                _ => None,
            })
            .collect();
        Some(WireModel::Resilient {
            entry,
            fallbacks,
            llm_call: self.llm_call,
            circuit_breaker: self.chain[0].breaker.settings(),
        })
    }
}

/// The [`ResilientModel`] a worker builds from a task's [`WireModel::Resilient`]: each
/// entry's shared client (nothing resolved from the worker's environment) with this
/// process's breaker of its configuration.
pub fn resilient_model_from_entries(
    entries: &[&ModelConfig],
    llm_call: LlmCall,
    breakers: BreakerSettings,
) -> Result<Arc<dyn ChatModel>, ModelError> {
    let chain = entries
        .iter()
        .map(|entry| {
            Ok(Link {
                model: shared_model_from_entry(entry, &|_| None)?,
                breaker: breaker_for(&breaker_key(entry), breakers),
            })
        })
        .collect::<Result<Vec<_>, ModelError>>()?;
    Ok(Arc::new(ResilientModel::new(chain, llm_call)?))
}

/// The model a run uses, as [`super::model_from_config`] builds it, wrapped with its
/// retries, its breaker and the models of its `fallback:` list (each a `models:` name;
/// a fallback's own list is not followed). `llm_call:` and `circuit_breaker:` are read
/// from `app`.
pub fn resilient_model_from_config(
    app: &AppConfig,
    name: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Arc<dyn ChatModel>, ModelError> {
    let entry = select_model_config(app, name, env)?;
    let invalid = |message: String| ModelError::InvalidConfig {
        model: entry.name.clone(),
        message,
    };
    let llm_call = LlmCall::from_config(app.other.get("llm_call")).map_err(invalid)?;
    let breakers =
        BreakerSettings::from_config(app.other.get("circuit_breaker")).map_err(invalid)?;
    let mut entries = vec![entry.clone()];
    for fallback in fallback_names(&entry).map_err(invalid)? {
        if entries.iter().any(|e| e.name == fallback) {
            continue;
        }
        let found = app
            .models
            .iter()
            .find(|m| m.name == fallback)
            .ok_or_else(|| ModelError::UnknownModel {
                name: fallback.clone(),
                configured: app.models.iter().map(|m| m.name.clone()).collect(),
            })?;
        entries.push(found.clone());
    }
    let chain = entries
        .iter()
        .map(|entry| {
            Ok(Link {
                model: shared_model_from_entry(entry, env)?,
                breaker: breaker_for(&breaker_key(entry), breakers),
            })
        })
        .collect::<Result<Vec<_>, ModelError>>()?;
    Ok(Arc::new(ResilientModel::new(chain, llm_call)?))
}

/// The names an entry's `fallback:` lists (one name or a list of names).
pub fn fallback_names(entry: &ModelConfig) -> Result<Vec<String>, String> {
    match entry.extra.get(FALLBACK_KEY) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(name)) => Ok(vec![name.clone()]),
        Some(Value::Array(names)) => names
            .iter()
            .map(|n| {
                n.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| format!("fallback lists model names, not {n}"))
            })
            .collect(),
        Some(other) => Err(format!("fallback lists model names, not {other}")),
    }
}

#[cfg(test)]
#[path = "resilient_tests.rs"]
mod tests;
