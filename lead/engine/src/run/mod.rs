//! A run: an agent's model and tool loop over one `ThreadState` (spec 3, 4, 8), the
//! same for the lead's runs and a subagent's task. `actor` is the loop (`RunLoop`) and the
//! `RunActor` that owns it, `events` what a run reports as it goes (`RunEvent`,
//! `ToolState`), `execute` where each tool call runs, `journal` where a run is
//! checkpointed (the lead's store plugs in behind its trait).

pub mod actor;
pub mod events;
pub mod execute;
pub mod journal;
