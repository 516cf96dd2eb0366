//! Crawl4AI (spec E.11, `crawl4ai.tools:web_fetch_tool`): the address guard, then `POST
//! {base}/md` with `{"url", "f": filter}`; the Markdown it returns, cut, with no title
//! line. Config: `base_url` (`http://localhost:11235`), `token`, `timeout` (30 s),
//! `filter` (`fit|raw|bm25|llm`, else `fit`), the guard keys.

use std::time::Duration;

use serde_json::{json, Value};

use crate::middleware::tool_error::ToolFailure;
use crate::tools::web::http::{check_reported, crawler_url, secs, HttpError};
use crate::tools::web::readability::{cut_chars, MAX_FETCH_CHARS};
use crate::tools::web::WebCall;

pub const BASE: &str = "http://localhost:11235";
const FILTERS: &[&str] = &["fit", "raw", "bm25", "llm"];

pub async fn web_fetch(call: &WebCall<'_>) -> Result<String, ToolFailure> {
    let url = call.str_arg("url")?;
    let entry = call.entry("web_fetch");
    // Antler follows the page's redirects itself: the crawler gets where they end.
    let url = match crawler_url(&url, &entry.guard(), "fetch").await {
        Ok(url) => url,
        Err(refusal) => return Ok(refusal),
    };
    let filter = entry
        .str("filter")
        .filter(|f| FILTERS.contains(&f.as_str()))
        .unwrap_or_else(|| "fit".into());
    let timeout = Duration::from_secs_f64(entry.secs_or("timeout", 30.0));
    let mut request = call
        .client
        .post(&format!("{}/md", entry.base_url(BASE)))
        .header("Content-Type", "application/json");
    if let Some(token) = entry.str("token") {
        request = request.header("Authorization", format!("Bearer {token}"));
    }
    let reply = match call
        .client
        .send(
            request.body(json!({"url": url, "f": filter}).to_string()),
            call.deadline(timeout),
        )
        .await
    {
        Ok(reply) => reply,
        Err(HttpError::Timeout(_)) => {
            return Ok(format!(
                "Error: Crawl4AI request timed out after {}s",
                secs(timeout)
            ))
        }
        Err(e) => return Ok(format!("Error: Crawl4AI request failed: {e}")),
    };
    let head: String = reply.body.chars().take(200).collect();
    if reply.status.as_u16() != 200 {
        return Ok(format!(
            "Error: Crawl4AI HTTP {}: {head}",
            reply.status.as_u16()
        ));
    }
    let Some(json) = reply.json() else {
        return Ok(format!(
            "Error: Crawl4AI returned a non-JSON 200 response (content-type: {}): {head}",
            reply.content_type()
        ));
    };
    if json.get("success") == Some(&Value::Bool(false)) {
        return Ok(format!("Error: Crawl4AI reported failure for {url}"));
    }
    // Where the crawler says it ended: a redirect it followed to a private address
    // never reaches the model.
    let reported = json
        .get("redirected_url")
        .or_else(|| json.get("url"))
        .and_then(Value::as_str);
    if let Some(refusal) = check_reported(reported, &entry.guard()).await {
        return Ok(refusal);
    }
    let markdown = json.get("markdown").and_then(Value::as_str).unwrap_or("");
    if markdown.trim().is_empty() {
        return Ok("Error: Crawl4AI returned empty markdown".into());
    }
    Ok(cut_chars(markdown, MAX_FETCH_CHARS).to_owned())
}
