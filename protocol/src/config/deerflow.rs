//! DeerFlow's top-level sections that Antler reads from [`AppConfig::other`] and that have
//! no module of their own: typed with DeerFlow's defaults and ranges (`loop_detection`,
//! `tool_output`, `suggestions`, `input_polish`, `max_recursion_limit`,
//! `safety_finish_reason`), or accepted only at the value that asks for nothing Antler
//! lacks (a feature off, the one backend Antler has) and otherwise refused by a config
//! error that names the key and says what Antler does instead. [`check`] finds the errors
//! and warnings at load time, so the accessors on `AppConfig` never fail.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::app::AppConfig;
use super::diagnostics::FieldPath;

/// The sections this module reads (with `DEERFLOW_READ_KEYS`, what Antler reads of
/// DeerFlow's keys: `reads_deerflow_key`).
pub const SECTIONS: &[&str] = &[
    "log_level",
    "logging",
    "token_usage",
    "max_recursion_limit",
    "tool_output",
    "tool_progress",
    "suggestions",
    "input_polish",
    "loop_detection",
    "safety_finish_reason",
    "agents_api",
    "agent_storage",
    "scheduler",
    "mcp_tasks",
    "run_ownership",
    "dedupe_storage",
    "channel_connections",
    "channels",
    "auth",
    "plugins",
    "extensions",
    "read_before_write",
    "database",
    "checkpointer",
    "run_events",
    "stream_bridge",
];

/// Where Antler keeps what DeerFlow's storage sections place (`database`, `checkpointer`,
/// `run_events`).
const OWN_STORE: &str = "Antler keeps runs, their checkpoints and events, threads and memory in its own runs store (SQLite in the runtime directory, one file per lead); leave the DeerFlow default";

/// DeerFlow's default `max_recursion_limit`.
pub const DEFAULT_MAX_RECURSION_LIMIT: u64 = 1000;

/// What a bad `log_level` is told: DeerFlow's level names (Python's, any case).
const LOG_LEVEL_EXPECTED: &str = "expected one of debug, info, warning, error, critical";

/// `log_level:` (DeerFlow's `logging_level_from_config`): the level of Antler's own log
/// lines (the `antler*` targets); other libraries' lines keep their default, as DeerFlow
/// sets only its own loggers. `critical` is `error`: tracing has no level above it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Debug,
    #[default]
    Info,
    Warning,
    Error,
}

impl LogLevel {
    /// A DeerFlow level name, any case (`warn` and `fatal` are Python's aliases).
    pub fn parse(name: &str) -> Option<LogLevel> {
        Some(match name.trim().to_ascii_lowercase().as_str() {
            "debug" => LogLevel::Debug,
            "info" => LogLevel::Info,
            "warning" | "warn" => LogLevel::Warning,
            "error" | "critical" | "fatal" => LogLevel::Error,
            _ => return None,
        })
    }

    /// The level's name in a tracing filter directive.
    pub fn directive(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warning => "warn",
            LogLevel::Error => "error",
        }
    }
}

/// `loop_detection:` (spec C.7).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LoopDetectionConfig {
    pub enabled: bool,
    pub warn_threshold: usize,
    pub hard_limit: usize,
    pub window_size: usize,
    /// Accepted for DeerFlow's files; Antler keeps no per-thread tracker to evict (the
    /// counts are replayed from the thread's messages).
    pub max_tracked_threads: usize,
    pub tool_freq_warn: usize,
    pub tool_freq_hard_limit: usize,
    pub tool_freq_overrides: BTreeMap<String, ToolFreqOverride>,
}

/// One tool's layer-2 thresholds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolFreqOverride {
    pub warn: usize,
    pub hard_limit: usize,
}

impl Default for LoopDetectionConfig {
    fn default() -> Self {
        LoopDetectionConfig {
            enabled: true,
            warn_threshold: 3,
            hard_limit: 5,
            window_size: 20,
            max_tracked_threads: 100,
            tool_freq_warn: 30,
            tool_freq_hard_limit: 50,
            tool_freq_overrides: BTreeMap::new(),
        }
    }
}

const LOOP_DETECTION_KEYS: &[&str] = &[
    "enabled",
    "warn_threshold",
    "hard_limit",
    "window_size",
    "max_tracked_threads",
    "tool_freq_warn",
    "tool_freq_hard_limit",
    "tool_freq_overrides",
];

