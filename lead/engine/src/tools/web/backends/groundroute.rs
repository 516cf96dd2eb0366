//! GroundRoute (spec E.10, `groundroute.tools:web_search_tool | web_fetch_tool`): `POST
//! {base}/v1/search` with a bearer key; the `max_results` argument wins over config.
//! Config: `api_key` (else `GROUNDROUTE_API_KEY`), `max_results`, `base_url`
//! (`https://api.groundroute.ai`), and on `web_fetch` the guard keys.

use std::time::Duration;

use serde_json::{json, Value};

use crate::middleware::tool_error::ToolFailure;
use crate::tools::web::guard::validate_public_http_url;
use crate::tools::web::readability::{cut_chars, MAX_FETCH_CHARS};
use crate::tools::web::{error_json, pretty, WebCall};

pub const BASE: &str = "https://api.groundroute.ai";
pub const MISSING_KEY: &str = "GROUNDROUTE_API_KEY is not configured";

enum Failure {
    Http(u16),
    Other(String),
}

async fn search(
    call: &WebCall<'_>,
    entry_name: &str,
    key: &str,
    body: Value,
) -> Result<Vec<Value>, Failure> {
    let entry = call.entry(entry_name);
    let request = call
        .client
        .post(&format!("{}/v1/search", entry.base_url(BASE)))
        .header("Authorization", format!("Bearer {key}"))
        .header("Content-Type", "application/json")
        .body(body.to_string());
    let reply = call
        .client
        .send(request, call.deadline(Duration::from_secs(30)))
        .await
        .map_err(|e| Failure::Other(e.to_string()))?;
    if !reply.status.is_success() {
        return Err(Failure::Http(reply.status.as_u16()));
    }
    let json = reply
        .json()
        .ok_or_else(|| Failure::Other("GroundRoute returned a body that is not JSON".into()))?;
    Ok(json
        .get("results")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default())
}

fn s(v: &Value, k: &str) -> String {
    v.get(k).and_then(Value::as_str).unwrap_or("").to_owned()
}

pub async fn web_search(call: &WebCall<'_>) -> Result<String, ToolFailure> {
    let query = call.str_arg("query")?;
    let entry = call.entry("web_search");
    let Some(key) = entry.str_or_env("api_key", "GROUNDROUTE_API_KEY") else {
        return Ok(error_json(MISSING_KEY, "query", &query));
    };
    let n = match call.arg("max_results") {
        Some(v) => v.as_i64().unwrap_or(5),
        None => entry.int_or("max_results", 5),
    }
    .clamp(1, 50);
    Ok(match search(call, "web_search", &key, json!({"query": query, "max_results": n})).await {
        Ok(items) if items.is_empty() => error_json("No results found", "query", &query),
        Ok(items) => pretty(&Value::Array(
            items.iter().map(|r| json!({"title": s(r, "title"), "url": s(r, "url"), "snippet": s(r, "snippet"), "source_engine": s(r, "source_engine")})).collect(),
        )),
        Err(Failure::Http(code)) => error_json(&format!("GroundRoute API error: HTTP {code}"), "query", &query),
        Err(Failure::Other(e)) => error_json(&e, "query", &query),
    })
}

pub async fn web_fetch(call: &WebCall<'_>) -> Result<String, ToolFailure> {
    let url = call.str_arg("url")?;
    let entry = call.entry("web_fetch");
    if let Some(refusal) = validate_public_http_url(&url, &entry.guard(), "fetch").await {
        return Ok(refusal);
    }
    let Some(key) = entry.str_or_env("api_key", "GROUNDROUTE_API_KEY") else {
        return Ok(error_json(MISSING_KEY, "url", &url));
    };
    Ok(
        match search(
            call,
            "web_fetch",
            &key,
            json!({"query": url, "mode": "page", "max_results": 1}),
        )
        .await
        {
            Ok(items) => match items.first() {
                Some(r) => {
                    let content = Some(s(r, "content"))
                        .filter(|c| !c.is_empty())
                        .unwrap_or_else(|| s(r, "snippet"));
                    format!(
                        "# {}\n\n{}",
                        s(r, "title"),
                        cut_chars(&content, MAX_FETCH_CHARS)
                    )
                }
                None => "Error: No results found".to_owned(),
            },
            Err(Failure::Http(code)) => format!("Error: GroundRoute API error: HTTP {code}"),
            Err(Failure::Other(e)) => format!("Error: {e}"),
        },
    )
}
