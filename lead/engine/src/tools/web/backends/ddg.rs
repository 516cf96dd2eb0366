//! DuckDuckGo (spec E.1, `ddg_search.tools:web_search_tool` and
//! `image_search.tools:image_search_tool`). DeerFlow uses the `ddgs` scraper; Antler reads
//! the same sources directly: the HTML results page (`POST {base}/html/`, form `q`, `kl`
//! region, `kp` safesearch) and the image API (`{base}/?q=` for the `vqd` token, then
//! `GET {base}/i.js`). Any failure is "no results", as `ddgs` errors are in DeerFlow.
//! Config: `max_results` (overrides the argument), `region` (`wt-wt`), `safesearch`
//! (`moderate`), `base_url` (default the DuckDuckGo hosts), `timeout` (30 s).

use std::time::Duration;

use serde_json::{json, Value};

use crate::middleware::tool_error::ToolFailure;
use crate::tools::web::{error_json, pretty, WebCall};

/// Where text results come from unless `base_url` is set.
pub const TEXT_BASE: &str = "https://html.duckduckgo.com";
/// Where image results come from unless `base_url` is set.
pub const IMAGES_BASE: &str = "https://duckduckgo.com";
pub const NO_RESULTS: &str = "No results found";
pub const NO_IMAGES: &str = "No images found";
/// The hint every image result list carries.
pub const IMAGE_USAGE_HINT: &str =
    "Use the 'image_url' values as reference images in image generation. Download them first if needed.";
const USER_AGENT: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0";

/// `kp`: DuckDuckGo's safesearch parameter.
fn safesearch_param(level: &str) -> &'static str {
    match level.to_ascii_lowercase().as_str() {
        "on" | "strict" => "1",
        "off" => "-2",
        _ => "-1",
    }
}

fn max_results(call: &WebCall<'_>, entry: &crate::tools::web::entry::ToolEntry) -> usize {
    let from_arg = call.arg("max_results").and_then(Value::as_i64).unwrap_or(5);
    let n = if entry.has("max_results") {
        entry.int_or("max_results", from_arg)
    } else {
        from_arg
    };
    n.max(1) as usize
}

