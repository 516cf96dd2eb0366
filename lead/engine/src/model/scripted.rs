//! [`ScriptedModel`]: a test and demo model that replays a YAML [`Playbook`] of turns and
//! calls no network (`antler run --playbook FILE`); a subagent's playbook is picked by the
//! task's description or type. A turn can also script what a real model gets wrong (calls
//! whose arguments are not JSON, reasoning, a provider error, an empty reply) and the
//! replies to the first asks of a turn before its own (`attempts`), so the run loop's
//! retries are tested without a network. A playbook file is bounded and read as UTF-8, and an error
//! about it never echoes its quoted content.

use std::path::Path;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    Auxiliary, ChatModel, InvalidToolCall, ModelError, ModelReply, ModelRequest, SubagentRequest,
    WireModel,
};
use crate::thread::state::{Message, Reasoning, TokenUsage, ToolCall};

/// One scripted tool call; `id` defaults to `call-{turn}-{index}` (both 1-based).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScriptedCall {
    pub name: String,
    #[serde(default = "empty_args")]
    pub args: Value,
    #[serde(default)]
    pub id: Option<String>,
}

fn empty_args() -> Value {
    Value::Object(serde_json::Map::new())
}

/// One scripted assistant turn.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScriptedTurn {
    /// Simulated model latency before this turn's reply, in milliseconds.
    #[serde(default)]
    pub delay_ms: u64,
    /// The usage this turn reports, as a provider would.
    #[serde(default)]
    pub usage: Option<TokenUsage>,
    /// The finish reason this turn reports.
    #[serde(default)]
    pub finish_reason: Option<String>,
    #[serde(default)]
    pub content: String,
    #[serde(default)]
    pub tool_calls: Vec<ScriptedCall>,
    /// Calls whose arguments are written as text, as a model streams them: each is an
    /// invalid call (not JSON, or not an object), never a call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub invalid_calls: Vec<ScriptedRawCall>,
    /// What the model thought before it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// The turn fails as a provider would, instead of answering.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ScriptedError>,
    /// The replies to the first asks of this turn, in order, before the turn's own (an
    /// empty reply the run asks again, an error the run retries).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<ScriptedTurn>,
}

/// A call whose arguments are text as the model wrote them; `id` as [`ScriptedCall`]'s,
/// numbered after the turn's `tool_calls`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScriptedRawCall {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub arguments: String,
    #[serde(default)]
    pub id: Option<String>,
}

/// A provider failure: an HTTP status and its text (no status: the endpoint could not be
/// reached).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScriptedError {
    #[serde(default)]
    pub status: Option<u16>,
    #[serde(default)]
    pub message: String,
}

/// A playbook: `turns:` in order. The model plays turn N when the conversation holds
/// N-1 assistant messages, so a resumed run continues where it stopped.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Playbook {
    pub turns: Vec<ScriptedTurn>,
    /// The playbooks of the run's subagents: a task plays the one named by its
    /// `description`, else by its `subagent_type`, else `default`.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub subagents: std::collections::BTreeMap<String, Playbook>,
    /// The replies to the run's security scans (`skill_manage`), in order; the last one
    /// answers every later scan. None: a scan fails as an unreachable model does.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_scan: Vec<ScriptedTurn>,
    /// The replies to the run's summaries (summarization), in order; the last one
    /// answers every later summary. None: a summary fails as an unreachable model does.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub summaries: Vec<ScriptedTurn>,
    /// The replies to title calls, as `summaries`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub titles: Vec<ScriptedTurn>,
}

/// The largest playbook a run reads, from a file or sent inline.
pub const MAX_PLAYBOOK_BYTES: usize = 256 * 1024;

/// The field names of a playbook, which an error about a file may name.
const PLAYBOOK_FIELDS: &[&str] = &[
    "turns",
    "subagents",
    "security_scan",
    "summaries",
    "titles",
    "delay_ms",
    "content",
    "tool_calls",
    "id",
    "name",
    "args",
    "usage",
    "finish_reason",
    "invalid_calls",
    "arguments",
    "reasoning",
    "error",
    "status",
    "message",
    "attempts",
    "input_tokens",
    "output_tokens",
    "total_tokens",
];

