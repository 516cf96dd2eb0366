//! A run: an agent's model and tool loop over one `ThreadState` (spec 3, 4, 8), the
//! same for the lead's runs and a subagent's task. `run_loop` is the loop (`RunLoop`),
//! `step` one model turn of it and `calls` that turn's tool calls, `builder` how a loop
//! is made (`RunBuilder`), `settings` its knobs (`RunSettings`), `actor` the `RunActor`
//! that owns a loop and its messages, `events` what a run reports as it goes
//! (`RunEvent`, `ToolState`) and `delta` its streamed tokens (`model_delta`), `goal` the
//! hidden turns a thread's goal asks for after an answer, `execute` where each tool call
//! runs, `client` a run driven by a client (Antler's MCP server) instead of its model,
//! `journal` where a run is checkpointed (the lead's store plugs in behind its trait).

pub mod actor;
mod approvals_relay;
pub mod builder;
mod calls;
pub(crate) mod client;
mod context;
mod delta;
pub mod events;
pub mod execute;
mod goal;
pub mod journal;
pub mod run_loop;
pub mod settings;
mod spans;
mod step;