pub async fn web_search(call: &WebCall<'_>) -> Result<String, ToolFailure> {
    let query = call.str_arg("query")?;
    let entry = call.entry("web_search");
    let n = max_results(call, &entry);
    let region = entry.str("region").unwrap_or_else(|| "wt-wt".into());
    let safesearch = entry.str("safesearch").unwrap_or_else(|| "moderate".into());
    let base = entry.base_url(TEXT_BASE);
    let deadline = call.deadline(Duration::from_secs_f64(entry.secs_or("timeout", 30.0)));
    let body = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("q", &query)
        .append_pair("b", "")
        .append_pair("kl", &region)
        .append_pair("kp", safesearch_param(&safesearch))
        .finish();
    let request = call
        .client
        .post(&format!("{base}/html/"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .header("User-Agent", USER_AGENT)
        .body(body);
    let results = match call.client.send(request, deadline).await {
        Ok(reply) if reply.status.is_success() => parse_html_results(&reply.body, n),
        Ok(reply) => {
            tracing::warn!(status = %reply.status, "DuckDuckGo search failed");
            Vec::new()
        }
        Err(e) => {
            tracing::warn!("Failed to search web: {e}");
            Vec::new()
        }
    };
    if results.is_empty() {
        return Ok(error_json(NO_RESULTS, "query", &query));
    }
    Ok(pretty(&json!({
        "query": query,
        "total_results": results.len(),
        "results": results,
    })))
}

/// `{title, url, content}` of the first `n` organic results of DuckDuckGo's HTML page.
fn parse_html_results(html: &str, n: usize) -> Vec<Value> {
    let doc = dom_query::Document::from(html);
    let mut out = Vec::new();
    for result in doc.select("div.result").iter() {
        if out.len() >= n {
            break;
        }
        if result.has_class("result--ad") {
            continue;
        }
        let link = result.select("a.result__a");
        let title = link.text().trim().to_owned();
        let href = link.attr("href").map(|h| h.to_string()).unwrap_or_default();
        if title.is_empty() || href.is_empty() {
            continue;
        }
        let snippet = result.select(".result__snippet").text().trim().to_owned();
        out.push(json!({"title": title, "url": unwrap_redirect(&href), "content": snippet}));
    }
    out
}

/// DuckDuckGo's `//duckduckgo.com/l/?uddg=<target>` links point at their `uddg` target.
fn unwrap_redirect(href: &str) -> String {
    let absolute = if href.starts_with("//") {
        format!("https:{href}")
    } else {
        href.to_owned()
    };
    if let Ok(url) = reqwest::Url::parse(&absolute) {
        if url.path() == "/l/" {
            if let Some((_, target)) = url.query_pairs().find(|(k, _)| k == "uddg") {
                return target.into_owned();
            }
        }
    }
    absolute
}

pub async fn image_search(call: &WebCall<'_>) -> Result<String, ToolFailure> {
    let query = call.str_arg("query")?;
    let entry = call.entry("image_search");
    let n = max_results(call, &entry);
    let base = entry.base_url(IMAGES_BASE);
    let deadline = call.deadline(Duration::from_secs_f64(entry.secs_or("timeout", 30.0)));
    let filter = |key: &str, name: &str| {
        let value = call.arg(key).and_then(Value::as_str).unwrap_or("");
        format!("{name}:{value}")
    };
    let filters = [
        filter("size", "size"),
        filter("color", "color"),
        filter("type_image", "type"),
        filter("layout", "layout"),
        filter("license_image", "license"),
    ]
    .join(",");
    let results = match images(call, &base, &query, &filters, deadline).await {
        Ok(items) => items,
        Err(e) => {
            tracing::warn!("Failed to search images: {e}");
            Vec::new()
        }
    };
    let results: Vec<Value> = results
        .iter()
        .take(n)
        .map(|r| {
            json!({
                "title": r.get("title").and_then(Value::as_str).unwrap_or(""),
                "image_url": r.get("image").and_then(Value::as_str).unwrap_or(""),
                "thumbnail_url": r.get("thumbnail").and_then(Value::as_str).unwrap_or(""),
            })
        })
        .collect();
    if results.is_empty() {
        return Ok(error_json(NO_IMAGES, "query", &query));
    }
    Ok(pretty(&json!({
        "query": query,
        "total_results": results.len(),
        "results": results,
        "usage_hint": IMAGE_USAGE_HINT,
    })))
}

async fn images(
    call: &WebCall<'_>,
    base: &str,
    query: &str,
    filters: &str,
    deadline: Duration,
) -> Result<Vec<Value>, String> {
    let mut token_url = reqwest::Url::parse(&format!("{base}/")).map_err(|e| e.to_string())?;
    token_url.query_pairs_mut().append_pair("q", query);
    let page = call
        .client
        .send(
            call.client
                .get(token_url.as_str())
                .header("User-Agent", USER_AGENT),
            deadline,
        )
        .await
        .map_err(|e| e.to_string())?;
    let vqd = vqd_of(&page.body).ok_or("no vqd token in DuckDuckGo's page")?;
    let mut url = reqwest::Url::parse(&format!("{base}/i.js")).map_err(|e| e.to_string())?;
    url.query_pairs_mut()
        .append_pair("l", "wt-wt")
        .append_pair("o", "json")
        .append_pair("q", query)
        .append_pair("vqd", &vqd)
        .append_pair("f", filters)
        .append_pair("p", "-1");
    let reply = call
        .client
        .send(
            call.client
                .get(url.as_str())
                .header("User-Agent", USER_AGENT)
                .header("Referer", format!("{base}/")),
            deadline,
        )
        .await
        .map_err(|e| e.to_string())?;
    if !reply.status.is_success() {
        return Err(format!("HTTP {}", reply.status.as_u16()));
    }
    let json = reply.json().ok_or("not JSON")?;
    Ok(json
        .get("results")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default())
}

/// The `vqd` token of DuckDuckGo's search page (`vqd="…"`, `vqd='…'` or `vqd=…&`).
fn vqd_of(page: &str) -> Option<String> {
    let at = page.find("vqd=")? + 4;
    let rest = &page[at..];
    let (rest, end) = match rest.chars().next()? {
        q @ ('"' | '\'') => (&rest[1..], q),
        _ => (rest, '&'),
    };
    let token: String = rest
        .chars()
        .take_while(|c| *c != end && !c.is_whitespace() && *c != '"' && *c != '\'')
        .collect();
    (!token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirect_links_point_at_their_target() {
        assert_eq!(
            unwrap_redirect("//duckduckgo.com/l/?uddg=https%3A%2F%2Fwww.rust-lang.org%2F&rut=x"),
            "https://www.rust-lang.org/"
        );
        assert_eq!(vqd_of("x vqd=\"4-123\" y").as_deref(), Some("4-123"));
        assert_eq!(vqd_of("a&vqd=4-9&b").as_deref(), Some("4-9"));
    }
}
