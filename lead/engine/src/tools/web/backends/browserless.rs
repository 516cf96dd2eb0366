//! Browserless (spec E.12, `browserless.tools:web_fetch_tool | web_capture_tool`): the
//! address guard first (`fetch`, or `capture`), then `POST {base}/content` (the token in
//! the body) and the readability step on the rendered HTML, or `POST
//! {base}/screenshot?token=...` and the image written under the thread's `outputs` through
//! the run's thread files (never over an earlier file: a taken name gets `-1`, `-2`, ...)
//! and declared as an artifact. Either adds a warning when the target page answered with
//! an error status. Config: `base_url` (`http://localhost:3032`), `token` (else
//! `BROWSERLESS_TOKEN`), `timeout_s` or `timeout` (30 s), the guard keys; `web_fetch`:
//! `wait_for_event`, `wait_for_timeout`, `wait_for_selector`; `web_capture`:
//! `output_format` (`png`), `full_page` (true), `viewport_width` / `viewport_height`
//! (1280 x 720), `quality` (jpeg, webp), `wait_for_selector`, `wait_for_selector_timeout_ms`
//! (5000), `wait_for_timeout_ms`, `best_attempt`.

use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::{json, Value};

use crate::middleware::tool_error::ToolFailure;
use crate::tools::web::entry::ToolEntry;
use crate::tools::web::http::{crawler_url, secs, HttpError};
use crate::tools::web::readability::markdown_of_async;
use crate::tools::web::{WebCall, WebOutcome};
use antler_protocol::messages::ThreadFileError;

pub const BASE: &str = "http://localhost:3032";
/// `web_capture`'s answer: the virtual path written, then the target status warning.
pub const CAPTURED: &str = "Captured screenshot: {virtual_path}{warning}";
/// A screenshot request that answered 200 with no bytes.
pub const EMPTY_SCREENSHOT: &str = "Error: Browserless returned empty screenshot response";
/// The name of a capture whose filename and URL give none.
pub const DEFAULT_STEM: &str = "web-capture";
/// The image formats Browserless takes, each its file extension.
pub const OUTPUT_FORMATS: [&str; 3] = ["png", "jpeg", "webp"];

/// `timeout_s`, else `timeout`, else 30 s.
fn timeout(entry: &ToolEntry) -> Duration {
    Duration::from_secs_f64(if entry.has("timeout_s") {
        entry.secs_or("timeout_s", 30.0)
    } else {
        entry.secs_or("timeout", 30.0)
    })
}

/// DeerFlow's `_target_status_warning`: Browserless answers 200 even when the page it
/// rendered answered 4xx/5xx; `X-Response-Code` and `X-Response-Status` say so.
fn target_status_warning(headers: &HeaderMap) -> String {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .trim()
            .to_owned()
    };
    let code = header("x-response-code");
    if code.is_empty() || code.starts_with('2') || code.starts_with('3') {
        return String::new();
    }
    let detail = format!("{code} {}", header("x-response-status"));
    format!(" (warning: target page responded {})", detail.trim())
}

pub async fn web_fetch(call: &WebCall<'_>) -> Result<String, ToolFailure> {
    let url = call.str_arg("url")?;
    let entry = call.entry("web_fetch");
    // Antler follows the page's redirects itself: the browser gets where they end.
    let url = match crawler_url(&url, &entry.guard(), "fetch").await {
        Ok(url) => url,
        Err(refusal) => return Ok(refusal),
    };
    let timeout = timeout(&entry);
    let mut body = json!({"url": url});
    if let Some(token) = entry.str_or_env("token", "BROWSERLESS_TOKEN") {
        body["token"] = json!(token);
    }
    if let Some(event) = entry.str("wait_for_event") {
        body["waitForEvent"] = json!({"event": event});
    }
    let wait = entry.int_or("wait_for_timeout", 0);
    if wait > 0 {
        body["waitForTimeout"] = json!(wait);
    }
    if let Some(selector) = entry.str("wait_for_selector") {
        body["waitForSelector"] = json!({"selector": selector, "timeout": 5000});
    }
    let request = call
        .client
        .post(&format!("{}/content", entry.base_url(BASE)))
        .header("Content-Type", "application/json")
        .header("Cache-Control", "no-cache")
        .body(body.to_string());
    let reply = match call.client.send(request, call.deadline(timeout)).await {
        Ok(reply) => reply,
        Err(HttpError::Timeout(_)) => {
            return Ok(format!(
                "Error: Browserless request timed out after {}s",
                secs(timeout)
            ))
        }
        Err(e) => return Ok(format!("Error: Browserless request failed: {e}")),
    };
    if reply.status.as_u16() != 200 {
        let head: String = reply.body.chars().take(200).collect();
        return Ok(format!(
            "Error: Browserless HTTP {}: {head}",
            reply.status.as_u16()
        ));
    }
    if reply.body.trim().is_empty() {
        return Ok("Error: Browserless returned empty response".into());
    }
    let warning = target_status_warning(&reply.headers);
    Ok(markdown_of_async(reply.body, Some(url)).await + &warning)
}

