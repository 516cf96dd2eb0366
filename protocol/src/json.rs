//! [`Json`]: a JSON value the wire can carry. bincode is not self-describing, so it cannot
//! carry `serde_json::Value` (whose `Deserialize` asks the format what comes next); this
//! enum says it instead. The conversions to and from `serde_json::Value` are lossless
//! (integers stay `i64` or `u64`, floats `f64`, object keys keep their order). In a
//! human-readable format (JSON, YAML) it reads and writes as plain JSON; on the wire its
//! nesting is bounded by [`MAX_DEPTH`], so a forged frame cannot exhaust the stack.

use std::cell::Cell;
use std::fmt;

use serde::{de::Error as _, Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Number, Value};

/// How deep a decoded value may nest (serde_json's own limit).
pub const MAX_DEPTH: u32 = 128;

/// A JSON value: what a tool's arguments, a JSON schema or an MCP result is.
#[derive(Debug, Clone, Default)]
pub enum Json {
    #[default]
    Null,
    Bool(bool),
    /// An integer that fits `i64` (every negative one, and non-negative ones up to `i64::MAX`).
    Int(i64),
    /// A non-negative integer above `i64::MAX`.
    UInt(u64),
    /// A finite float (JSON has no NaN or infinity; one becomes `null` in a `Value`).
    Float(f64),
    String(String),
    Array(Vec<Json>),
    /// Members in their order.
    Object(Vec<(String, Json)>),
}

