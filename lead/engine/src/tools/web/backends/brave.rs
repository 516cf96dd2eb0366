//! Brave Search (spec E.3, `brave.tools:web_search_tool` and `image_search_tool`): `GET
//! {base}/res/v1/web/search` and `/res/v1/images/search` with the subscription token.
//! Image URLs pass DeerFlow's `_safe_public_url` filter (an absent field falls back to the
//! other one, a filtered one stays empty). Config: `api_key` (else
//! `BRAVE_SEARCH_API_KEY`), `max_results`, `base_url` (`https://api.search.brave.com`), and
//! for images `country`, `search_lang`, `safesearch`, `spellcheck`.

use std::time::Duration;

use serde_json::{json, Map, Value};

use super::ddg::IMAGE_USAGE_HINT;
use super::safe_url::safe_public_url;
use crate::middleware::tool_error::ToolFailure;
use crate::tools::web::{error_json, pretty, WebCall};

pub const BASE: &str = "https://api.search.brave.com";
pub const MISSING_KEY: &str = "BRAVE_SEARCH_API_KEY is not configured";
pub const NO_RESULTS: &str = "No results found";
pub const NO_IMAGES: &str = "No images found";
pub const NO_SAFE_IMAGES: &str = "No safe image URLs found";

#[derive(Clone, Copy)]
enum Kind {
    Web,
    Images,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Web => "Brave Search",
            Kind::Images => "Brave Image Search",
        }
    }
}

fn count(call: &WebCall<'_>, entry_name: &str, max: i64) -> i64 {
    let entry = call.entry(entry_name);
    let raw = if entry.has("max_results") {
        entry.int("max_results")
    } else {
        call.arg("max_results").map(|v| match v {
            Value::Number(n) => n.as_i64().ok_or_else(|| n.to_string()),
            Value::String(s) => s.trim().parse().map_err(|_| s.clone()),
            other => Err(other.to_string()),
        })
    };
    match raw {
        Some(Ok(n)) => n.clamp(1, max),
        None => 5,
        Some(Err(_)) => 5,
    }
}

async fn get(
    call: &WebCall<'_>,
    entry_name: &str,
    query: &str,
    kind: Kind,
    params: Vec<(&str, String)>,
) -> Result<Map<String, Value>, String> {
    let entry = call.entry(entry_name);
    let key = entry
        .str_or_env("api_key", "BRAVE_SEARCH_API_KEY")
        .ok_or_else(|| {
            tracing::warn!("{MISSING_KEY}");
            error_json(MISSING_KEY, "query", query)
        })?;
    let path = match kind {
        Kind::Web => "/res/v1/web/search",
        Kind::Images => "/res/v1/images/search",
    };
    let mut url = reqwest::Url::parse(&format!("{}{path}", entry.base_url(BASE)))
        .map_err(|e| error_json(&e.to_string(), "query", query))?;
    {
        let mut pairs = url.query_pairs_mut();
        for (k, v) in &params {
            pairs.append_pair(k, v);
        }
    }
    let request = call
        .client
        .get(url.as_str())
        .header("X-Subscription-Token", key)
        .header("Accept", "application/json");
    let reply = call
        .client
        .send(request, call.deadline(Duration::from_secs(30)))
        .await
        .map_err(|e| error_json(&e.to_string(), "query", query))?;
    if !reply.status.is_success() {
        let message = format!("{} API error: HTTP {}", kind.label(), reply.status.as_u16());
        return Err(error_json(&message, "query", query));
    }
    match reply.json() {
        Some(Value::Object(o)) => Ok(o),
        _ => Err(error_json(
            &format!("{} returned an unexpected response format", kind.label()),
            "query",
            query,
        )),
    }
}

/// The query as Brave gets it: stripped, at most 400 characters.
fn brave_query(query: &str) -> String {
    query.trim().chars().take(400).collect()
}

