//! InfoQuest (BytePlus, spec E.9, `infoquest.tools:web_search_tool | web_fetch_tool |
//! image_search_tool`): `POST` to the search host (web and images) and the reader host
//! (fetch), with a bearer `INFOQUEST_API_KEY` when set. DeerFlow sends these without a
//! timeout; Antler gives each one (`timeout`, 60 s by default). Config: `search_time_range`,
//! `fetch_time`, `navigation_timeout`, `image_search_time_range`, `image_size` (`i`),
//! `base_url` (search, images) and `reader_url` (fetch), the guard keys.

use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::middleware::tool_error::ToolFailure;
use crate::tools::web::guard::validate_public_http_url;
use crate::tools::web::readability::markdown_of_async;
use crate::tools::web::{pretty, WebCall};

pub const SEARCH_BASE: &str = "https://search.infoquest.bytepluses.com";
pub const READER_BASE: &str = "https://reader.infoquest.bytepluses.com";
/// `web_search`'s text when the request or its reply failed (`{e}` follows).
pub const SEARCH_FAILED: &str =
    "Error: InfoQuest Web-Search - Search tool execution failed | mode=synchronous | error=";
/// `image_search`'s text when the request or its reply failed (`{e}` follows).
pub const IMAGE_SEARCH_FAILED: &str =
    "Error: InfoQuest Image Search - Image search tool execution failed | mode=synchronous | error=";
/// A search reply with `content` but no `search_result`.
pub const SEARCH_WRONG_FORMAT: &str = "Error: web search API return wrong format";
/// An image search reply with `content` but no `search_result`.
pub const IMAGE_SEARCH_WRONG_FORMAT: &str = "Error: image search API return wrong format";
/// The image sizes InfoQuest takes (`l`arge, `m`edium, `i`con).
pub const IMAGE_SIZES: [&str; 3] = ["l", "m", "i"];

async fn post(
    call: &WebCall<'_>,
    url: &str,
    body: Value,
    deadline: Duration,
) -> Result<crate::tools::web::http::ApiResponse, String> {
    let mut request = call
        .client
        .post(url)
        .header("Content-Type", "application/json");
    if let Ok(key) = std::env::var("INFOQUEST_API_KEY") {
        if !key.is_empty() {
            request = request.header("Authorization", format!("Bearer {key}"));
        }
    }
    call.client
        .send(request.body(body.to_string()), call.deadline(deadline))
        .await
        .map_err(|e| e.to_string())
}

fn deadline(call: &WebCall<'_>, entry: &str) -> Duration {
    Duration::from_secs_f64(call.entry(entry).secs_or("timeout", 60.0))
}

async fn search(call: &WebCall<'_>, entry_name: &str, body: Value) -> Result<Value, String> {
    let base = call.entry(entry_name).base_url(SEARCH_BASE);
    let reply = post(call, &base, body, deadline(call, entry_name)).await?;
    if !reply.status.is_success() {
        return Err(format!("{} Error for url: {base}", reply.status.as_u16()));
    }
    reply
        .json()
        .ok_or_else(|| "InfoQuest returned a body that is not JSON".into())
}

/// One search's `content.results` objects, or the tool's text instead: `failed` with the
/// error when the request fails, `wrong` (or the reply) when it is not a result list.
async fn search_blocks(
    call: &WebCall<'_>,
    entry_name: &str,
    body: Value,
    failed: &str,
    wrong: &str,
) -> Result<Vec<Map<String, Value>>, String> {
    let raw = search(call, entry_name, body)
        .await
        .map_err(|e| format!("{failed}{e}"))?;
    contents(&raw, wrong)
}

/// The `content.results` objects of a search reply, or what to answer instead.
fn contents(raw: &Value, wrong: &str) -> Result<Vec<Map<String, Value>>, String> {
    match raw
        .pointer("/search_result/results")
        .and_then(Value::as_array)
    {
        Some(results) => Ok(results
            .iter()
            .filter_map(|r| {
                r.pointer("/content/results")
                    .and_then(Value::as_object)
                    .cloned()
            })
            .collect()),
        None if raw.get("content").is_some() => Err(wrong.to_owned()),
        None => Err(crate::tools::web::compact(raw)),
    }
}

