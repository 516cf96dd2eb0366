//! Tests of the prefilter: bitmaps, folding and the byte searches, checked against the
//! query regexes `matcher` compiles.

use super::*;
use crate::catalog::matcher::compile_query_regex;
use regex::RegexBuilder;

#[test]
fn transpose_moves_every_bit_to_its_mirror() {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut a = [0u64; 64];
    for row in &mut a {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        *row = state;
    }
    let original = a;
    transpose64(&mut a);
    for (r, row) in original.iter().enumerate() {
        for (c, col) in a.iter().enumerate() {
            assert_eq!(row >> c & 1, col >> r & 1, "bit ({r}, {c})");
        }
    }
}

#[test]
fn stored_rows_answer_like_per_bit_writes() {
    let tools = 150;
    let rows: Vec<ToolFeatures> = (0..tools)
        .map(|i| ToolFeatures::of_tool(&format!("srv{}_tool{i}", i % 3), "Sends a message"))
        .collect();
    let mut slices = Slices::new(HAY_SLICES, tools);
    for (block, chunk) in rows.chunks(64).enumerate() {
        let mut block_rows = [[0u64; HAY_WORDS]; 64];
        for (t, features) in chunk.iter().enumerate() {
            block_rows[t] = features.hay;
        }
        slices.store_rows(block, &block_rows);
    }
    for needle in ["srv1", "tool14", "message", "zzz"] {
        let features = FeatureSet::of_folded(needle.as_bytes());
        let candidates: Vec<usize> = iter_bits(&slices.candidates(&features, tools)).collect();
        let brute: Vec<usize> = (0..tools)
            .filter(|&t| {
                features
                    .iter()
                    .all(|s| rows[t].hay[s / 64] >> (s % 64) & 1 == 1)
            })
            .collect();
        assert_eq!(candidates, brute, "{needle}");
    }
    let srv1: Vec<usize> =
        iter_bits(&slices.candidates(&FeatureSet::of_folded(b"srv1"), tools)).collect();
    assert!((1..tools).step_by(3).all(|t| srv1.contains(&t)));
}

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
