//! `tool_search` queries over the deferred tools (spec 2.3) as DeerFlow answers them, one
//! documented extension ([`SearchMode::Extended`]), and the rendering of matched schemas.
//! Built once per catalog: haystacks, folded and lowercased copies in shared buffers, the
//! prefilter signatures (from per-tool features, computed at ingestion for MCP tools) and
//! the name order; matched schemas are rendered once and kept in a bounded cache. See
//! [`SearchIndex`] for the few places Python's `re` differs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::matcher::Query;
use super::prefilter::{
    find_bytes, fold_into, has_bit, iter_bits, lowercase_into, FeatureSet, Slices, ToolFeatures,
    HAY_SLICES, HAY_WORDS, NAME_SLICES, NAME_WORDS,
};
use super::pyjson::{push_indent, write_pretty, write_str};
use super::tool::ToolSpec;

/// Cap of the ranked query forms (`select:` is uncapped).
pub const MAX_RESULTS: usize = 5;

/// What ingestion computed for one MCP tool, so that a catalog build does not: its
/// search features, its rank among the names of its listing (ranks of one listing order
/// its tools by name) and its entry of the catalog-hash blob.
#[derive(Clone, Copy)]
pub(crate) struct Prepared<'a> {
    pub(crate) features: &'a ToolFeatures,
    pub(crate) name_rank: u32,
    /// Its entry of the catalog-hash blob.
    pub(crate) hash_entry: &'a str,
}

/// How a query that DeerFlow answers with nothing is treated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SearchMode {
    /// DeerFlow's semantics only: the whole keyword query is one regex.
    Parity,
    /// DeerFlow's semantics, and when a keyword query of two or more words matches
    /// nothing as a phrase, the words are ranked one by one ([`SearchIndex`] docs).
    #[default]
    Extended,
}

