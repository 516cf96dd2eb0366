//! Antler's own `web_fetch` (`use: antler.web:web_fetch`): the page is fetched here, not
//! by a remote reader, through the address guard (every hop, pinned connections, at most
//! five redirects, a body cap), then its article is extracted and turned into Markdown,
//! cut at 4,096 characters. Config keys: `timeout` (seconds, default 20),
//! `user_agent`, `allow_private_addresses`, `allowed_private_hosts`.

use std::time::Duration;

use crate::middleware::tool_error::ToolFailure;
use crate::tools::web::http::{self, FetchError, USER_AGENT};
use crate::tools::web::readability::markdown_of_async;
use crate::tools::web::WebCall;

/// The default deadline of one fetch.
pub const DEFAULT_TIMEOUT_SECS: f64 = 20.0;
/// A reply that is not a success.
pub const HTTP_STATUS: &str = "Error: The page responded HTTP {code}";
/// A body that is not text.
pub const NOT_TEXT: &str = "Error: The page is not text (content-type: {ct})";

pub async fn web_fetch(call: &WebCall<'_>) -> Result<String, ToolFailure> {
    let url = call.str_arg("url")?;
    let entry = call.entry("web_fetch");
    let deadline = call.deadline(Duration::from_secs_f64(
        entry.secs_or("timeout", DEFAULT_TIMEOUT_SECS),
    ));
    let agent = entry
        .str("user_agent")
        .unwrap_or_else(|| USER_AGENT.to_owned());
    let page = match http::fetch_page(&url, &entry.guard(), deadline, &agent).await {
        Ok(page) => page,
        Err(FetchError::Http(e)) => return Ok(format!("Error: Request failed: {e}")),
        Err(refused) => return Ok(refused.to_string()),
    };
    if !page.status.is_success() {
        return Ok(HTTP_STATUS.replace("{code}", page.status.as_str()));
    }
    let ct = page.content_type.to_ascii_lowercase();
    let is_text = ct.is_empty()
        || ct.starts_with("text/")
        || ct.contains("html")
        || ct.contains("xml")
        || ct.contains("json");
    if !is_text {
        return Ok(NOT_TEXT.replace("{ct}", &page.content_type));
    }
    // A blank page goes through readability too: E.0's placeholder texts.
    Ok(markdown_of_async(page.body, Some(page.url.to_string())).await)
}
