//! DeerFlow's two one-call routes (spec C.8): `GET /api/suggestions/config`, `POST
//! /api/threads/{id}/suggestions` (follow-up questions for a conversation the client
//! sends; any failure is an empty list) and `POST /api/input-polish` (a draft rewritten
//! into a clearer instruction; 404 when off, 400 for an empty or long draft, 503 when the
//! model fails). Each makes one model call with thinking off, under a deadline, with
//! DeerFlow's prompts; nothing is stored.

use std::sync::Arc;
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use antler_engine::{ChatModel, Message, ModelRequest};
use antler_protocol::config::{AppConfig, MAX_SUGGESTIONS_LIMIT};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{body, error, State};
use crate::runs::manager::CurrentConfig;
use crate::runs::prepare::{model_for, MODEL_PREFIX};

/// The largest body either route reads.
const MAX_BODY: usize = 1024 * 1024;
/// The deadline of the one model call.
const MODEL_DEADLINE: Duration = Duration::from_secs(120);

/// DeerFlow's suggestions instruction: `{n}` questions.
pub const SUGGESTIONS_INSTRUCTION: &str = "You are generating follow-up questions to help the user continue the conversation.\nBased on the conversation below, produce EXACTLY {n} short questions the user might ask next.\nRequirements:\n- Questions must be relevant to the preceding conversation.\n- Questions must be written in the same language as the user.\n- Keep each question concise (ideally <= 20 words / <= 40 Chinese characters).\n- Do NOT include numbering, markdown, or any extra text.\n- Output MUST be a JSON array of strings only.\n";
/// DeerFlow's suggestions request: `{conversation}`, `{n}`.
pub const SUGGESTIONS_REQUEST: &str =
    "Conversation Context:\n{conversation}\n\nGenerate {n} follow-up questions";
/// DeerFlow's input-polish instruction.
pub const POLISH_INSTRUCTION: &str = "You are DeerFlow's pre-send prompt optimizer.\nRewrite the user's rough draft into a clearer instruction for an AI agent before it is sent.\nDo not answer the task.\nPreserve the user's language, intent, entities, file paths, URLs, code blocks, and any leading slash command prefix exactly.\nImprove the draft by making the goal, scope, constraints, and desired output explicit when they are implied by the draft.\nFor vague quality words such as 'better', 'good-looking', or 'polished', translate them into concrete but generic quality criteria.\nDo not invent facts, business context, tools, file names, dates, metrics, or user preferences that are not implied.\nPrefer one concise paragraph or a short bullet list. Keep it under 180 words unless the original draft is longer.\nOutput only the rewritten draft, with no markdown wrapper, explanation, or alternatives.";
/// DeerFlow's input-polish request: `{locale}`, `{text}`.
pub const POLISH_REQUEST: &str =
    "Locale hint: {locale}\n\nRewrite this draft while preserving its intent:\n<draft>\n{text}\n</draft>";
/// The locale hint when the client gives none.
const POLISH_DEFAULT_LOCALE: &str = "same language as the draft";
/// DeerFlow's texts for the polish route's refusals.
pub const POLISH_DISABLED: &str = "Input polishing is disabled";
pub const POLISH_EMPTY: &str = "Input text is required";
pub const POLISH_FAILED: &str = "Failed to polish input";

/// One message of the conversation a client sends.
#[derive(Deserialize, utoipa::ToSchema)]
pub(super) struct SuggestionMessage {
    role: String,
    content: String,
}

/// `POST /api/threads/{id}/suggestions`'s body.
#[derive(Deserialize, utoipa::ToSchema)]
pub(super) struct SuggestionsBody {
    messages: Vec<SuggestionMessage>,
    #[serde(default = "default_n")]
    n: usize,
    #[serde(default)]
    model_name: Option<String>,
}

fn default_n() -> usize {
    3
}

/// `POST /api/input-polish`'s body.
#[derive(Deserialize, utoipa::ToSchema)]
pub(super) struct PolishBody {
    text: String,
    #[serde(default)]
    locale: Option<String>,
    /// For tracing only in DeerFlow; unused here.
    #[serde(default)]
    #[allow(dead_code)]
    thread_id: Option<String>,
}

/// The config as runs see it now, or the response saying why not.
async fn current_config(state: &State) -> Result<Arc<AppConfig>, HttpResponse> {
    match state.runs.manager.send(CurrentConfig).await {
        Ok(Ok(config)) => Ok(config),
        Ok(Err(e)) => Err(error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())),
        Err(e) => Err(error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())),
    }
}

/// `GET /api/suggestions/config`: `{enabled, max_suggestions}`.
pub(super) async fn suggestions_config(state: web::Data<State>) -> HttpResponse {
    match current_config(&state).await {
        Ok(config) => {
            let s = config.suggestions();
            HttpResponse::Ok()
                .json(json!({"enabled": s.enabled, "max_suggestions": s.max_suggestions}))
        }
        Err(response) => response,
    }
}

