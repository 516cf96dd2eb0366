//! The catalog hash: the 16-hex-character digest DeerFlow binds promotions to (spec 2.2).
//! It is sha256 over `json.dumps([{"name", "schema": openai_function}], sort_keys=True,
//! ensure_ascii=False)` for the deferred tools sorted by name, first 16 hex characters,
//! so it does not depend on input order and changes with membership or any schema.
//! The blob is streamed through one reusable buffer; no `Value` is cloned per tool.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::pyjson::write_str;
use super::tool::ToolSpec;

/// The hash of one deferred-tool catalog.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CatalogHash(String);

impl CatalogHash {
    /// Number of hex characters DeerFlow keeps.
    pub const LEN: usize = 16;

    /// Hashes `tools` in any order (they are sorted by name first, as DeerFlow does).
    pub fn of_tools<'a>(tools: impl IntoIterator<Item = &'a ToolSpec>) -> CatalogHash {
        let mut sorted: Vec<&ToolSpec> = tools.into_iter().collect();
        sorted.sort_by(|a, b| a.name.cmp(&b.name));
        Self::of_sorted(sorted)
    }

    /// Hashes tools already sorted by name (stable for equal names, as Python's `sorted`).
    pub(crate) fn of_sorted<'a>(sorted: impl IntoIterator<Item = &'a ToolSpec>) -> CatalogHash {
        let mut blob = BlobHasher::new();
        blob.entries(sorted);
        blob.finish()
    }

    /// Parses a hash as it appears in state (`promoted.catalog_hash`).
    pub fn parse(text: &str) -> Option<CatalogHash> {
        let valid = text.len() == Self::LEN
            && text
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        valid.then(|| CatalogHash(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CatalogHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The exact blob DeerFlow hashes for `tools` (any order), for tests and diagnostics.
pub fn canonical_blob<'a>(tools: impl IntoIterator<Item = &'a ToolSpec>) -> String {
    let mut sorted: Vec<&ToolSpec> = tools.into_iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let mut blob = String::from("[");
    write_entries(sorted, false, |chunk| blob.push_str(chunk));
    blob.push(']');
    blob
}

/// Streams the blob `[entry, entry, ...]` into sha256, possibly in several parts.
pub struct BlobHasher {
    hasher: Sha256,
    entries: usize,
}

impl Default for BlobHasher {
    fn default() -> Self {
        Self::new()
    }
}

impl BlobHasher {
    pub fn new() -> Self {
        let mut hasher = Sha256::new();
        hasher.update(b"[");
        BlobHasher { hasher, entries: 0 }
    }

    /// Appends the entries of `sorted` tools.
    pub(crate) fn entries<'a>(&mut self, sorted: impl IntoIterator<Item = &'a ToolSpec>) {
        let hasher = &mut self.hasher;
        self.entries += write_entries(sorted, self.entries > 0, |chunk| {
            hasher.update(chunk.as_bytes())
        });
    }

    /// Appends entries already written by [`entry_of`], in name order.
    pub fn written_entries<'a>(&mut self, entries: impl IntoIterator<Item = &'a str>) {
        for entry in entries {
            if self.entries > 0 {
                self.hasher.update(b", ");
            }
            self.hasher.update(entry.as_bytes());
            self.entries += 1;
        }
    }

    pub fn finish(mut self) -> CatalogHash {
        self.hasher.update(b"]");
        let digest = hex::encode(self.hasher.finalize());
        CatalogHash(digest[..CatalogHash::LEN].to_owned())
    }
}

/// One tool's blob entry, written once (when an MCP listing is ingested) so that a
/// catalog build streams it into sha256 without escaping or reassembling anything.
/// The schema's canonical form is written into the entry only: the entry is what the
/// hash reads, so the schema does not keep a second copy.
pub fn entry_of(tool: &ToolSpec) -> Box<str> {
    let mut entry = String::with_capacity(1024);
    write_head(&mut entry, tool);
    tool.parameters.write_canonical(&mut entry);
    entry.push_str("}}");
    entry.into_boxed_str()
}

/// An entry up to its parameters. Keys are written in sorted order directly:
/// `name` < `schema` and `description` < `name` < `parameters`.
fn write_head(buf: &mut String, tool: &ToolSpec) {
    buf.push_str("{\"name\": ");
    write_str(buf, &tool.name);
    buf.push_str(", \"schema\": {\"description\": ");
    write_str(buf, &tool.description);
    buf.push_str(", \"name\": ");
    write_str(buf, &tool.name);
    buf.push_str(", \"parameters\": ");
}

/// Writes the blob entries of `sorted` tools to `sink` one at a time through a reused
/// buffer, each preceded by `", "` unless it is the very first (`separate_first` false).
/// Returns the number of entries written.
pub(crate) fn write_entries<'a>(
    sorted: impl IntoIterator<Item = &'a ToolSpec>,
    separate_first: bool,
    mut sink: impl FnMut(&str),
) -> usize {
    let mut buf = String::with_capacity(1024);
    let mut count = 0;
    for tool in sorted {
        if count > 0 || separate_first {
            buf.push_str(", ");
        }
        write_head(&mut buf, tool);
        // The schema's canonical form is written once per schema, not once per build.
        sink(&buf);
        buf.clear();
        sink(tool.parameters.canonical());
        buf.push_str("}}");
        count += 1;
    }
    if !buf.is_empty() {
        sink(&buf);
    }
    count
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn golden_pair() -> (ToolSpec, ToolSpec) {
        let params = |arg: &str| json!({"properties": {arg: {"type": "string"}}, "required": [arg], "type": "object"});
        (
            ToolSpec::mcp(
                "alpha_search",
                "Search alpha records by query.",
                params("query"),
                None,
                "alpha_search",
            ),
            ToolSpec::mcp(
                "beta_translate",
                "Translate beta text.",
                params("text"),
                None,
                "beta_translate",
            ),
        )
    }

    #[test]
    fn golden_hash_from_the_spec() {
        let (alpha, beta) = golden_pair();
        assert_eq!(
            CatalogHash::of_tools([&alpha, &beta]).as_str(),
            "d412c5eaf716041f"
        );
        assert_eq!(
            CatalogHash::of_tools([&beta, &alpha]).as_str(),
            "d412c5eaf716041f"
        );
        assert!(canonical_blob([&alpha]).starts_with(
            "[{\"name\": \"alpha_search\", \"schema\": {\"description\": \"Search alpha records by query.\", \"name\": \"alpha_search\", \"parameters\": {\"properties\": {\"query\": {\"type\": \"string\"}}, \"required\": [\"query\"], \"type\": \"object\"}}}"
        ));
    }

    #[test]
    fn written_entries_hash_like_tools() {
        let (alpha, beta) = golden_pair();
        let mut blob = BlobHasher::new();
        blob.written_entries([&*entry_of(&alpha), &*entry_of(&beta)]);
        assert_eq!(blob.finish().as_str(), "d412c5eaf716041f");
    }

    #[test]
    fn parse_accepts_only_sixteen_lowercase_hex() {
        assert!(CatalogHash::parse("d412c5eaf716041f").is_some());
        assert!(CatalogHash::parse("D412C5EAF716041F").is_none());
        assert!(CatalogHash::parse("h1").is_none());
    }
}
