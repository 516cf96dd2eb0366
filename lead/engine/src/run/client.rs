//! A run driven by a client instead of the loop's model (Antler's MCP server): the tools
//! the client may see now ([`RunLoop::visible_tools`], exactly what a model turn would be
//! offered: deferral, promotions, skill policy) and one call the client makes
//! ([`RunLoop::call_from_client`]), recorded as an AI turn carrying it, then admitted,
//! executed, returned and merged by the same path as a model's calls (`calls`), so the
//! guardrail, the skill policy and the deferred filter apply and every call is a run
//! event. [`RunLoop::end_client_session`] releases the sandbox and records the end.

use std::future::Future;
use std::sync::Arc;

use crate::catalog::ToolSpec;
use crate::middleware::deferred::RoutingBeforeFilter;
use crate::run::journal::RunStatus;
use crate::run::run_loop::{RunError, RunLoop};
use crate::thread::lease;
use crate::thread::state::{next_ai_id, Message, StateUpdate, ToolCall};

impl RunLoop {
    /// The tools a model turn would be offered now, in catalog order.
    pub fn visible_tools(&self) -> Vec<ToolSpec> {
        let chain = RoutingBeforeFilter::new(&self.catalog, self.settings.auto_promote_top_k);
        self.skill_policy()
            .filter(chain.visible_tools(self.state.promoted.as_ref()))
            .into_iter()
            .cloned()
            .collect()
    }

    /// Runs `call`, made by the client: journaled as an AI turn carrying it, then through
    /// the call middlewares and its executor as a model's call is. Returns the messages
    /// the call added (its tool message).
    pub async fn call_from_client(&mut self, call: ToolCall) -> Result<Vec<Message>, RunError> {
        let catalog = Arc::clone(&self.catalog);
        let chain = RoutingBeforeFilter::new(&catalog, self.settings.auto_promote_top_k);
        let policy = self.skill_policy();
        let turn = self.state.turns() + 1;
        let ai = Message::Ai {
            id: next_ai_id(&self.state.messages, turn),
            content: String::new(),
            tool_calls: vec![call.clone()],
            reasoning: None,
        };
        self.merge(StateUpdate::messages([ai])).await?;
        let before = self.state.messages.len();
        self.run_calls(std::slice::from_ref(&call), &chain, &policy)
            .await?;
        Ok(self.state.messages[before..].to_vec())
    }

    /// Keeps the run's sandbox lease renewed while it is held; never ends (drop it when
    /// the client's session ends).
    pub fn lease_renewal(&self) -> impl Future<Output = ()> + 'static {
        lease::keep_renewed(Arc::clone(&self.hosts), Arc::clone(&self.lease))
    }

    /// The client's session ended: the sandbox goes back to its pool and the run is
    /// recorded as a success (its thread is free for the next run).
    pub async fn end_client_session(&mut self) {
        self.executor().release(&self.state).await;
        if let Err(e) = self
            .journal
            .set_status(&self.context.run_id, RunStatus::Success, None)
            .await
        {
            tracing::error!(run = %self.context.run_id, "cannot record the session's end: {e}");
        }
    }
}
