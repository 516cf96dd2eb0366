//! Framing: a 4-byte big-endian length prefix (tokio-util's length-delimited codec) and a
//! maximum frame size. A frame over the limit is an error that closes the connection.

use bytes::{BufMut, BytesMut};
use tokio_util::codec::{Encoder, LengthDelimitedCodec};

use crate::envelope::Envelope;

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

/// Why an envelope was not written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("message of {size} bytes exceeds the {max}-byte frame limit")]
    TooLarge { size: usize, max: usize },
    #[error("message does not encode: {0}")]
    Encode(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Encodes an envelope as one frame (prefix, then bincode) at the end of a buffer; a
/// message over the limit is refused and leaves the buffer as it was.
#[derive(Debug, Clone, Copy)]
pub struct EnvelopeEncoder {
    pub max_frame_bytes: usize,
}

impl<'a> Encoder<&'a Envelope> for EnvelopeEncoder {
    type Error = WriteError;

    fn encode(&mut self, item: &'a Envelope, dst: &mut BytesMut) -> Result<(), WriteError> {
        let start = dst.len();
        dst.put_u32(0);
        let mut w = dst.writer();
        let result =
            bincode::serde::encode_into_std_write(item, &mut w, bincode::config::standard());
        let dst = w.into_inner();
        let size = match result {
            Ok(n) => n,
            Err(e) => {
                dst.truncate(start);
                return Err(WriteError::Encode(e.to_string()));
            }
        };
        if size > self.max_frame_bytes {
            dst.truncate(start);
            return Err(WriteError::TooLarge {
                size,
                max: self.max_frame_bytes,
            });
        }
        dst[start..start + 4].copy_from_slice(&(size as u32).to_be_bytes());
        Ok(())
    }
}
