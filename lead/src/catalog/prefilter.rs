//! The search prefilter: case folding that agrees with the `regex` crate's case-insensitive
//! matching, and bit-sliced signatures of each tool's single characters, character pairs
//! and character triples (one bitmap over tools per feature). A query's candidates are the AND of its
//! features' bitmaps; every feature is a necessary condition of a match, so a candidate
//! set never misses a real match, it only spares verifying the others.

/// The byte a folded haystack holds for a character that can only match non-ASCII text.
pub(crate) const OTHER: u8 = 0;

/// Folds a character so that whenever a case-insensitive `regex` matches query char `q`
/// against text char `t`, `fold(q) == fold(t)`. Under simple case folding the only
/// non-ASCII characters equal to ASCII ones are U+017F (s) and U+212A (k); every other
/// non-ASCII character folds to [`OTHER`].
pub(crate) fn fold(c: char) -> u8 {
    if c.is_ascii() {
        (c as u8).to_ascii_lowercase()
    } else {
        match c {
            '\u{17f}' => b's',
            '\u{212a}' => b'k',
            _ => OTHER,
        }
    }
}

/// Appends the folded `text`; ASCII runs are copied and lowercased in place.
pub(crate) fn fold_into(out: &mut String, text: &str) {
    let mut rest = text;
    while !rest.is_empty() {
        let ascii = rest.bytes().take_while(u8::is_ascii).count();
        let start = out.len();
        out.push_str(&rest[..ascii]);
        out[start..].make_ascii_lowercase();
        rest = &rest[ascii..];
        if let Some(c) = rest.chars().next() {
            out.push(char::from(fold(c)));
            rest = &rest[c.len_utf8()..];
        }
    }
}

/// Appends `text.lower()`, with the same fast path for ASCII text.
pub(crate) fn lowercase_into(out: &mut String, text: &str) {
    if text.is_ascii() {
        let start = out.len();
        out.push_str(text);
        out[start..].make_ascii_lowercase();
    } else {
        // `str::to_lowercase` maps a word-final Σ to ς, as Python's `str.lower` does.
        out.push_str(&text.to_lowercase());
    }
}

/// The first occurrence of `needle` (non-empty) in `hay` at or after `from`: a SWAR scan
/// for the needle's first byte, then a comparison. No per-call setup, which matters for
/// the short needles and texts of a search.
pub(crate) fn find_bytes(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let (&first, rest) = needle.split_first()?;
    let last_start = hay.len().checked_sub(needle.len())?;
    let spread = ONES * u64::from(first);
    let mut at = from;
    while at <= last_start {
        // Find the next position of `first` in hay[at..=last_start].
        let found = if let Some(chunk) = hay.get(at..at + 8) {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            let x = u64::from_le_bytes(word) ^ spread;
            let zero = x.wrapping_sub(ONES) & !x & HIGH;
            if zero == 0 {
                at += 8;
                continue;
            }
            at + (zero.trailing_zeros() / 8) as usize
        } else if hay[at] == first {
            at
        } else {
            at += 1;
            continue;
        };
        if found > last_start {
            return None;
        }
        if hay[found + 1..found + needle.len()] == *rest {
            return Some(found);
        }
        at = found + 1;
    }
    None
}

/// Non-overlapping occurrences of `needle` (non-empty) in `hay`, left to right.
pub(crate) fn count_bytes(hay: &[u8], needle: &[u8]) -> usize {
    let mut count = 0;
    let mut at = 0;
    while let Some(found) = find_bytes(hay, needle, at) {
        count += 1;
        at = found + needle.len();
    }
    count
}

pub(crate) fn fold_str(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    fold_into(&mut out, text);
    out
}

/// Haystack features: 128 single folded bytes, 256 hashed byte pairs, 512 hashed byte
/// triples (triples keep common words selective: every pair of "send" is common).
pub(crate) const HAY_SLICES: usize = 128 + 256 + 512;
/// Name features (folded, and lowercased): 64 hashed chars, 64 hashed pairs.
pub(crate) const NAME_SLICES: usize = 128;

fn pair_slot(a: u32, b: u32, bits: u32) -> usize {
    (((a << 11) ^ b).wrapping_mul(0x9E37_79B1) >> (32 - bits)) as usize
}

fn triple_slot(a: u8, b: u8, c: u8) -> usize {
    let key = u32::from(a) << 16 | u32::from(b) << 8 | u32::from(c);
    (key.wrapping_mul(0x85EB_CA6B) >> (32 - 9)) as usize
}

/// Features of folded text for the haystack slices.
pub(crate) fn hay_slots(folded: &[u8], mut emit: impl FnMut(usize)) {
    for (i, &byte) in folded.iter().enumerate() {
        emit(usize::from(byte & 0x7f));
        if i >= 1 {
            emit(128 + pair_slot(u32::from(folded[i - 1]), u32::from(byte), 8));
        }
        if i >= 2 {
            emit(384 + triple_slot(folded[i - 2], folded[i - 1], byte));
        }
    }
}

/// Features of a name (folded bytes or lowercased chars) for the name slices.
pub(crate) fn name_slots(chars: impl Iterator<Item = u32>, mut emit: impl FnMut(usize)) {
    let mut prev: Option<u32> = None;
    for c in chars {
        emit(pair_slot(c, 0x5bd1, 6));
        if let Some(p) = prev {
            emit(64 + pair_slot(p, c, 6));
        }
        prev = Some(c);
    }
}

