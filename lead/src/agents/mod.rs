//! Custom agents, which only the lead has: `store` the agents on disk, `profile` what an
//! agent's files make of a run (SOUL, skills, tool groups, model), `tools` the
//! `setup_agent` and `update_agent` builtins, plugged into the engine's runs as
//! [`LeadAgentTools`].

pub mod profile;
pub mod store;
pub mod tools;

use antler_engine::catalog::builtins::{SETUP_AGENT, UPDATE_AGENT};
use antler_engine::run::context::RunContext;
use antler_engine::run::execute::LeadTools;
use antler_engine::run::middleware::tool_error::ToolFailure;
use antler_engine::run::state::{StateUpdate, ToolCall};

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
