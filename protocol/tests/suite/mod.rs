//! One module per former integration-test file (each was its own test binary), in the
//! order of their names.

mod answered_now;
mod config_errors;
mod config_examples;
mod config_fuzz;
mod frame_fuzz;
mod link_redial;
mod relays;
mod rpc;
mod schema_skew;
mod waiting_callers;