/// Reads `path` if it is a regular file of at most [`MAX_PLAYBOOK_BYTES`] of UTF-8.
fn read_playbook(path: &Path) -> std::io::Result<String> {
    use std::io::{Error, ErrorKind, Read};
    use std::os::unix::fs::OpenOptionsExt;
    // Non-blocking, so opening a FIFO does not wait for a writer; checked on the handle,
    // so the file cannot be swapped between the check and the read.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(Error::new(ErrorKind::InvalidInput, "not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(MAX_PLAYBOOK_BYTES as u64 + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() > MAX_PLAYBOOK_BYTES {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!("larger than {} KiB", MAX_PLAYBOOK_BYTES / 1024),
        ));
    }
    String::from_utf8(bytes).map_err(|_| Error::new(ErrorKind::InvalidData, "not UTF-8 text"))
}

/// A YAML error with every quoted value replaced by `…`: double-quoted spans, and
/// backquoted words that are not playbook field names. Where (line, column, field path)
/// and what kind of error stay.
fn without_quoted_content(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find(['"', '`']) {
        out.push_str(&rest[..at]);
        let quote = &rest[at..at + 1];
        let after = &rest[at + 1..];
        let Some(end) = after.find(quote) else {
            out.push_str(quote);
            out.push('…');
            rest = "";
            break;
        };
        let inner = &after[..end];
        let keep = quote == "`" && PLAYBOOK_FIELDS.contains(&inner);
        out.push_str(quote);
        out.push_str(if keep { inner } else { "…" });
        out.push_str(quote);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

/// The scripted model: replays a [`Playbook`] (for tests and demos; no network).
#[derive(Clone, Debug)]
pub struct ScriptedModel {
    name: String,
    playbook: Playbook,
    /// How many security scans the model has answered.
    scans: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// How often each turn (by number) was asked, for its `attempts`.
    asks: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<usize, usize>>>,
    /// How many summaries and titles the model has answered.
    auxiliaries: std::sync::Arc<[std::sync::atomic::AtomicUsize; 2]>,
}

impl ScriptedModel {
    /// The name scripted models report.
    pub const NAME: &'static str = "scripted";

    pub fn new(playbook: Playbook) -> ScriptedModel {
        ScriptedModel {
            name: Self::NAME.to_owned(),
            playbook,
            scans: std::sync::Arc::default(),
            asks: std::sync::Arc::default(),
            auxiliaries: std::sync::Arc::default(),
        }
    }

    /// The same playbook reporting `name` (several scripted models in one run: a model and
    /// its fallbacks).
    pub fn named(mut self, name: impl Into<String>) -> ScriptedModel {
        self.name = name.into();
        self
    }

    /// Parses a playbook from YAML text; `origin` names it in errors.
    pub fn from_yaml(text: &str, origin: &str) -> Result<ScriptedModel, ModelError> {
        let playbook: Playbook =
            serde_yaml::from_str(text).map_err(|e| ModelError::PlaybookInvalid {
                path: origin.to_owned(),
                message: e.to_string(),
            })?;
        if playbook.turns.is_empty() {
            return Err(ModelError::PlaybookInvalid {
                path: origin.to_owned(),
                message: "turns: the playbook needs at least one turn".to_owned(),
            });
        }
        Ok(ScriptedModel::new(playbook))
    }

    /// Reads a playbook file: a regular file of at most [`MAX_PLAYBOOK_BYTES`], so a device,
    /// a FIFO or a huge file is refused before it is read. An invalid playbook's error names
    /// where and which field, never the file's content (the file may not be a playbook at all).
    pub fn from_file(path: &Path) -> Result<ScriptedModel, ModelError> {
        let origin = path.display().to_string();
        let text = read_playbook(path).map_err(|source| ModelError::PlaybookRead {
            path: origin.clone(),
            source,
        })?;
        ScriptedModel::from_yaml(&text, &origin).map_err(|e| match e {
            ModelError::PlaybookInvalid { path, message } => ModelError::PlaybookInvalid {
                path,
                message: without_quoted_content(&message),
            },
            other => other,
        })
    }

    /// The reply for the conversation so far: turn N when it holds N-1 assistant
    /// messages, or one of that turn's `attempts` while they last.
    pub fn reply(&self, messages: &[Message]) -> Result<ModelReply, ModelError> {
        self.reply_after(messages, 0)
    }

    /// [`ScriptedModel::reply`] on a continued thread: the `earlier` AI messages (of the
    /// thread's earlier runs) are not turns of this playbook, so each run on a thread
    /// plays its playbook from its first turn. Call ids stay numbered by the thread's turn,
    /// so they never repeat an earlier run's.
    pub fn reply_after(
        &self,
        messages: &[Message],
        earlier: usize,
    ) -> Result<ModelReply, ModelError> {
        let total = messages
            .iter()
            .filter(|m| matches!(m, Message::Ai { .. }))
            .count();
        self.reply_to_turn(total.saturating_sub(earlier), total + 1)
    }

    /// The reply of the playbook's turn `played` (0-based) as the thread's turn
    /// `turn_number` (1-based: ids and call ids), or one of its `attempts` while they last.
    fn reply_to_turn(&self, played: usize, turn_number: usize) -> Result<ModelReply, ModelError> {
        let turn = self
            .playbook
            .turns
            .get(played)
            .ok_or(ModelError::PlaybookExhausted {
                turns: self.playbook.turns.len(),
                asked: played + 1,
            })?;
        let asked = {
            let mut asks = self
                .asks
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let n = asks.entry(turn_number).or_insert(0);
            *n += 1;
            *n - 1
        };
        let turn = turn.attempts.get(asked).unwrap_or(turn);
        self.play(turn, turn_number)
    }

    /// One scripted reply of turn `turn_number`.
    fn play(&self, turn: &ScriptedTurn, turn_number: usize) -> Result<ModelReply, ModelError> {
        if let Some(error) = &turn.error {
            return Err(match error.status {
                Some(status) => ModelError::Http {
                    model: self.name.clone(),
                    status,
                    attempts: 1,
                    message: error.message.clone(),
                },
                None => ModelError::Connection {
                    model: self.name.clone(),
                    url: "scripted".to_owned(),
                    attempts: 1,
                    message: error.message.clone(),
                },
            });
        }
        let call_id = |id: &Option<String>, n: usize| {
            id.clone()
                .unwrap_or_else(|| format!("call-{turn_number}-{n}"))
        };
        let tool_calls = turn
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, call)| ToolCall {
                id: call_id(&call.id, i + 1),
                name: call.name.clone(),
                args: call.args.clone(),
            })
            .collect();
        let invalid_calls = turn
            .invalid_calls
            .iter()
            .enumerate()
            .map(|(i, call)| InvalidToolCall {
                id: call_id(&call.id, turn.tool_calls.len() + i + 1),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
                error: match serde_json::from_str::<Value>(&call.arguments) {
                    Ok(Value::Object(_)) => "the call was scripted as invalid".to_owned(),
                    Ok(_) => "the arguments are not a JSON object".to_owned(),
                    Err(e) => e.to_string(),
                },
            })
            .collect();
        Ok(ModelReply {
            id: format!("ai-{turn_number}"),
            content: turn.content.clone(),
            tool_calls,
            invalid_calls,
            reasoning: turn.reasoning.as_ref().map(|text| Reasoning {
                text: text.clone(),
                replay: Vec::new(),
            }),
            usage: turn.usage,
            finish_reason: turn.finish_reason.clone(),
        })
    }
}

