//! The web tools (spec E): `web_search`, `web_fetch`, `image_search` and `web_capture` of
//! every DeerFlow backend by its `use:` id, and Antler's own fetch (`antler.web:web_fetch`,
//! no remote reader). They run in the engine, as builtins do, on async reqwest with a
//! deadline per call; a capture is written to the thread's `outputs` through the run's
//! [`ThreadFiles`] (this disk, or the sandbox-host that owns the thread). [`WebTools`] holds the `tools:` entries (matched by entry name, as DeerFlow's
//! `get_tool_config(name)`); a result is neutralised as untrusted text before the model
//! sees it, and one that reads as an error (`Error:`, or JSON with an `"error"`) is an
//! error tool message. `guard` owns the address checks, `http` the requests,
//! `readability` the HTML to Markdown step, `backends` one module per backend.

pub mod backends;
pub mod entry;
pub mod guard;
pub mod http;
pub mod readability;

use std::collections::HashMap;
use std::time::Duration;

use antler_protocol::config::ToolConfig;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use self::backends::Backend;
use self::entry::ToolEntry;
use self::http::ApiClient;
use crate::catalog::pyjson;
use crate::catalog::registry::{self, Place, Resolution};
use crate::middleware::tool_error::{FailureClass, ToolFailure};
use crate::thread::files::ThreadFiles;
use crate::thread::input::neutralize_untrusted_tags;
use crate::thread::state::{Message, StateUpdate, ToolCall, ToolStatus};

/// The web tools' names whose results are untrusted (`ToolResultSanitizationMiddleware`).
pub const UNTRUSTED_RESULT_TOOLS: &[&str] =
    &["web_search", "web_fetch", "image_search", "web_capture"];

/// The web tools of one config: each configured web tool's backend and every entry.
#[derive(Clone, Debug, Default)]
pub struct WebTools {
    /// Tool name → its backend (the first entry of that name wins, as in assembly).
    backends: HashMap<String, Backend>,
    /// Entry name → its extra keys.
    entries: HashMap<String, ToolEntry>,
}

/// What one backend call has at hand.
pub struct WebCall<'a> {
    pub tools: &'a WebTools,
    pub client: &'a ApiClient,
    pub args: &'a serde_json::Map<String, Value>,
    /// The longest the call may take (the run's tool timeout).
    pub limit: Duration,
    /// The run's thread files (where `web_capture` writes).
    pub files: &'a dyn ThreadFiles,
}

/// What a web tool produced: the text the model reads, and the artifacts it declares
/// (`web_capture`'s screenshot).
#[derive(Debug, Default)]
pub struct WebOutcome {
    pub text: String,
    pub artifacts: Vec<String>,
}

impl From<String> for WebOutcome {
    fn from(text: String) -> WebOutcome {
        WebOutcome {
            text,
            artifacts: Vec::new(),
        }
    }
}

impl WebCall<'_> {
    /// The entry named `name` (DeerFlow's `get_tool_config(name).model_extra`).
    pub fn entry(&self, name: &str) -> ToolEntry {
        self.tools.entries.get(name).cloned().unwrap_or_default()
    }

    /// `deadline`, no longer than the run's tool timeout.
    pub fn deadline(&self, deadline: Duration) -> Duration {
        deadline.min(self.limit)
    }

    /// A required string argument.
    pub fn str_arg(&self, name: &str) -> Result<String, ToolFailure> {
        match self.args.get(name) {
            Some(Value::String(s)) => Ok(s.clone()),
            _ => Err(ToolFailure::new(
                FailureClass::ValidationError,
                format!("{name}: field required (a string)"),
            )),
        }
    }

    /// An optional argument as written.
    pub fn arg(&self, name: &str) -> Option<&Value> {
        self.args.get(name).filter(|v| !v.is_null())
    }
}

impl WebTools {
    /// The web tools of `tools` (the `tools:` section): entries whose `use:` id names a
    /// web backend Antler runs.
    pub fn from_config(tools: &[ToolConfig]) -> WebTools {
        let mut web = WebTools::default();
        for tc in tools {
            web.entries
                .entry(tc.name.clone())
                .or_insert_with(|| ToolEntry::new(tc.extra.clone()));
            let Resolution::Found(implementation) = registry::resolve(&tc.use_) else {
                continue;
            };
            if implementation.place != Place::Web || !implementation.available {
                continue;
            }
            if let Some(backend) = Backend::of(implementation.id) {
                web.backends
                    .entry(implementation.name.to_owned())
                    .or_insert(backend);
            }
        }
        web
    }

    /// Whether no web tool is configured.
    pub fn is_empty(&self) -> bool {
        self.backends.is_empty()
    }

    /// Whether `name` is one of these web tools.
    pub fn handles(&self, name: &str) -> bool {
        self.backends.contains_key(name)
    }