/// A bit-sliced signature index: slice `s` is a bitmap over tools of "tool has feature
/// `s`", so the candidates for a needle are the AND of its features' slices. Features
/// are necessary conditions of a match, so candidates never miss a real match.
pub(crate) struct Slices {
    pub(crate) words: usize,
    bits: Vec<u64>,
}

impl Slices {
    pub(crate) fn new(slices: usize, tools: usize) -> Self {
        let words = tools.div_ceil(64);
        Slices {
            words,
            bits: vec![0; slices * words],
        }
    }

    /// Stores the features of the 64 tools of block `block` (`features[s]` has bit `t`
    /// when tool `64 * block + t` has feature `s`).
    pub(crate) fn store_block(&mut self, block: usize, features: &[u64]) {
        for (slice, &bits) in features.iter().enumerate() {
            self.bits[slice * self.words + block] = bits;
        }
    }

    /// Tools having every feature in `features` (all tools when it is empty).
    pub(crate) fn candidates(&self, features: &FeatureSet, tools: usize) -> Vec<u64> {
        let mut acc = full_bitmap(tools, self.words);
        for feature in features.iter() {
            let slice = &self.bits[feature * self.words..(feature + 1) * self.words];
            for (word, bits) in acc.iter_mut().zip(slice) {
                *word &= *bits;
            }
        }
        acc
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.bits.capacity() * 8
    }
}

pub(crate) fn full_bitmap(tools: usize, words: usize) -> Vec<u64> {
    let mut bitmap = vec![u64::MAX; words];
    if !tools.is_multiple_of(64) {
        if let Some(last) = bitmap.last_mut() {
            *last = (1u64 << (tools % 64)) - 1;
        }
    }
    bitmap
}

pub(crate) fn has_bit(bitmap: &[u64], position: usize) -> bool {
    bitmap[position / 64] >> (position % 64) & 1 == 1
}

pub(crate) fn iter_bits(bitmap: &[u64]) -> impl Iterator<Item = usize> + '_ {
    bitmap.iter().enumerate().flat_map(|(w, &word)| {
        let mut rest = word;
        std::iter::from_fn(move || {
            (rest != 0).then(|| {
                let bit = rest.trailing_zeros() as usize;
                rest &= rest - 1;
                w * 64 + bit
            })
        })
    })
}

/// The features a needle needs, as a small bitmask over slice numbers.
#[derive(Clone, Default)]
pub(crate) struct FeatureSet([u64; HAY_SLICES / 64]);

impl FeatureSet {
    pub(crate) fn insert(&mut self, slot: usize) {
        self.0[slot / 64] |= 1 << (slot % 64);
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        iter_bits(&self.0)
    }

    pub(crate) fn of_folded(folded: &[u8]) -> Self {
        let mut set = FeatureSet::default();
        hay_slots(folded, |slot| set.insert(slot));
        set
    }

    pub(crate) fn of_name(chars: impl Iterator<Item = u32>) -> Self {
        let mut set = FeatureSet::default();
        name_slots(chars, |slot| set.insert(slot));
        set
    }
}

/// Features one alternative of a pattern needs, in the haystack and (for a match
/// inside the name) in the folded name.
pub(crate) struct Branch {
    pub(crate) hay: FeatureSet,
    pub(crate) name: FeatureSet,
}

impl Branch {
    pub(crate) fn of(literal: &str) -> Branch {
        let folded = fold_str(literal);
        Branch {
            hay: FeatureSet::of_folded(folded.as_bytes()),
            name: FeatureSet::of_name(folded.bytes().map(u32::from)),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::catalog::matcher::compile_query_regex;
    use regex::RegexBuilder;

    #[test]
    fn byte_search_agrees_with_str_search() {
        let hays = [
            "",
            "a",
            "send send  send",
            "xxsenxsendsend",
            "ababababa",
            "aaaaaaaaaaaaaaaaaaaaab",
        ];
        let needles = ["a", "ab", "aba", "send", "sendsend", "b", "aab", "x"];
        for hay in hays {
            for needle in needles {
                let expected_first = hay.find(needle);
                assert_eq!(
                    find_bytes(hay.as_bytes(), needle.as_bytes(), 0),
                    expected_first
                );
                assert_eq!(
                    count_bytes(hay.as_bytes(), needle.as_bytes()),
                    hay.matches(needle).count(),
                    "{needle:?} in {hay:?}"
                );
            }
        }
    }

    #[test]
    fn folding_agrees_with_case_insensitive_regex_for_every_char() {
        // Every char a case-insensitive ASCII class matches must fold to ASCII.
        let ascii = RegexBuilder::new(r"[\x00-\x7F]")
            .case_insensitive(true)
            .build()
            .unwrap();
        let mut buf = [0u8; 4];
        for c in (0x80u32..0x11_0000).filter_map(char::from_u32) {
            if ascii.is_match(c.encode_utf8(&mut buf)) {
                assert_ne!(fold(c), OTHER, "{c:?} matches ASCII but folds to OTHER");
            }
        }
        // And the two that do fold to the letter they match.
        assert!(compile_query_regex("slack")
            .unwrap()
            .is_match("\u{17f}lac\u{212a}"));
        assert_eq!(fold_str("\u{17f}LAC\u{212a}"), "slack");
    }
}