/// Python's `str.isspace`: Unicode `White_Space` plus the separators U+001C..U+001F.
pub(crate) fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.strip()`.
pub(crate) fn py_strip(text: &str) -> &str {
    text.trim_matches(is_py_space)
}

/// Python's `str.split()` (runs of whitespace, no empty parts).
fn py_split(text: &str) -> impl Iterator<Item = &str> {
    text.split(is_py_space).filter(|part| !part.is_empty())
}

/// Python's `text.split(None, 1)`: the first word and the remainder, if any.
fn py_split_first(text: &str) -> Option<(&str, Option<&str>)> {
    let text = text.trim_start_matches(is_py_space);
    if text.is_empty() {
        return None;
    }
    let end = text.find(is_py_space).unwrap_or(text.len());
    let rest = text[end..].trim_start_matches(is_py_space);
    Some((&text[..end], (!rest.is_empty()).then_some(rest)))
}

/// Where one tool's texts sit in the index's shared buffers.
struct Spans {
    /// `f"{name} {description}"` in `haystacks`.
    hay: Range32,
    name_len: u32,
    /// One ASCII byte per character of the haystack, see [`fold`], in `folded`.
    folded: Range32,
    folded_name_len: u32,
    /// `name.lower()`, in `lowered`, for `+required`.
    lower: Range32,
}

#[derive(Clone, Copy)]
struct Range32 {
    start: u32,
    end: u32,
}

impl Range32 {
    fn push(buffer: &mut String, text: impl FnOnce(&mut String)) -> Range32 {
        let start = to_u32(buffer.len());
        text(buffer);
        Range32 {
            start,
            end: to_u32(buffer.len()),
        }
    }

    fn of(self, buffer: &str) -> &str {
        &buffer[self.start as usize..self.end as usize]
    }
}

/// One tool's texts, borrowed from the index.
#[derive(Clone, Copy)]
struct Entry<'a> {
    haystack: &'a str,
    name_len: usize,
    folded: &'a str,
    folded_name_len: usize,
}

impl<'a> Entry<'a> {
    fn name(self) -> &'a str {
        &self.haystack[..self.name_len]
    }
    fn description(self) -> &'a str {
        &self.haystack[self.name_len + 1..]
    }
    fn folded_name(self) -> &'a str {
        &self.folded[..self.folded_name_len]
    }
    fn folded_description(self) -> &'a str {
        &self.folded[self.folded_name_len + 1..]
    }
    fn matches_haystack(self, query: &Query) -> bool {
        query.is_match(self.haystack, self.folded)
    }
    fn matches_name(self, query: &Query) -> bool {
        query.is_match(self.name(), self.folded_name())
    }
    fn matches_description(self, query: &Query) -> bool {
        query.is_match(self.description(), self.folded_description())
    }
}

/// The search structures of one deferred-tool catalog, positions in catalog order.
///
/// Parity: results equal DeerFlow's `DeferredToolCatalog.search` (see the conformance
/// tests), except where the `regex` crate and Python's `re` disagree: Python's `re.I` also equates `i` with `ı`
/// and `İ`; Python's `$` also matches before a final newline; look-around and
/// backreferences, which `regex` lacks, are matched literally; `findall` counts of
/// patterns that prefer an empty match (`a??`) can differ.
///
/// Extension ([`SearchMode::Extended`]): a keyword query of two or more words that
/// matches nothing as a whole is ranked term by term. Each term is compiled like a
/// query (case-insensitive regex, literal on error); a tool scores 2 per term found in
/// its name, else 1 per term found in its description; tools scoring 0 are dropped,
/// ties keep catalog order, and the cap is 5. A query DeerFlow answers with results is
/// answered identically, so every DeerFlow answer other than `[]` is preserved.
pub struct SearchIndex {
    spans: Vec<Spans>,
    haystacks: String,
    folded: String,
    lowered: String,
    /// Positions sorted by name, for `select:`, the hash and the prompt section.
    by_name: Vec<u32>,
    hay: Slices,
    folded_names: Slices,
    lower_names: Slices,
    /// Schemas rendered for earlier results, reused: a result is a concatenation.
    rendered: RenderCache,
}

/// Bytes of rendered schemas a catalog keeps; a full cache starts over. Models fetch a
/// few schemas per run, so the working set is small; the bound keeps a client that
/// fetches every schema of a large catalog from doubling the catalog's memory.
pub const RENDER_CACHE_BYTES: usize = 256 * 1024;

/// Each matched tool's `convert_to_openai_function` at nesting level 1 of
/// `json.dumps([...], indent=2, ensure_ascii=False)`, by position, within
/// [`RENDER_CACHE_BYTES`]. The lock is held for lookups and inserts, never while rendering.
#[derive(Default)]
struct RenderCache(Mutex<RenderedSchemas>);

#[derive(Default)]
struct RenderedSchemas {
    by_position: HashMap<u32, Arc<str>>,
    bytes: usize,
}

impl RenderCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, RenderedSchemas> {
        // A panic while holding the lock cannot leave the map inconsistent (each
        // insert is one call), so a poisoned cache is still usable.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The rendered schemas of `positions`, rendering (outside the lock) those not cached.
    fn get_all(&self, positions: &[usize], render: impl Fn(usize) -> String) -> Vec<Arc<str>> {
        let cached: Vec<Option<Arc<str>>> = {
            let cache = self.lock();
            positions
                .iter()
                .map(|&p| cache.by_position.get(&to_u32(p)).cloned())
                .collect()
        };
        let mut fresh = Vec::new();
        let parts: Vec<Arc<str>> = cached
            .into_iter()
            .zip(positions)
            .map(|(hit, &p)| {
                hit.unwrap_or_else(|| {
                    let part: Arc<str> = render(p).into();
                    fresh.push((p, Arc::clone(&part)));
                    part
                })
            })
            .collect();
        if !fresh.is_empty() {
            let mut cache = self.lock();
            for (p, part) in fresh {
                if part.len() > RENDER_CACHE_BYTES {
                    continue;
                }
                if cache.bytes + part.len() > RENDER_CACHE_BYTES {
                    cache.by_position.clear();
                    cache.bytes = 0;
                }
                cache.bytes += part.len();
                if let Some(old) = cache.by_position.insert(to_u32(p), part) {
                    cache.bytes -= old.len();
                }
            }
        }
        parts
    }

    fn heap_bytes(&self) -> usize {
        let cache = self.lock();
        cache.bytes
            + cache.by_position.capacity()
                * (std::mem::size_of::<(u32, Arc<str>)>() + 1 + 2 * std::mem::size_of::<usize>())
    }
}

impl SearchIndex {
    /// Builds the index over the deferred tools, in catalog order.
    pub fn build(tools: &[&ToolSpec]) -> SearchIndex {
        Self::with_order(tools, name_order(tools), |_| None)
    }

    /// The same, given `by_name` (the positions of `tools` sorted by name) and the
    /// features already computed for some tools (`prepared(position)`, for MCP tools
    /// from their ingestion); the others' features are computed here.
    pub(crate) fn with_order<'f>(
        tools: &[&ToolSpec],
        by_name: Vec<u32>,
        prepared: impl Fn(usize) -> Option<&'f ToolFeatures>,
    ) -> SearchIndex {
        let count = tools.len();
        let text_len: usize = tools
            .iter()
            .map(|t| t.name.len() + 1 + t.description.len())
            .sum();
        let name_len: usize = tools.iter().map(|t| t.name.len()).sum();
        let mut haystacks = String::with_capacity(text_len);
        let mut folded = String::with_capacity(text_len);
        let mut lowered = String::with_capacity(name_len);
        let mut hay = Slices::new(HAY_SLICES, count);
        let mut folded_names = Slices::new(NAME_SLICES, count);
        let mut lower_names = Slices::new(NAME_SLICES, count);
        // Each block of 64 tools' feature rows is gathered here, then transposed into
        // the slices at once.
        let mut hay_rows = [[0u64; HAY_WORDS]; 64];
        let mut folded_rows = [[0u64; NAME_WORDS]; 64];
        let mut lower_rows = [[0u64; NAME_WORDS]; 64];
        let mut spans = Vec::with_capacity(count);
        for (position, tool) in tools.iter().enumerate() {
            let hay_span = Range32::push(&mut haystacks, |b| {
                b.push_str(&tool.name);
                b.push(' ');
                b.push_str(&tool.description);
            });
            let folded_name_len = tool.name.chars().count();
            let folded_span = Range32::push(&mut folded, |b| {
                fold_into(b, &tool.name);
                b.push(' ');
                fold_into(b, &tool.description);
            });
            let lower_span = Range32::push(&mut lowered, |b| lowercase_into(b, &tool.name));
            let row = position % 64;
            let computed;
            let features = match prepared(position) {
                Some(features) => features,
                None => {
                    computed = ToolFeatures::of_texts(
                        folded_span.of(&folded).as_bytes(),
                        folded_name_len,
                        lower_span.of(&lowered),
                    );
                    &computed
                }
            };
            hay_rows[row] = features.hay;
            folded_rows[row] = features.folded_name;
            lower_rows[row] = features.lower_name;
            spans.push(Spans {
                hay: hay_span,
                name_len: to_u32(tool.name.len()),
                folded: folded_span,
                folded_name_len: to_u32(folded_name_len),
                lower: lower_span,
            });
            if row == 63 || position + 1 == count {
                let block = position / 64;
                hay.store_rows(block, &hay_rows);
                folded_names.store_rows(block, &folded_rows);
                lower_names.store_rows(block, &lower_rows);
                hay_rows = [[0; HAY_WORDS]; 64];
                folded_rows = [[0; NAME_WORDS]; 64];
                lower_rows = [[0; NAME_WORDS]; 64];
            }
        }
        SearchIndex {
            spans,
            haystacks,
            folded,
            lowered,
            by_name,
            hay,
            folded_names,
            lower_names,
            rendered: RenderCache::default(),
        }
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    fn entry(&self, position: usize) -> Entry<'_> {
        let spans = &self.spans[position];
        Entry {
            haystack: spans.hay.of(&self.haystacks),
            name_len: spans.name_len as usize,
            folded: spans.folded.of(&self.folded),
            folded_name_len: spans.folded_name_len as usize,
        }
    }

    /// Positions sorted by tool name.
    pub fn by_name(&self) -> &[u32] {
        &self.by_name
    }

    /// Runs a `tool_search` query; returns positions in result order.
    pub fn search(&self, query: &str, mode: SearchMode) -> Vec<usize> {
        let query = py_strip(query);
        if query.is_empty() {
            return Vec::new();
        }
        if let Some(names) = query.strip_prefix("select:") {
            return self.select(names);
        }
        if let Some(rest) = query.strip_prefix('+') {
            return self.required(rest);
        }
        let hits = self.keyword(query);
        if hits.is_empty() && mode == SearchMode::Extended && py_split(query).nth(1).is_some() {
            return self.rank_terms(query);
        }
        hits
    }

    /// `select:a,b`: exact names, catalog order, uncapped, unknown names ignored.
    fn select(&self, names: &str) -> Vec<usize> {
        let mut hits: Vec<usize> = names
            .split(',')
            .filter_map(|name| self.position_of(py_strip(name)))
            .collect();
        hits.sort_unstable();
        hits.dedup();
        hits
    }

    /// The position of the deferred tool named `name`.
    pub fn position_of(&self, name: &str) -> Option<usize> {
        self.by_name
            .binary_search_by(|&p| self.entry(p as usize).name().cmp(name))
            .ok()
            .map(|i| self.by_name[i] as usize)
    }

    /// `+required rest`: `required` (lowercased) must be in the lowercased name; the
    /// candidates are stably ranked by `len(re.findall(rest, haystack))`, descending.
    fn required(&self, text: &str) -> Vec<usize> {
        let Some((first, rest)) = py_split_first(text) else {
            return Vec::new();
        };
        let required = first.to_lowercase();
        let features = FeatureSet::of_name(required.chars().map(u32::from));
        let candidates = self.lower_names.candidates(&features, self.len());
        let has_required = |p: usize| {
            let lower = self.spans[p].lower.of(&self.lowered);
            find_bytes(lower.as_bytes(), required.as_bytes(), 0).is_some()
        };
        let Some(rest) = rest else {
            return iter_bits(&candidates)
                .filter(|&p| has_required(p))
                .take(MAX_RESULTS)
                .collect();
        };
        let rank = Query::new(rest);
        let may_count = rank.candidates(&self.hay, self.len());
        let mut counted: Vec<(usize, usize)> = Vec::new();
        let mut zeros: Vec<usize> = Vec::with_capacity(MAX_RESULTS);
        for position in iter_bits(&candidates) {
            if has_bit(&may_count, position) {
                if !has_required(position) {
                    continue;
                }
                let spans = &self.spans[position];
                let text = spans.hay.of(&self.haystacks);
                match rank.count(text, spans.folded.of(&self.folded)) {
                    0 if zeros.len() < MAX_RESULTS => zeros.push(position),
                    0 => {}
                    n => counted.push((n, position)),
                }
            } else if zeros.len() < MAX_RESULTS && has_required(position) {
                zeros.push(position);
            }
        }
        // Equal counts keep catalog order, as Python's stable sort does.
        counted.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        counted
            .into_iter()
            .map(|(_, position)| position)
            .chain(zeros)
            .take(MAX_RESULTS)
            .collect()
    }

    /// The whole query as one case-insensitive regex over `"name description"`; name
    /// matches (score 2) first, then the rest (score 1), catalog order within each.
    fn keyword(&self, query: &str) -> Vec<usize> {
        let query = Query::new(query);
        let candidates = query.candidates(&self.hay, self.len());
        let mut named = Vec::with_capacity(MAX_RESULTS);
        let mut described = Vec::with_capacity(MAX_RESULTS);
        for position in iter_bits(&candidates) {
            let entry = self.entry(position);
            if !entry.matches_haystack(&query) {
                continue;
            }
            if entry.matches_name(&query) {
                named.push(position);
                if named.len() == MAX_RESULTS {
                    break;
                }
            } else if described.len() < MAX_RESULTS {
                described.push(position);
            }
        }
        named.extend(described);
        named.truncate(MAX_RESULTS);
        named
    }

    /// The extension: rank term by term (see the type's docs). Each tool's best possible
    /// score comes from the prefilters alone; tools are verified from the highest bound
    /// down, and verification stops once five exact scores beat every remaining bound.
    fn rank_terms(&self, query: &str) -> Vec<usize> {
        let mut words: Vec<&str> = Vec::new();
        for word in py_split(query) {
            if !words
                .iter()
                .any(|w| w.to_lowercase() == word.to_lowercase())
            {
                words.push(word);
            }
        }
        let terms: Vec<(Query, Vec<u64>, Vec<u64>)> = words
            .into_iter()
            .map(|word| {
                let term = Query::new(word);
                let anywhere = term.candidates(&self.hay, self.len());
                let in_name = term.name_candidates(&self.folded_names, self.len());
                (term, anywhere, in_name)
            })
            .collect();
        // Each tool's bound (2 per term its name may contain, else 1 per term its text may
        // contain), as a bit-sliced counter: plane `p` holds bit `p` of every tool's bound.
        let words = self.hay.words;
        let max_bound = 2 * terms.len();
        let planes_needed = (usize::BITS - max_bound.leading_zeros()) as usize;
        let mut planes = vec![vec![0u64; words]; planes_needed];
        for (_, anywhere, in_name) in &terms {
            for w in 0..words {
                add_at(&mut planes, w, 1, in_name[w]);
                add_at(&mut planes, w, 0, anywhere[w] & !in_name[w]);
            }
        }
        let mut at_bound = vec![0u64; words];
        let mut best: Vec<(usize, usize)> = Vec::with_capacity(MAX_RESULTS + 1);
        for limit in (1..=max_bound).rev() {
            if best.len() == MAX_RESULTS && best.last().is_some_and(|&(s, _)| limit < s) {
                break;
            }
            for (w, word) in at_bound.iter_mut().enumerate() {
                *word = planes.iter().enumerate().fold(u64::MAX, |acc, (p, plane)| {
                    acc & if limit >> p & 1 == 1 {
                        plane[w]
                    } else {
                        !plane[w]
                    }
                });
            }
            for position in iter_bits(&at_bound) {
                // Positions ascend, so once the fifth best beats this bound at this
                // position it beats every tool left at this level too.
                if best.len() == MAX_RESULTS
                    && best
                        .last()
                        .is_some_and(|&(s, p)| s > limit || (s == limit && p < position))
                {
                    break;
                }
                let entry = self.entry(position);
                let score: usize = terms
                    .iter()
                    .map(|(term, anywhere, in_name)| {
                        if has_bit(in_name, position) && entry.matches_name(term) {
                            2
                        } else {
                            usize::from(
                                has_bit(anywhere, position) && entry.matches_description(term),
                            )
                        }
                    })
                    .sum();
                if score > 0 {
                    best.push((score, position));
                    best.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
                    best.truncate(MAX_RESULTS);
                }
            }
        }
        best.into_iter().map(|(_, position)| position).collect()
    }

    /// `json.dumps([convert_to_openai_function(t) for t in matched], indent=2,
    /// ensure_ascii=False)` for the given positions; `tool` maps a position back to its
    /// tool (a rendered schema is kept for later results, see [`RENDER_CACHE_BYTES`]).
    pub fn render<'t>(&self, positions: &[usize], tool: impl Fn(usize) -> &'t ToolSpec) -> String {
        if positions.is_empty() {
            return "[]".to_owned();
        }
        let parts = self.rendered.get_all(positions, |p| {
            let mut out = String::with_capacity(1024);
            render_function(&mut out, tool(p));
            out
        });
        let size = parts.iter().map(|part| part.len() + 2).sum::<usize>() + 4;
        let mut out = String::with_capacity(size);
        out.push_str("[\n");
        for (i, part) in parts.iter().enumerate() {
            if i > 0 {
                out.push_str(",\n");
            }
            out.push_str(&part[..]);
        }
        out.push_str("\n]");
        out
    }

    /// Heap bytes the index holds, for the benchmark's accounting.
    pub fn heap_bytes(&self) -> IndexBytes {
        IndexBytes {
            texts: self.spans.capacity() * std::mem::size_of::<Spans>()
                + self.haystacks.capacity()
                + self.folded.capacity()
                + self.lowered.capacity(),
            signatures: self.hay.heap_bytes()
                + self.folded_names.heap_bytes()
                + self.lower_names.heap_bytes()
                + self.by_name.capacity() * 4,
            rendered: self.rendered.heap_bytes(),
        }
    }
}

