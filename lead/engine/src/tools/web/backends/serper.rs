//! Serper (spec E.4, `serper.tools:web_search_tool` and `image_search_tool`): `POST
//! {base}/search` and `{base}/images` with `X-API-KEY`, body `{"q", "num"}`. Config:
//! `api_key` (else `SERPER_API_KEY`), `max_results` (overrides the argument; at most 10),
//! `base_url` (`https://google.serper.dev`).

use std::time::Duration;

use serde_json::{json, Map, Value};

use super::ddg::IMAGE_USAGE_HINT;
use super::safe_url::safe_public_url;
use crate::middleware::tool_error::ToolFailure;
use crate::tools::web::{error_json, pretty, WebCall};

pub const BASE: &str = "https://google.serper.dev";
pub const MISSING_KEY: &str = "SERPER_API_KEY is not configured";
pub const UNEXPECTED: &str = "Serper returned an unexpected response format";

fn num(call: &WebCall<'_>, entry_name: &str) -> i64 {
    let entry = call.entry(entry_name);
    let n = if entry.has("max_results") {
        entry.int_or("max_results", 5)
    } else {
        call.arg("max_results").and_then(Value::as_i64).unwrap_or(5)
    };
    if n <= 0 {
        5
    } else {
        n.min(10)
    }
}

async fn post(
    call: &WebCall<'_>,
    entry_name: &str,
    path: &str,
    query: &str,
    n: i64,
) -> Result<Map<String, Value>, String> {
    let entry = call.entry(entry_name);
    let key = entry
        .str_or_env("api_key", "SERPER_API_KEY")
        .ok_or_else(|| error_json(MISSING_KEY, "query", query))?;
    let q: String = query.trim().chars().take(500).collect();
    let request = call
        .client
        .post(&format!("{}{path}", entry.base_url(BASE)))
        .header("X-API-KEY", key)
        .header("Content-Type", "application/json")
        .body(json!({"q": q, "num": n}).to_string());
    let reply = call
        .client
        .send(request, call.deadline(Duration::from_secs(30)))
        .await
        .map_err(|e| {
            error_json(
                &e.to_string().chars().take(500).collect::<String>(),
                "query",
                query,
            )
        })?;
    if !reply.status.is_success() {
        return Err(error_json(
            &format!("Serper API error: HTTP {}", reply.status.as_u16()),
            "query",
            query,
        ));
    }
    match reply.json() {
        Some(Value::Object(o)) => Ok(o),
        _ => Err(error_json(UNEXPECTED, "query", query)),
    }
}

/// The result list under `field`: a missing or null one is empty, a non-list one an error.
fn list<'a>(
    payload: &'a Map<String, Value>,
    field: &str,
    query: &str,
) -> Result<Vec<&'a Map<String, Value>>, String> {
    match payload.get(field) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => Ok(items.iter().filter_map(Value::as_object).collect()),
        Some(_) => Err(error_json(UNEXPECTED, "query", query)),
    }
}

fn s<'a>(m: &'a Map<String, Value>, k: &str) -> &'a str {
    m.get(k).and_then(Value::as_str).unwrap_or("")
}

pub async fn web_search(call: &WebCall<'_>) -> Result<String, ToolFailure> {
    let query = call.str_arg("query")?;
    let n = num(call, "web_search");
    let payload = match post(call, "web_search", "/search", &query, n).await {
        Ok(p) => p,
        Err(text) => return Ok(text),
    };
    let organic = match list(&payload, "organic", &query) {
        Ok(l) => l,
        Err(text) => return Ok(text),
    };
    let results: Vec<Value> = organic
        .into_iter()
        .take(n as usize)
        .map(|r| json!({"title": s(r, "title"), "url": s(r, "link"), "content": s(r, "snippet")}))
        .collect();
    if results.is_empty() {
        return Ok(error_json("No results found", "query", &query));
    }
    Ok(pretty(
        &json!({"query": query, "total_results": results.len(), "results": results}),
    ))
}

pub async fn image_search(call: &WebCall<'_>) -> Result<String, ToolFailure> {
    let query = call.str_arg("query")?;
    let n = num(call, "image_search");
    let payload = match post(call, "image_search", "/images", &query, n).await {
        Ok(p) => p,
        Err(text) => return Ok(text),
    };
    let images = match list(&payload, "images", &query) {
        Ok(l) => l,
        Err(text) => return Ok(text),
    };
    if images.is_empty() {
        return Ok(error_json("No images found", "query", &query));
    }
    let mut results = Vec::new();
    for item in images {
        if results.len() as i64 >= n {
            break;
        }
        let image = item
            .get("imageUrl")
            .and_then(Value::as_str)
            .map(safe_public_url);
        let thumb = item
            .get("thumbnailUrl")
            .and_then(Value::as_str)
            .map(safe_public_url);
        let image_url = image.clone().or_else(|| thumb.clone()).unwrap_or_default();
        let thumbnail_url = thumb.or(image).unwrap_or_default();
        if image_url.is_empty() && thumbnail_url.is_empty() {
            continue;
        }
        results.push(json!({"title": s(item, "title"), "image_url": image_url, "thumbnail_url": thumbnail_url}));
    }
    if results.is_empty() {
        return Ok(error_json("No safe image URLs found", "query", &query));
    }
    Ok(pretty(&json!({
        "query": query,
        "total_results": results.len(),
        "results": results,
        "usage_hint": IMAGE_USAGE_HINT,
    })))
}