pub async fn web_search(call: &WebCall<'_>) -> Result<String, ToolFailure> {
    let query = call.str_arg("query")?;
    let n = count(call, "web_search", 20);
    let params = vec![
        ("q", brave_query(&query)),
        ("count", n.to_string()),
        ("text_decorations", "false".into()),
    ];
    let payload = match get(call, "web_search", &query, Kind::Web, params).await {
        Ok(p) => p,
        Err(text) => return Ok(text),
    };
    let results: Vec<Value> = payload
        .get("web")
        .and_then(|w| w.get("results"))
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter(|r| r.is_object())
                .map(|r| {
                    json!({
                        "title": r.get("title").and_then(Value::as_str).unwrap_or(""),
                        "url": r.get("url").and_then(Value::as_str).unwrap_or(""),
                        "content": r.get("description").and_then(Value::as_str).unwrap_or(""),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    if results.is_empty() {
        return Ok(error_json(NO_RESULTS, "query", &query));
    }
    Ok(pretty(
        &json!({"query": query, "total_results": results.len(), "results": results}),
    ))
}

pub async fn image_search(call: &WebCall<'_>) -> Result<String, ToolFailure> {
    let query = call.str_arg("query")?;
    let n = count(call, "image_search", 200);
    let entry = call.entry("image_search");
    let mut params = vec![("q", brave_query(&query)), ("count", n.to_string())];
    for key in ["country", "search_lang", "safesearch", "spellcheck"] {
        if let Some(v) = entry.str(key) {
            params.push((key, v));
        }
    }
    let payload = match get(call, "image_search", &query, Kind::Images, params).await {
        Ok(p) => p,
        Err(text) => return Ok(text),
    };
    let Some(items) = payload.get("results").and_then(Value::as_array) else {
        return Ok(error_json(
            "Brave Image Search returned an unexpected response format",
            "query",
            &query,
        ));
    };
    if items.is_empty() {
        return Ok(error_json(NO_IMAGES, "query", &query));
    }
    let mut results = Vec::new();
    for item in items.iter().filter(|i| i.is_object()) {
        if results.len() as i64 >= n {
            break;
        }
        let properties = item.get("properties");
        let thumbnail = item.get("thumbnail");
        let image_raw = properties
            .and_then(|p| p.get("url"))
            .and_then(Value::as_str);
        let thumb_raw = thumbnail.and_then(|t| t.get("src")).and_then(Value::as_str);
        let image = image_raw.map(safe_public_url);
        let thumb = thumb_raw.map(safe_public_url);
        // An absent field falls back to the other's URL; a filtered one stays empty.
        let (image_url, image_from) = match (&image, &thumb) {
            (Some(i), _) => (i.clone(), properties),
            (None, Some(t)) => (t.clone(), thumbnail),
            (None, None) => (String::new(), None),
        };
        let (thumbnail_url, _) = match (&thumb, &image) {
            (Some(t), _) => (t.clone(), thumbnail),
            (None, Some(i)) => (i.clone(), properties),
            (None, None) => (String::new(), None),
        };
        if image_url.is_empty() && thumbnail_url.is_empty() {
            continue;
        }
        let dims = image_from.filter(|_| !image_url.is_empty()).or(thumbnail);
        results.push(json!({
            "title": item.get("title").and_then(Value::as_str).unwrap_or(""),
            "image_url": image_url,
            "thumbnail_url": thumbnail_url,
            "source_url": item.get("url").and_then(Value::as_str).map(safe_public_url).unwrap_or_default(),
            "source": item.get("source").and_then(Value::as_str).unwrap_or(""),
            "width": dims.and_then(|d| d.get("width")).cloned().unwrap_or(Value::Null),
            "height": dims.and_then(|d| d.get("height")).cloned().unwrap_or(Value::Null),
        }));
    }
    if results.is_empty() {
        return Ok(error_json(NO_SAFE_IMAGES, "query", &query));
    }
    Ok(pretty(&json!({
        "query": query,
        "total_results": results.len(),
        "results": results,
        "usage_hint": IMAGE_USAGE_HINT,
    })))
}
