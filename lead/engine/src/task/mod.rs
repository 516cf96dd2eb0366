//! Subagent tasks above the run loop (spec 7): `spec` is a task as it travels from the
//! lead to a worker (its catalog and model in their wire forms, its limits), `wire` its
//! conversions to and from the protocol's task types that cross the wire, `graph` runs
//! one on the engine (a `RunLoop` over the parent's thread, with the task's budgets,
//! timeout and cancellation), `asks` holds its calls an approval rule asks about until
//! the parent run's user answers. The `task` tool a run calls, its results and events are
//! `tools::task`'s.

pub mod approvals;
pub mod asks;
pub mod graph;
pub mod spec;
pub mod wire;
