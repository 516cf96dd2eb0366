//! `LoopDetectionMiddleware` (spec C.7), `after_model`, with DeerFlow's two layers: the
//! same set of tool calls (each reduced to its salient key, hashed as DeerFlow hashes it)
//! repeated within the last `window_size` tool-calling replies (layer 1), and one tool
//! called too often within a window of recent calls (layer 2, `tool_freq_*`). A warning is
//! queued for the next model call (`loop_warning`); a hard stop strips the reply's calls and
//! ends the run `loop_capped`. What DeerFlow keeps in memory per thread (the windows, the
//! warned sets) is replayed from the state's messages, so a resumed or continued thread
//! counts the same whatever process drives it.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use md5::{Digest, Md5};
use serde_json::{Map, Value};

use crate::model::ModelReply;
use crate::thread::state::{Message, StopReason, ToolCall};

/// Layer 1's warning (queued for the next model call).
pub const LOOP_WARNING: &str = "[LOOP DETECTED] You are repeating the same tool calls. Stop calling tools and produce your final answer now. If you cannot complete the task, summarize what you accomplished so far.";

/// Layer 2's warning: `{tool_name}`, `{count}`.
pub const TOOL_FREQ_WARNING: &str = "[LOOP DETECTED] You have called {tool_name} {count} times without producing a final answer. Stop calling tools and produce your final answer now. If you cannot complete the task, summarize what you accomplished so far.";

/// Appended to the reply whose tool calls are stripped at layer 1's hard limit.
pub const LOOP_HARD_STOP: &str = "[FORCED STOP] Repeated tool calls exceeded the safety limit. Producing final answer with results collected so far.";

/// Appended at layer 2's hard limit: `{tool_name}`, `{count}`.
pub const TOOL_FREQ_HARD_STOP: &str = "[FORCED STOP] Tool {tool_name} called {count} times — exceeded the per-tool safety limit. Producing final answer with results collected so far.";

/// The name of the human message that carries queued warnings to the next model call.
pub const LOOP_WARNING_NAME: &str = "loop_warning";

/// At most this many warnings wait for the next model call (the oldest go first).
pub const MAX_PENDING_WARNINGS: usize = 4;

pub const DEFAULT_WARN_THRESHOLD: usize = 3;
pub const DEFAULT_HARD_LIMIT: usize = 5;
pub const DEFAULT_WINDOW_SIZE: usize = 20;
pub const DEFAULT_TOOL_FREQ_WARN: usize = 30;
pub const DEFAULT_TOOL_FREQ_HARD_LIMIT: usize = 50;

/// The arguments of these tools are keyed by the file's 200-line buckets.
const READ_FILE: &str = "read_file";
/// The arguments of these tools are keyed whole (content matters).
const CONTENT_TOOLS: [&str; 2] = ["write_file", "str_replace"];
/// The arguments that identify what any other tool works on.
const SALIENT_FIELDS: [&str; 7] = ["path", "url", "query", "command", "pattern", "glob", "cmd"];
const READ_BUCKET: i64 = 200;

/// What loop detection decided about one reply.
#[derive(Clone, Debug, PartialEq)]
pub enum LoopVerdict {
    /// Nothing repeats enough.
    Pass,
    /// Queue this warning for the next model call ([`LoopWarnings`]).
    Warn(String),
    /// The reply's tool calls were stripped; the run stops with this reason.
    HardStop(StopReason),
}

/// One tool's own layer-2 thresholds (`tool_freq_overrides`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToolFreqLimits {
    pub warn: usize,
    pub hard_limit: usize,
}

/// The thresholds (`loop_detection:` in config.yaml).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoopDetection {
    pub enabled: bool,
    pub warn_threshold: usize,
    pub hard_limit: usize,
    pub window_size: usize,
    pub tool_freq_warn: usize,
    pub tool_freq_hard_limit: usize,
    pub tool_freq_overrides: BTreeMap<String, ToolFreqLimits>,
}

impl Default for LoopDetection {
    fn default() -> Self {
        LoopDetection {
            enabled: true,
            warn_threshold: DEFAULT_WARN_THRESHOLD,
            hard_limit: DEFAULT_HARD_LIMIT,
            window_size: DEFAULT_WINDOW_SIZE,
            tool_freq_warn: DEFAULT_TOOL_FREQ_WARN,
            tool_freq_hard_limit: DEFAULT_TOOL_FREQ_HARD_LIMIT,
            tool_freq_overrides: BTreeMap::new(),
        }
    }
}

impl LoopDetection {
    /// The thresholds of a checked `loop_detection:` section.
    pub fn from_config(config: &antler_protocol::config::LoopDetectionConfig) -> LoopDetection {
        LoopDetection {
            enabled: config.enabled,
            warn_threshold: config.warn_threshold,
            hard_limit: config.hard_limit,
            window_size: config.window_size,
            tool_freq_warn: config.tool_freq_warn,
            tool_freq_hard_limit: config.tool_freq_hard_limit,
            tool_freq_overrides: config
                .tool_freq_overrides
                .iter()
                .map(|(name, o)| {
                    let limits = ToolFreqLimits {
                        warn: o.warn,
                        hard_limit: o.hard_limit,
                    };
                    (name.clone(), limits)
                })
                .collect(),
        }
    }

