//! User input is data (spec A.7, `InputSanitizationMiddleware`): framework tags in it are
//! escaped (`<tag` becomes `&lt;tag`, closing tags too), the input markers already in it are
//! neutralised, and the text is wrapped in the BEGIN/END USER INPUT markers, so no message
//! can forge a prompt section, a reminder or a tool result. Web tool results get the same
//! escaping and neutralising ([`neutralize_untrusted_tags`], `tools::web`), unwrapped.

/// The markers user input is wrapped in (spec A.7).
pub const USER_INPUT_BEGIN: &str = "--- BEGIN USER INPUT ---";
pub const USER_INPUT_END: &str = "--- END USER INPUT ---";

/// Tag names a user message may not open or close: the framework's tags (spec A.8) and the
/// names models take as instructions.
pub const BLOCKED_TAGS: &[&str] = &[
    "role",
    "soul",
    "self_update",
    "thinking_style",
    "clarification_system",
    "skill_system",
    "available_skills",
    "skill",
    "name",
    "description",
    "location",
    "disabled_skills",
    "skill_index",
    "memory_tool_system",
    "available-deferred-tools",
    "mcp_routing_hints",
    "subagent_system",
    "working_directory",
    "response_style",
    "citations",
    "critical_reminders",
    "system-reminder",
    "current_date",
    "memory",
    "current_uploads",
    "uploaded_files",
    "slash_skill_activation",
    "skill_content",
    "user_request",
    "durable_context_data",
    "todo_list_system",
    "system",
    "instruction",
    "instructions",
    "important",
    "override",
    "ignore",
    "prompt",
    "think",
    "thinking",
    "analysis",
    "tool_call",
    "tool_result",
    "function_call",
    "assistant",
    "user",
];

/// The neutralised forms of the markers.
const BEGIN_NEUTRAL: &str = "[BEGIN USER INPUT]";
const END_NEUTRAL: &str = "[END USER INPUT]";

/// `text` as the model receives it: blocked tags escaped, markers neutralised, wrapped.
pub fn sanitize_user_input(text: &str) -> String {
    let neutral = neutralize_untrusted_tags(text);
    let mut out = String::with_capacity(neutral.len() + 64);
    out.push_str(USER_INPUT_BEGIN);
    out.push('\n');
    out.push_str(&neutral);
    out.push('\n');
    out.push_str(USER_INPUT_END);
    out
}

/// Untrusted text (user input, web tool results: DeerFlow's `neutralize_untrusted_tags`)
/// with the input markers in it neutralised and every blocked tag, opening or closing,
/// escaped (`<tag` becomes `&lt;tag`), so it can forge no prompt section or marker.
pub fn neutralize_untrusted_tags(text: &str) -> String {
    let text = text
        .replace(USER_INPUT_BEGIN, BEGIN_NEUTRAL)
        .replace(USER_INPUT_END, END_NEUTRAL);
    let mut out = String::with_capacity(text.len() + 16);
    let mut rest = text.as_str();
    while let Some(at) = rest.find('<') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let name_start = after.strip_prefix('/').unwrap_or(after);
        let name_len = name_start
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            .unwrap_or(name_start.len());
        let name = &name_start[..name_len];
        let boundary = name_start[name_len..]
            .chars()
            .next()
            .is_none_or(|c| c == '>' || c == '/' || c.is_whitespace());
        if boundary && BLOCKED_TAGS.iter().any(|t| t.eq_ignore_ascii_case(name)) {
            out.push_str("&lt;");
        } else {
            out.push('<');
        }
        rest = after;
    }
    out.push_str(rest);
    out
}
