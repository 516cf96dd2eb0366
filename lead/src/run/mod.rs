//! A run: the lead agent's model and tool loop over one `ThreadState` (spec 3, 4, 8).
//! `state` holds the reducers, `model` the chat model trait and the scripted model,
//! `openai` the OpenAI-compatible model, `middleware` DeerFlow's tool-call
//! middlewares, `builtins` and `view_image` the tools executed in the lead, `execute`
//! where each call runs, `hosts` the way to sandbox-host and mcp-host, `actor` the loop,
//! `checkpoint` its SQLite store, `settlement` the delivery receipt.

pub mod actor;
pub mod builtins;
pub mod checkpoint;
pub mod context;
pub mod execute;
pub mod hosts;
pub mod middleware;
pub mod model;
pub mod openai;
pub mod settlement;
pub mod state;
pub mod view_image;