    /// `after_model` for `reply`, given the messages before it. At a hard stop the reply
    /// is rewritten: its calls dropped, the stop text appended, `tool_calls` finish
    /// reason made `stop`.
    pub fn after_model(&self, history: &[Message], reply: &mut ModelReply) -> LoopVerdict {
        if !self.enabled || reply.tool_calls.is_empty() {
            return LoopVerdict::Pass;
        }
        let mut tracker = Tracker::new(self);
        for message in history {
            if let Message::Ai { tool_calls, .. } = message {
                if !tool_calls.is_empty() {
                    tracker.check(tool_calls);
                }
            }
        }
        match tracker.check(&reply.tool_calls) {
            Check::Pass => LoopVerdict::Pass,
            Check::Warn(text) => {
                tracing::warn!("repetitive tool calls, a loop warning is queued");
                LoopVerdict::Warn(text)
            }
            Check::HardStop(text) => {
                tracing::warn!("loop hard limit reached, forcing a final answer");
                reply.tool_calls.clear();
                // DeerFlow's `content += "\n\n" + text`, an empty content included (its
                // `None` has no counterpart here: a reply's content is a string).
                reply.content = format!("{}\n\n{text}", reply.content);
                if reply.finish_reason.as_deref() == Some(crate::model::finish_reason::TOOL_CALLS) {
                    reply.finish_reason = Some(crate::model::finish_reason::STOP.to_owned());
                }
                LoopVerdict::HardStop(StopReason::LoopCapped)
            }
        }
    }

    fn freq_limits(&self, name: &str) -> (usize, usize) {
        match self.tool_freq_overrides.get(name) {
            Some(o) => (o.warn, o.hard_limit),
            None => (self.tool_freq_warn, self.tool_freq_hard_limit),
        }
    }

    /// Layer 2's window: at least every threshold, so a count can reach it.
    fn freq_window(&self) -> usize {
        self.tool_freq_overrides
            .values()
            .map(|o| o.hard_limit)
            .chain([self.window_size, self.tool_freq_hard_limit])
            .max()
            .unwrap_or(self.window_size)
    }
}

enum Check {
    Pass,
    Warn(String),
    HardStop(String),
}

/// What DeerFlow keeps per thread, rebuilt by replaying the thread's tool-calling replies.
struct Tracker<'a> {
    config: &'a LoopDetection,
    hashes: VecDeque<String>,
    warned: HashSet<String>,
    names: VecDeque<String>,
    name_counts: HashMap<String, usize>,
    freq_warned: HashSet<String>,
}

impl<'a> Tracker<'a> {
    fn new(config: &'a LoopDetection) -> Tracker<'a> {
        Tracker {
            config,
            hashes: VecDeque::new(),
            warned: HashSet::new(),
            names: VecDeque::new(),
            name_counts: HashMap::new(),
            freq_warned: HashSet::new(),
        }
    }

    /// One tool-calling reply through both layers.
    fn check(&mut self, calls: &[ToolCall]) -> Check {
        let config = self.config;
        let hash = call_set_hash(calls);
        self.hashes.push_back(hash.clone());
        while self.hashes.len() > config.window_size {
            self.hashes.pop_front();
        }
        // The warned set is pruned to the window: a hash may warn again later.
        let hashes = &self.hashes;
        self.warned.retain(|h| hashes.contains(h));
        let count = self.hashes.iter().filter(|h| **h == hash).count();
        // Layer 1: identical call sets.
        if count >= config.hard_limit {
            return Check::HardStop(LOOP_HARD_STOP.to_owned());
        }
        if count >= config.warn_threshold && self.warned.insert(hash) {
            return Check::Warn(LOOP_WARNING.to_owned());
        }
        // Layer 2: one tool too often; the first name that trips ends the check.
        let window = config.freq_window();
        for call in calls {
            let name = call.name.as_str();
            if name.is_empty() {
                continue;
            }
            self.names.push_back(name.to_owned());
            *self.name_counts.entry(name.to_owned()).or_default() += 1;
            while self.names.len() > window {
                if let Some(old) = self.names.pop_front() {
                    if let Some(n) = self.name_counts.get_mut(&old) {
                        *n -= 1;
                        if *n == 0 {
                            self.name_counts.remove(&old);
                        }
                    }
                }
            }
            let count = self.name_counts.get(name).copied().unwrap_or(0);
            let (warn, hard) = config.freq_limits(name);
            if count >= hard {
                return Check::HardStop(freq_text(TOOL_FREQ_HARD_STOP, name, count));
            }
            if count >= warn {
                if self.freq_warned.insert(name.to_owned()) {
                    return Check::Warn(freq_text(TOOL_FREQ_WARNING, name, count));
                }
            } else {
                // The count fell below the threshold: a later burst warns again.
                self.freq_warned.remove(name);
            }
        }
        Check::Pass
    }
}

fn freq_text(template: &str, name: &str, count: usize) -> String {
    template
        .replace("{tool_name}", name)
        .replace("{count}", &count.to_string())
}

/// The warnings waiting for the next model call of a run: at most
/// [`MAX_PENDING_WARNINGS`], without duplicates, dropped when the run's drive ends.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoopWarnings {
    pending: Vec<String>,
}

