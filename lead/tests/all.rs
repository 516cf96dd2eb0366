//! antler-lead's integration tests in one binary: each former `tests/*.rs` file is a
//! module of `suite/`, so the lead and its dependencies are linked once.
//! One file's tests: `cargo test -p antler-lead --test all suite::run_loop::`.

mod suite;
