//! How a byte field (`#[serde(with = "bytes")]`) is encoded: as one run of bytes, which
//! the codec writes exactly as it writes a `Vec<u8>` (a length, then the bytes), so the
//! wire does not change; but it is copied in one go where a `Vec<u8>` costs a serde call
//! per byte each way. Self-describing formats (JSON) still read a list of numbers.

use serde::{de, Deserializer, Serializer};

pub(crate) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_bytes(bytes)
}

/// Asks for borrowed bytes: the codec then hands over a slice of the frame, copied once
/// into the field (an owned buffer would be zero-filled first, then copied into).
pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    d.deserialize_bytes(BytesVisitor)
}

struct BytesVisitor;

impl<'de> de::Visitor<'de> for BytesVisitor {
    type Value = Vec<u8>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("bytes")
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
        Ok(v.to_vec())
    }

    fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
        Ok(v)
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
        // Never trust a claimed length beyond a small reservation.
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(b) = seq.next_element::<u8>()? {
            out.push(b);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    use crate::codec;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Plain {
        name: String,
        content: Vec<u8>,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct AsBytes {
        name: String,
        #[serde(with = "super")]
        content: Vec<u8>,
    }

    #[test]
    fn the_wire_is_that_of_a_vec_of_bytes() {
        for content in [vec![], b"0123456789abcdef".to_vec(), vec![0xff; 300]] {
            let plain = Plain {
                name: "f".into(),
                content: content.clone(),
            };
            let bytes = AsBytes {
                name: "f".into(),
                content,
            };
            let wire = codec::encode(&bytes).unwrap();
            assert_eq!(wire, codec::encode(&plain).unwrap());
            assert_eq!(codec::decode::<AsBytes>(&wire).unwrap(), bytes);
            assert_eq!(codec::decode::<Plain>(&wire).unwrap(), plain);
        }
    }

    #[test]
    fn json_keeps_a_list_of_numbers() {
        let v = AsBytes {
            name: "f".into(),
            content: vec![1, 2, 255],
        };
        let json = serde_json::to_string(&v).unwrap();
        assert_eq!(json, r#"{"name":"f","content":[1,2,255]}"#);
        assert_eq!(serde_json::from_str::<AsBytes>(&json).unwrap(), v);
    }

    #[test]
    fn a_forged_length_is_refused_not_allocated() {
        // name "f", then a content length claiming 2^62 bytes, then 2 bytes.
        let mut forged = vec![1u8, b'f', 0xff];
        forged.extend_from_slice(&(1u64 << 62).to_le_bytes());
        forged.extend_from_slice(b"ab");
        assert!(codec::decode::<AsBytes>(&forged).is_err());
    }
}
