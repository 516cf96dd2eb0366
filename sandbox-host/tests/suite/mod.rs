//! One module per former integration-test file (each was its own test binary), in the
//! order of their names.

mod parity;
mod thread_files;
