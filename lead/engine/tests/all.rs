//! antler-engine's integration tests in one binary: each former `tests/*.rs` file is a
//! module of `suite/`, and the support they share (`skill_manage_support`, the web tools'
//! `web_support`) is compiled once, here.
//! One file's tests: `cargo test -p antler-engine --test all suite::web_exa::`.

mod skill_manage_support;
mod suite;
mod web_support;