impl LoopWarnings {
    pub fn queue(&mut self, warning: String) {
        if !self.pending.contains(&warning) {
            self.pending.push(warning);
        }
        if self.pending.len() > MAX_PENDING_WARNINGS {
            let extra = self.pending.len() - MAX_PENDING_WARNINGS;
            self.pending.drain(..extra);
        }
    }

    /// The message the next request ends with (after the tool results, so every call
    /// keeps its result next to it), emptying the queue; it is never stored in the state.
    pub fn take_message(&mut self) -> Option<Message> {
        if self.pending.is_empty() {
            return None;
        }
        let content = std::mem::take(&mut self.pending).join("\n\n");
        Some(Message::Human {
            content,
            name: Some(LOOP_WARNING_NAME.to_owned()),
            hide_from_ui: true,
            additional_kwargs: None,
        })
    }
}

/// The order-independent identity of a set of tool calls: DeerFlow's
/// `md5(json.dumps(sorted("{name}:{key}")))[:12]`.
pub fn call_set_hash(calls: &[ToolCall]) -> String {
    let mut keys: Vec<Value> = calls
        .iter()
        .map(|call| format!("{}:{}", call.name, stable_key(&call.name, &call.args)))
        .map(Value::String)
        .collect();
    keys.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
    let blob = py_dumps(&Value::Array(keys));
    let digest = Md5::digest(blob.as_bytes());
    hex::encode(digest)[..12].to_owned()
}

/// The arguments as a mapping, or the key used when they are not one (a string that is
/// not JSON, JSON that is not an object).
fn normalize_args(args: &Value) -> (Map<String, Value>, Option<String>) {
    match args {
        Value::Object(map) => (map.clone(), None),
        Value::Null => (Map::new(), None),
        Value::String(raw) => match serde_json::from_str::<Value>(raw) {
            Ok(Value::Object(map)) => (map, None),
            Ok(parsed) => (Map::new(), Some(py_dumps(&parsed))),
            Err(_) => (Map::new(), Some(raw.clone())),
        },
        other => (Map::new(), Some(py_dumps(other))),
    }
}

/// What a call works on, by tool (spec C.7 "Key per call").
fn stable_key(name: &str, args: &Value) -> String {
    let (args, fallback) = normalize_args(args);
    if name == READ_FILE && fallback.is_none() {
        let path = match args.get("path") {
            Some(Value::String(p)) => p.clone(),
            Some(Value::Null) | None => String::new(),
            Some(other) => py_str(other),
        };
        let line = |v: Option<&Value>| -> Option<i64> {
            match v? {
                Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
                Value::String(s) => s.trim().parse().ok(),
                Value::Bool(b) => Some(i64::from(*b)),
                _ => None,
            }
        };
        let start = match args.get("start_line") {
            None | Some(Value::Null) => 1,
            given => line(given).unwrap_or(1),
        };
        let end = match args.get("end_line") {
            None | Some(Value::Null) => start,
            given => line(given).unwrap_or(start),
        };
        let (low, high) = (start.min(end).max(1), start.max(end).max(1));
        return format!(
            "{path}:{}-{}",
            (low - 1).div_euclid(READ_BUCKET),
            (high - 1).div_euclid(READ_BUCKET)
        );
    }
    if CONTENT_TOOLS.contains(&name) {
        return fallback.unwrap_or_else(|| py_dumps(&Value::Object(args)));
    }
    let salient: Map<String, Value> = SALIENT_FIELDS
        .iter()
        .filter_map(|field| {
            args.get(*field)
                .filter(|v| !v.is_null())
                .map(|v| ((*field).to_owned(), v.clone()))
        })
        .collect();
    if !salient.is_empty() {
        return py_dumps(&Value::Object(salient));
    }
    fallback.unwrap_or_else(|| py_dumps(&Value::Object(args)))
}

/// Python's `str()` of a JSON value, for a non-string path.
fn py_str(value: &Value) -> String {
    match value {
        Value::Bool(true) => "True".to_owned(),
        Value::Bool(false) => "False".to_owned(),
        Value::Null => "None".to_owned(),
        other => py_dumps(other),
    }
}

/// Python's `json.dumps(value, sort_keys=True)`: `", "` and `": "` separators, keys
/// sorted, non-ASCII escaped as `\uXXXX`.
fn py_dumps(value: &Value) -> String {
    let mut out = String::new();
    write_py(value, &mut out);
    out
}

fn write_py(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_py_string(key, out);
                out.push_str(": ");
                write_py(value, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_py(item, out);
            }
            out.push(']');
        }
        Value::String(s) => write_py_string(s, out),
        other => out.push_str(&other.to_string()),
    }
}

fn write_py_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7f => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
#[path = "loop_detection_tests.rs"]
mod tests;
