//! Framing: a 4-byte big-endian length prefix (tokio-util's length-delimited codec) and a
//! maximum frame size. A frame over the limit is an error that closes the connection.

use tokio_util::codec::LengthDelimitedCodec;

/// The default maximum frame size: 16 MiB.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// The codec for one connection with the given frame limit.
pub fn codec(max_frame_bytes: usize) -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_length(4)
        .big_endian()
        .max_frame_length(max_frame_bytes)
        .new_codec()
}

/// Writes the frame for `payload` (prefix and bytes) into `out`; for raw clients and tests.
pub fn frame_bytes(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 4);
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out
}