/// `POST /api/threads/{id}/suggestions`: at most `min(n, max_suggestions)` questions; an
/// empty list when suggestions are off or anything fails.
pub(super) async fn suggestions(state: web::Data<State>, payload: web::Payload) -> HttpResponse {
    let body = match body::read_body(payload, MAX_BODY).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let body: SuggestionsBody = match serde_json::from_slice(&body) {
        Ok(body) => body,
        Err(e) => {
            return error(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("the body must be {{messages: [{{role, content}}], n?, model_name?}}: {e}"),
            )
        }
    };
    if !(1..=MAX_SUGGESTIONS_LIMIT).contains(&body.n) {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("n must be from 1 to {MAX_SUGGESTIONS_LIMIT}"),
        );
    }
    let none = || HttpResponse::Ok().json(json!({"suggestions": []}));
    let config = match current_config(&state).await {
        Ok(config) => config,
        Err(_) => return none(),
    };
    let settings = config.suggestions();
    let conversation = conversation(&body.messages);
    if !settings.enabled || conversation.is_empty() {
        return none();
    }
    let n = body.n.min(settings.max_suggestions);
    let instruction = SUGGESTIONS_INSTRUCTION.replace("{n}", &n.to_string());
    let request = SUGGESTIONS_REQUEST
        .replace("{conversation}", &conversation)
        .replace("{n}", &n.to_string());
    match one_call(&config, body.model_name.as_deref(), &instruction, &request).await {
        Ok(raw) => {
            let found: Vec<String> = parse_string_list(&raw)
                .unwrap_or_default()
                .into_iter()
                .map(|s| s.replace('\n', " ").trim().to_owned())
                .filter(|s| !s.is_empty())
                .take(n)
                .collect();
            HttpResponse::Ok().json(json!({ "suggestions": found }))
        }
        Err(e) => {
            tracing::warn!("suggestions failed: {e}");
            none()
        }
    }
}

/// `POST /api/input-polish`: `{rewritten_text, changed}`.
pub(super) async fn input_polish(state: web::Data<State>, payload: web::Payload) -> HttpResponse {
    let body = match body::read_body(payload, MAX_BODY).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let body: PolishBody = match serde_json::from_slice(&body) {
        Ok(body) => body,
        Err(e) => {
            return error(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("the body must be {{text, locale?, thread_id?}}: {e}"),
            )
        }
    };
    let config = match current_config(&state).await {
        Ok(config) => config,
        Err(response) => return response,
    };
    let settings = config.input_polish();
    if !settings.enabled {
        return error(StatusCode::NOT_FOUND, POLISH_DISABLED);
    }
    let text = body.text.trim();
    if text.is_empty() {
        return error(StatusCode::BAD_REQUEST, POLISH_EMPTY);
    }
    if text.chars().count() > settings.max_chars {
        return error(
            StatusCode::BAD_REQUEST,
            format!("Input text exceeds {} characters", settings.max_chars),
        );
    }
    let locale = body
        .locale
        .as_deref()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .unwrap_or(POLISH_DEFAULT_LOCALE);
    let request = POLISH_REQUEST
        .replace("{locale}", locale)
        .replace("{text}", text);
    let model = settings.model_name.as_deref();
    let rewritten = match one_call(&config, model, POLISH_INSTRUCTION, &request).await {
        Ok(raw) => strip_code_fence(&strip_think_blocks(&raw, false))
            .trim()
            .to_owned(),
        Err(e) => {
            tracing::warn!("input polishing failed: {e}");
            return error(StatusCode::SERVICE_UNAVAILABLE, POLISH_FAILED);
        }
    };
    if rewritten.is_empty() {
        return error(StatusCode::SERVICE_UNAVAILABLE, POLISH_FAILED);
    }
    let changed = rewritten != text;
    HttpResponse::Ok().json(json!({"rewritten_text": rewritten, "changed": changed}))
}