    /// Runs `call` when it is a web tool (`None`: it is not), within `limit`, on the thread
    /// whose files are `files`.
    pub async fn execute(
        &self,
        call: &ToolCall,
        limit: Duration,
        files: &dyn ThreadFiles,
    ) -> Option<Result<StateUpdate, ToolFailure>> {
        let backend = *self.backends.get(&call.name)?;
        // The process's API client, built at the first web call (never for a config
        // without web tools, or runs that call none).
        let client = match ApiClient::new() {
            Ok(client) => client,
            Err(e) => {
                return Some(Err(ToolFailure::new(
                    FailureClass::ConnectionError,
                    e.to_string(),
                )))
            }
        };
        let empty = serde_json::Map::new();
        let args = call.args.as_object().unwrap_or(&empty);
        let web_call = WebCall {
            tools: self,
            client: &client,
            args,
            limit,
            files,
        };
        let work = backend.run(&call.name, &web_call);
        let result = match tokio::time::timeout(limit, work).await {
            Ok(result) => result,
            Err(_) => Err(ToolFailure::new(
                FailureClass::TimeoutError,
                format!("{} did not finish within {}s", call.name, http::secs(limit)),
            )),
        };
        Some(result.map(|WebOutcome { text, artifacts }| {
            let status = if reads_as_error(&text) {
                ToolStatus::Error
            } else {
                ToolStatus::Success
            };
            let text = if UNTRUSTED_RESULT_TOOLS.contains(&call.name.as_str()) {
                neutralize_untrusted_tags(&text)
            } else {
                text
            };
            StateUpdate {
                artifacts,
                ..StateUpdate::messages([Message::tool(&call.id, &call.name, text, status)])
            }
        }))
    }
}

/// The web entries of config.yaml as they travel to a subagent worker inside its task
/// spec, so a subagent's web tools run as the lead's do. Their keys (API keys, tokens)
/// never show in the `Debug` form: only names and `use:` ids do.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WireWebTools {
    pub entries: Vec<WireWebEntry>,
}

/// One web entry of [`WireWebTools`].
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct WireWebEntry {
    pub name: String,
    pub group: String,
    pub use_id: String,
    pub extra: Map<String, Value>,
}

impl std::fmt::Debug for WireWebTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(
                self.entries
                    .iter()
                    .map(|e| format!("{} ({})", e.name, e.use_id)),
            )
            .finish()
    }
}

impl WireWebTools {
    /// The entries of `tools` that are web tools (by `use:` id or by DeerFlow's entry names).
    pub fn of(tools: &[ToolConfig]) -> WireWebTools {
        let entries = tools
            .iter()
            .filter(|tc| {
                UNTRUSTED_RESULT_TOOLS.contains(&tc.name.as_str())
                    || matches!(registry::resolve(&tc.use_), Resolution::Found(i) if i.place == Place::Web)
            })
            .map(|tc| WireWebEntry {
                name: tc.name.clone(),
                group: tc.group.clone(),
                use_id: tc.use_.clone(),
                extra: tc.extra.clone(),
            })
            .collect();
        WireWebTools { entries }
    }

    /// The web tools these entries configure (`None` when there are none).
    pub fn tools(&self) -> Option<WebTools> {
        if self.entries.is_empty() {
            return None;
        }
        let configs: Vec<ToolConfig> = self
            .entries
            .iter()
            .map(|e| ToolConfig {
                name: e.name.clone(),
                group: e.group.clone(),
                use_: e.use_id.clone(),
                extra: e.extra.clone(),
            })
            .collect();
        Some(WebTools::from_config(&configs))
    }
}

/// `tool_result_meta`'s error test: a text starting with `Error:`, or a JSON object with a
/// truthy `"error"`.
pub fn reads_as_error(text: &str) -> bool {
    if text.starts_with("Error:") {
        return true;
    }
    if !text.trim_start().starts_with('{') {
        return false;
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(o)) => match o.get("error") {
            None | Some(Value::Null) | Some(Value::Bool(false)) => false,
            Some(Value::String(s)) => !s.is_empty(),
            Some(_) => true,
        },
        _ => false,
    }
}

/// `json.dumps(value, indent=2, ensure_ascii=False)`.
pub fn pretty(value: &Value) -> String {
    let mut out = String::new();
    pyjson::write_pretty(&mut out, value, 0);
    out
}

/// `json.dumps(value, ensure_ascii=False)`.
pub fn compact(value: &Value) -> String {
    let mut out = String::new();
    pyjson::write_compact(&mut out, value);
    out
}

/// `json.dumps({"error": message, key: subject}, ensure_ascii=False)`.
pub fn error_json(message: &str, key: &str, subject: &str) -> String {
    let mut object = serde_json::Map::new();
    object.insert("error".into(), Value::String(message.to_owned()));
    object.insert(key.into(), Value::String(subject.to_owned()));
    compact(&Value::Object(object))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_results_are_recognised() {
        assert!(reads_as_error("Error: No results found"));
        assert!(reads_as_error(
            "{\"error\": \"No results found\", \"query\": \"q\"}"
        ));
        assert!(!reads_as_error("[{\"title\": \"t\"}]"));
        assert!(!reads_as_error("# Title\n\nError: in the text"));
    }

    #[test]
    fn error_json_is_pythons_compact_form() {
        assert_eq!(
            error_json("No results found", "query", "rust \"actors\""),
            r#"{"error": "No results found", "query": "rust \"actors\""}"#
        );
    }
}
