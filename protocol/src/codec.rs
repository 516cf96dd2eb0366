//! The payload codec: bincode 2 (serde mode, standard config) behind three functions, so no
//! other module names bincode. Decoding never panics: a payload is at most one frame
//! (bounded by the frame limit) and serde pre-allocates cautiously from claimed lengths.

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
    let (value, read) = bincode::serde::decode_from_slice(bytes, bincode::config::standard())
        .map_err(|e| CodecError::Decode(e.to_string()))?;
    if read != bytes.len() {
        return Err(CodecError::Trailing(bytes.len() - read));
    }
    Ok(value)
}
