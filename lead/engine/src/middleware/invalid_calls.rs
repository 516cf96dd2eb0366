//! A model's invalid tool calls (spec D.4, done better): a call whose arguments are not
//! JSON, not an object or cut short, whose arguments do not fit the schema of a tool
//! whose code is elsewhere (an MCP server's, an ACP agent's: Antler's own tools check
//! their arguments with DeerFlow's texts), whose name is empty, or that names a tool the
//! run does not have, is never executed. It
//! stays in the AI message (its arguments repaired to an object, an empty name made
//! `unknown_tool`) and is answered at once by an error tool message in DeerFlow's words,
//! so the model reads why on its very next request and the run goes on; the valid calls
//! of the same reply still run. `llm_call.max_invalid_tool_calls` replies in a row whose
//! calls were all invalid end the run as `invalid_tool_calls_capped`. The streak is read
//! from the state's messages, so a resumed run counts the same.

use serde_json::{Map, Value};

use super::error_message;
use super::schema;
use super::tool_error::{invalid_tool_message, UNKNOWN_TOOL_NAME};
use crate::catalog::{Catalog, ToolSource};
use crate::model::{InvalidToolCall, ModelReply};
use crate::thread::state::{Message, ToolCall};

/// Arguments that could not be read or do not fit: `{error}` is the reason, cut at
/// [`MAX_ERROR_CHARS`].
pub const INVALID_ARGUMENTS: &str =
    "[Tool call could not be executed because its arguments were invalid: {error}]";

/// [`INVALID_ARGUMENTS`] without a reason.
pub const INVALID_ARGUMENTS_NO_DETAIL: &str =
    "[Tool call could not be executed because its arguments were invalid.]";

/// A `write_file` call whose arguments are not JSON; `{details}` is ` Parser error: {error}`
/// or nothing.
pub const WRITE_FILE_INVALID: &str = "[write_file failed before execution: the tool-call arguments were not valid JSON, so no file was written. This often happens when the model tries to write a very large Markdown file in a single tool call, especially when `content` contains unescaped quotes, inline JSON, backslashes, or code fences. Do not retry the same large `write_file` payload for this artifact; provide the report/content directly as normal assistant text in your next response. If a file write is still needed later, split the file into smaller sections instead of one large payload.{details}]";

/// A call without a name.
pub const EMPTY_NAME: &str = "[Tool call could not be executed because its name was missing or empty. Use one of the available tool names when retrying.]";

/// Appended to the reply that reaches the limit (its calls are dropped); `{count}` is the
/// number of replies in a row.
pub const INVALID_CALLS_HARD_STOP: &str = "[FORCED STOP] The model's tool calls were invalid in {count} consecutive replies, so none of them was executed. Producing final answer with results collected so far.";

/// The sandbox tool whose unreadable calls get [`WRITE_FILE_INVALID`].
pub const WRITE_FILE: &str = "write_file";

/// The longest reason quoted to the model.
pub const MAX_ERROR_CHARS: usize = 500;

/// `llm_call.max_invalid_tool_calls`' default.
pub const DEFAULT_MAX_INVALID_REPLIES: usize = 3;

/// How many replies of only invalid calls in a row end a run (`llm_call:
/// max_invalid_tool_calls`, at least 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InvalidCallLimit {
    pub max_consecutive: usize,
}

impl Default for InvalidCallLimit {
    fn default() -> Self {
        InvalidCallLimit {
            max_consecutive: DEFAULT_MAX_INVALID_REPLIES,
        }
    }
}

impl InvalidCallLimit {
    /// From config.yaml's `llm_call:` section (absent: the default).
    pub fn from_config(llm_call: Option<&Value>) -> Result<InvalidCallLimit, String> {
        let Some(value) = llm_call.and_then(|s| s.get("max_invalid_tool_calls")) else {
            return Ok(InvalidCallLimit::default());
        };
        match value.as_u64() {
            Some(n) if n >= 1 => Ok(InvalidCallLimit {
                max_consecutive: n as usize,
            }),
            _ => Err(format!(
                "llm_call.max_invalid_tool_calls must be a whole number of at least 1, not {value}"
            )),
        }
    }
}

/// A call that is not run, as the AI message keeps it, and its answer.
#[derive(Clone, Debug, PartialEq)]
pub struct RefusedCall {
    pub call: ToolCall,
    pub answer: Message,
}

