//! The TCP forwarder a test puts between a lead and PostgreSQL, to cut the network between
//! them: the chaos crate's ([`antler_chaos::Forwarder`]), which the multi-lead chaos mode
//! cuts the same way. [`Forwarder::cut`] drops every connection and refuses new ones until
//! [`Forwarder::heal`], and names the local ports of the upstream connections it dropped.

pub use antler_chaos::Forwarder;