/// The `url`'s host (as written, with its port) and path parts joined by `-`, at most 80
/// characters (Python's `urlparse`: no decoding, no normalising).
fn default_stem(url: &str) -> String {
    let rest = url.split_once("://").map_or("", |(_, rest)| rest);
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (netloc, tail) = rest.split_at(end);
    let path = tail.split(['?', '#']).next().unwrap_or("");
    let parts: Vec<&str> = std::iter::once(netloc)
        .chain(path.split('/'))
        .filter(|p| !p.is_empty())
        .collect();
    if parts.is_empty() {
        return DEFAULT_STEM.to_owned();
    }
    parts.join("-").chars().take(80).collect()
}

/// DeerFlow's `_safe_capture_filename`: the file name of `filename` (directories
/// dropped) without its extension, else the URL's stem; every run of characters outside
/// `[A-Za-z0-9._-]` becomes `_`, leading and trailing `._-` go, at most 100 characters,
/// and the format's extension. Antler leaves out DeerFlow's timestamp in the default name
/// (a name must not depend on the time): a second capture of one URL gets `-1`.
pub fn safe_capture_filename(filename: Option<&str>, url: &str, format: &str) -> String {
    let stem = match filename.filter(|f| !f.is_empty()) {
        Some(filename) => {
            let name = filename
                .trim_end_matches('/')
                .rsplit('/')
                .next()
                .unwrap_or("");
            // Python's `Path.stem`: a dot that leads or ends the name is no extension's.
            let stem = match name.rfind('.') {
                Some(dot) if dot > 0 && dot + 1 < name.len() => &name[..dot],
                _ => name,
            };
            if stem.is_empty() {
                DEFAULT_STEM.to_owned()
            } else {
                stem.to_owned()
            }
        }
        None => default_stem(url),
    };
    let mut safe = String::with_capacity(stem.len());
    let mut in_run = false;
    for c in stem.chars() {
        if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
            safe.push(c);
            in_run = false;
        } else if !in_run {
            safe.push('_');
            in_run = true;
        }
    }
    let safe = safe.trim_matches(|c| matches!(c, '.' | '_' | '-'));
    let safe: String = if safe.is_empty() {
        DEFAULT_STEM.to_owned()
    } else {
        safe.chars().take(100).collect()
    };
    format!("{safe}.{format}")
}

/// An argument the model may leave out (absent or null).
fn bool_arg(call: &WebCall<'_>, name: &str) -> Option<bool> {
    match call.arg(name)? {
        Value::Bool(b) => Some(*b),
        _ => None,
    }
}

