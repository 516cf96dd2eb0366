//! The payload codec: bincode 2 (serde mode, standard config) behind three functions, so no
//! other module names bincode. Decoding never panics and never trusts a claimed length:
//! what a payload may make the decoder allocate is bounded by a small multiple of its own
//! size (a forged string length is refused, not allocated).

use serde::{de::DeserializeOwned, Serialize};

/// A payload that does not encode or decode.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("payload does not encode: {0}")]
    Encode(String),
    #[error("payload does not decode: {0}")]
    Decode(String),
    #[error("payload has {0} trailing bytes after the message")]
    Trailing(usize),
}

/// Encodes `value` and appends it to `out`.
pub fn encode_into<T: Serialize>(value: &T, out: &mut Vec<u8>) -> Result<(), CodecError> {
    bincode::serde::encode_into_std_write(value, out, bincode::config::standard())
        .map(|_| ())
        .map_err(|e| CodecError::Encode(e.to_string()))
}

/// Encodes `value` into a new buffer.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::with_capacity(64);
    encode_into(value, &mut out)?;
    Ok(out)
}

/// Decodes one whole value from `bytes`; trailing bytes are an error.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    // Containers claim `len * size_of::<T>()` bytes before allocating; a varint-encoded
    // element may take 1 byte on the wire and 8 in memory, hence the factor.
    let budget = bytes.len().saturating_mul(8).max(4096);
    let (value, read) = if budget <= 64 << 10 {
        decode_limited::<T, { 64 << 10 }>(bytes)
    } else if budget <= 1 << 20 {
        decode_limited::<T, { 1 << 20 }>(bytes)
    } else if budget <= 16 << 20 {
        decode_limited::<T, { 16 << 20 }>(bytes)
    } else if budget <= 256 << 20 {
        decode_limited::<T, { 256 << 20 }>(bytes)
    } else {
        decode_limited::<T, { 4 << 30 }>(bytes)
    }?;
    if read != bytes.len() {
        return Err(CodecError::Trailing(bytes.len() - read));
    }
    Ok(value)
}

fn decode_limited<T: DeserializeOwned, const LIMIT: usize>(
    bytes: &[u8],
) -> Result<(T, usize), CodecError> {
    let config = bincode::config::standard().with_limit::<LIMIT>();
    bincode::serde::decode_from_slice(bytes, config).map_err(|e| CodecError::Decode(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forged_string_length_is_refused_not_allocated() {
        // Some(String) whose varint length claims 2^62 bytes, in a 12-byte payload.
        let mut forged = vec![1u8, 0xff];
        forged.extend_from_slice(&(1u64 << 62).to_le_bytes());
        forged.extend_from_slice(b"ab");
        let r = decode::<Option<String>>(&forged);
        assert!(matches!(r, Err(CodecError::Decode(_))), "{r:?}");
    }

    #[test]
    fn values_round_trip_and_trailing_bytes_are_refused() {
        let v = (7u64, "text".to_string(), vec![1u32, 2, 3]);
        let mut bytes = encode(&v).unwrap();
        assert_eq!(decode::<(u64, String, Vec<u32>)>(&bytes).unwrap(), v);
        bytes.push(0);
        assert!(matches!(
            decode::<(u64, String, Vec<u32>)>(&bytes),
            Err(CodecError::Trailing(1))
        ));
    }
}
