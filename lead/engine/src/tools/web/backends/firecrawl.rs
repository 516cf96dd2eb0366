//! Firecrawl and fastCRW (spec E.6, `firecrawl.tools:*`, `fastcrw.tools:*`), one v2 API:
//! `POST /v2/search` and `/v2/scrape` with the SDK's `origin`, retried on a 502 (three
//! attempts, 0.5 s doubling). The tools catch everything and return `Error: {e}`. Config:
//! `api_key` (else `FIRECRAWL_API_KEY` / `CRW_API_KEY`), `max_results` (5), `base_url`
//! (Firecrawl `https://api.firecrawl.dev`; fastCRW else `CRW_API_URL`, else
//! `https://fastcrw.com/api`, whose path DeerFlow's URL join drops), the guard keys.

use std::time::Duration;

use serde_json::{json, Value};

use crate::middleware::tool_error::ToolFailure;
use crate::tools::web::http::{check_reported, crawler_url};
use crate::tools::web::readability::{cut_chars, MAX_FETCH_CHARS};
use crate::tools::web::{pretty, WebCall};

pub const ORIGIN: &str = "python-sdk@4.23.0";
pub const NO_CONTENT: &str = "Error: No content found";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavour {
    Firecrawl,
    FastCrw,
}

impl Flavour {
    fn key_env(self) -> &'static str {
        match self {
            Flavour::Firecrawl => "FIRECRAWL_API_KEY",
            Flavour::FastCrw => "CRW_API_KEY",
        }
    }

    /// The API's origin (scheme, host, port): `urljoin(base + "/", "/v2/...")` keeps no path.
    fn origin(self, entry: &crate::tools::web::entry::ToolEntry) -> String {
        let base = match self {
            Flavour::Firecrawl => entry.base_url("https://api.firecrawl.dev"),
            Flavour::FastCrw => entry
                .str("base_url")
                .or_else(|| std::env::var("CRW_API_URL").ok())
                .unwrap_or_else(|| "https://fastcrw.com/api".into()),
        };
        match reqwest::Url::parse(&base) {
            Ok(url) => url.origin().ascii_serialization(),
            Err(_) => base.trim_end_matches('/').to_owned(),
        }
    }
}

async fn post(
    call: &WebCall<'_>,
    flavour: Flavour,
    entry_name: &str,
    path: &str,
    action: &str,
    mut body: Value,
) -> Result<Value, String> {
    let entry = call.entry(entry_name);
    let key = entry.str_or_env("api_key", flavour.key_env());
    if flavour == Flavour::Firecrawl && key.is_none() {
        return Err("No API key provided".into());
    }
    body["origin"] = json!(ORIGIN);
    let url = format!("{}{path}", flavour.origin(&entry));
    let mut pause = Duration::from_millis(500);
    for attempt in 1..=3 {
        let mut request = call
            .client
            .post(&url)
            .header("Content-Type", "application/json");
        if let Some(key) = &key {
            request = request.header("Authorization", format!("Bearer {key}"));
        }
        let reply = call
            .client
            .send(
                request.body(body.to_string()),
                call.deadline(Duration::from_secs(60)),
            )
            .await
            .map_err(|e| e.to_string())?;
        if reply.status.as_u16() == 502 && attempt < 3 {
            tokio::time::sleep(pause).await;
            pause *= 2;
            continue;
        }
        let json = reply.json();
        let field = |k: &str| {
            json.as_ref()
                .and_then(|j| j.get(k))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        if reply.status.as_u16() != 200
            || json.as_ref().and_then(|j| j.get("success")) == Some(&Value::Bool(false))
        {
            let class = match reply.status.as_u16() {
                401 => "Unauthorized",
                402 => "Payment Required",
                429 => "Rate limit exceeded",
                _ => "Unexpected error",
            };
            let error = Some(field("error"))
                .filter(|e| !e.is_empty())
                .unwrap_or_else(|| format!("HTTP {}", reply.status.as_u16()));
            let details = json
                .as_ref()
                .and_then(|j| j.get("details"))
                .map(|d| d.to_string())
                .unwrap_or_else(|| "No additional error details provided.".into());
            return Err(format!("{class}: Failed to {action}. {error} - {details}"));
        }
        return json.ok_or_else(|| "not JSON".to_owned());
    }
    Err("Unexpected error: Failed after 3 attempts".into())
}

fn s(v: &Value, k: &str) -> String {
    v.get(k).and_then(Value::as_str).unwrap_or("").to_owned()
}

pub async fn web_search(call: &WebCall<'_>, flavour: Flavour) -> Result<String, ToolFailure> {
    let query = call.str_arg("query")?;
    let n = call.entry("web_search").int_or("max_results", 5);
    Ok(
        match post(
            call,
            flavour,
            "web_search",
            "/v2/search",
            "search",
            json!({"query": query, "limit": n}),
        )
        .await
        {
            Ok(reply) => {
                let results: Vec<Value> = reply
                .pointer("/data/web")
                .and_then(Value::as_array)
                .map(|items| items.iter().map(|r| json!({"title": s(r, "title"), "url": s(r, "url"), "snippet": s(r, "description")})).collect())
                .unwrap_or_default();
                pretty(&Value::Array(results))
            }
            Err(e) => format!("Error: {e}"),
        },
    )
}

pub async fn web_fetch(call: &WebCall<'_>, flavour: Flavour) -> Result<String, ToolFailure> {
    let url = call.str_arg("url")?;
    // DeerFlow checks only fastCRW's URLs; Antler checks both.
    // Antler follows the page's redirects itself: the crawler gets where they end.
    let url = match crawler_url(&url, &call.entry("web_fetch").guard(), "fetch").await {
        Ok(url) => url,
        Err(refusal) => return Ok(refusal),
    };
    Ok(
        match post(
            call,
            flavour,
            "web_fetch",
            "/v2/scrape",
            "scrape URL",
            json!({"url": url, "formats": ["markdown"]}),
        )
        .await
        {
            Ok(reply) => {
                // Where the crawler says it ended: a redirect it followed to a private
                // address never reaches the model.
                let reported = reply
                    .pointer("/data/metadata/url")
                    .or_else(|| reply.pointer("/data/metadata/sourceURL"))
                    .and_then(Value::as_str);
                if let Some(refusal) =
                    check_reported(reported, &call.entry("web_fetch").guard()).await
                {
                    return Ok(refusal);
                }
                let markdown = reply
                    .pointer("/data/markdown")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if markdown.is_empty() {
                    NO_CONTENT.to_owned()
                } else {
                    let title = reply
                        .pointer("/data/metadata/title")
                        .and_then(Value::as_str)
                        .filter(|t| !t.is_empty())
                        .unwrap_or("Untitled");
                    format!("# {title}\n\n{}", cut_chars(markdown, MAX_FETCH_CHARS))
                }
            }
            Err(e) => format!("Error: {e}"),
        },
    )
}
