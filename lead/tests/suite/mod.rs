//! One module per former integration-test file (each was its own test binary), in the
//! order of their names.

mod catalog_assembly;
mod catalog_conformance;
mod catalog_spec_cases;
mod overload_errors;
mod resume_issued_calls;
mod run_epoch;
mod run_loop;
mod skill_activation;
