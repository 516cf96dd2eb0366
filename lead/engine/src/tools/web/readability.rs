//! DeerFlow's readability step (`utils/readability.py`) on Rust crates: the article of an
//! HTML page extracted as readability.js does (`dom_smoothie`), then turned into Markdown
//! (`htmd`, a turndown.js port). An empty article is E.0's placeholder text, an empty
//! title `Untitled`. Parsing is CPU work: callers run it off the actor's thread.

/// The content of a page nothing could be extracted from.
pub const NO_CONTENT: &str = "No content could be extracted from this page";
/// The title of a page without one.
pub const UNTITLED: &str = "Untitled";
/// The longest text a fetch returns, in characters (Python's `[:4096]`).
pub const MAX_FETCH_CHARS: usize = 4096;

/// An extracted article: its title and its content as HTML.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Article {
    pub title: String,
    pub html: String,
}

impl Article {
    /// Extracts the readable article of `html` (`url`, when absolute, makes relative
    /// links absolute).
    pub fn extract(html: &str, url: Option<&str>) -> Article {
        let url = url.filter(|u| reqwest::Url::parse(u).is_ok());
        let parsed = dom_smoothie::Readability::new(html, url, None)
            .ok()
            .and_then(|mut r| r.parse().ok());
        let (title, content) = match parsed {
            Some(article) => (article.title, article.content.to_string()),
            None => (page_title(html), String::new()),
        };
        let title = title.trim();
        Article {
            title: if title.is_empty() { UNTITLED } else { title }.to_owned(),
            html: if content.trim().is_empty() {
                NO_CONTENT.to_owned()
            } else {
                content
            },
        }
    }

    /// `# {title}\n\n` and the content as Markdown (`Article.to_markdown()`).
    pub fn to_markdown(&self) -> String {
        let converter = htmd::HtmlToMarkdown::builder()
            .skip_tags(vec!["script", "style", "noscript", "iframe", "svg", "form"])
            .build();
        let body = converter
            .convert(&self.html)
            .unwrap_or_else(|_| self.html.clone());
        format!("# {}\n\n{}", self.title, body.trim())
    }
}

/// The first `max` characters of `text` (Python's `text[:max]`).
pub fn cut_chars(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

/// The page's `<title>`, for a page readability found no article in.
fn page_title(html: &str) -> String {
    let doc = dom_query::Document::from(html);
    doc.select("title").text().trim().to_owned()
}

/// The readability step and the cut: what jina, infoquest, browserless and Antler's own
/// fetch return for `html`.
pub fn markdown_of(html: &str, url: Option<&str>) -> String {
    let markdown = Article::extract(html, url).to_markdown();
    cut_chars(&markdown, MAX_FETCH_CHARS).to_owned()
}

/// [`markdown_of`] on a blocking thread (parsing a large page takes a while).
pub async fn markdown_of_async(html: String, url: Option<String>) -> String {
    let fallback = format!("# {UNTITLED}\n\n{NO_CONTENT}");
    tokio::task::spawn_blocking(move || markdown_of(&html, url.as_deref()))
        .await
        .unwrap_or(fallback)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_page_gets_the_placeholder_texts() {
        assert_eq!(
            markdown_of("<html><body></body></html>", None),
            "# Untitled\n\nNo content could be extracted from this page"
        );
    }

    #[test]
    fn the_cut_counts_characters_not_bytes() {
        assert_eq!(cut_chars("ééé", 2), "éé");
        assert_eq!(cut_chars("ab", 5), "ab");
    }
}
