//! The tools the engine runs itself (spec 3, 5): `builtins` (the thread's files,
//! `present_files`, `ask_clarification`...), `view_image`, `mcp_result` (how an MCP call's
//! result becomes a tool message), `acp` (what a run adds to its `invoke_acp_agent`
//! calls; sandbox-host runs the agents), `skills` (the installed skills and their
//! activation), `skill_manage` (the agent's edits of the user's custom skills), `web`
//! (search, fetch, images, capture) and `task` (the `task` tool and how a run delegates
//! it). Where each call runs is `run::execute`'s choice.

pub mod acp;
pub mod builtins;
pub mod mcp_result;
pub mod skill_manage;
pub mod skills;
pub mod task;
pub mod view_image;
pub mod web;