pub async fn web_search(call: &WebCall<'_>) -> Result<String, ToolFailure> {
    let query = call.str_arg("query")?;
    let range = call.entry("web_search").int_or("search_time_range", -1);
    let mut body = json!({"format": "JSON", "query": query});
    if range > 0 {
        body["time_range"] = json!(range);
    }
    let blocks =
        match search_blocks(call, "web_search", body, SEARCH_FAILED, SEARCH_WRONG_FORMAT).await {
            Ok(b) => b,
            Err(text) => return Ok(text),
        };
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for block in blocks {
        for item in block
            .get("organic")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let url = item
                .get("url")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            if url.is_empty() || !seen.insert(url.clone()) {
                continue;
            }
            let mut page = Map::new();
            page.insert("type".into(), json!("page"));
            for key in ["title", "desc"] {
                if let Some(v) = item.get(key) {
                    page.insert(key.into(), v.clone());
                }
            }
            if let Some(desc) = item.get("desc") {
                page.insert("snippet".into(), desc.clone());
            }
            page.insert("url".into(), json!(url));
            out.push(Value::Object(page));
        }
        for item in block
            .get("top_stories")
            .and_then(|t| t.get("items"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let url = item
                .get("url")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let Some(title) = item.get("title") else {
                continue;
            };
            if url.is_empty() || !seen.insert(url.clone()) {
                continue;
            }
            let mut news = Map::new();
            news.insert("type".into(), json!("news"));
            for key in ["time_frame", "source"] {
                if let Some(v) = item.get(key) {
                    news.insert(key.into(), v.clone());
                }
            }
            news.insert("title".into(), title.clone());
            news.insert("url".into(), json!(url));
            out.push(Value::Object(news));
        }
    }
    Ok(pretty(&Value::Array(out)))
}

/// `image_search(query)`: the search host with `"search_type": "Images"`; each
/// `images_results[]` item with an `original` becomes `{"image_url", "title"?}`, kept only
/// when its URL is new.
pub async fn image_search(call: &WebCall<'_>) -> Result<String, ToolFailure> {
    let query = call.str_arg("query")?;
    let entry = call.entry("image_search");
    let mut body = json!({"format": "JSON", "query": query, "search_type": "Images"});
    let range = entry.int_or("image_search_time_range", -1);
    if (1..=365).contains(&range) {
        body["time_range"] = json!(range);
    }
    let size = if entry.has("image_size") {
        entry.str("image_size")
    } else {
        Some("i".to_owned())
    };
    if let Some(size) = size.filter(|s| IMAGE_SIZES.contains(&s.as_str())) {
        body["image_size"] = json!(size);
    }
    let blocks = match search_blocks(
        call,
        "image_search",
        body,
        IMAGE_SEARCH_FAILED,
        IMAGE_SEARCH_WRONG_FORMAT,
    )
    .await
    {
        Ok(b) => b,
        Err(text) => return Ok(text),
    };
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for block in blocks {
        for item in block
            .get("images_results")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let Some(original) = item.get("original") else {
                continue;
            };
            let url = original.as_str().unwrap_or("");
            if url.is_empty() || !seen.insert(url.to_owned()) {
                continue;
            }
            let mut image = Map::new();
            image.insert("image_url".into(), original.clone());
            if let Some(title) = item.get("title") {
                image.insert("title".into(), title.clone());
            }
            out.push(Value::Object(image));
        }
    }
    Ok(pretty(&Value::Array(out)))
}

pub async fn web_fetch(call: &WebCall<'_>) -> Result<String, ToolFailure> {
    let url = call.str_arg("url")?;
    let entry = call.entry("web_fetch");
    if let Some(refusal) = validate_public_http_url(&url, &entry.guard(), "fetch").await {
        return Ok(refusal);
    }
    let mut body = json!({"url": url, "format": "HTML"});
    for (key, field) in [
        ("fetch_time", "fetch_time"),
        ("timeout", "timeout"),
        ("navigation_timeout", "navi_timeout"),
    ] {
        let v = entry.int_or(key, -1);
        if v > 0 {
            body[field] = json!(v);
        }
    }
    let reader = entry
        .str("reader_url")
        .unwrap_or_else(|| READER_BASE.into());
    let reply = match post(
        call,
        reader.trim_end_matches('/'),
        body,
        deadline(call, "web_fetch"),
    )
    .await
    {
        Ok(r) => r,
        Err(e) => return Ok(format!("Error: fetch API failed: {e}")),
    };
    if reply.status.as_u16() != 200 {
        return Ok(format!(
            "Error: fetch API returned status {}: {}",
            reply.status.as_u16(),
            reply.body
        ));
    }
    if reply.body.trim().is_empty() {
        return Ok("Error: no result found".into());
    }
    let html = match reply.json() {
        Some(j) => ["reader_result", "content"]
            .iter()
            .find_map(|k| j.get(*k).and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_else(|| reply.body.clone()),
        None => reply.body.clone(),
    };
    Ok(markdown_of_async(html, Some(url)).await)
}