/// `tool_output:` (spec C.8): ToolOutputBudget's limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ToolOutputConfig {
    pub enabled: bool,
    /// Over this many characters a result is written to a file; 0: never written.
    pub externalize_min_chars: usize,
    pub preview_head_chars: usize,
    pub preview_tail_chars: usize,
    /// Without a file, a result is cut to this many characters; 0: never cut.
    pub fallback_max_chars: usize,
    pub fallback_head_chars: usize,
    pub fallback_tail_chars: usize,
    /// Only DeerFlow's `.tool-results` (Antler's settlement and sandbox know that name).
    pub storage_subdir: String,
    pub exempt_tools: Vec<String>,
    /// `externalize_min_chars` per tool (0: never written for that tool).
    pub tool_overrides: BTreeMap<String, usize>,
}

/// The one directory Antler spills tool results to, under `outputs/`.
pub const TOOL_RESULTS_SUBDIR: &str = ".tool-results";

impl Default for ToolOutputConfig {
    fn default() -> Self {
        ToolOutputConfig {
            enabled: true,
            externalize_min_chars: 12_000,
            preview_head_chars: 2_000,
            preview_tail_chars: 1_000,
            fallback_max_chars: 30_000,
            fallback_head_chars: 8_000,
            fallback_tail_chars: 3_000,
            storage_subdir: TOOL_RESULTS_SUBDIR.to_owned(),
            exempt_tools: vec!["read_file".to_owned(), "read_file_tool".to_owned()],
            tool_overrides: BTreeMap::new(),
        }
    }
}

/// A count as it travels (and back, saturating on a narrower `usize`).
fn wide(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

fn narrow(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

impl From<&LoopDetectionConfig> for crate::messages::WireLoopDetection {
    fn from(c: &LoopDetectionConfig) -> Self {
        crate::messages::WireLoopDetection {
            enabled: c.enabled,
            warn_threshold: wide(c.warn_threshold),
            hard_limit: wide(c.hard_limit),
            window_size: wide(c.window_size),
            tool_freq_warn: wide(c.tool_freq_warn),
            tool_freq_hard_limit: wide(c.tool_freq_hard_limit),
            tool_freq_overrides: c
                .tool_freq_overrides
                .iter()
                .map(|(tool, o)| (tool.clone(), wide(o.warn), wide(o.hard_limit)))
                .collect(),
        }
    }
}

impl From<crate::messages::WireLoopDetection> for LoopDetectionConfig {
    fn from(w: crate::messages::WireLoopDetection) -> Self {
        LoopDetectionConfig {
            enabled: w.enabled,
            warn_threshold: narrow(w.warn_threshold),
            hard_limit: narrow(w.hard_limit),
            window_size: narrow(w.window_size),
            tool_freq_warn: narrow(w.tool_freq_warn),
            tool_freq_hard_limit: narrow(w.tool_freq_hard_limit),
            tool_freq_overrides: w
                .tool_freq_overrides
                .into_iter()
                .map(|(tool, warn, hard_limit)| {
                    let limits = ToolFreqOverride {
                        warn: narrow(warn),
                        hard_limit: narrow(hard_limit),
                    };
                    (tool, limits)
                })
                .collect(),
            ..LoopDetectionConfig::default()
        }
    }
}

impl From<&ToolOutputConfig> for crate::messages::WireToolOutput {
    fn from(c: &ToolOutputConfig) -> Self {
        crate::messages::WireToolOutput {
            enabled: c.enabled,
            externalize_min_chars: wide(c.externalize_min_chars),
            preview_head_chars: wide(c.preview_head_chars),
            preview_tail_chars: wide(c.preview_tail_chars),
            fallback_max_chars: wide(c.fallback_max_chars),
            fallback_head_chars: wide(c.fallback_head_chars),
            fallback_tail_chars: wide(c.fallback_tail_chars),
            exempt_tools: c.exempt_tools.clone(),
            tool_overrides: c
                .tool_overrides
                .iter()
                .map(|(tool, n)| (tool.clone(), wide(*n)))
                .collect(),
        }
    }
}

impl From<crate::messages::WireToolOutput> for ToolOutputConfig {
    fn from(w: crate::messages::WireToolOutput) -> Self {
        ToolOutputConfig {
            enabled: w.enabled,
            externalize_min_chars: narrow(w.externalize_min_chars),
            preview_head_chars: narrow(w.preview_head_chars),
            preview_tail_chars: narrow(w.preview_tail_chars),
            fallback_max_chars: narrow(w.fallback_max_chars),
            fallback_head_chars: narrow(w.fallback_head_chars),
            fallback_tail_chars: narrow(w.fallback_tail_chars),
            exempt_tools: w.exempt_tools,
            tool_overrides: w
                .tool_overrides
                .into_iter()
                .map(|(tool, n)| (tool, narrow(n)))
                .collect(),
            ..ToolOutputConfig::default()
        }
    }
}

const TOOL_OUTPUT_KEYS: &[&str] = &[
    "enabled",
    "externalize_min_chars",
    "preview_head_chars",
    "preview_tail_chars",
    "fallback_max_chars",
    "fallback_head_chars",
    "fallback_tail_chars",
    "storage_subdir",
    "exempt_tools",
    "tool_overrides",
];

/// `suggestions:` (spec C.8).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct SuggestionsConfig {
    pub enabled: bool,
    /// 1 to [`MAX_SUGGESTIONS_LIMIT`].
    pub max_suggestions: usize,
}

/// The most suggestions one call may ask for.
pub const MAX_SUGGESTIONS_LIMIT: usize = 5;

impl Default for SuggestionsConfig {
    fn default() -> Self {
        SuggestionsConfig {
            enabled: true,
            max_suggestions: 3,
        }
    }
}

const SUGGESTIONS_KEYS: &[&str] = &["enabled", "max_suggestions"];

/// `input_polish:` (spec C.8).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct InputPolishConfig {
    pub enabled: bool,
    pub max_chars: usize,
    /// A `models:` name; `None`: the default model.
    pub model_name: Option<String>,
}

