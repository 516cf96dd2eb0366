//! antler-chaos: the chaos harness, `antler chaos` (the `antler` binary hands its suite
//! flags to this crate's `antler-chaos` binary). It owns the schedules (a seed decides the
//! runs and the faults), the faults (signals to every process kind, stopped actors, disk
//! and network faults), the invariant checks and the reports: faults at random, under
//! load, against a whole local cluster of its own, and a report of what held. It starts
//! that cluster (`antler up` in a private directory, the gateway on a free loopback port),
//! submits the schedule's runs through the gateway while its faults fire (it is the lead's
//! orchestrator too: a killed lead is started again, as Kubernetes would), answers
//! clarifications, waits for every run to end, checks the invariants, stops the cluster
//! and checks that nothing is left. The seed is printed and accepted, so a failure
//! replays. The report is a table per fault kind and the invariants, printed and written
//! as JSON (its last line on stdout); the command exits 1 when an invariant breaks.
//!
//! `--mode multi-lead` runs several leads on one PostgreSQL instead ([`multilead`]) and
//! checks, beside the invariants that apply, that at most one epoch acts for a run and
//! that every takeover shows in the run's events.
//!
//! The lead's code it uses comes through one module, `lead`.

mod checks;
mod cluster;
mod command;
mod disk;
mod events;
mod faults;
mod lead;
mod multihost;
mod multilead;
mod plan;
mod postgres;
mod procfs;
mod report;
mod runs;
mod schedule;

pub use command::{run, ChaosArgs};
/// The TCP forwarder the multi-lead mode cuts between a lead and PostgreSQL (the HA tests
/// use it too).
pub use postgres::Forwarder;
