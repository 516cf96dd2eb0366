//! Tavily (spec E.2, `tavily.tools:web_search_tool` and `web_fetch_tool`): `POST
//! {base}/search` and `{base}/extract` with the Python client's headers. The key is the
//! `web_search` entry's `api_key` for both tools (DeerFlow's quirk: `web_fetch` reads it
//! there too), else `TAVILY_API_KEY`; a missing key and a non-200 reply are the client's
//! exceptions, which the tool does not catch. Config: `max_results` (5),
//! `include_domains`, `exclude_domains`, `base_url` (`https://api.tavily.com`), and on
//! `web_fetch` the address-guard keys.

use std::time::Duration;

use serde_json::{json, Value};

use crate::middleware::tool_error::{FailureClass, ToolFailure};
use crate::tools::web::guard::validate_public_http_url;
use crate::tools::web::http::ApiResponse;
use crate::tools::web::readability::{cut_chars, MAX_FETCH_CHARS};
use crate::tools::web::{pretty, WebCall};

pub const BASE: &str = "https://api.tavily.com";
pub const MISSING_KEY: &str = "No API key provided. Please provide the api_key attribute or set the TAVILY_API_KEY environment variable.";
pub const NO_RESULTS: &str = "Error: No results found";
const SEARCH_TIMEOUT: Duration = Duration::from_secs(60);
const EXTRACT_TIMEOUT: Duration = Duration::from_secs(60);

struct Client {
    key: String,
    base: String,
}

fn client(call: &WebCall<'_>) -> Result<Client, ToolFailure> {
    let search = call.entry("web_search");
    let key = search
        .str_or_env("api_key", "TAVILY_API_KEY")
        .ok_or_else(|| ToolFailure::new(FailureClass::MissingAPIKeyError, MISSING_KEY))?;
    Ok(Client {
        key,
        base: search.base_url(BASE),
    })
}

async fn post(
    call: &WebCall<'_>,
    c: &Client,
    path: &str,
    body: Value,
    deadline: Duration,
) -> Result<Value, ToolFailure> {
    let mut request = call
        .client
        .post(&format!("{}{path}", c.base))
        .header("Content-Type", "application/json")
        .header("Authorization", format!("Bearer {}", c.key))
        .header("X-Client-Source", "tavily-python");
    if let Ok(project) = std::env::var("TAVILY_PROJECT") {
        request = request.header("X-Project-ID", project);
    }
    let reply = call
        .client
        .send(request.body(body.to_string()), call.deadline(deadline))
        .await
        .map_err(|e| ToolFailure::new(FailureClass::HTTPError, e.to_string()))?;
    if reply.status.as_u16() != 200 {
        return Err(status_error(&reply));
    }
    reply.json().ok_or_else(|| {
        ToolFailure::new(
            FailureClass::JSONDecodeError,
            "Tavily returned a body that is not JSON",
        )
    })
}

/// The Python client's exception for a non-200 reply (`detail.error` as its text).
fn status_error(reply: &ApiResponse) -> ToolFailure {
    let detail = reply
        .json()
        .and_then(|j| {
            j.pointer("/detail/error")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| reply.body.clone());
    let class = match reply.status.as_u16() {
        401 => FailureClass::InvalidAPIKeyError,
        429 => FailureClass::UsageLimitExceededError,
        403 | 432 | 433 => FailureClass::ForbiddenError,
        400 => FailureClass::BadRequestError,
        _ => FailureClass::HTTPError,
    };
    ToolFailure::new(class, detail)
}

pub async fn web_search(call: &WebCall<'_>) -> Result<String, ToolFailure> {
    let query = call.str_arg("query")?;
    let entry = call.entry("web_search");
    let max_results = match entry.int("max_results") {
        Some(Ok(n)) if n > 0 && !entry.get("max_results").is_some_and(Value::is_boolean) => n,
        _ => 5,
    };
    let c = client(call)?;
    let mut body = json!({"query": query, "max_results": max_results});
    for key in ["include_domains", "exclude_domains"] {
        if let Some(v) = entry.get(key) {
            body[key] = v.clone();
        }
    }
    if entry
        .get("include_domains")
        .is_some_and(|v| v.as_array().is_some_and(|a| !a.is_empty()))
    {
        body["include_domains_mode"] = json!("filter");
    }
    let reply = post(call, &c, "/search", body, SEARCH_TIMEOUT).await?;
    let results: Vec<Value> = reply
        .get("results")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .map(|r| {
                    json!({
                        "title": r.get("title").cloned().unwrap_or(Value::Null),
                        "url": r.get("url").cloned().unwrap_or(Value::Null),
                        "snippet": r.get("content").cloned().unwrap_or(Value::Null),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(pretty(&Value::Array(results)))
}

pub async fn web_fetch(call: &WebCall<'_>) -> Result<String, ToolFailure> {
    let url = call.str_arg("url")?;
    if let Some(refusal) =
        validate_public_http_url(&url, &call.entry("web_fetch").guard(), "fetch").await
    {
        return Ok(refusal);
    }
    let c = client(call)?;
    let reply = post(
        call,
        &c,
        "/extract",
        json!({"urls": [url], "timeout": 30}),
        EXTRACT_TIMEOUT,
    )
    .await?;
    if let Some(failed) = reply
        .get("failed_results")
        .and_then(Value::as_array)
        .and_then(|f| f.first())
    {
        let error = match failed.get("error") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => "None".into(),
        };
        return Ok(format!("Error: {error}"));
    }
    let Some(result) = reply
        .get("results")
        .and_then(Value::as_array)
        .and_then(|r| r.first())
    else {
        return Ok(NO_RESULTS.to_owned());
    };
    // DeerFlow indexes `title` and raises without one; the page's URL stands in here.
    let title = [result.get("title"), result.get("url")]
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .find(|s| !s.is_empty())
        .unwrap_or(&url);
    let content = result
        .get("raw_content")
        .and_then(Value::as_str)
        .unwrap_or("");
    Ok(format!(
        "# {title}\n\n{}",
        cut_chars(content, MAX_FETCH_CHARS)
    ))
}
