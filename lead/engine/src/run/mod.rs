//! A run: an agent's model and tool loop over one `ThreadState` (spec 3, 4, 8), the
//! same for the lead's runs and a subagent's task. `state` holds the reducers, `model`
//! the chat model trait and the scripted model, `openai` the OpenAI-compatible model, `http_clients`
//! the process's shared HTTP clients,
//! `prompt` the system prompts, `middleware` DeerFlow's tool-call middlewares,
//! `builtins` and `view_image` the tools executed by the engine, `execute` where each
//! call runs, `hosts` the way to sandbox-host and mcp-host, `lease` the run's lease on its
//! sandbox, `actor` the loop, `journal` where it is checkpointed, `settlement` the
//! delivery receipt, `skills` the installed skills and their activation, `skill_manage`
//! the agent's edits of the user's custom skills, `task` the
//! `task` tool and the subagent task graph, `thread_files` the thread's own files (local or
//! through sandbox-host), `web` the web tools (search, fetch, images), `acp` what a run adds
//! to its `invoke_acp_agent` calls (sandbox-host runs the agents).

pub mod acp;
pub mod actor;
pub mod builtins;
pub mod context;
pub mod execute;
pub mod hosts;
pub mod http_clients;
pub mod journal;
pub mod lease;
pub mod mcp_result;
pub mod middleware;
pub mod model;
pub mod openai;
pub mod prompt;
pub mod settlement;
pub mod skill_manage;
pub mod skills;
pub mod state;
pub mod task;
pub mod thread_files;
pub mod view_image;
pub mod web;