/// Floats compare by their bits, so equality is total (`Eq`): two values are equal when
/// they encode the same.
impl PartialEq for Json {
    fn eq(&self, other: &Json) -> bool {
        match (self, other) {
            (Json::Null, Json::Null) => true,
            (Json::Bool(a), Json::Bool(b)) => a == b,
            (Json::Int(a), Json::Int(b)) => a == b,
            (Json::UInt(a), Json::UInt(b)) => a == b,
            (Json::Float(a), Json::Float(b)) => a.to_bits() == b.to_bits(),
            (Json::String(a), Json::String(b)) => a == b,
            (Json::Array(a), Json::Array(b)) => a == b,
            (Json::Object(a), Json::Object(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Json {}

impl Json {
    /// An empty object (`{}`).
    pub fn object() -> Json {
        Json::Object(Vec::new())
    }

    /// Parses JSON text.
    pub fn parse(text: &str) -> Result<Json, serde_json::Error> {
        serde_json::from_str::<Value>(text).map(Json::from)
    }

    /// The value as a `serde_json::Value`.
    pub fn to_value(&self) -> Value {
        Value::from(self)
    }

    /// The member `key` of an object.
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(members) => members.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
}

/// The value as compact JSON text.
impl fmt::Display for Json {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.to_value(), f)
    }
}

impl From<Value> for Json {
    fn from(value: Value) -> Json {
        match value {
            Value::Null => Json::Null,
            Value::Bool(b) => Json::Bool(b),
            Value::Number(n) => Json::from(&n),
            Value::String(s) => Json::String(s),
            Value::Array(items) => Json::Array(items.into_iter().map(Json::from).collect()),
            Value::Object(map) => {
                Json::Object(map.into_iter().map(|(k, v)| (k, v.into())).collect())
            }
        }
    }
}

impl From<&Value> for Json {
    fn from(value: &Value) -> Json {
        Json::from(value.clone())
    }
}

impl From<&Number> for Json {
    fn from(n: &Number) -> Json {
        if let Some(i) = n.as_i64() {
            Json::Int(i)
        } else if let Some(u) = n.as_u64() {
            Json::UInt(u)
        } else {
            // Without `arbitrary_precision` a number is an i64, a u64 or an f64.
            Json::Float(n.as_f64().unwrap_or(f64::NAN))
        }
    }
}

impl From<Map<String, Value>> for Json {
    fn from(map: Map<String, Value>) -> Json {
        Json::from(Value::Object(map))
    }
}

impl From<Json> for Value {
    fn from(json: Json) -> Value {
        match json {
            Json::Null => Value::Null,
            Json::Bool(b) => Value::Bool(b),
            Json::Int(i) => Value::from(i),
            Json::UInt(u) => Value::from(u),
            Json::Float(f) => Number::from_f64(f).map_or(Value::Null, Value::Number),
            Json::String(s) => Value::String(s),
            Json::Array(items) => Value::Array(items.into_iter().map(Value::from).collect()),
            Json::Object(members) => {
                Value::Object(members.into_iter().map(|(k, v)| (k, v.into())).collect())
            }
        }
    }
}

impl From<&Json> for Value {
    fn from(json: &Json) -> Value {
        Value::from(json.clone())
    }
}

impl Serialize for Json {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            return self.to_value().serialize(serializer);
        }
        const NAME: &str = "Json";
        match self {
            Json::Null => serializer.serialize_unit_variant(NAME, 0, "Null"),
            Json::Bool(b) => serializer.serialize_newtype_variant(NAME, 1, "Bool", b),
            Json::Int(i) => serializer.serialize_newtype_variant(NAME, 2, "Int", i),
            Json::UInt(u) => serializer.serialize_newtype_variant(NAME, 3, "UInt", u),
            Json::Float(f) => serializer.serialize_newtype_variant(NAME, 4, "Float", f),
            Json::String(s) => serializer.serialize_newtype_variant(NAME, 5, "String", s),
            Json::Array(items) => serializer.serialize_newtype_variant(NAME, 6, "Array", items),
            Json::Object(members) => {
                serializer.serialize_newtype_variant(NAME, 7, "Object", members)
            }
        }
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Json, D::Error> {
        if deserializer.is_human_readable() {
            return Value::deserialize(deserializer).map(Json::from);
        }
        let _depth = Depth::enter()
            .ok_or_else(|| D::Error::custom(format!("JSON nested deeper than {MAX_DEPTH}")))?;
        Ok(match Encoded::deserialize(deserializer)? {
            Encoded::Null => Json::Null,
            Encoded::Bool(b) => Json::Bool(b),
            Encoded::Int(i) => Json::Int(i),
            Encoded::UInt(u) => Json::UInt(u),
            Encoded::Float(f) => Json::Float(f),
            Encoded::String(s) => Json::String(s),
            Encoded::Array(items) => Json::Array(items),
            Encoded::Object(members) => Json::Object(members),
        })
    }
}

/// [`Json`]'s encoded form, in the order of its variants (its children decode as `Json`,
/// so each level passes through [`Depth`]).
#[derive(Deserialize)]
#[serde(rename = "Json")]
enum Encoded {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

thread_local! {
    /// How many `Json` values this thread is decoding inside one another.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// One level of nesting being decoded; leaving it (even by an error) gives it back.
struct Depth;

impl Depth {
    fn enter() -> Option<Depth> {
        DEPTH.with(|depth| {
            let now = depth.get();
            (now < MAX_DEPTH).then(|| {
                depth.set(now + 1);
                Depth
            })
        })
    }
}

impl Drop for Depth {
    fn drop(&mut self) {
        DEPTH.with(|depth| depth.set(depth.get().saturating_sub(1)));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::codec;
    use proptest::prelude::*;

    /// Any `serde_json::Value`, numbers of every kind included.
    fn any_value() -> impl Strategy<Value = Value> {
        let number = prop_oneof![
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
        ];
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            number,
            ".{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((".{0,6}", inner), 0..6)
                    .prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn a_value_survives_the_wire_unchanged(value in any_value()) {
            let json = Json::from(value.clone());
            let decoded: Json = codec::decode(&codec::encode(&json).unwrap()).unwrap();
            prop_assert_eq!(&decoded, &json);
            let back = Value::from(decoded);
            prop_assert_eq!(&back, &value);
            // Numbers keep their kind, objects their key order.
            prop_assert_eq!(back.to_string(), value.to_string());
        }

        #[test]
        fn json_text_reads_and_writes_as_plain_json(value in any_value()) {
            let json = Json::from(value.clone());
            let text = serde_json::to_string(&json).unwrap();
            prop_assert_eq!(&text, &value.to_string());
            // As serde_json reads the text back (its float parsing is not exact).
            let reread = Json::from(serde_json::from_str::<Value>(&text).unwrap());
            prop_assert_eq!(serde_json::from_str::<Json>(&text).unwrap(), reread);
        }
    }

    #[test]
    fn integers_keep_their_kind() {
        let value: Value = serde_json::from_str(r#"[-1, 1, 18446744073709551615, 1.0]"#).unwrap();
        let json = Json::from(value);
        assert_eq!(
            json,
            Json::Array(vec![
                Json::Int(-1),
                Json::Int(1),
                Json::UInt(u64::MAX),
                Json::Float(1.0)
            ])
        );
        assert_eq!(json.to_string(), "[-1,1,18446744073709551615,1.0]");
    }

    #[test]
    fn object_members_keep_their_order() {
        let json = Json::parse(r#"{"z": 1, "a": {"y": null, "b": true}}"#).unwrap();
        assert_eq!(json.to_string(), r#"{"z":1,"a":{"y":null,"b":true}}"#);
        assert_eq!(json.get("z"), Some(&Json::Int(1)));
    }

    #[test]
    fn a_forged_deep_nesting_is_refused_not_followed() {
        // `Array([Array([...])])` nested far deeper than the limit: variant 6, length 1.
        let bytes: Vec<u8> = std::iter::repeat_n([6u8, 1u8], 100_000).flatten().collect();
        let decoded = codec::decode::<Json>(&bytes);
        assert!(decoded.is_err(), "{decoded:?}");
        // The limit is let go of after an error: a shallow value decodes again.
        let ok: Json = codec::decode(&codec::encode(&Json::Int(3)).unwrap()).unwrap();
        assert_eq!(ok, Json::Int(3));
    }
}