impl Default for InputPolishConfig {
    fn default() -> Self {
        InputPolishConfig {
            enabled: true,
            max_chars: 4000,
            model_name: None,
        }
    }
}

const INPUT_POLISH_KEYS: &[&str] = &["enabled", "max_chars", "model_name"];

/// A problem [`check`] found: an error fails the load, a warning is shown.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Finding {
    /// The value is refused; what is expected or what Antler does instead.
    Error {
        path: FieldPath,
        message: String,
        expected: Option<String>,
    },
    /// A key the section does not have, with the section's keys.
    UnknownKey {
        path: FieldPath,
        known: &'static [&'static str],
    },
}

impl AppConfig {
    fn section<T: DeserializeOwned + Default>(&self, key: &str) -> T {
        self.other
            .get(key)
            .filter(|v| !v.is_null())
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_default()
    }

    /// `loop_detection:`, DeerFlow's defaults where unset.
    pub fn loop_detection(&self) -> LoopDetectionConfig {
        self.section("loop_detection")
    }

    /// `tool_output:`, DeerFlow's defaults where unset.
    pub fn tool_output(&self) -> ToolOutputConfig {
        self.section("tool_output")
    }

    /// `suggestions:`, DeerFlow's defaults where unset.
    pub fn suggestions(&self) -> SuggestionsConfig {
        self.section("suggestions")
    }

    /// `input_polish:`, DeerFlow's defaults where unset.
    pub fn input_polish(&self) -> InputPolishConfig {
        self.section("input_polish")
    }

    /// `log_level` (DeerFlow's default `info`): the detail of Antler's own log lines in
    /// every process when `RUST_LOG` is unset.
    pub fn log_level(&self) -> LogLevel {
        self.other
            .get("log_level")
            .and_then(Value::as_str)
            .and_then(LogLevel::parse)
            .unwrap_or_default()
    }

    /// `max_recursion_limit` (DeerFlow's default 1000): the most model turns a run may take.
    pub fn max_recursion_limit(&self) -> u64 {
        self.other
            .get("max_recursion_limit")
            .and_then(Value::as_u64)
            .filter(|n| *n >= 1)
            .unwrap_or(DEFAULT_MAX_RECURSION_LIMIT)
    }

