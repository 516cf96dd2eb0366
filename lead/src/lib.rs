//! antler-lead: the lead process's library: catalog actor, supervisor, gateway and CLI plumbing.

pub mod catalog;
