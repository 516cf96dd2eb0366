//! Python `json.dumps` output, byte for byte, written by hand into a caller's `String`.
//! Three shapes: compact with `sort_keys=True` and the default `", "` / `": "` separators
//! (the catalog hash blob), the same in insertion order (langchain's content for a tool
//! that returns a dict), and `indent=2` in insertion order (the `tool_search` result).
//! Both are `ensure_ascii=False`: non-ASCII stays as is, while `"`, `\` and control
//! characters are escaped as CPython does (`\n`-style short forms, else `\u00XX`).

use std::fmt::Write as _;

use serde_json::{Number, Value};

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The escape CPython writes for `byte`, if it needs one; `""` means `\u00XX`.
fn escape_of(byte: u8) -> Option<&'static str> {
    match byte {
        b'"' => Some("\\\""),
        b'\\' => Some("\\\\"),
        b'\n' => Some("\\n"),
        b'\r' => Some("\\r"),
        b'\t' => Some("\\t"),
        0x08 => Some("\\b"),
        0x0c => Some("\\f"),
        0x00..=0x1f => Some(""),
        _ => None,
    }
}

/// Whether any of the 8 bytes is a control character, `"` or `\` (exact, SWAR).
fn word_needs_escape(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let has_zero = |w: u64| w.wrapping_sub(ONES) & !w & HIGH;
    let control = word.wrapping_sub(ONES * 0x20) & !word & HIGH;
    let quote = has_zero(word ^ (ONES * u64::from(b'"')));
    let backslash = has_zero(word ^ (ONES * u64::from(b'\\')));
    control | quote | backslash != 0
}

/// Whether `text` has anything CPython would escape, checked eight bytes at a time: the
/// last word overlaps the previous one, and a short text is padded with spaces (which
/// need no escape), assembled by shifts so no variable-length copy is involved.
fn needs_escape(text: &[u8]) -> bool {
    let word_at = |at: usize| {
        let mut word = [0u8; 8];
        word.copy_from_slice(&text[at..at + 8]);
        u64::from_le_bytes(word)
    };
    if text.len() < 8 {
        let mut word = u64::from_le_bytes([b' '; 8]);
        for (i, &byte) in text.iter().enumerate() {
            word ^= u64::from(byte ^ b' ') << (8 * i);
        }
        return word_needs_escape(word);
    }
    (0..text.len() / 8).any(|i| word_needs_escape(word_at(i * 8)))
        || word_needs_escape(word_at(text.len() - 8))
}

/// Writes `text` as a JSON string literal, escaped as CPython's encoder does.
pub(crate) fn write_str(out: &mut String, text: &str) {
    out.reserve(text.len() + 2);
    out.push('"');
    if !needs_escape(text.as_bytes()) {
        out.push_str(text);
        out.push('"');
        return;
    }
    let mut start = 0;
    for (i, &byte) in text.as_bytes().iter().enumerate() {
        if let Some(short) = escape_of(byte) {
            // Every escaped byte is ASCII, so `i` is a char boundary.
            out.push_str(&text[start..i]);
            if short.is_empty() {
                out.push_str("\\u00");
                out.push(char::from(HEX[usize::from(byte >> 4)]));
                out.push(char::from(HEX[usize::from(byte & 0x0f)]));
            } else {
                out.push_str(short);
            }
            start = i + 1;
        }
    }
    out.push_str(&text[start..]);
    out.push('"');
}

/// Writes a number as Python prints it: integers in decimal, floats as `repr(float)`.
pub(crate) fn write_number(out: &mut String, number: &Number) {
    // Writing into a `String` cannot fail.
    if let Some(int) = number.as_i64() {
        let _ = write!(out, "{int}");
    } else if let Some(uint) = number.as_u64() {
        let _ = write!(out, "{uint}");
    } else if let Some(float) = number.as_f64() {
        write_py_float(out, float);
    }
}

/// `repr(float)`: the shortest round-tripping digits, positional when the decimal
/// exponent is in [-4, 16), scientific (`1e+16`, `1e-05`) otherwise.
pub(crate) fn write_py_float(out: &mut String, value: f64) {
    if value.is_nan() {
        out.push_str("NaN");
        return;
    }
    if value.is_infinite() {
        out.push_str(if value > 0.0 { "Infinity" } else { "-Infinity" });
        return;
    }
    // `{:e}` prints the shortest round-tripping digits, e.g. `-1.2345e-5`.
    let mut sci = String::with_capacity(24);
    let _ = write!(sci, "{value:e}");
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (negative, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if negative {
        out.push('-');
    }
    let point = exponent + 1;
    if !(-3..=16).contains(&point) {
        let (first, rest) = digits.split_at(1);
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        out.push('e');
        out.push(if exponent < 0 { '-' } else { '+' });
        let magnitude = exponent.unsigned_abs();
        if magnitude < 10 {
            out.push('0');
        }
        let _ = write!(out, "{magnitude}");
    } else if point <= 0 {
        out.push_str("0.");
        for _ in 0..-point {
            out.push('0');
        }
        out.push_str(&digits);
    } else {
        let point = point as usize;
        if point >= digits.len() {
            out.push_str(&digits);
            for _ in digits.len()..point {
                out.push('0');
            }
            out.push_str(".0");
        } else {
            out.push_str(&digits[..point]);
            out.push('.');
            out.push_str(&digits[point..]);
        }
    }
}

/// Compact, key-sorted writer (`json.dumps(v, sort_keys=True)`). The scratch vector is
/// reused for every object so sorting keys allocates nothing once it has grown.
#[derive(Default)]
pub(crate) struct SortedCompact<'a> {
    scratch: Vec<Key<'a>>,
}

