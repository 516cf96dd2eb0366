//! One module per web backend of spec E, each with its request shapes, config keys and
//! the texts the model reads; [`Backend`] names them by the package of their DeerFlow
//! `use:` id (`deerflow.community.<pkg>.tools:*`, Antler's `antler.web.<pkg>:*`).

pub mod antler;
pub mod brave;
pub mod browserless;
pub mod crawl4ai;
pub mod ddg;
pub mod exa;
pub mod firecrawl;
pub mod groundroute;
pub mod infoquest;
pub mod jina;
pub mod safe_url;
pub mod searxng;
pub mod serper;
pub mod tavily;

use super::{WebCall, WebOutcome};
use crate::middleware::tool_error::{FailureClass, ToolFailure};

/// A web backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// Antler's own fetch: the page fetched here, readability, Markdown.
    Antler,
    /// DuckDuckGo's HTML results and image search (`ddg_search`, `image_search`).
    DuckDuckGo,
    Tavily,
    Brave,
    Serper,
    Exa,
    Firecrawl,
    FastCrw,
    Jina,
    Searxng,
    InfoQuest,
    GroundRoute,
    Crawl4ai,
    Browserless,
}

impl Backend {
    /// The backend of an Antler implementation id (`antler.web.<pkg>:<tool>`).
    pub fn of(implementation_id: &str) -> Option<Backend> {
        let (module, _tool) = implementation_id.split_once(':')?;
        Some(match module {
            "antler.web" => Backend::Antler,
            "antler.web.ddg_search" | "antler.web.image_search" => Backend::DuckDuckGo,
            "antler.web.tavily" => Backend::Tavily,
            "antler.web.brave" => Backend::Brave,
            "antler.web.serper" => Backend::Serper,
            "antler.web.exa" => Backend::Exa,
            "antler.web.firecrawl" => Backend::Firecrawl,
            "antler.web.fastcrw" => Backend::FastCrw,
            "antler.web.infoquest" => Backend::InfoQuest,
            "antler.web.groundroute" => Backend::GroundRoute,
            "antler.web.crawl4ai" => Backend::Crawl4ai,
            "antler.web.browserless" => Backend::Browserless,
            "antler.web.jina_ai" => Backend::Jina,
            "antler.web.searxng" => Backend::Searxng,
            _ => return None,
        })
    }

    /// Runs `tool` (`web_search`, `web_fetch`, `image_search` or `web_capture`) on this
    /// backend: what the model reads (and any artifact), or a failure the tool did not
    /// catch (DeerFlow's exceptions).
    pub async fn run(self, tool: &str, call: &WebCall<'_>) -> Result<WebOutcome, ToolFailure> {
        match (self, tool) {
            (Backend::Browserless, "web_capture") => browserless::web_capture(call).await,
            _ => self.run_text(tool, call).await.map(WebOutcome::from),
        }
    }

    /// The tools whose result is their text alone.
    async fn run_text(self, tool: &str, call: &WebCall<'_>) -> Result<String, ToolFailure> {
        use Backend::*;
        match (self, tool) {
            (Antler, "web_fetch") => antler::web_fetch(call).await,
            (DuckDuckGo, "web_search") => ddg::web_search(call).await,
            (DuckDuckGo, "image_search") => ddg::image_search(call).await,
            (Tavily, "web_search") => tavily::web_search(call).await,
            (Tavily, "web_fetch") => tavily::web_fetch(call).await,
            (Brave, "web_search") => brave::web_search(call).await,
            (Brave, "image_search") => brave::image_search(call).await,
            (Serper, "web_search") => serper::web_search(call).await,
            (Serper, "image_search") => serper::image_search(call).await,
            (Exa, "web_search") => exa::web_search(call).await,
            (Exa, "web_fetch") => exa::web_fetch(call).await,
            (Firecrawl, "web_search") => {
                firecrawl::web_search(call, firecrawl::Flavour::Firecrawl).await
            }
            (Firecrawl, "web_fetch") => {
                firecrawl::web_fetch(call, firecrawl::Flavour::Firecrawl).await
            }
            (FastCrw, "web_search") => {
                firecrawl::web_search(call, firecrawl::Flavour::FastCrw).await
            }
            (FastCrw, "web_fetch") => firecrawl::web_fetch(call, firecrawl::Flavour::FastCrw).await,
            (InfoQuest, "web_search") => infoquest::web_search(call).await,
            (InfoQuest, "web_fetch") => infoquest::web_fetch(call).await,
            (InfoQuest, "image_search") => infoquest::image_search(call).await,
            (GroundRoute, "web_search") => groundroute::web_search(call).await,
            (GroundRoute, "web_fetch") => groundroute::web_fetch(call).await,
            (Crawl4ai, "web_fetch") => crawl4ai::web_fetch(call).await,
            (Browserless, "web_fetch") => browserless::web_fetch(call).await,
            (Jina, "web_fetch") => jina::web_fetch(call).await,
            (Searxng, "web_search") => searxng::web_search(call).await,
            (backend, tool) => Err(ToolFailure::new(
                FailureClass::ToolUnavailable,
                format!("the {backend:?} backend has no {tool}"),
            )),
        }
    }
}
