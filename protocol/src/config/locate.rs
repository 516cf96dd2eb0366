//! Best-effort line and column of a field path in a config file's text, for diagnostics that
//! come after parsing (unknown keys, semantic checks). It walks the text with serde and stops
//! with a marker error at the target: the parser stamps that error with its position, which
//! is exact for YAML and, for JSON, is moved back to the key's opening quote.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::diagnostics::{FieldPath, Location, PathSegment};

/// The two text formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Yaml,
    Json,
}

const FOUND: &str = "antler-config-locate: found";
const MISSING: &str = "antler-config-locate: missing";

/// The location of the last key of `path` (or of the element, for a final index).
pub(crate) fn locate(text: &str, format: Format, path: &FieldPath) -> Option<Location> {
    if path.is_root() {
        return None;
    }
    let seek = Seek {
        path: path.segments(),
    };
    match format {
        Format::Yaml => {
            let error = seek
                .deserialize(serde_yaml::Deserializer::from_str(text))
                .err()?;
            if !error.to_string().contains(FOUND) {
                return None;
            }
            error.location().map(|l| Location {
                line: l.line(),
                column: l.column(),
            })
        }
        Format::Json => {
            let mut deserializer = serde_json::Deserializer::from_str(text);
            let error = seek.deserialize(&mut deserializer).err()?;
            if !error.to_string().contains(FOUND) || error.line() == 0 {
                return None;
            }
            let location = Location {
                line: error.line(),
                column: error.column(),
            };
            match path.segments().last() {
                Some(PathSegment::Key(key)) => Some(json_key_start(text, location, key)),
                _ => Some(location),
            }
        }
    }
}

/// The location of `path`, or of its nearest ancestor that exists in the text.
pub(crate) fn locate_nearest(text: &str, format: Format, path: &FieldPath) -> Option<Location> {
    let mut current = Some(path.clone());
    while let Some(candidate) = current {
        if let Some(location) = locate(text, format, &candidate) {
            return Some(location);
        }
        current = candidate.parent();
    }
    None
}

/// serde_json reports a key's position just past its closing quote; find its opening quote.
fn json_key_start(text: &str, at: Location, key: &str) -> Location {
    let Some(line) = text.lines().nth(at.line - 1) else {
        return at;
    };
    let quoted = match serde_json::to_string(key) {
        Ok(q) => q,
        Err(_) => return at,
    };
    let prefix: String = line.chars().take(at.column).collect();
    match prefix.rfind(&quoted) {
        Some(byte) => Location {
            line: at.line,
            column: prefix[..byte].chars().count() + 1,
        },
        None => at,
    }
}

/// Walks to `path`; fails with `FOUND` at the target and `MISSING` when it is absent.
struct Seek<'p> {
    path: &'p [PathSegment],
}

impl<'de> DeserializeSeed<'de> for Seek<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl Seek<'_> {
    fn leaf<E: de::Error>(&self) -> Result<(), E> {
        Err(E::custom(if self.path.is_empty() {
            FOUND
        } else {
            MISSING
        }))
    }
}

macro_rules! leaf_visits {
    ($($name:ident: $ty:ty),*) => {
        $(fn $name<E: de::Error>(self, _: $ty) -> Result<(), E> { self.leaf() })*
    };
}

impl<'de> Visitor<'de> for Seek<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any value")
    }

    leaf_visits!(visit_bool: bool, visit_i64: i64, visit_u64: u64, visit_f64: f64,
        visit_str: &str, visit_bytes: &[u8]);

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.leaf()
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.leaf()
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_enum<A: de::EnumAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        self.leaf()
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some((PathSegment::Key(target), rest)) = self.path.split_first() else {
            return self.leaf();
        };
        let last = rest.is_empty();
        while let Some(matched) = map.next_key_seed(KeyProbe { target, last })? {
            if matched {
                return map.next_value_seed(Seek { path: rest });
            }
            map.next_value::<IgnoredAny>()?;
        }
        Err(de::Error::custom(MISSING))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some((PathSegment::Index(target), rest)) = self.path.split_first() else {
            return self.leaf();
        };
        for _ in 0..*target {
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Err(de::Error::custom(MISSING));
            }
        }
        // `Seek` always fails at its target, so reaching here means the index is absent.
        seq.next_element_seed(Seek { path: rest })?;
        Err(de::Error::custom(MISSING))
    }
}

/// Reads one mapping key: `true` when it is the target, and fails with `FOUND` (positioned
/// at the key) when it is the target and the last segment.
struct KeyProbe<'t> {
    target: &'t str,
    last: bool,
}

impl KeyProbe<'_> {
    fn check<E: de::Error>(&self, key: &str) -> Result<bool, E> {
        match (key == self.target, self.last) {
            (true, true) => Err(E::custom(FOUND)),
            (matched, _) => Ok(matched),
        }
    }
}

impl<'de> DeserializeSeed<'de> for KeyProbe<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for KeyProbe<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a mapping key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<bool, E> {
        self.check(v)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<bool, E> {
        self.check(&v.to_string())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<bool, E> {
        self.check(&v.to_string())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<bool, E> {
        self.check(&v.to_string())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<bool, E> {
        self.check(&v.to_string())
    }

    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(line: usize, column: usize) -> Option<Location> {
        Some(Location { line, column })
    }

    #[test]
    fn yaml_keys_and_elements() {
        let text = "a: 1\ntools:\n  - name: x\n    group: web\n  - name: y\n    grop: web\n";
        let tools = FieldPath::root().key("tools");
        assert_eq!(locate(text, Format::Yaml, &tools), at(2, 1));
        assert_eq!(
            locate(text, Format::Yaml, &tools.index(1).key("grop")),
            at(6, 5)
        );
        assert_eq!(locate(text, Format::Yaml, &tools.index(1)), at(5, 5));
        assert_eq!(locate(text, Format::Yaml, &tools.index(2)), None);
        assert_eq!(
            locate(text, Format::Yaml, &tools.index(0).key("nope")),
            None
        );
        assert_eq!(
            locate_nearest(text, Format::Yaml, &tools.index(0).key("nope")),
            at(3, 5)
        );
    }

    #[test]
    fn json_keys_point_at_the_opening_quote() {
        let text =
            "{\n  \"mcpServers\": {\n    \"a\": {\"type\": \"stdio\"},\n    \"b\": {}\n  }\n}";
        let servers = FieldPath::root().key("mcpServers");
        assert_eq!(locate(text, Format::Json, &servers), at(2, 3));
        assert_eq!(locate(text, Format::Json, &servers.key("b")), at(4, 5));
        assert_eq!(
            locate(text, Format::Json, &servers.key("a").key("type")),
            at(3, 11)
        );
    }
}
