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

    /// Stores the features of the (up to) 64 tools of block `block`, given per tool as
    /// rows (`rows[t]` bit `s` of word `w`: tool `64 * block + t` has feature
    /// `64 * w + s`); missing tools are zero rows. Each 64x64 tile is transposed in
    /// registers, so a block costs a few hundred word operations, not one per feature.
    pub(crate) fn store_rows<const W: usize>(&mut self, block: usize, rows: &[[u64; W]; 64]) {
        let mut tile = [0u64; 64];
        for w in 0..W {
            for (t, row) in rows.iter().enumerate() {
                tile[t] = row[w];
            }
            transpose64(&mut tile);
            for (s, &bits) in tile.iter().enumerate() {
                self.bits[(64 * w + s) * self.words + block] = bits;
            }
        }
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.bits.capacity() * 8
    }
}

/// Transposes a 64x64 bit matrix in place: bit `c` of `a[r]` moves to bit `r` of `a[c]`
/// (recursive block swaps, as in Hacker's Delight 7-3, for least-significant-bit-first
/// columns).
fn transpose64(a: &mut [u64; 64]) {
    let mut j = 32;
    let mut mask: u64 = 0x0000_0000_FFFF_FFFF;
    while j != 0 {
        let mut k = 0;
        while k < 64 {
            let t = ((a[k] >> j) ^ a[k + j]) & mask;
            a[k] ^= t << j;
            a[k + j] ^= t;
            k = (k + j + 1) & !j;
        }
        j >>= 1;
        mask ^= mask << j;
    }
}

/// Words of a tool's haystack feature row.
pub(crate) const HAY_WORDS: usize = HAY_SLICES / 64;
/// Words of a tool's name feature rows.
pub(crate) const NAME_WORDS: usize = NAME_SLICES / 64;

/// One tool's features, as rows over the slice numbers: what a search index stores for
/// the tool. Computed once per tool (for MCP tools, when their listing is ingested) and
/// transposed into an index's slices when a catalog is built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ToolFeatures {
    pub(crate) hay: [u64; HAY_WORDS],
    pub(crate) folded_name: [u64; NAME_WORDS],
    pub(crate) lower_name: [u64; NAME_WORDS],
}

impl ToolFeatures {
    /// The features of a tool whose folded haystack is `folded` (its first
    /// `folded_name_len` bytes being the folded name) and whose lowercased name is
    /// `lower_name`.
    pub(crate) fn of_texts(folded: &[u8], folded_name_len: usize, lower_name: &str) -> Self {
        let mut features = ToolFeatures {
            hay: [0; HAY_WORDS],
            folded_name: [0; NAME_WORDS],
            lower_name: [0; NAME_WORDS],
        };
        hay_slots(folded, |slot| set_bit(&mut features.hay, slot));
        name_slots(
            folded[..folded_name_len].iter().map(|&b| u32::from(b)),
            |slot| set_bit(&mut features.folded_name, slot),
        );
        name_slots(lower_name.chars().map(u32::from), |slot| {
            set_bit(&mut features.lower_name, slot)
        });
        features
    }

    /// The features of `name` and `description`, as an index computes them.
    pub(crate) fn of_tool(name: &str, description: &str) -> Self {
        let mut folded = String::with_capacity(name.len() + 1 + description.len());
        fold_into(&mut folded, name);
        folded.push(' ');
        fold_into(&mut folded, description);
        let mut lower = String::with_capacity(name.len());
        lowercase_into(&mut lower, name);
        Self::of_texts(folded.as_bytes(), name.chars().count(), &lower)
    }
}

fn set_bit<const W: usize>(row: &mut [u64; W], slot: usize) {
    row[slot / 64] |= 1 << (slot % 64);
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
#[path = "prefilter_tests.rs"]
mod tests;