/// An object entry with its key's first eight bytes, zero-padded, as a big-endian
/// integer: comparing prefixes orders most keys without touching their bytes again.
#[derive(Clone, Copy)]
struct Key<'a> {
    prefix: u64,
    key: &'a str,
    value: &'a Value,
}

impl<'a> Key<'a> {
    fn new(key: &'a str, value: &'a Value) -> Self {
        let mut prefix = 0u64;
        for (i, &byte) in key.as_bytes().iter().take(8).enumerate() {
            prefix |= u64::from(byte) << (56 - 8 * i);
        }
        Key { prefix, key, value }
    }

    /// `self.key.cmp(other.key)`: zero padding sorts a proper prefix first, as the full
    /// byte comparison does, so equal prefixes are the only case that needs it.
    fn order(&self, other: &Key<'_>) -> std::cmp::Ordering {
        self.prefix
            .cmp(&other.prefix)
            .then_with(|| self.key.cmp(other.key))
    }
}

impl<'a> SortedCompact<'a> {
    pub(crate) fn write(&mut self, out: &mut String, value: &'a Value) {
        match value {
            Value::Null => out.push_str("null"),
            Value::Bool(true) => out.push_str("true"),
            Value::Bool(false) => out.push_str("false"),
            Value::Number(number) => write_number(out, number),
            Value::String(text) => write_str(out, text),
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    self.write(out, item);
                }
                out.push(']');
            }
            Value::Object(object) => {
                let start = self.scratch.len();
                self.scratch
                    .extend(object.iter().map(|(key, value)| Key::new(key, value)));
                let end = self.scratch.len();
                sort_keys(&mut self.scratch[start..end]);
                out.push('{');
                for i in start..end {
                    let Key { key, value, .. } = self.scratch[i];
                    if i > start {
                        out.push_str(", ");
                    }
                    write_str(out, key);
                    out.push_str(": ");
                    // Nested objects push above `end` and truncate back to it.
                    self.write(out, value);
                }
                self.scratch.truncate(start);
                out.push('}');
            }
        }
    }
}

/// Sorts an object's entries by key. Byte order is code point order for UTF-8, which is
/// how Python sorts `str`. Objects are small, so an insertion sort wins over the general
/// sort below 17 entries.
fn sort_keys(entries: &mut [Key<'_>]) {
    if entries.len() > 16 {
        entries.sort_unstable_by(Key::order);
        return;
    }
    for i in 1..entries.len() {
        let mut j = i;
        while j > 0 && entries[j - 1].order(&entries[j]).is_gt() {
            entries.swap(j - 1, j);
            j -= 1;
        }
    }
}

/// `json.dumps(v)` in insertion order: the `", "` / `": "` separators, one line.
pub(crate) fn write_compact(out: &mut String, value: &Value) {
    match value {
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_compact(out, item);
            }
            out.push(']');
        }
        Value::Object(object) => {
            out.push('{');
            for (i, (key, item)) in object.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_str(out, key);
                out.push_str(": ");
                write_compact(out, item);
            }
            out.push('}');
        }
        scalar => SortedCompact::default().write(out, scalar),
    }
}

/// `json.dumps(v, indent=2)` in insertion order, for a value that starts at nesting
/// `level` (the caller has already written that line's indentation).
pub(crate) fn write_pretty(out: &mut String, value: &Value, level: usize) {
    match value {
        Value::Array(items) if !items.is_empty() => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                out.push_str(if i > 0 { ",\n" } else { "\n" });
                push_indent(out, level + 1);
                write_pretty(out, item, level + 1);
            }
            out.push('\n');
            push_indent(out, level);
            out.push(']');
        }
        Value::Object(object) if !object.is_empty() => {
            out.push('{');
            for (i, (key, item)) in object.iter().enumerate() {
                out.push_str(if i > 0 { ",\n" } else { "\n" });
                push_indent(out, level + 1);
                write_str(out, key);
                out.push_str(": ");
                write_pretty(out, item, level + 1);
            }
            out.push('\n');
            push_indent(out, level);
            out.push('}');
        }
        Value::Array(_) => out.push_str("[]"),
        Value::Object(_) => out.push_str("{}"),
        scalar => SortedCompact::default().write(out, scalar),
    }
}