/// The conversation as DeerFlow writes it for the prompt (`User:`/`Assistant:` lines).
fn conversation(messages: &[SuggestionMessage]) -> String {
    messages
        .iter()
        .map(|m| {
            let content = m.content.trim();
            match m.role.trim().to_lowercase().as_str() {
                "user" | "human" => format!("User: {content}"),
                "assistant" | "ai" => format!("Assistant: {content}"),
                _ => format!("{}: {content}", m.role),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_owned()
}

/// One system + user call with thinking off; the reply's text.
async fn one_call(
    config: &AppConfig,
    model_name: Option<&str>,
    instruction: &str,
    request: &str,
) -> Result<String, String> {
    let label = format!("{MODEL_PREFIX}{}", model_name.unwrap_or_default());
    let model: Arc<dyn ChatModel> = model_for(&label, config).map_err(|e| e.to_string())?;
    let messages = [
        Message::System {
            content: instruction.to_owned(),
        },
        Message::human(request),
    ];
    let mut call = ModelRequest::new(&messages, &[], &[]);
    call.thinking = false;
    match tokio::time::timeout(MODEL_DEADLINE, model.complete(call)).await {
        Ok(Ok(reply)) => Ok(reply.content),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!(
            "the model did not answer within {} s",
            MODEL_DEADLINE.as_secs()
        )),
    }
}

/// `strip_think_blocks`: complete `<think>…</think>` blocks removed; with
/// `truncate_unclosed`, the text cut at a dangling `<think>`.
fn strip_think_blocks(text: &str, truncate_unclosed: bool) -> String {
    let mut out = String::new();
    let mut rest = text;
    loop {
        let Some(open) = find_tag(rest, "<think") else {
            out.push_str(rest);
            break;
        };
        let after_open = match rest[open..].find('>') {
            Some(i) => open + i + 1,
            None => {
                out.push_str(if truncate_unclosed {
                    &rest[..open]
                } else {
                    rest
                });
                break;
            }
        };
        match find_tag(&rest[after_open..], "</think") {
            Some(close) => {
                let close = after_open + close;
                let end = rest[close..]
                    .find('>')
                    .map_or(rest.len(), |i| close + i + 1);
                out.push_str(&rest[..open]);
                rest = &rest[end..];
            }
            None => {
                out.push_str(if truncate_unclosed {
                    &rest[..open]
                } else {
                    rest
                });
                break;
            }
        }
    }
    out.trim().to_owned()
}

/// Where `tag` (e.g. `<think`) starts in `text`, case-insensitively, as a whole tag name.
fn find_tag(text: &str, tag: &str) -> Option<usize> {
    let lower = text.to_ascii_lowercase();
    let mut from = 0;
    while let Some(i) = lower[from..].find(tag) {
        let at = from + i;
        let next = lower[at + tag.len()..].chars().next();
        if next.is_none_or(|c| c == '>' || c.is_whitespace() || c == '/') {
            return Some(at);
        }
        from = at + tag.len();
    }
    None
}

/// `strip_markdown_code_fence`: one wrapping ``` fence removed.
fn strip_code_fence(text: &str) -> String {
    let stripped = text.trim();
    if !stripped.starts_with("```") {
        return stripped.to_owned();
    }
    let lines: Vec<&str> = stripped.lines().collect();
    if lines.len() >= 3 && lines[0].starts_with("```") && lines[lines.len() - 1].starts_with("```")
    {
        return lines[1..lines.len() - 1].join("\n").trim().to_owned();
    }
    stripped.to_owned()
}

/// The strings of the JSON array between the reply's first `[` and last `]`.
fn parse_string_list(raw: &str) -> Option<Vec<String>> {
    let text = strip_code_fence(&strip_think_blocks(raw, true));
    let (start, end) = (text.find('[')?, text.rfind(']')?);
    if end <= start {
        return None;
    }
    let Value::Array(items) = serde_json::from_str(&text[start..=end]).ok()? else {
        return None;
    };
    Some(
        items
            .into_iter()
            .filter_map(|v| v.as_str().map(|s| s.trim().to_owned()))
            .filter(|s| !s.is_empty())
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_with_thoughts_and_a_fence_gives_its_questions() {
        let raw = "<think>They asked about Rust.</think>\n```json\n[\"Why Rust?\", 3, \"  \", \"How fast?\"]\n```";
        assert_eq!(
            parse_string_list(raw),
            Some(vec!["Why Rust?".to_owned(), "How fast?".to_owned()])
        );
        assert_eq!(parse_string_list("no list here"), None);
        assert_eq!(parse_string_list("<think>[\"hidden\"]"), None);
    }

    #[test]
    fn think_blocks_go_and_a_dangling_tag_is_kept_when_asked() {
        assert_eq!(strip_think_blocks("a<THINK x>b</think >c", true), "ac");
        assert_eq!(
            strip_think_blocks("keep <think> literally", false),
            "keep <think> literally"
        );
        assert_eq!(strip_think_blocks("cut <think> here", true), "cut");
        assert_eq!(
            strip_think_blocks("<thinking> is a word", true),
            "<thinking> is a word"
        );
    }

    #[test]
    fn the_conversation_reads_as_deerflow_writes_it() {
        let messages = [
            SuggestionMessage {
                role: "user".into(),
                content: " Hi ".into(),
            },
            SuggestionMessage {
                role: "AI".into(),
                content: "Hello".into(),
            },
            SuggestionMessage {
                role: "tool".into(),
                content: "x".into(),
            },
        ];
        assert_eq!(
            conversation(&messages),
            "User: Hi\nAssistant: Hello\ntool: x"
        );
    }
}