/// Adds the one-bit-per-tool `bits` times 2^`plane` to word `w` of a bit-sliced counter.
fn add_at(planes: &mut [Vec<u64>], w: usize, plane: usize, bits: u64) {
    let mut carry = bits;
    for counter in planes.iter_mut().skip(plane) {
        if carry == 0 {
            break;
        }
        let overflow = counter[w] & carry;
        counter[w] ^= carry;
        carry = overflow;
    }
}

/// The positions of `tools` sorted by name: mostly by a 16-byte big-endian prefix (ties,
/// such as a shared server prefix, compare the full names). Names are unique in a
/// catalog, so an unstable sort is deterministic.
pub(crate) fn name_order(tools: &[&ToolSpec]) -> Vec<u32> {
    let mut keyed: Vec<(u128, u32)> = tools
        .iter()
        .enumerate()
        .map(|(p, tool)| {
            let mut prefix = 0u128;
            for (i, &byte) in tool.name.as_bytes().iter().take(16).enumerate() {
                prefix |= u128::from(byte) << (120 - 8 * i);
            }
            (prefix, to_u32(p))
        })
        .collect();
    keyed.sort_unstable_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| tools[a.1 as usize].name.cmp(&tools[b.1 as usize].name))
    });
    keyed.into_iter().map(|(_, p)| p).collect()
}