pub(crate) fn push_indent(out: &mut String, level: usize) {
    for _ in 0..level {
        out.push_str("  ");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn compact(value: &Value) -> String {
        let mut out = String::new();
        SortedCompact::default().write(&mut out, value);
        out
    }

    #[test]
    fn floats_print_like_python_repr() {
        // Expected strings printed by CPython 3.11 `json.dumps`.
        let cases = [
            (1.0, "1.0"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-0.0, "-0.0"),
            (1.5e300, "1.5e+300"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1e22, "1e+22"),
            (5e-324, "5e-324"),
            (123.456, "123.456"),
            (-2.5, "-2.5"),
        ];
        for (value, expected) in cases {
            let mut out = String::new();
            write_py_float(&mut out, value);
            assert_eq!(out, expected, "{value}");
        }
    }

    #[test]
    fn strings_escape_like_cpython_with_ensure_ascii_false() {
        let value = json!({"a": "\u{1}\u{1f}\u{7f}\"\\/\u{2028}é\u{8}\u{c}\n\r\t"});
        // CPython: {"a": "\u0001\u001f<DEL>\"\\/<U+2028>é\b\f\n\r\t"}
        assert_eq!(
            compact(&value),
            "{\"a\": \"\\u0001\\u001f\u{7f}\\\"\\\\/\u{2028}é\\b\\f\\n\\r\\t\"}"
        );
    }

    #[test]
    fn escaping_finds_specials_at_every_offset() {
        for special in ['"', '\\', '\n', '\u{1}', '\u{1f}'] {
            for at in 0..20 {
                let mut text: String = "é".repeat(2) + &"a".repeat(at);
                text.push(special);
                text.push_str("tail ~\u{7f}");
                let mut ours = String::new();
                write_str(&mut ours, &text);
                let mut naive = String::from("\"");
                for c in text.chars() {
                    match c {
                        '"' => naive.push_str("\\\""),
                        '\\' => naive.push_str("\\\\"),
                        '\n' => naive.push_str("\\n"),
                        c if (c as u32) < 0x20 => naive.push_str(&format!("\\u{:04x}", c as u32)),
                        c => naive.push(c),
                    }
                }
                naive.push('"');
                assert_eq!(ours, naive, "{special:?} at {at}");
            }
        }
    }

    #[test]
    fn key_order_is_byte_order() {
        let keys = [
            "",
            "a",
            "a\u{0}",
            "a\u{0}b",
            "a\u{1}",
            "ab",
            "abcdefgh",
            "abcdefgh\u{0}",
            "abcdefghi",
            "abcdefgz",
            "b",
            "é",
            "z",
            "Z",
            "type",
            "title",
            "\u{10000}",
        ];
        let null = Value::Null;
        for a in keys {
            for b in keys {
                assert_eq!(
                    Key::new(a, &null).order(&Key::new(b, &null)),
                    a.cmp(b),
                    "{a:?} vs {b:?}"
                );
            }
        }
        let values: Vec<Value> = (0..40).map(Value::from).collect();
        let names: Vec<String> = (0..40).map(|i| format!("k{}", (i * 7919) % 40)).collect();
        for n in [3, 16, 17, 40] {
            let mut entries: Vec<Key<'_>> = names[..n]
                .iter()
                .zip(&values)
                .map(|(k, v)| Key::new(k, v))
                .collect();
            sort_keys(&mut entries);
            assert!(entries.windows(2).all(|w| w[0].key < w[1].key));
        }
    }

    #[test]
    fn compact_sorts_keys_recursively_and_keeps_ints() {
        let value = json!({"b": [1, {"z": null, "a": true}], "a": 2.0, "é": "x", "Z": -3});
        assert_eq!(
            compact(&value),
            "{\"Z\": -3, \"a\": 2.0, \"b\": [1, {\"a\": true, \"z\": null}], \"é\": \"x\"}"
        );
    }

    #[test]
    fn insertion_order_compact_matches_python_dumps() {
        // json.dumps({"files": [], "b": {"z": 1, "a": [True, None]}, "é": "x\n"}, ensure_ascii=False)
        let value = json!({"files": [], "b": {"z": 1, "a": [true, null]}, "é": "x\n"});
        let mut out = String::new();
        write_compact(&mut out, &value);
        assert_eq!(
            out,
            "{\"files\": [], \"b\": {\"z\": 1, \"a\": [true, null]}, \"é\": \"x\\n\"}"
        );
    }

    #[test]
    fn pretty_matches_python_indent_2() {
        let value = json!({"a": [], "b": {}, "c": [1, {"d": []}]});
        let mut out = String::new();
        write_pretty(&mut out, &value, 0);
        assert_eq!(
            out,
            "{\n  \"a\": [],\n  \"b\": {},\n  \"c\": [\n    1,\n    {\n      \"d\": []\n    }\n  ]\n}"
        );
    }
}
