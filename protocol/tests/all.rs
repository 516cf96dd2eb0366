//! antler-protocol's integration tests in one binary: each former `tests/*.rs` file is a
//! module of `suite/`, and the peer they share (`common_peer`) is compiled once, here.
//! The tests that measure the whole process are in `alone`, a binary of their own.
//! One file's tests: `cargo test -p antler-protocol --test all suite::rpc::`.

mod common_peer;
mod suite;