impl ChatModel for ScriptedModel {
    fn name(&self) -> &str {
        &self.name
    }

    fn for_subagent(&self, task: &dyn SubagentRequest) -> Option<WireModel> {
        let subagents = &self.playbook.subagents;
        let playbook = subagents
            .get(task.description())
            .or_else(|| subagents.get(task.subagent_type()))
            .or_else(|| subagents.get("default"))?;
        Some(WireModel::Scripted {
            playbook: playbook.clone(),
        })
    }

    fn reads_prompt(&self) -> bool {
        false
    }

    fn is_scripted(&self) -> bool {
        true
    }

    fn moderate<'a>(
        &'a self,
        _system: &'a str,
        _user: &'a str,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        let n = self.scans.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let scans = &self.playbook.security_scan;
        let turn = scans.get(n).or(scans.last()).cloned();
        Box::pin(async move {
            let turn = turn.ok_or(ModelError::NoScriptedScan)?;
            if turn.delay_ms > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(turn.delay_ms)).await;
            }
            Ok(ModelReply {
                id: format!("security-scan-{}", n + 1),
                content: turn.content,
                usage: turn.usage,
                finish_reason: turn.finish_reason,
                ..ModelReply::default()
            })
        })
    }

    fn auxiliary<'a>(
        &'a self,
        purpose: Auxiliary,
        _prompt: &'a str,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        let (index, replies, what) = match purpose {
            Auxiliary::Summary => (0, &self.playbook.summaries, "summaries"),
            Auxiliary::Title => (1, &self.playbook.titles, "titles"),
        };
        let n = self.auxiliaries[index].fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let turn = replies.get(n).or(replies.last()).cloned();
        Box::pin(async move {
            let turn = turn.ok_or_else(|| ModelError::Connection {
                model: self.name.clone(),
                url: "scripted".to_owned(),
                attempts: 1,
                message: format!("the playbook has no `{what}` reply"),
            })?;
            if turn.delay_ms > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(turn.delay_ms)).await;
            }
            self.play(&turn, n + 1)
        })
    }

    fn complete<'a>(
        &'a self,
        request: ModelRequest<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        // The thread's turn (summarized turns counted), and this run's place in the
        // playbook (earlier runs' turns on a continued thread are not the playbook's).
        let turn = request.turn();
        let played = (turn - 1).saturating_sub(request.turns_before);
        let delay = self.playbook.turns.get(played).map_or(0, |t| t.delay_ms);
        let reply = self.reply_to_turn(played, turn);
        Box::pin(async move {
            if delay > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
            }
            reply
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::thread::state::ToolStatus;
    use serde_json::json;

    const PLAYBOOK: &str = r#"
turns:
  - content: Looking for a tool.
    tool_calls:
      - name: tool_search
        args: {query: "select:srv_echo"}
      - name: srv_echo
        id: my-id
        args: {message: hi}
  - content: All done.
"#;

    fn run(model: &ScriptedModel, messages: &[Message]) -> Result<ModelReply, ModelError> {
        futures::executor::block_on(model.complete(ModelRequest::new(messages, &[], &[])))
    }

    #[test]
    fn turns_replay_in_order_with_deterministic_ids() {
        let model = ScriptedModel::from_yaml(PLAYBOOK, "inline").unwrap();
        assert_eq!(model.name(), "scripted");
        let mut messages = vec![Message::human("task")];
        let first = run(&model, &messages).unwrap();
        assert_eq!(first.id, "ai-1");
        assert_eq!(first.content, "Looking for a tool.");
        let ids: Vec<&str> = first.tool_calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["call-1-1", "my-id"]);
        assert_eq!(
            first.tool_calls[0].args,
            json!({"query": "select:srv_echo"})
        );
        messages.push(first.into_message());
        messages.push(Message::tool(
            "call-1-1",
            "tool_search",
            "[]",
            ToolStatus::Success,
        ));
        let second = run(&model, &messages).unwrap();
        assert_eq!(
            (second.id.as_str(), second.content.as_str()),
            ("ai-2", "All done.")
        );
        assert!(second.tool_calls.is_empty());
        messages.push(second.into_message());
        assert_eq!(
            run(&model, &messages).unwrap_err().to_string(),
            "the playbook has 2 turns and the run asked for turn 3"
        );
    }

    #[test]
    fn a_turn_scripts_mistakes_reasoning_errors_and_earlier_attempts() {
        let yaml = r#"
turns:
  - reasoning: Think first.
    tool_calls:
      - name: get_weather
        args: {city: Paris}
    invalid_calls:
      - name: get_weather
        arguments: '{"city": "Par'
      - name: write_file
        arguments: '[1]'
  - attempts:
      - error: {status: 503, message: overloaded}
      - content: ""
    content: Sunny.
"#;
        let model = ScriptedModel::from_yaml(yaml, "inline")
            .unwrap()
            .named("primary");
        assert_eq!(model.name(), "primary");
        let first = run(&model, &[]).unwrap();
        assert_eq!(first.reasoning.as_ref().unwrap().text, "Think first.");
        assert_eq!(first.tool_calls.len(), 1);
        let invalid: Vec<(&str, &str)> = first
            .invalid_calls
            .iter()
            .map(|c| (c.id.as_str(), c.error.as_str()))
            .collect();
        assert_eq!(
            invalid,
            [
                ("call-1-2", "EOF while parsing a string at line 1 column 13"),
                ("call-1-3", "the arguments are not a JSON object"),
            ]
        );
        let history = [Message::human("go"), first.into_message()];
        let err = run(&model, &history).unwrap_err();
        assert_eq!(
            err.to_string(),
            "model `primary`: HTTP 503 after 1 attempt(s): overloaded"
        );
        assert_eq!(run(&model, &history).unwrap().content, "");
        assert_eq!(run(&model, &history).unwrap().content, "Sunny.");
        assert_eq!(run(&model, &history).unwrap().content, "Sunny.");
    }

    #[test]
    fn invalid_playbooks_say_where_and_what() {
        let err = ScriptedModel::from_yaml("turns:\n  - contnet: x\n", "p.yaml").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("invalid playbook p.yaml: turns[0]: unknown field `contnet`"),
            "{err}"
        );
        let err = ScriptedModel::from_yaml("turns: []\n", "p.yaml").unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid playbook p.yaml: turns: the playbook needs at least one turn"
        );
    }

    #[test]
    fn a_file_that_is_not_a_playbook_is_never_quoted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shadow");
        std::fs::write(&path, "root:$6$secrethash:19000:0:99999:7:::\n").unwrap();
        let err = ScriptedModel::from_file(&path).unwrap_err().to_string();
        assert!(
            !err.contains("secrethash") && !err.contains("root:"),
            "{err}"
        );
        assert!(err.starts_with("invalid playbook "), "{err}");
        let path = dir.path().join("keys.yaml");
        std::fs::write(&path, "turns:\n  - api_key_sk_live_123: x\n").unwrap();
        let err = ScriptedModel::from_file(&path).unwrap_err().to_string();
        assert!(!err.contains("api_key_sk_live_123"), "{err}");
        assert!(
            err.contains("turns[0]") && err.contains("`content`"),
            "{err}"
        );
    }

    #[test]
    fn devices_fifos_and_huge_files_are_refused_unread() {
        let dir = tempfile::tempdir().unwrap();
        let err = ScriptedModel::from_file(Path::new("/dev/zero")).unwrap_err();
        assert!(err.to_string().ends_with("not a regular file"), "{err}");
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.display().to_string()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = ScriptedModel::from_file(&fifo).unwrap_err();
        assert!(err.to_string().ends_with("not a regular file"), "{err}");
        let big = dir.path().join("big.yaml");
        std::fs::write(&big, vec![b'#'; MAX_PLAYBOOK_BYTES + 1]).unwrap();
        let err = ScriptedModel::from_file(&big).unwrap_err();
        assert!(err.to_string().ends_with("larger than 256 KiB"), "{err}");
    }

    #[test]
    fn a_playbook_file_is_read_from_disk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("play.yaml");
        std::fs::write(&path, PLAYBOOK).unwrap();
        let model = ScriptedModel::from_file(&path).unwrap();
        assert_eq!(run(&model, &[]).unwrap().tool_calls.len(), 2);
        let missing = ScriptedModel::from_file(&dir.path().join("nope.yaml")).unwrap_err();
        assert!(
            missing.to_string().starts_with("cannot read playbook "),
            "{missing}"
        );
    }
}
