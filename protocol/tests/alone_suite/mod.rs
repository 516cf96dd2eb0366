//! One module per former integration-test file that measures the whole process (each was
//! its own test binary); every test here holds `crate::ALONE`.

mod close_at_once;
mod heap_trim;
mod heartbeat_starvation;
mod reply_on_caller;
