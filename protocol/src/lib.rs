//! antler-protocol: every message that crosses an Antler process, the codec, framing,
//! handshake, RPC links, and the shared configuration types.

pub mod config;
