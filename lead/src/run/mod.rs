//! A run: the lead agent's model and tool loop over one `ThreadState` (spec 3, 4, 8).
//! `state` holds the reducers, `model` the chat model trait and the scripted model,
//! `openai` the OpenAI-compatible model, `middleware` DeerFlow's tool-call middlewares,
//! `builtins`, `view_image` and `agents` the tools executed in the lead (`agent_store` the
//! custom agents on disk), `execute` where each call runs, `hosts` the way to sandbox-host
//! and mcp-host, `lease` the run's lease on its sandbox, `actor` the loop, `checkpoint` its SQLite store, `settlement` the delivery
//! receipt, `skills` the installed skills and their activation.

pub mod actor;
pub mod agent_profile;
pub mod agent_store;
pub mod agents;
pub mod builtins;
pub mod checkpoint;
pub mod context;
pub mod execute;
pub mod hosts;
pub mod lease;
pub mod middleware;
pub mod model;
pub mod openai;
pub mod prompt;
pub mod settlement;
pub mod skills;
pub mod state;
pub mod view_image;
