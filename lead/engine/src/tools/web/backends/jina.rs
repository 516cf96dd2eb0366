//! Jina reader (spec E.7, `jina_ai.tools:web_fetch_tool`): `POST {base}/` with `{"url"}`,
//! asking for HTML, then the readability step and the 4,096-character cut. The target URL
//! passes the address guard first (DeerFlow checks it only on three backends). Config:
//! `timeout` (10 s; booleans and bad strings fall back), `base_url`
//! (`https://r.jina.ai`), the guard keys; the key is env `JINA_API_KEY` when set.

use std::time::Duration;

use serde_json::{json, Value};

use crate::middleware::tool_error::ToolFailure;
use crate::tools::web::http::{crawler_url, HttpError};
use crate::tools::web::readability::markdown_of_async;
use crate::tools::web::WebCall;

pub const BASE: &str = "https://r.jina.ai";
pub const STATUS: &str = "Error: Jina API returned status {code}: {body}";
pub const EMPTY: &str = "Error: Jina API returned empty response";
pub const FAILED: &str = "Error: Request to Jina API failed: {class}: {e}";

pub async fn web_fetch(call: &WebCall<'_>) -> Result<String, ToolFailure> {
    let url = call.str_arg("url")?;
    let entry = call.entry("web_fetch");
    // Antler follows the page's redirects itself: the reader gets where they end.
    let url = match crawler_url(&url, &entry.guard(), "fetch").await {
        Ok(url) => url,
        Err(refusal) => return Ok(refusal),
    };
    let timeout = match entry.get("timeout") {
        Some(Value::Bool(_)) | None => 10,
        Some(_) => entry.int_or("timeout", 10).max(1),
    };
    let mut request = call
        .client
        .post(&format!("{}/", entry.base_url(BASE)))
        .header("Content-Type", "application/json")
        .header("X-Return-Format", "html")
        .header("X-Timeout", timeout.to_string());
    match std::env::var("JINA_API_KEY").ok().filter(|k| !k.is_empty()) {
        Some(key) => request = request.header("Authorization", format!("Bearer {key}")),
        None => tracing::warn!(
            "JINA_API_KEY is not set; Jina's reader is called without a key (rate limited)"
        ),
    }
    let deadline = call.deadline(Duration::from_secs(timeout as u64));
    let reply = match call
        .client
        .send(request.body(json!({"url": url}).to_string()), deadline)
        .await
    {
        Ok(reply) => reply,
        Err(e) => {
            let class = match e {
                HttpError::Timeout(_) => "ReadTimeout",
                HttpError::TooLarge(_) => "ValueError",
                HttpError::Request(_) => "ConnectError",
            };
            return Ok(FAILED
                .replace("{class}", class)
                .replace("{e}", &e.to_string()));
        }
    };
    if reply.status.as_u16() != 200 {
        return Ok(STATUS
            .replace("{code}", reply.status.as_str())
            .replace("{body}", &reply.body));
    }
    if reply.body.trim().is_empty() {
        return Ok(EMPTY.to_owned());
    }
    Ok(markdown_of_async(reply.body, Some(url)).await)
}
