//! SearXNG (spec E.8, `searxng.tools:web_search_tool`): `GET {base}/search` in JSON
//! format. Any failure, an HTTP status or a bad `max_results` included, is `{"error",
//! "query"}`. Config: `base_url` (`http://localhost:8088`), `max_results` (5).

use std::time::Duration;

use serde_json::{json, Value};

use crate::middleware::tool_error::ToolFailure;
use crate::tools::web::{error_json, pretty, WebCall};

pub const BASE: &str = "http://localhost:8088";
pub const USER_AGENT: &str = "Mozilla/5.0 (compatible; DeerFlow/1.0)";

pub async fn web_search(call: &WebCall<'_>) -> Result<String, ToolFailure> {
    let query = call.str_arg("query")?;
    Ok(match search(call, &query).await {
        Ok(text) => text,
        Err(e) => error_json(&e, "query", &query),
    })
}

async fn search(call: &WebCall<'_>, query: &str) -> Result<String, String> {
    let entry = call.entry("web_search");
    let n = match entry.int("max_results") {
        None => 5,
        Some(Ok(n)) => n,
        Some(Err(raw)) => return Err(format!("invalid literal for int() with base 10: '{raw}'")),
    };
    let mut url = reqwest::Url::parse(&format!("{}/search", entry.base_url(BASE)))
        .map_err(|e| e.to_string())?;
    url.query_pairs_mut()
        .append_pair("q", query)
        .append_pair("format", "json")
        .append_pair("language", "auto")
        .append_pair("pageno", "1")
        .append_pair("limit", &n.to_string());
    let request = call
        .client
        .get(url.as_str())
        .header("User-Agent", USER_AGENT)
        .header("Accept", "application/json");
    let reply = call
        .client
        .send(request, call.deadline(Duration::from_secs(30)))
        .await
        .map_err(|e| e.to_string())?;
    if !reply.status.is_success() {
        return Err(format!(
            "{} error '{} {}' for url '{}'",
            if reply.status.is_server_error() {
                "Server"
            } else {
                "Client"
            },
            reply.status.as_u16(),
            reply.status.canonical_reason().unwrap_or(""),
            url
        ));
    }
    let body = reply
        .json()
        .ok_or("SearXNG returned a body that is not JSON")?;
    let results: Vec<Value> = body
        .get("results")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .take(n.max(0) as usize)
                .map(|r| {
                    json!({
                        "title": r.get("title").and_then(Value::as_str).unwrap_or(""),
                        "url": r.get("url").and_then(Value::as_str).unwrap_or(""),
                        "snippet": r.get("content").and_then(Value::as_str).unwrap_or(""),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(pretty(&Value::Array(results)))
}
