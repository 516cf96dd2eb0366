//! antler-sandbox-host's integration tests in one binary: each former `tests/*.rs` file
//! is a module of `suite/`.
//! One file's tests: `cargo test -p antler-sandbox-host --test all suite::parity::`.

mod suite;
