//! How one query pattern matches, as DeerFlow compiles it: a case-insensitive regex, or
//! the literal text when the pattern does not compile. Compiled with the linear-time
//! `regex` crate under a size limit, so a model-written pattern can neither hang nor grow
//! without bound. Plain literals skip the regex and match on folded text; `findall`
//! counts follow Python's rules for empty matches. Compiled regexes are kept, with their
//! match caches, in a small bounded process-wide cache: compiling a case-insensitive
//! Unicode regex costs far more than matching it over thousands of tools, and models
//! repeat their queries.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use regex::{Regex, RegexBuilder};

use super::prefilter::{
    count_bytes, find_bytes, fold_str, full_bitmap, Branch, FeatureSet, Slices, OTHER,
};

/// Compiled-size limit of a model-written query regex; larger ones fall back to a literal.
pub const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Compiles a query the way DeerFlow's `_compile_catalog_regex` does, with the linear-time
/// `regex` crate: case-insensitive, and on any compile error (bad syntax, syntax Rust does
/// not support such as look-around or backreferences, or the size limit) the query is
/// matched literally. `None` only when even the escaped literal exceeds the size limit.
/// The regex is shared with the cache, and so are its match caches (lazy DFA states),
/// which a repeated query finds already built.
pub fn compile_query_regex(pattern: &str) -> Option<Arc<Regex>> {
    build_cached(pattern).or_else(|| build_cached(&regex::escape(pattern)))
}

/// Compiled sources kept at most (a full cache starts over).
const REGEX_CACHE_LIMIT: usize = 128;
/// The lazy-DFA cache of one compiled query regex is kept with it; this bounds it (the
/// `regex` default is 2 MiB), so the cache's worst case stays in tens of MiB.
const REGEX_DFA_CACHE_LIMIT: usize = 256 * 1024;
/// The longest source the cache keeps (longer ones are compiled each time).
const REGEX_CACHE_MAX_SOURCE: usize = 1024;

/// `source` compiled case-insensitively under the size limit (`None`: it does not
/// compile), from the cache when it was compiled before. The cache hands out the same
/// `Arc<Regex>`: a `Regex` clone would share the program but start with an empty pool of
/// match caches, rebuilding its lazy DFA on every query.
fn build_cached(source: &str) -> Option<Arc<Regex>> {
    static CACHE: OnceLock<Mutex<HashMap<String, Option<Arc<Regex>>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Mutex::default);
    if let Some(hit) = cache
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(source)
    {
        return hit.clone();
    }
    let built = RegexBuilder::new(source)
        .case_insensitive(true)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_DFA_CACHE_LIMIT)
        .build()
        .ok()
        .map(Arc::new);
    if source.len() <= REGEX_CACHE_MAX_SOURCE {
        let mut cache = cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if cache.len() >= REGEX_CACHE_LIMIT {
            cache.clear();
        }
        cache.insert(source.to_owned(), built.clone());
    }
    built
}

/// `len(re.findall(regex, text))`: non-overlapping matches, where an empty match may
/// follow a non-empty one at the same position (Python 3.7+), unlike `find_iter`.
/// After an empty match the scan moves one character on; Python would first try a
/// lower-priority non-empty match at the same position (only patterns such as `a??`
/// or `|a` can tell the difference).
pub fn count_matches(regex: &Regex, text: &str) -> usize {
    let mut count = 0;
    let mut at = 0;
    while at <= text.len() {
        let Some(found) = regex.find_at(text, at) else {
            break;
        };
        count += 1;
        if found.end() > found.start() {
            at = found.end();
        } else {
            match text[found.end()..].chars().next() {
                Some(c) => at = found.end() + c.len_utf8(),
                None => break,
            }
        }
    }
    count
}

/// Python `re` metacharacters: a query without any of them is a plain literal.
pub(crate) fn is_plain_literal(text: &str) -> bool {
    !text.contains([
        '.', '^', '$', '*', '+', '?', '{', '}', '[', ']', '\\', '|', '(', ')',
    ])
}

/// How one compiled query (or query term) decides a match.
pub(crate) enum Matcher {
    /// A literal whose every character folds to ASCII: matched exactly by substring
    /// search in the folded text, no regex needed.
    Folded(String),
    /// Anything else, matched by the compiled case-insensitive regex.
    Regex(Arc<Regex>),
    /// A literal too large for the regex size limit: lowercase substring search.
    Lowercase(String),
}

/// A matcher and its prefilter: alternatives of required features; `None` means every
/// tool is a candidate.
pub(crate) struct Query {
    matcher: Matcher,
    prefilter: Option<Vec<Branch>>,
}

