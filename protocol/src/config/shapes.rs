//! Value shapes both config files share: `NamedMap` (a string-keyed map in file order),
//! `str | [str]` lists, and sections that may be written as `null`.
//! `NamedMap` keeps DeerFlow's dict semantics: file order, and a repeated key replaces
//! the earlier value in place. Every deserializer here streams, so errors keep their location.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// A string-keyed map that keeps the order of the file, as DeerFlow's Python dicts do.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedMap<V> {
    entries: Vec<(String, V)>,
}

impl<V> Default for NamedMap<V> {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
        }
    }
}

impl<V> NamedMap<V> {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// The value under `name`.
    pub fn get(&self, name: &str) -> Option<&V> {
        self.entries.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    /// The value under `name`, mutably.
    pub fn get_mut(&mut self, name: &str) -> Option<&mut V> {
        self.entries
            .iter_mut()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
    }

    /// Whether `name` is present.
    pub fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Sets `name`; an existing entry keeps its position. Returns the replaced value.
    pub fn insert(&mut self, name: impl Into<String>, value: V) -> Option<V> {
        let name = name.into();
        match self.get_mut(&name) {
            Some(slot) => Some(std::mem::replace(slot, value)),
            None => {
                self.entries.push((name, value));
                None
            }
        }
    }

    /// Removes `name`, keeping the order of the others.
    pub fn remove(&mut self, name: &str) -> Option<V> {
        let index = self.entries.iter().position(|(k, _)| k == name)?;
        Some(self.entries.remove(index).1)
    }

    /// Entries in file order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Names in file order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(k, _)| k.as_str())
    }

    /// Values in file order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.entries.iter().map(|(_, v)| v)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the map has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl<V> FromIterator<(String, V)> for NamedMap<V> {
    fn from_iter<I: IntoIterator<Item = (String, V)>>(iter: I) -> Self {
        let mut map = Self::new();
        for (k, v) in iter {
            map.insert(k, v);
        }
        map
    }
}

impl<V> IntoIterator for NamedMap<V> {
    type Item = (String, V);
    type IntoIter = std::vec::IntoIter<(String, V)>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for NamedMap<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MapVisitor<V>(PhantomData<V>);

        impl<'de, V: Deserialize<'de>> Visitor<'de> for MapVisitor<V> {
            type Value = NamedMap<V>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a mapping of names to entries")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
                let mut map = NamedMap::new();
                while let Some((key, value)) = access.next_entry::<String, V>()? {
                    map.insert(key, value);
                }
                Ok(map)
            }
        }

        deserializer.deserialize_map(MapVisitor(PhantomData))
    }
}

/// Reads `null` as the type's default, so `models:` with every entry commented out loads.
pub(crate) fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// Reads `str | [str]` (DeerFlow's `mcpInterceptors`) as a list; `null` is empty.
pub(crate) fn string_or_list<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<String>, D::Error> {
    struct OneOrMany;

    impl<'de> Visitor<'de> for OneOrMany {
        type Value = Vec<String>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a string or a list of strings")
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(vec![v.to_owned()])
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }

        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(item) = seq.next_element::<String>()? {
                out.push(item);
            }
            Ok(out)
        }
    }

    deserializer.deserialize_any(OneOrMany)
}

/// Serde `default = "..."` helper for fields that default to `true`.
pub(crate) fn default_true() -> bool {
    true
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn named_map_keeps_file_order_and_replaces_in_place() {
        let map: NamedMap<i32> = serde_json::from_str(r#"{"b": 1, "a": 2, "b": 3}"#).unwrap();
        assert_eq!(map.iter().collect::<Vec<_>>(), vec![("b", &3), ("a", &2)]);
    }

    #[test]
    fn string_or_list_accepts_both_shapes() {
        #[derive(serde::Deserialize)]
        struct S {
            #[serde(deserialize_with = "string_or_list")]
            v: Vec<String>,
        }
        let one: S = serde_json::from_str(r#"{"v": "a:b"}"#).unwrap();
        let many: S = serde_json::from_str(r#"{"v": ["a:b", "c:d"]}"#).unwrap();
        assert_eq!(one.v, vec!["a:b"]);
        assert_eq!(many.v, vec!["a:b", "c:d"]);
        let err = serde_json::from_str::<S>(r#"{"v": 5}"#).err().unwrap();
        assert!(err
            .to_string()
            .contains("expected a string or a list of strings"));
    }
}
