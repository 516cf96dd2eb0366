//! Subagents on the lead's side: `types` the subagent types and their limits (spec 7.1),
//! `dispatcher` the `SubagentDispatcher` (worker membership, slots and every capacity
//! limit in one place), `delegator` the engine's `Delegator` for a lead run (a `task`
//! call becomes a task spec placed on a worker, its events streamed to the run). The
//! change of the number of workers of a running cluster is the cluster's (`cluster::scaling`).

pub(crate) mod delegator;
pub(crate) mod dispatcher;
pub(crate) mod types;

pub use dispatcher::{Release, Reserve, Reserved, SubagentDispatcher, Workers};
