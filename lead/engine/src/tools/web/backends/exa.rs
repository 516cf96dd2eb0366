//! Exa (spec E.5, `exa.tools:web_search_tool` and `web_fetch_tool`): `POST {base}/search`
//! and `{base}/contents` with the Python client's headers; both tools catch everything and
//! return `Error: {e}`. Config: `api_key` (each tool's own entry, else `EXA_API_KEY`),
//! `max_results` (5), `search_type` (`auto`), `contents_max_characters` (1000), `base_url`
//! (`https://api.exa.ai`), and on `web_fetch` the guard keys.

use std::time::Duration;

use serde_json::{json, Value};

use crate::middleware::tool_error::ToolFailure;
use crate::tools::web::guard::validate_public_http_url;
use crate::tools::web::readability::{cut_chars, MAX_FETCH_CHARS};
use crate::tools::web::{pretty, WebCall};

pub const BASE: &str = "https://api.exa.ai";
pub const MISSING_KEY: &str =
    "API key must be provided as an argument or in EXA_API_KEY environment variable";

async fn post(
    call: &WebCall<'_>,
    entry_name: &str,
    path: &str,
    body: Value,
) -> Result<Value, String> {
    let entry = call.entry(entry_name);
    let key = entry
        .str_or_env("api_key", "EXA_API_KEY")
        .ok_or(MISSING_KEY)?;
    let request = call
        .client
        .post(&format!("{}{path}", entry.base_url(BASE)))
        .header("x-api-key", key)
        .header("User-Agent", "exa-py/2.12.1")
        .header("Content-Type", "application/json")
        .body(body.to_string());
    let reply = call
        .client
        .send(request, call.deadline(Duration::from_secs(60)))
        .await
        .map_err(|e| e.to_string())?;
    if reply.status.as_u16() >= 400 {
        return Err(format!(
            "Request failed with status code {}: {}",
            reply.status.as_u16(),
            reply.body
        ));
    }
    reply
        .json()
        .ok_or_else(|| "Exa returned a body that is not JSON".to_owned())
}

fn text_of(v: Option<&Value>) -> &str {
    v.and_then(Value::as_str).unwrap_or("")
}

pub async fn web_search(call: &WebCall<'_>) -> Result<String, ToolFailure> {
    let query = call.str_arg("query")?;
    let entry = call.entry("web_search");
    let body = json!({
        "query": query,
        "type": entry.str("search_type").unwrap_or_else(|| "auto".into()),
        "numResults": entry.int_or("max_results", 5),
        "contents": {"highlights": {"maxCharacters": entry.int_or("contents_max_characters", 1000)}},
    });
    Ok(match post(call, "web_search", "/search", body).await {
        Ok(reply) => {
            let results: Vec<Value> = reply
                .get("results")
                .and_then(Value::as_array)
                .map(|items| {
                    items
                        .iter()
                        .map(|r| {
                            let highlights: Vec<&str> = r
                                .get("highlights")
                                .and_then(Value::as_array)
                                .map(|h| h.iter().filter_map(Value::as_str).collect())
                                .unwrap_or_default();
                            json!({"title": text_of(r.get("title")), "url": text_of(r.get("url")), "snippet": highlights.join("\n")})
                        })
                        .collect()
                })
                .unwrap_or_default();
            pretty(&Value::Array(results))
        }
        Err(e) => format!("Error: {e}"),
    })
}

pub async fn web_fetch(call: &WebCall<'_>) -> Result<String, ToolFailure> {
    let url = call.str_arg("url")?;
    if let Some(refusal) =
        validate_public_http_url(&url, &call.entry("web_fetch").guard(), "fetch").await
    {
        return Ok(refusal);
    }
    let body = json!({"urls": [url], "text": {"maxCharacters": 4096}});
    Ok(match post(call, "web_fetch", "/contents", body).await {
        Ok(reply) => match reply
            .get("results")
            .and_then(Value::as_array)
            .and_then(|r| r.first())
        {
            Some(r) => {
                let title = Some(text_of(r.get("title")))
                    .filter(|t| !t.is_empty())
                    .unwrap_or("Untitled");
                format!(
                    "# {title}\n\n{}",
                    cut_chars(text_of(r.get("text")), MAX_FETCH_CHARS)
                )
            }
            None => "Error: No results found".to_owned(),
        },
        Err(e) => format!("Error: {e}"),
    })
}