impl Query {
    /// Plans `pattern` as DeerFlow compiles it (regex, literal on compile error).
    pub(crate) fn new(pattern: &str) -> Query {
        if is_plain_literal(pattern) {
            return Query::literal(pattern);
        }
        if pattern.split('|').all(is_plain_literal) {
            // An alternation of literals: a tool is a candidate if any branch could match.
            if let Some(regex) = compile_query_regex(pattern) {
                let branches: Option<Vec<Branch>> = pattern
                    .split('|')
                    .map(|branch| (!branch.is_empty()).then(|| Branch::of(branch)))
                    .collect();
                return Query {
                    matcher: Matcher::Regex(regex),
                    prefilter: branches,
                };
            }
        }
        match build_cached(pattern) {
            Some(regex) => Query {
                matcher: Matcher::Regex(regex),
                prefilter: None,
            },
            None => Query::literal(pattern),
        }
    }

    fn literal(text: &str) -> Query {
        let folded = fold_str(text);
        let prefilter = Some(vec![Branch::of(text)]);
        if !text.is_empty() && !folded.bytes().any(|b| b == OTHER) {
            return Query {
                matcher: Matcher::Folded(folded),
                prefilter,
            };
        }
        match compile_query_regex(&regex::escape(text)) {
            Some(regex) => Query {
                matcher: Matcher::Regex(regex),
                prefilter,
            },
            // Lowercasing is not case folding, so the folded prefilter does not apply.
            None => Query {
                matcher: Matcher::Lowercase(text.to_lowercase()),
                prefilter: None,
            },
        }
    }

    /// Tools whose haystack may match, from the haystack slices over `tools` tools.
    pub(crate) fn candidates(&self, hay: &Slices, tools: usize) -> Vec<u64> {
        self.union(hay, tools, |branch| &branch.hay)
    }

    /// Tools whose name may match, from the folded-name slices.
    pub(crate) fn name_candidates(&self, names: &Slices, tools: usize) -> Vec<u64> {
        self.union(names, tools, |branch| &branch.name)
    }

    fn union(
        &self,
        slices: &Slices,
        tools: usize,
        features: impl Fn(&Branch) -> &FeatureSet,
    ) -> Vec<u64> {
        let Some(branches) = &self.prefilter else {
            return full_bitmap(tools, slices.words);
        };
        let mut union = vec![0u64; slices.words];
        for branch in branches {
            let hits = slices.candidates(features(branch), tools);
            for (word, bits) in union.iter_mut().zip(hits) {
                *word |= bits;
            }
        }
        union
    }

    /// Whether the pattern matches `text`, whose folded form is `folded`.
    pub(crate) fn is_match(&self, text: &str, folded: &str) -> bool {
        match &self.matcher {
            Matcher::Folded(needle) => {
                find_bytes(folded.as_bytes(), needle.as_bytes(), 0).is_some()
            }
            Matcher::Regex(regex) => regex.is_match(text),
            Matcher::Lowercase(needle) => text.to_lowercase().contains(needle.as_str()),
        }
    }

    /// `len(re.findall(pattern, text))`, `folded` being the folded `text`.
    pub(crate) fn count(&self, text: &str, folded: &str) -> usize {
        match &self.matcher {
            Matcher::Folded(needle) => count_bytes(folded.as_bytes(), needle.as_bytes()),
            Matcher::Regex(regex) => count_matches(regex, text),
            Matcher::Lowercase(needle) => text.to_lowercase().matches(needle.as_str()).count(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn findall_counts_like_python() {
        // Expected counts from CPython 3.11 `len(re.findall(p, t))`.
        for (pattern, text, expected) in [
            ("a*", "baaab", 4),
            ("x*", "axb", 4),
            ("send", "send send send message", 3),
            ("aa", "aaaaa", 2),
            ("", "abc", 4),
        ] {
            let regex = compile_query_regex(pattern).unwrap();
            assert_eq!(count_matches(&regex, text), expected, "{pattern} in {text}");
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod cache_tests {
    use super::*;

    #[test]
    fn a_cached_regex_matches_like_a_fresh_one_and_bad_patterns_stay_literal() {
        for _ in 0..2 {
            let regex = compile_query_regex("SLACK\\d+_(send|post)").unwrap();
            assert!(regex.is_match("slack12_post"));
            assert!(!regex.is_match("slack_post"));
            // Unbalanced: matched literally, from the cache the second time too.
            let literal = compile_query_regex("a(b").unwrap();
            assert!(literal.is_match("xA(Bx"));
            assert!(!literal.is_match("ab"));
        }
        // A repeated query gets the very same regex, and so the match caches (lazy DFA
        // states) the earlier query built; a `Regex` clone would start them empty.
        let first = compile_query_regex("shared\\d+_(send|post)").unwrap();
        let again = compile_query_regex("shared\\d+_(send|post)").unwrap();
        assert!(Arc::ptr_eq(&first, &again));
    }
}
