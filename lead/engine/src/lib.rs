//! antler-engine: the agent engine the lead and the subagent workers both run. `catalog`
//! assembles, hashes, defers and searches tools; `run` is one run's model -> tools loop
//! with its middleware, model clients, prompts, skills and the builtins that need no
//! lead-only state. What only the lead has (the checkpoint journal, the custom-agent
//! tools, delegation to subagent workers) plugs in through the traits in
//! [`run::journal`], [`run::execute`] and [`run::delegation`]; this crate never depends
//! on the lead.

pub mod catalog;
pub mod run;