/// Moves every invalid call out of `reply` (its unreadable calls, and the calls of
/// `tool_calls` with an empty name, a name not in `catalog`, or arguments that do not
/// fit the tool's schema), in the reply's order: what stays in `reply.tool_calls` may run.
pub fn sort_out(reply: &mut ModelReply, catalog: &Catalog) -> Vec<RefusedCall> {
    let mut refused: Vec<RefusedCall> = std::mem::take(&mut reply.invalid_calls)
        .iter()
        .map(unreadable)
        .collect();
    let mut valid = Vec::with_capacity(reply.tool_calls.len());
    for call in std::mem::take(&mut reply.tool_calls) {
        if call.name.trim().is_empty() {
            let answer = error_message(&call.id, UNKNOWN_TOOL_NAME, EMPTY_NAME);
            refused.push(RefusedCall {
                call: ToolCall {
                    name: UNKNOWN_TOOL_NAME.to_owned(),
                    ..call
                },
                answer,
            });
            continue;
        }
        let Some(tool) = catalog.get(&call.name) else {
            let available = catalog.tools().iter().map(|t| t.name.as_str());
            let answer = invalid_tool_message(&call.name, &call.id, available);
            refused.push(RefusedCall { call, answer });
            continue;
        };
        // Antler's own tools (DeerFlow's builtins and config tools) check their arguments
        // themselves, with DeerFlow's texts (the conformance vectors pin them); the schema
        // is checked here for the tools whose code is elsewhere (MCP servers, ACP agents).
        let external = matches!(tool.source, ToolSource::Mcp { .. } | ToolSource::Acp);
        if !external {
            valid.push(call);
            continue;
        }
        match schema::validate(tool.parameters.value(), &call.args) {
            Ok(()) => valid.push(call),
            Err(reason) => {
                let answer = error_message(&call.id, &call.name, invalid_arguments(&reason));
                refused.push(RefusedCall { call, answer });
            }
        }
    }
    reply.tool_calls = valid;
    refused
}

/// An unreadable call (not JSON, not an object, cut short): kept with `{}` for arguments
/// (DeerFlow's repair) and answered with the parser's reason.
fn unreadable(call: &InvalidToolCall) -> RefusedCall {
    let name = if call.name.trim().is_empty() {
        UNKNOWN_TOOL_NAME
    } else {
        call.name.as_str()
    };
    let content = if call.name.trim().is_empty() {
        EMPTY_NAME.to_owned()
    } else if call.name == WRITE_FILE {
        // Never echo the (usually huge) payload back: the parser's reason only.
        let error = if call.arguments.trim().is_empty() {
            cut(&call.error)
        } else {
            cut(&call.error.replace(call.arguments.as_str(), "…"))
        };
        let details = if error.is_empty() {
            String::new()
        } else {
            format!(" Parser error: {error}")
        };
        WRITE_FILE_INVALID.replacen("{details}", &details, 1)
    } else {
        invalid_arguments(&call.error)
    };
    RefusedCall {
        call: ToolCall {
            id: call.id.clone(),
            name: name.to_owned(),
            args: Value::Object(Map::new()),
        },
        answer: error_message(&call.id, name, content),
    }
}

/// [`INVALID_ARGUMENTS`] with `error` cut, or the text without a reason.
pub fn invalid_arguments(error: &str) -> String {
    let error = cut(error);
    if error.is_empty() {
        INVALID_ARGUMENTS_NO_DETAIL.to_owned()
    } else {
        INVALID_ARGUMENTS.replacen("{error}", &error, 1)
    }
}

fn cut(text: &str) -> String {
    text.trim().chars().take(MAX_ERROR_CHARS).collect()
}

/// Whether a tool message is the answer to an invalid call (one of this module's texts,
/// or the unknown-tool one).
pub fn is_invalid_call_answer(content: &str) -> bool {
    let unknown_tool =
        content.starts_with("Error: ") && content.contains(" is not a valid tool, try one of [");
    unknown_tool
        || content.starts_with("[Tool call could not be executed because")
        || content.starts_with("[write_file failed before execution:")
}

/// How many AI messages at the end of `messages` made calls that were all invalid (each
/// answered by an invalid-call answer), counting back to the first that was not.
pub fn consecutive_invalid_replies(messages: &[Message]) -> usize {
    let mut streak = 0;
    for (at, message) in messages.iter().enumerate().rev() {
        let Message::Ai { tool_calls, .. } = message else {
            continue;
        };
        if tool_calls.is_empty() {
            break;
        }
        let all_invalid = tool_calls.iter().all(|call| {
            messages[at + 1..].iter().any(|m| {
                matches!(m, Message::Tool { tool_call_id, content, .. }
                    if *tool_call_id == call.id && is_invalid_call_answer(content))
            })
        });
        if !all_invalid {
            break;
        }
        streak += 1;
    }
    streak
}