    /// `read_before_write.enabled` (off unless set; DeerFlow's example turns it on): writes
    /// to existing files need a read of their current version.
    pub fn read_before_write_enabled(&self) -> bool {
        self.other
            .get("read_before_write")
            .and_then(|s| s.get("enabled"))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }

    /// `safety_finish_reason.enabled` (DeerFlow's default true): whether a reply cut by a
    /// safety filter has its tool calls dropped and ends the run `safety_capped`.
    pub fn safety_finish_reason_enabled(&self) -> bool {
        self.other
            .get("safety_finish_reason")
            .and_then(|s| s.get("enabled"))
            .and_then(Value::as_bool)
            .unwrap_or(true)
    }
}

/// A switch DeerFlow has and Antler lacks: (section, keys, the value that asks for it,
/// what Antler does instead).
type Switch = (&'static str, &'static [&'static str], bool, &'static str);

const NO_CHANNELS: &str =
    "Antler has no IM channels; users reach it through the gateway (`antler.gateway`) and the CLI";

/// The switches refused at the value that asks for what Antler lacks.
const SWITCHES: &[Switch] = &[
    ("logging", &["enhance", "enabled"], true, "Antler has no request-trace correlation headers; each run's events carry its run id and the lead's log is `logs/antler.log` (`log_level` or RUST_LOG sets its detail)"),
    ("token_usage", &["enabled"], false, "Antler always records token usage (the run's `model_finished` events and its view); it cannot be turned off"),
    ("tool_progress", &["enabled"], true, "Antler has no tool-progress state machine; repeated calls are caught by loop detection (`loop_detection:`) and failing tools by its tool-error handling"),
    ("agents_api", &["enabled"], true, "Antler has no HTTP API for custom agents' SOUL.md/USER.md; agents are made with `antler run --bootstrap` (setup_agent) and edited by `update_agent`"),
    ("scheduler", &["enabled"], true, "Antler has no scheduled tasks; start runs from cron or CI with `antler run` or `POST /api/runs`"),
    ("mcp_tasks", &["enabled"], true, "Antler does not poll MCP tasks; an MCP call runs to its result within the call's deadline"),
    ("run_ownership", &["heartbeat_enabled"], true, "Antler's runs are owned by its one lead, which resumes them from their checkpoints after a restart; there are no gateway workers to hand runs between"),
    ("channel_connections", &["enabled"], true, NO_CHANNELS),
    ("auth", &["local", "allow_registration"], true, "Antler has no self-registration; its users are the gateway's tokens and JWT issuers (`antler.gateway.tokens`, `antler.gateway.jwt`)"),
    ("auth", &["oidc", "enabled"], true, "Antler has no OIDC login; it accepts JWTs from a trusted issuer (`antler.gateway.jwt`) and gateway tokens"),
];

/// Every error and warning of the sections this module reads.
pub(crate) fn check(config: &AppConfig) -> Vec<Finding> {
    let mut findings = Vec::new();
    let root = FieldPath::root();
    for (section, keys, refused, instead) in SWITCHES {
        let Some(value) = config.other.get(section) else {
            continue;
        };
        if bool_at(value, keys) == Some(*refused) {
            let mut f = Findings {
                out: &mut findings,
                path: root.key(*section),
            };
            f.refuse(keys, instead);
        }
    }
    for key in SECTIONS {
        let Some(value) = config.other.get(key).filter(|v| !v.is_null()) else {
            continue;
        };
        let mut f = Findings {
            out: &mut findings,
            path: root.key(*key),
        };
        match *key {
            "log_level" => f.log_level(value),
            "max_recursion_limit" => f.positive(value, &[]),
            "tool_output" => f.tool_output(value),
            "suggestions" => f.typed::<SuggestionsConfig>(value, SUGGESTIONS_KEYS, |c, f| {
                if !(1..=MAX_SUGGESTIONS_LIMIT).contains(&c.max_suggestions) {
                    f.invalid(&["max_suggestions"], "expected an integer from 1 to 5");
                }
            }),
            "input_polish" => f.input_polish(value, config),
            "loop_detection" => f.loop_detection(value),
            "safety_finish_reason" => f.safety_finish_reason(value),
            "agent_storage" => f.backend(value, &["file"], "Antler keeps custom agents as files under the data root (`backend: file`)"),
            "dedupe_storage" => f.backend(value, &["auto", "memory"], "Antler has no IM channels whose webhooks need deduplicating; leave `backend: auto`"),
            "run_ownership" => {
                for field in ["lease_seconds", "grace_seconds"] {
                    if let Some(v) = value.get(field) {
                        f.positive(v, &[field]);
                    }
                }
            }
            "channels" => f.channels(value),
            "plugins" => f.plugins(value),
            "extensions" => f.extensions(value),
            "read_before_write" => f.bool_field(value, "enabled"),
            "database" => {
                f.backend(value, &["sqlite"], OWN_STORE);
                let mode = value.get("checkpoint_channel_mode").and_then(Value::as_str);
                if mode.is_some_and(|m| m != "full") {
                    f.refuse(&["checkpoint_channel_mode"], "Antler checkpoints each step's whole state (`full`)");
                }
            }
            "checkpointer" => {
                let kind = value.get("type").and_then(Value::as_str);
                if kind.is_some_and(|k| !["memory", "sqlite"].contains(&k)) {
                    f.refuse(&["type"], OWN_STORE);
                }
            }
            "run_events" => f.backend(value, &["memory", "db"], OWN_STORE),
            "stream_bridge" => {
                let kind = value.get("type").and_then(Value::as_str);
                if kind.is_some_and(|k| k != "memory") {
                    f.refuse(&["type"], "Antler replays a run's event stream from the events the runs store keeps (`Last-Event-ID`), on any lead; no Redis is needed");
                }
            }
            _ => {}
        }
    }
    findings
}

/// The boolean at `keys` under `value`.
fn bool_at(value: &Value, keys: &[&str]) -> Option<bool> {
    keys.iter()
        .try_fold(value, |v, k| v.get(*k))
        .and_then(Value::as_bool)
}

/// The findings of one section.
struct Findings<'a> {
    out: &'a mut Vec<Finding>,
    path: FieldPath,
}

