//! Browserless (spec E.12, `browserless.tools:web_fetch_tool`): the address guard, then
//! `POST {base}/content` (the token in the body), the readability step on the rendered
//! HTML, and a warning suffix when the target page answered with an error status.
//! Config: `base_url` (`http://localhost:3032`), `token` (else `BROWSERLESS_TOKEN`),
//! `timeout_s` or `timeout` (30 s), `wait_for_event`, `wait_for_timeout`,
//! `wait_for_selector`, the guard keys. `web_capture` is not built yet.

use std::time::Duration;

use serde_json::json;

use crate::run::middleware::tool_error::ToolFailure;
use crate::run::web::guard::validate_public_http_url;
use crate::run::web::http::{secs, HttpError};
use crate::run::web::readability::markdown_of_async;
use crate::run::web::WebCall;

pub const BASE: &str = "http://localhost:3032";

pub async fn web_fetch(call: &WebCall<'_>) -> Result<String, ToolFailure> {
    let url = call.str_arg("url")?;
    let entry = call.entry("web_fetch");
    if let Some(refusal) = validate_public_http_url(&url, &entry.guard(), "fetch").await {
        return Ok(refusal);
    }
    let timeout = Duration::from_secs_f64(if entry.has("timeout_s") {
        entry.secs_or("timeout_s", 30.0)
    } else {
        entry.secs_or("timeout", 30.0)
    });
    let mut body = json!({"url": url});
    if let Some(token) = entry.str_or_env("token", "BROWSERLESS_TOKEN") {
        body["token"] = json!(token);
    }
    if let Some(event) = entry.str("wait_for_event") {
        body["waitForEvent"] = json!({"event": event});
    }
    let wait = entry.int_or("wait_for_timeout", 0);
    if wait > 0 {
        body["waitForTimeout"] = json!(wait);
    }
    if let Some(selector) = entry.str("wait_for_selector") {
        body["waitForSelector"] = json!({"selector": selector, "timeout": 5000});
    }
    let request = call
        .client
        .post(&format!("{}/content", entry.base_url(BASE)))
        .header("Content-Type", "application/json")
        .header("Cache-Control", "no-cache")
        .body(body.to_string());
    let reply = match call.client.send(request, call.deadline(timeout)).await {
        Ok(reply) => reply,
        Err(HttpError::Timeout(_)) => {
            return Ok(format!(
                "Error: Browserless request timed out after {}s",
                secs(timeout)
            ))
        }
        Err(e) => return Ok(format!("Error: Browserless request failed: {e}")),
    };
    if reply.status.as_u16() != 200 {
        let head: String = reply.body.chars().take(200).collect();
        return Ok(format!(
            "Error: Browserless HTTP {}: {head}",
            reply.status.as_u16()
        ));
    }
    if reply.body.trim().is_empty() {
        return Ok("Error: Browserless returned empty response".into());
    }
    let header = |name: &str| {
        reply
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let warning = match header("x-response-code") {
        Some(code) if !code.starts_with('2') && !code.starts_with('3') => {
            format!(
                " (warning: target page responded {code} {})",
                header("x-response-status").unwrap_or_default()
            )
        }
        _ => String::new(),
    };
    Ok(markdown_of_async(reply.body, Some(url)).await + &warning)
}