/// The hard stop's note for `count` replies in a row.
pub fn hard_stop_note(count: usize) -> String {
    INVALID_CALLS_HARD_STOP.replacen("{count}", &count.to_string(), 1)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::catalog::ToolSpec;
    use crate::thread::state::ToolStatus;
    use serde_json::json;

    fn catalog() -> Catalog {
        // An MCP server's tool: its schema is checked before any call reaches the server.
        let weather = ToolSpec::mcp(
            "get_weather",
            "Weather.",
            json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
            Some("weather".to_owned()),
            "get_weather",
        );
        Catalog::build(vec![weather], false).unwrap()
    }

    fn call(id: &str, name: &str, args: Value) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            args,
        }
    }

    fn text(message: &Message) -> &str {
        match message {
            Message::Tool {
                content, status, ..
            } => {
                assert_eq!(*status, ToolStatus::Error);
                content
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn each_kind_of_invalid_call_gets_its_deerflow_text() {
        let mut reply = ModelReply {
            tool_calls: vec![
                call("c1", "get_weather", json!({"city": "Paris"})),
                call("c2", "get_weather", json!({"town": 3})),
                call("c3", "get_wether", json!({})),
                call("c4", " ", json!({})),
            ],
            invalid_calls: vec![
                InvalidToolCall {
                    id: "c5".into(),
                    name: "get_weather".into(),
                    arguments: "{\"city\": \"Par".into(),
                    error: "EOF while parsing a string at line 1 column 13".into(),
                },
                InvalidToolCall {
                    id: "c6".into(),
                    name: WRITE_FILE.into(),
                    arguments: "{".into(),
                    error: "x".repeat(600),
                },
            ],
            ..ModelReply::default()
        };
        let refused = sort_out(&mut reply, &catalog());
        assert_eq!(
            reply.tool_calls,
            [call("c1", "get_weather", json!({"city": "Paris"}))]
        );
        let ids: Vec<&str> = refused.iter().map(|r| r.call.id.as_str()).collect();
        assert_eq!(ids, ["c5", "c6", "c2", "c3", "c4"]);
        assert_eq!(
            text(&refused[0].answer),
            "[Tool call could not be executed because its arguments were invalid: EOF while parsing a string at line 1 column 13]"
        );
        assert_eq!(refused[0].call.args, json!({}));
        let write = text(&refused[1].answer);
        assert!(write.starts_with("[write_file failed before execution: the tool-call arguments were not valid JSON, so no file was written."), "{write}");
        assert!(
            write.ends_with(&format!(" Parser error: {}]", "x".repeat(500))),
            "{write}"
        );
        assert_eq!(
            text(&refused[2].answer),
            "[Tool call could not be executed because its arguments were invalid: `city` is a required property]"
        );
        assert_eq!(
            text(&refused[3].answer),
            "Error: get_wether is not a valid tool, try one of [get_weather]."
        );
        assert_eq!(text(&refused[4].answer), EMPTY_NAME);
        assert_eq!(refused[4].call.name, "unknown_tool");
        assert!(refused
            .iter()
            .all(|r| is_invalid_call_answer(text(&r.answer))));
    }

    #[test]
    fn the_streak_counts_replies_whose_calls_were_all_invalid() {
        let ai = |id: &str, calls: &[&str]| Message::Ai {
            id: id.into(),
            content: String::new(),
            tool_calls: calls
                .iter()
                .map(|c| call(c, "get_weather", json!({})))
                .collect(),
            reasoning: None,
        };
        let bad = |id: &str| error_message(id, "get_weather", invalid_arguments("nope"));
        let ok = |id: &str| Message::tool(id, "get_weather", "Sunny", ToolStatus::Success);
        let mut messages = vec![Message::human("go"), ai("a1", &["c1"]), bad("c1")];
        assert_eq!(consecutive_invalid_replies(&messages), 1);
        messages.extend([ai("a2", &["c2", "c3"]), bad("c2"), ok("c3")]);
        assert_eq!(consecutive_invalid_replies(&messages), 0);
        messages.extend([ai("a3", &["c4"]), bad("c4"), ai("a4", &["c5"]), bad("c5")]);
        assert_eq!(consecutive_invalid_replies(&messages), 2);
    }

    #[test]
    fn the_limit_reads_llm_call() {
        assert_eq!(
            InvalidCallLimit::from_config(None).unwrap().max_consecutive,
            3
        );
        let section = json!({"max_invalid_tool_calls": 5});
        assert_eq!(
            InvalidCallLimit::from_config(Some(&section))
                .unwrap()
                .max_consecutive,
            5
        );
        let zero = json!({"max_invalid_tool_calls": 0});
        assert!(InvalidCallLimit::from_config(Some(&zero)).is_err());
    }
}
