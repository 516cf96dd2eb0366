//! The cross-process integration, peer and chaos suites in one binary: each former
//! `tests/*.rs` file is a module of `suite/`, and the harnesses they share are compiled
//! once, here: clusters (`lead_support`), MCP peers and stand-ins (`mcp_support`), model
//! servers (`model_support`), network namespaces (`netns_support`), a PostgreSQL cluster
//! (`pg_support`), sandbox hosts (`sandbox_support`) and subagent workers
//! (`subagent_support`). The benches include
//! `lead_support` and `netns_support` by path.
//!
//! Tests share this process (two test threads): a check of processes, namespaces or
//! cgroups looks at the test's own (its cluster's pids, its temporary directory, its
//! pid-tagged names), never at the whole machine.
//! One file's tests: `cargo test -p antler-tests --test all suite::sandbox_escape::`.

mod lead_support;
mod mcp_support;
mod model_support;
mod netns_support;
mod pg_support;
mod sandbox_support;
mod subagent_support;
mod suite;
