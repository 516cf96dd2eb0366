//! DeerFlow's approximate token counter (`count_tokens_approximately`, spec C.1), and
//! Python's `repr` of tool calls that it counts: what a request sends, in tokens.

use serde_json::Value;

use crate::catalog::ToolSpec;
use crate::model::Provider;
use crate::thread::state::Message;

/// Characters per token of the approximate counter (LangChain's default).
pub const CHARS_PER_TOKEN: f64 = 4.0;
/// Characters per token for Anthropic's models (LangChain's offline estimate).
pub const ANTHROPIC_CHARS_PER_TOKEN: f64 = 3.3;
/// Tokens added per message (`extra_tokens_per_message`).
pub(crate) const EXTRA_TOKENS_PER_MESSAGE: f64 = 3.0;
/// The fixed cost of one image (`tokens_per_image`).
pub const TOKENS_PER_IMAGE: u64 = 85;
/// The most viewed images a request is counted with (a vision model sees those of its
/// last `view_image` calls only).
pub const MAX_COUNTED_IMAGES: usize = 8;
/// DeerFlow's approximate counter (`count_tokens_approximately`, C.1): per message,
/// ⌈(content + tool calls' repr + tool_call_id + role + name) / chars_per_token⌉ + 3.
/// Antler keeps no per-message usage, so the usage scaling does not apply; reasoning a
/// provider is sent back is counted too.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenCounter {
    pub chars_per_token: f64,
}

impl Default for TokenCounter {
    fn default() -> Self {
        TokenCounter {
            chars_per_token: CHARS_PER_TOKEN,
        }
    }
}

impl TokenCounter {
    /// The counter for a `models:` entry: 3.3 characters a token for Anthropic's models
    /// (LangChain's `anthropic-chat` estimate), 4 for every other.
    pub fn for_entry(entry: &antler_protocol::config::ModelConfig) -> TokenCounter {
        let chars_per_token = match Provider::of_entry(entry) {
            Ok(Provider::Anthropic) => ANTHROPIC_CHARS_PER_TOKEN,
            _ => CHARS_PER_TOKEN,
        };
        TokenCounter { chars_per_token }
    }

    /// The tokens of one message.
    pub fn message(&self, message: &Message) -> u64 {
        let chars = match message {
            Message::System { content } => chars(content) + "system".len(),
            Message::Human { content, name, .. } => {
                chars(content) + "user".len() + name.as_deref().map_or(0, chars)
            }
            Message::Ai {
                content,
                tool_calls,
                reasoning,
                ..
            } => {
                let calls = if tool_calls.is_empty() {
                    0
                } else {
                    chars(&tool_calls_repr(tool_calls))
                };
                chars(content)
                    + calls
                    + "assistant".len()
                    + reasoning.as_ref().map_or(0, |r| chars(&r.text))
            }
            Message::Tool {
                tool_call_id,
                name,
                content,
                ..
            } => chars(content) + chars(tool_call_id) + "tool".len() + chars(name),
        };
        (chars as f64 / self.chars_per_token).ceil() as u64 + EXTRA_TOKENS_PER_MESSAGE as u64
    }

    /// The tokens of `messages`.
    pub fn messages(&self, messages: &[Message]) -> u64 {
        messages.iter().map(|m| self.message(m)).sum()
    }

    /// The tokens of the tool schemas a request carries (LangChain counts
    /// `json.dumps` of each OpenAI tool).
    pub fn tools(&self, tools: &[&ToolSpec]) -> u64 {
        let chars: usize = tools
            .iter()
            .map(|t| {
                let schema = t.parameters.canonical().len();
                // `{"type": "function", "function": {"name": , "description": , "parameters": }}`
                // and json.dumps' spaces after `:` and `,`.
                70 + chars(&t.name) + chars(&t.description) + schema + schema / 6
            })
            .sum();
        (chars as f64 / self.chars_per_token).ceil() as u64
    }

    /// What a request sends: its messages, its tools and its images.
    pub fn request(&self, messages: &[Message], tools: &[&ToolSpec], images: usize) -> u64 {
        self.messages(messages) + self.tools(tools) + TOKENS_PER_IMAGE * images as u64
    }

    /// The tokens of a plain text as one user message (how DeerFlow trims a text).
    pub(crate) fn text(&self, text: &str) -> u64 {
        self.message(&Message::human(text))
    }

    /// The most characters of a text that fit `tokens` as one user message.
    pub(crate) fn chars_within(&self, tokens: u64) -> usize {
        let budget = tokens.saturating_sub(EXTRA_TOKENS_PER_MESSAGE as u64) as f64;
        ((budget * self.chars_per_token) as usize).saturating_sub("user".len())
    }
}

/// Python's `len`: code points.
pub(crate) fn chars(text: &str) -> usize {
    text.chars().count()
}

/// `repr(tool_calls)` as Python prints LangChain's tool-call dicts.
pub(crate) fn tool_calls_repr(calls: &[crate::thread::state::ToolCall]) -> String {
    let mut out = String::from("[");
    for (i, call) in calls.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str("{'name': ");
        py_str(&mut out, &call.name);
        out.push_str(", 'args': ");
        py_repr(&mut out, &call.args);
        out.push_str(", 'id': ");
        py_str(&mut out, &call.id);
        out.push_str(", 'type': 'tool_call'}");
    }
    out.push(']');
    out
}

pub(crate) fn py_str(out: &mut String, s: &str) {
    out.push('\'');
    for c in s.chars() {
        match c {
            '\'' => out.push_str("\\'"),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('\'');
}

pub(crate) fn py_repr(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("None"),
        Value::Bool(true) => out.push_str("True"),
        Value::Bool(false) => out.push_str("False"),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => py_str(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_repr(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_str(out, k);
                out.push_str(": ");
                py_repr(out, v);
            }
            out.push('}');
        }
    }
}

/// What a request sends, by DeerFlow's counter: its messages, its tools, its images.
pub fn count_request_tokens(messages: &[Message], tools: &[&ToolSpec], images: usize) -> u64 {
    TokenCounter::default().request(messages, tools, images)
}
