//! Custom agents, which only the lead has: `store` the agents on disk, `profile` what an
//! agent's files make of a run (SOUL, skills, tool groups, model), `tools` the
//! `setup_agent` and `update_agent` builtins, plugged into the engine's runs as
//! [`LeadAgentTools`].

pub mod profile;
pub mod store;
pub mod tools;

use antler_engine::{
    catalog::builtins::{SETUP_AGENT, UPDATE_AGENT},
    LeadTools, RunContext, StateUpdate, ToolCall, ToolFailure,
};

/// The custom-agent tools, as the engine's runs call them.
#[derive(Clone, Copy, Debug, Default)]
pub struct LeadAgentTools;

impl LeadTools for LeadAgentTools {
    fn execute(
        &self,
        call: &ToolCall,
        context: &RunContext,
    ) -> Option<Result<StateUpdate, ToolFailure>> {
        match call.name.as_str() {
            SETUP_AGENT => Some(tools::setup_agent(call, context)),
            UPDATE_AGENT => Some(tools::update_agent(call, context)),
            _ => None,
        }
    }
}