impl Findings<'_> {
    fn at(&self, keys: &[&str]) -> FieldPath {
        keys.iter().fold(self.path.clone(), |p, k| p.key(*k))
    }

    fn invalid(&mut self, keys: &[&str], expected: &str) {
        let path = self.at(keys);
        self.out.push(Finding::Error {
            path,
            message: "value out of range".to_owned(),
            expected: Some(expected.to_owned()),
        });
    }

    fn refuse(&mut self, keys: &[&str], instead: &str) {
        let path = self.at(keys);
        self.out.push(Finding::Error {
            path,
            message: "Antler does not support this value".to_owned(),
            expected: Some(instead.to_owned()),
        });
    }

    fn bool_field(&mut self, value: &Value, key: &str) {
        if value.get(key).is_some_and(|v| !v.is_boolean()) {
            let path = self.at(&[key]);
            self.out.push(Finding::Error {
                path,
                message: "invalid type".to_owned(),
                expected: Some("expected true or false".to_owned()),
            });
        }
    }

    /// The section as `T` (a type error names it), its unknown keys warned, then `more`.
    fn typed<T: DeserializeOwned>(
        &mut self,
        value: &Value,
        keys: &'static [&'static str],
        more: impl FnOnce(&T, &mut Self),
    ) {
        if let Value::Object(map) = value {
            for key in map.keys().filter(|k| !keys.contains(&k.as_str())) {
                let path = self.path.key(key.as_str());
                self.out.push(Finding::UnknownKey { path, known: keys });
            }
        }
        match serde_json::from_value::<T>(value.clone()) {
            Ok(typed) => more(&typed, self),
            Err(e) => {
                let path = self.path.clone();
                self.out.push(Finding::Error {
                    path,
                    message: format!("invalid section: {e}"),
                    expected: None,
                });
            }
        }
    }

    fn positive(&mut self, value: &Value, keys: &[&str]) {
        if value.as_u64().is_none_or(|n| n < 1) {
            self.invalid(keys, "expected an integer of at least 1");
        }
    }

    fn backend(&mut self, value: &Value, accepted: &[&str], instead: &str) {
        let backend = value.get("backend").and_then(Value::as_str);
        if backend.is_some_and(|b| !accepted.contains(&b)) {
            self.refuse(&["backend"], instead);
        }
    }

    fn input_polish(&mut self, value: &Value, config: &AppConfig) {
        self.typed::<InputPolishConfig>(value, INPUT_POLISH_KEYS, |c, f| {
            if c.max_chars < 1 {
                f.invalid(&["max_chars"], "expected an integer of at least 1");
            }
            if let Some(name) = &c.model_name {
                if !config.models.iter().any(|m| &m.name == name) {
                    f.invalid(&["model_name"], "expected the name of a `models:` entry");
                }
            }
        });
    }

    fn safety_finish_reason(&mut self, value: &Value) {
        if value.get("detectors").is_some_and(|d| !d.is_null()) {
            self.refuse(&["detectors"], "Antler cannot load detector classes; its built-in detectors (OpenAI-compatible content_filter, Anthropic refusal, Gemini SAFETY and the like) always apply while `enabled` is true; leave `detectors` unset");
        }
        self.bool_field(value, "enabled");
    }

    fn channels(&mut self, value: &Value) {
        let Value::Object(map) = value else { return };
        for (name, channel) in map {
            if bool_at(channel, &["enabled"]) == Some(true) {
                self.refuse(&[name.as_str(), "enabled"], NO_CHANNELS);
            }
        }
    }

    fn plugins(&mut self, value: &Value) {
        let Value::Array(items) = value else { return };
        for (i, plugin) in items.iter().enumerate() {
            if bool_at(plugin, &["enabled"]) != Some(false) {
                self.out.push(Finding::Error {
                    path: self.path.index(i),
                    message: "Antler cannot load Python plugins".to_owned(),
                    expected: Some("tools come from `tools:`, MCP servers and skills; remove the plugin or set `enabled: false`".to_owned()),
                });
            }
        }
    }

    fn extensions(&mut self, value: &Value) {
        let middlewares = value.get("middlewares").and_then(Value::as_array);
        if middlewares.is_some_and(|m| !m.is_empty()) {
            self.refuse(&["middlewares"], "Antler cannot load middleware classes; its middleware chain is built in (guardrails, loop detection, token budget, ...), and `guardrails.provider` checks each tool call");
        }
    }

    fn log_level(&mut self, value: &Value) {
        if value.as_str().and_then(LogLevel::parse).is_none() {
            self.invalid(&[], LOG_LEVEL_EXPECTED);
        }
    }

    fn tool_output(&mut self, value: &Value) {
        self.typed::<ToolOutputConfig>(value, TOOL_OUTPUT_KEYS, |c, f| {
            if c.storage_subdir != TOOL_RESULTS_SUBDIR {
                f.refuse(&["storage_subdir"], "Antler writes tool results under outputs/.tool-results, the directory its delivery settlement leaves out; leave `storage_subdir: .tool-results`");
            }
        });
    }

    fn loop_detection(&mut self, value: &Value) {
        self.typed::<LoopDetectionConfig>(value, LOOP_DETECTION_KEYS, |c, f| {
            for (key, n) in [
                ("warn_threshold", c.warn_threshold),
                ("hard_limit", c.hard_limit),
                ("window_size", c.window_size),
                ("max_tracked_threads", c.max_tracked_threads),
                ("tool_freq_warn", c.tool_freq_warn),
                ("tool_freq_hard_limit", c.tool_freq_hard_limit),
            ] {
                if n < 1 {
                    f.invalid(&[key], "expected an integer of at least 1");
                }
            }
            if c.hard_limit < c.warn_threshold {
                f.invalid(&["hard_limit"], "expected hard_limit >= warn_threshold");
            }
            if c.tool_freq_hard_limit < c.tool_freq_warn {
                f.invalid(
                    &["tool_freq_hard_limit"],
                    "expected tool_freq_hard_limit >= tool_freq_warn",
                );
            }
            for (tool, o) in &c.tool_freq_overrides {
                if o.warn < 1 || o.hard_limit < 1 {
                    f.invalid(
                        &["tool_freq_overrides", tool],
                        "expected warn and hard_limit of at least 1",
                    );
                } else if o.hard_limit < o.warn {
                    f.invalid(
                        &["tool_freq_overrides", tool, "hard_limit"],
                        "expected hard_limit >= warn",
                    );
                }
            }
        });
    }
}

#[cfg(test)]
#[path = "deerflow_tests.rs"]
mod tests;