/// Heap use of a [`SearchIndex`], by part.
#[derive(Clone, Copy, Debug, Default)]
pub struct IndexBytes {
    /// Haystacks, folded haystacks, lowercased names and their offsets.
    pub texts: usize,
    /// Bit-sliced signatures and the name order.
    pub signatures: usize,
    /// Rendered-schema cache (the schemas kept and the map holding them).
    pub rendered: usize,
}

/// Offsets are `u32`: a catalog's text is far below 4 GiB (the model could not be shown
/// more); saturating keeps the conversion total.
fn to_u32(value: usize) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

/// Renders one tool as an element of the `indent=2` result list (nesting level 1).
fn render_function(out: &mut String, tool: &ToolSpec) {
    push_indent(out, 1);
    out.push_str("{\n");
    push_indent(out, 2);
    out.push_str("\"name\": ");
    write_str(out, &tool.name);
    out.push_str(",\n");
    push_indent(out, 2);
    out.push_str("\"description\": ");
    write_str(out, &tool.description);
    out.push_str(",\n");
    push_indent(out, 2);
    out.push_str("\"parameters\": ");
    write_pretty(out, &tool.parameters, 2);
    out.push('\n');
    push_indent(out, 1);
    out.push('}');
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::catalog::matcher::{compile_query_regex, count_matches};
    use proptest::prelude::*;
    use proptest::sample::Index;
    use regex::Regex;
    use serde_json::json;
    use std::collections::HashSet;

    fn catalog(tools: &[(&str, &str)]) -> Vec<ToolSpec> {
        tools
            .iter()
            .map(|(name, description)| {
                ToolSpec::mcp(*name, *description, json!({"type": "object"}), None, *name)
            })
            .collect()
    }

    fn names(tools: &[ToolSpec], query: &str, mode: SearchMode) -> Vec<String> {
        let refs: Vec<&ToolSpec> = tools.iter().collect();
        let index = SearchIndex::build(&refs);
        index
            .search(query, mode)
            .into_iter()
            .map(|p| tools[p].name.clone())
            .collect()
    }

    #[test]
    fn literal_and_regex_paths_agree_on_odd_characters() {
        let tools = catalog(&[
            ("long_s", "\u{17f}lack with a long s"),
            ("kelvin", "\u{212a}elvin sign"),
            ("nul", "has \u{0} inside"),
            ("plain", "nothing"),
        ]);
        assert_eq!(names(&tools, "slack", SearchMode::Parity), ["long_s"]);
        assert_eq!(names(&tools, "KELVIN", SearchMode::Parity), ["kelvin"]);
        assert_eq!(
            names(&tools, "slack|kelvin", SearchMode::Parity),
            ["kelvin", "long_s"]
        );
        assert_eq!(
            names(&tools, "s\u{0}", SearchMode::Parity),
            Vec::<String>::new()
        );
    }

    #[test]
    fn extension_ranks_terms_only_when_the_phrase_finds_nothing() {
        let tools = catalog(&[
            ("send_mail", "Send an email"),
            ("slack_post", "post a message to slack"),
            ("jupyter_run", "Run a notebook cell"),
        ]);
        assert_eq!(
            names(&tools, "notebook jupyter", SearchMode::Extended),
            ["jupyter_run"]
        );
        assert!(names(&tools, "notebook jupyter", SearchMode::Parity).is_empty());
        // Name hits (2) outrank description hits (1); ties keep catalog order.
        assert_eq!(
            names(&tools, "slack message email", SearchMode::Extended),
            ["slack_post", "send_mail"]
        );
        // The phrase matches: the extension stays out.
        assert_eq!(
            names(&tools, "a message", SearchMode::Extended),
            ["slack_post"]
        );
    }

    /// The reference search: DeerFlow's `DeferredToolCatalog.search` (spec 2.3) and the
    /// extension, written the slow, obvious way over the tools themselves (no prefilter,
    /// no folded text, no pruning). The matched names, in result order.
    fn reference_search(tools: &[ToolSpec], query: &str, mode: SearchMode) -> Vec<String> {
        let rx = |p: &str| compile_query_regex(p).unwrap();
        let haystack = |t: &ToolSpec| format!("{} {}", t.name, t.description);
        let names = |found: Vec<&ToolSpec>| -> Vec<String> {
            found
                .into_iter()
                .take(MAX_RESULTS)
                .map(|t| t.name.clone())
                .collect()
        };
        let query = query.trim_matches(is_py_space);
        if query.is_empty() {
            return Vec::new();
        }
        if let Some(list) = query.strip_prefix("select:") {
            let wanted: HashSet<&str> = list
                .split(',')
                .map(|n| n.trim_matches(is_py_space))
                .collect();
            // Uncapped.
            return tools
                .iter()
                .filter(|t| wanted.contains(t.name.as_str()))
                .map(|t| t.name.clone())
                .collect();
        }
        if let Some(text) = query.strip_prefix('+') {
            // `parts = text.split(None, 1)`
            let text = text.trim_start_matches(is_py_space);
            let Some(first) = text.split(is_py_space).next().filter(|w| !w.is_empty()) else {
                return Vec::new();
            };
            let remainder = text[first.len()..].trim_start_matches(is_py_space);
            let required = first.to_lowercase();
            let mut found: Vec<&ToolSpec> = tools
                .iter()
                .filter(|t| t.name.to_lowercase().contains(&required))
                .collect();
            if !remainder.is_empty() {
                let rank = rx(remainder);
                // A stable sort, as Python's.
                found.sort_by_key(|t| std::cmp::Reverse(count_matches(&rank, &haystack(t))));
            }
            return names(found);
        }
        let whole = rx(query);
        let mut scored: Vec<(usize, &ToolSpec)> = tools
            .iter()
            .filter(|t| whole.is_match(&haystack(t)))
            .map(|t| (if whole.is_match(&t.name) { 2 } else { 1 }, t))
            .collect();
        let words: Vec<&str> = query.split(is_py_space).filter(|w| !w.is_empty()).collect();
        if scored.is_empty() && mode == SearchMode::Extended && words.len() > 1 {
            let mut distinct: Vec<&str> = Vec::new();
            for word in words {
                if !distinct
                    .iter()
                    .any(|w| w.to_lowercase() == word.to_lowercase())
                {
                    distinct.push(word);
                }
            }
            let regexes: Vec<Arc<Regex>> = distinct.iter().map(|w| rx(w)).collect();
            scored = tools
                .iter()
                .map(|t| {
                    let score = regexes
                        .iter()
                        .map(|r| {
                            if r.is_match(&t.name) {
                                2
                            } else {
                                usize::from(r.is_match(&t.description))
                            }
                        })
                        .sum();
                    (score, t)
                })
                .filter(|(score, _)| *score > 0)
                .collect();
        }
        // A stable sort: equal scores keep catalog order.
        scored.sort_by_key(|(score, _)| std::cmp::Reverse(*score));
        names(scored.into_iter().map(|(_, t)| t).collect())
    }

    #[test]
    fn prefilters_and_pruning_agree_with_the_reference() {
        let words = [
            "slack",
            "Send",
            "message",
            "post",
            "ſlack",
            "\u{212a}ey",
            "日历",
            "sum(x)",
            "a|b",
            "file",
            "FILE",
            "s",
            "k",
            "é",
            "list",
            "channel",
            "x",
            "_",
        ];
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |bound: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % bound as u64) as usize
        };
        for round in 0..60 {
            let count = 1 + next(140);
            let tools: Vec<ToolSpec> = (0..count)
                .map(|i| {
                    let name = format!(
                        "{}_{}_{i}",
                        words[next(words.len())],
                        words[next(words.len())]
                    );
                    let description: Vec<&str> =
                        (0..next(8)).map(|_| words[next(words.len())]).collect();
                    ToolSpec::mcp(name.clone(), description.join(" "), json!({}), None, name)
                })
                .collect();
            let refs: Vec<&ToolSpec> = tools.iter().collect();
            let index = SearchIndex::build(&refs);
            for _ in 0..20 {
                let query: Vec<&str> = (0..1 + next(3)).map(|_| words[next(words.len())]).collect();
                let query = query.join(" ");
                let ours: Vec<String> = index
                    .search(&query, SearchMode::Extended)
                    .into_iter()
                    .map(|p| tools[p].name.clone())
                    .collect();
                assert_eq!(
                    ours,
                    reference_search(&tools, &query, SearchMode::Extended),
                    "round {round}, query {query:?}"
                );
            }
        }
    }

    /// Name pieces: case variants, the characters `regex` folds onto ASCII (`ſ`, the
    /// Kelvin sign), a final-sigma pair, non-ASCII letters and regex metacharacters, few
    /// enough that queries often match.
    const NAME_ATOMS: &[&str] = &[
        "slack", "Slack", "SLACK", "send", "Send", "post", "file", "FILE", "s", "k", "a", "b", "x",
        "_", "-", ".", "+", "(", "|", "ſ", "\u{212a}", "Σ", "σ", "é", "É", "İ", "ß", "日历",
    ];
    /// Description pieces: the name pieces, words, phrases and Python whitespace.
    #[rustfmt::skip]
    const DESCRIPTION_ATOMS: &[&str] = &[
        "message", "to", "sum(x)", "a|b", "aa", "aaa", "send message", "slack send",
        "\n", "\t", "\u{a0}", "\u{1f}",
    ];
    /// Query pieces besides the name pieces and the tools' own names: regexes DeerFlow
    /// compiles, patterns that fall back to a literal, patterns `regex` lacks.
    #[rustfmt::skip]
    const QUERY_ATOMS: &[&str] = &[
        "a|b", "aa", "s.*k", "^mcp", "k$", "[sk]", "sum(", "sum(x)", r"\w+", "(?=x)", r"(a)\1",
        "a??", "|", "sl?ack", "mcp__", "__", "slack send", "send message", ".", "*", "",
    ];
    /// How a query opens: each form of spec 2.3, near misses of it, and whitespace.
    const QUERY_PREFIXES: &[&str] = &[
        "", "", "", "select:", "select: ", "SELECT:", "+", "+ ", " +", "+\u{a0}", " ", "\t",
    ];
    const QUERY_SEPARATORS: &[&str] = &[" ", " ", ",", " , ", "|", "", "  ", "\u{1f}"];
    const QUERY_SUFFIXES: &[&str] = &["", "", " ", "\u{1f}", ",", "\n"];

    fn atom(atoms: &'static [&'static str]) -> impl Strategy<Value = &'static str> {
        prop::sample::select(atoms)
    }

    /// A tool name: `mcp__server__tool`, or a few name pieces run together.
    fn tool_name() -> impl Strategy<Value = String> {
        let piece = || atom(NAME_ATOMS);
        prop_oneof![
            (
                prop::sample::select(&["slack", "Slack", "github", "fs", "s"][..]),
                prop::collection::vec(piece(), 1..3)
            )
                .prop_map(|(server, tool)| format!("mcp__{server}__{}", tool.join("_"))),
            prop::collection::vec(piece(), 1..4).prop_map(|pieces| pieces.concat()),
        ]
    }

    fn description() -> impl Strategy<Value = String> {
        let piece = prop_oneof![atom(NAME_ATOMS), atom(DESCRIPTION_ATOMS)];
        (
            prop::collection::vec(piece, 0..7),
            prop::sample::select(&[" ", " ", ""][..]),
        )
            .prop_map(|(pieces, glue)| pieces.join(glue))
    }

    /// A catalog with unique names (as every catalog has), in generated order.
    fn tools() -> impl Strategy<Value = Vec<ToolSpec>> {
        prop::collection::vec((tool_name(), description()), 0..90).prop_map(|drafts| {
            let mut seen = HashSet::new();
            drafts
                .into_iter()
                .filter(|(name, _)| seen.insert(name.clone()))
                .map(|(name, description)| {
                    ToolSpec::mcp(name.clone(), description, json!({}), None, name)
                })
                .collect()
        })
    }

    /// One piece of a query: a fixed piece, or the name of a catalog tool (picked when
    /// the catalog is known), as given or uppercased.
    #[derive(Clone, Debug)]
    enum QueryPiece {
        Text(&'static str),
        ToolName(Index, bool),
    }

    #[derive(Clone, Debug)]
    struct QueryDraft {
        prefix: &'static str,
        pieces: Vec<QueryPiece>,
        separator: &'static str,
        suffix: &'static str,
    }

    impl QueryDraft {
        fn render(&self, tools: &[ToolSpec]) -> String {
            let pieces: Vec<String> = self
                .pieces
                .iter()
                .map(|piece| match piece {
                    QueryPiece::Text(text) => (*text).to_owned(),
                    QueryPiece::ToolName(_, _) if tools.is_empty() => "slack".to_owned(),
                    QueryPiece::ToolName(at, upper) => {
                        let name = &tools[at.index(tools.len())].name;
                        if *upper {
                            name.to_uppercase()
                        } else {
                            name.clone()
                        }
                    }
                })
                .collect();
            format!(
                "{}{}{}",
                self.prefix,
                pieces.join(self.separator),
                self.suffix
            )
        }
    }

    fn query() -> impl Strategy<Value = QueryDraft> {
        let tool_name = || {
            (any::<Index>(), prop::bool::weighted(0.2))
                .prop_map(|(at, upper)| QueryPiece::ToolName(at, upper))
        };
        let piece = prop_oneof![
            atom(NAME_ATOMS).prop_map(QueryPiece::Text),
            atom(QUERY_ATOMS).prop_map(QueryPiece::Text),
            tool_name(),
        ];
        let any_form = (
            atom(QUERY_PREFIXES),
            prop::collection::vec(piece, 0..4),
            atom(QUERY_SEPARATORS),
            atom(QUERY_SUFFIXES),
        );
        // `select:` lists, mostly of names the catalog has.
        let select = (
            prop::sample::select(&["select:", " select:", "select: ", "SELECT:"][..]),
            prop::collection::vec(
                prop_oneof![4 => tool_name(), 1 => atom(NAME_ATOMS).prop_map(QueryPiece::Text)],
                0..9,
            ),
            prop::sample::select(&[",", " , ", ",\u{a0}", ",,"][..]),
            atom(QUERY_SUFFIXES),
        );
        prop_oneof![3 => any_form, 1 => select].prop_map(|(prefix, pieces, separator, suffix)| {
            QueryDraft {
                prefix,
                pieces,
                separator,
                suffix,
            }
        })
    }

    fn found(
        index: &SearchIndex,
        tools: &[ToolSpec],
        query: &str,
        mode: SearchMode,
    ) -> Vec<String> {
        index
            .search(query, mode)
            .into_iter()
            .map(|p| tools[p].name.clone())
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 256,
            // A divergence found is kept as a plain unit test, not a file beside the code.
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        /// The fast path (prefilters, folded literals, pruned ranking), over an index built
        /// from the tools and over one built from ingestion's features, answers every query
        /// form exactly as the reference does: the same tools in the same order.
        #[test]
        fn fast_search_returns_exactly_the_reference_results(
            tools in tools(),
            drafts in prop::collection::vec(query(), 1..8),
        ) {
            let refs: Vec<&ToolSpec> = tools.iter().collect();
            let built = SearchIndex::build(&refs);
            let features: Vec<ToolFeatures> = tools
                .iter()
                .map(|t| ToolFeatures::of_tool(&t.name, &t.description))
                .collect();
            let ingested = SearchIndex::with_order(&refs, name_order(&refs), |p| Some(&features[p]));
            for draft in &drafts {
                let query = draft.render(&tools);
                for mode in [SearchMode::Parity, SearchMode::Extended] {
                    let expected = reference_search(&tools, &query, mode);
                    prop_assert_eq!(
                        &found(&built, &tools, &query, mode),
                        &expected,
                        "query {:?}, {:?}", query, mode
                    );
                    prop_assert_eq!(
                        &found(&ingested, &tools, &query, mode),
                        &expected,
                        "query {:?}, {:?}, ingested features", query, mode
                    );
                }
            }
        }
    }

    #[test]
    fn render_is_python_indent_2() {
        let tools = [ToolSpec::mcp(
            "calc",
            "Σ “sum”",
            json!({"type": "object", "properties": {"a": {"type": "number"}}, "required": []}),
            None,
            "calc",
        )];
        let refs: Vec<&ToolSpec> = tools.iter().collect();
        let index = SearchIndex::build(&refs);
        assert_eq!(
            index.render(&[0], |p| &tools[p]),
            "[\n  {\n    \"name\": \"calc\",\n    \"description\": \"Σ “sum”\",\n    \"parameters\": {\n      \"type\": \"object\",\n      \"properties\": {\n        \"a\": {\n          \"type\": \"number\"\n        }\n      },\n      \"required\": []\n    }\n  }\n]"
        );
    }

    #[test]
    fn fetching_every_schema_keeps_the_render_cache_bounded_and_answers_unchanged() {
        // 400 schemas of about 4 KiB rendered: far more than the cache keeps.
        let tools: Vec<ToolSpec> = (0..400)
            .map(|i| {
                ToolSpec::mcp(
                    format!("tool_{i}"),
                    "x".repeat(4000),
                    json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
                    None,
                    format!("tool_{i}"),
                )
            })
            .collect();
        let refs: Vec<&ToolSpec> = tools.iter().collect();
        let index = SearchIndex::build(&refs);
        let first: Vec<String> = (0..400)
            .map(|p| index.render(&[p], |q| &tools[q]))
            .collect();
        assert!(index.heap_bytes().rendered <= RENDER_CACHE_BYTES + 64 * 1024);
        for (p, expected) in first.iter().enumerate().rev() {
            assert_eq!(&index.render(&[p], |q| &tools[q]), expected);
        }
        let fresh = SearchIndex::build(&refs);
        assert_eq!(
            index.render(&[3, 399, 0], |q| &tools[q]),
            fresh.render(&[3, 399, 0], |q| &tools[q])
        );
        assert!(index.heap_bytes().rendered <= RENDER_CACHE_BYTES + 64 * 1024);
    }
}