fn int_arg(call: &WebCall<'_>, name: &str) -> Option<i64> {
    match call.arg(name)? {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// `web_capture(url, filename?, full_page?, output_format?, viewport_width?,
/// viewport_height?)`: the arguments override the entry's keys.
pub async fn web_capture(call: &WebCall<'_>) -> Result<WebOutcome, ToolFailure> {
    let url = call.str_arg("url")?;
    let entry = call.entry("web_capture");
    let url = match crawler_url(&url, &entry.guard(), "capture").await {
        Ok(url) => url,
        Err(refusal) => return Ok(refusal.into()),
    };
    let asked = call
        .arg("output_format")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .filter(|f| !f.is_empty())
        .or_else(|| entry.str("output_format"))
        .unwrap_or_else(|| "png".into())
        .trim()
        .to_ascii_lowercase();
    let format = if OUTPUT_FORMATS.contains(&asked.as_str()) {
        asked
    } else {
        "png".to_owned()
    };
    let full_page = bool_arg(call, "full_page").unwrap_or_else(|| entry.bool_or("full_page", true));
    let width =
        int_arg(call, "viewport_width").unwrap_or_else(|| entry.int_or("viewport_width", 1280));
    let height =
        int_arg(call, "viewport_height").unwrap_or_else(|| entry.int_or("viewport_height", 720));
    let mut options = json!({"fullPage": full_page, "type": format});
    if format != "png" {
        if let Some(Ok(quality)) = entry.int("quality") {
            if (0..=100).contains(&quality) {
                options["quality"] = json!(quality);
            }
        }
    }
    let mut body = json!({
        "url": url,
        "options": options,
        "viewport": {"width": width, "height": height},
    });
    if let Some(selector) = entry.str("wait_for_selector") {
        body["waitForSelector"] = json!({
            "selector": selector,
            "timeout": entry.int_or("wait_for_selector_timeout_ms", 5000),
        });
    }
    let wait = entry.int_or("wait_for_timeout_ms", 0);
    if wait > 0 {
        body["waitForTimeout"] = json!(wait);
    }
    if entry.bool_or("best_attempt", false) {
        body["bestAttempt"] = json!(true);
    }
    let name = safe_capture_filename(call.arg("filename").and_then(Value::as_str), &url, &format);
    let timeout = timeout(&entry);
    let endpoint = format!("{}/screenshot", entry.base_url(BASE));
    let mut target = endpoint.clone();
    if let Some(token) = entry.str_or_env("token", "BROWSERLESS_TOKEN") {
        // A base that does not parse fails in the request below, with reqwest's text.
        if let Ok(mut with_token) = reqwest::Url::parse(&target) {
            with_token.query_pairs_mut().append_pair("token", &token);
            target = with_token.into();
        }
    }
    let request = call
        .client
        .post(&target)
        .header("Content-Type", "application/json")
        .header("Cache-Control", "no-cache")
        .body(body.to_string());
    let reply = match call.client.send_raw(request, call.deadline(timeout)).await {
        Ok(reply) => reply,
        Err(HttpError::Timeout(_)) => {
            return Ok(format!(
                "Error: Browserless screenshot request timed out after {}s",
                secs(timeout)
            )
            .into())
        }
        // reqwest names the URL it failed on: the model reads it without the token.
        Err(e) => {
            let text = e.to_string().replace(&target, &endpoint);
            return Ok(format!("Error: Browserless screenshot request failed: {text}").into());
        }
    };
    if reply.status.as_u16() != 200 {
        let text = String::from_utf8_lossy(&reply.body);
        let head: String = text.chars().take(200).collect();
        return Ok(format!("Error: Browserless HTTP {}: {head}", reply.status.as_u16()).into());
    }
    if reply.body.is_empty() {
        return Ok(EMPTY_SCREENSHOT.to_owned().into());
    }
    let warning = target_status_warning(&reply.headers);
    let virtual_path = match write(call, &name, reply.body).await {
        Ok(path) => path,
        Err(e) => return Ok(format!("Error: {e}").into()),
    };
    Ok(WebOutcome {
        text: CAPTURED
            .replacen("{virtual_path}", &virtual_path, 1)
            .replacen("{warning}", &warning, 1),
        artifacts: vec![virtual_path],
    })
}

/// Writes the image under `outputs` (the thread's directories made first when they are
/// missing, as DeerFlow's `mkdir(parents=True)`).
async fn write(call: &WebCall<'_>, name: &str, image: Vec<u8>) -> Result<String, ThreadFileError> {
    match call.files.write_output(name, image.clone()).await {
        Err(ThreadFileError::NotFound { .. }) => {
            call.files.ensure_dirs().await?;
            call.files.write_output(name, image).await
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_names_are_safe_and_take_the_format_extension() {
        let url = "https://example.com/docs/a page";
        assert_eq!(
            safe_capture_filename(Some("../../etc/shot.jpg"), url, "png"),
            "shot.png"
        );
        assert_eq!(
            safe_capture_filename(Some("my report (v2).png"), url, "webp"),
            "my_report_v2.webp"
        );
        assert_eq!(
            safe_capture_filename(Some("..."), url, "png"),
            "web-capture.png"
        );
        assert_eq!(
            safe_capture_filename(Some(".hidden"), url, "png"),
            "hidden.png"
        );
        assert_eq!(
            safe_capture_filename(None, url, "jpeg"),
            "example.com-docs-a_page.jpeg"
        );
        assert_eq!(
            safe_capture_filename(None, "https://example.com/", "png"),
            "example.com.png"
        );
        assert_eq!(
            safe_capture_filename(None, "http://127.0.0.1:8080/a?q=1", "png"),
            "127.0.0.1_8080-a.png"
        );
        let long = "x".repeat(300);
        assert_eq!(safe_capture_filename(Some(&long), url, "png").len(), 104);
    }
}
