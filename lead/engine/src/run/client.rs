//! A run driven by a client instead of the loop's model (Antler's MCP server): the tools
//! the client may see now ([`RunLoop::visible_tools`], exactly what a model turn would be
//! offered: deferral, promotions, skill policy) and one call the client makes
//! ([`RunLoop::call_from_client`]), recorded as an AI turn carrying it, then admitted,
//! executed, returned and merged by the same path as a model's calls (`calls`), so the
//! guardrail, the skill policy and the deferred filter apply and every call is a run
//! event. A call its client cancels ([`RunLoop::call_from_client`]'s `cancelled`) is
//! dropped where it is, as a run's cancel drops its step (the sandbox command is killed,
//! the downstream MCP call cancelled, a `task`'s subagent cancelled on its worker), and
//! ends with [`CALL_CANCELLED`] as its error result. A call an approval rule asks about
//! comes back with no result, waiting in the state's approvals; once its client's answer is
//! given ([`RunLoop::decide`]), [`RunLoop::call_decided_by_client`] runs it as decided.
//! [`RunLoop::end_client_session`] releases the sandbox and records the end.

use std::future::Future;
use std::sync::Arc;

use crate::catalog::builtins::TASK;
use crate::catalog::ToolSpec;
use crate::middleware::deferred::RoutingBeforeFilter;
use crate::middleware::error_message;
use crate::run::events::{RunEvent, ToolState};
use crate::run::journal::RunStatus;
use crate::run::run_loop::{RunError, RunLoop};
use crate::thread::lease;
use crate::thread::state::{next_ai_id, Message, StateUpdate, ToolCall};

/// The result of a call its client cancelled (`notifications/cancelled`).
pub const CALL_CANCELLED: &str = "the call was cancelled by the MCP client";

impl RunLoop {
    /// The tools a model turn would be offered now, in catalog order.
    pub fn visible_tools(&self) -> Vec<ToolSpec> {
        self.visible().into_iter().cloned().collect()
    }

    /// A digest of the names of [`RunLoop::visible_tools`], in order, taken without
    /// copying them: it changes when a call promotes (or hides) a tool.
    pub fn visible_tools_digest(&self) -> u64 {
        use std::hash::{Hash as _, Hasher as _};
        let mut digest = std::collections::hash_map::DefaultHasher::new();
        for tool in self.visible() {
            tool.name.hash(&mut digest);
        }
        digest.finish()
    }

    fn visible(&self) -> Vec<&ToolSpec> {
        let chain = RoutingBeforeFilter::new(&self.catalog, self.settings.auto_promote_top_k);
        self.skill_policy()
            .filter(chain.visible_tools(self.state.promoted.as_ref()))
    }

    /// Runs `call`, made by the client: journaled as an AI turn carrying it, then through
    /// the call middlewares and its executor as a model's call is. Returns the messages
    /// the call added (its tool message). Should `cancelled` resolve first, the call's
    /// work is dropped and it ends with [`CALL_CANCELLED`] (its `tool_finished` event an
    /// error naming it).
    pub async fn call_from_client(
        &mut self,
        call: ToolCall,
        cancelled: impl Future<Output = ()>,
    ) -> Result<Vec<Message>, RunError> {
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
        // The previous call's writes first: one that failed fails this call.
        self.settle_writes().await?;
        // The call's writes (its turn, its result) go to the store in order, and its
        // answer goes back while they land: the store takes every later write and read
        // after them, and the next call or the session's end awaits them. A client's
        // session run is never resumed, so nothing reads them before; a lead that dies
        // first leaves the thread without the call its client has the answer of.
        let turn_saved = self.merge_started(StateUpdate::messages([ai]))?;
        self.unsettled.push(turn_saved);
        let before = self.state.messages.len();
        self.defer_writes = true;
        let working = self.run_calls(std::slice::from_ref(&call), &chain, &policy);
        let was_cancelled = until_cancelled(working, cancelled).await;
        self.defer_writes = false;
        self.end_cancelled(&call, before, was_cancelled?).await?;
        Ok(self.state.messages[before..].to_vec())
    }

    /// The client's call `call` that an approval rule asked about, once its answer is
    /// given ([`RunLoop::decide`]): decided again by the approval stage with that answer
    /// (approved, it runs; denied, the denial is its result; approved for the thread, the
    /// rule is remembered for the thread), then executed as [`RunLoop::call_from_client`]
    /// executes a call, cancellation included. Returns the messages it added.
    pub async fn call_decided_by_client(
        &mut self,
        call: &ToolCall,
        cancelled: impl Future<Output = ()>,
    ) -> Result<Vec<Message>, RunError> {
        let before = self.state.messages.len();
        let was_cancelled = until_cancelled(self.resume_approvals(), cancelled).await?;
        self.end_cancelled(call, before, was_cancelled).await?;
        Ok(self.state.messages[before..].to_vec())
    }

    /// A call the client cancelled before it was answered (`before`: the thread's length
    /// when it started) ends with [`CALL_CANCELLED`].
    async fn end_cancelled(
        &mut self,
        call: &ToolCall,
        before: usize,
        was_cancelled: bool,
    ) -> Result<(), RunError> {
        let answered = self.state.messages[before..]
            .iter()
            .any(|m| matches!(m, Message::Tool { tool_call_id, .. } if *tool_call_id == call.id));
        if was_cancelled && !answered {
            tracing::info!(run = %self.context.run_id, call = %call.id, "the client cancelled its call");
            // Dropping a task's future leaves its subagent running on the worker (a lead
            // that lost its stream re-attaches to it): the worker is told to stop it. The
            // session's calls run one at a time, so the run's only task is this one.
            if let (Some(delegator), true) = (&self.delegator, call.name == TASK) {
                delegator.cancel_run(&self.context.run_id);
            }
            self.lifecycle(ToolState::Returned, &call.name, Some(&call.id));
            self.emit(RunEvent::ToolFinished {
                name: call.name.clone(),
                tool_call_id: call.id.clone(),
                error: true,
                message: Some(CALL_CANCELLED.to_owned()),
            });
            let cancelled = error_message(&call.id, &call.name, CALL_CANCELLED);
            self.merge(StateUpdate::messages([cancelled])).await?;
        }
        Ok(())
    }

    /// Keeps the run's sandbox lease renewed while it is held; never ends (drop it when
    /// the client's session ends).
    pub fn lease_renewal(&self) -> impl Future<Output = ()> + 'static {
        lease::keep_renewed(Arc::clone(&self.hosts), Arc::clone(&self.lease))
    }

    /// The client's session ended: the sandbox goes back to its pool and the run is
    /// recorded as a success (its thread is free for the next run).
    pub async fn end_client_session(&mut self) {
        if let Err(e) = self.settle_writes().await {
            tracing::error!(run = %self.context.run_id, "the session's last call was not stored: {e}");
        }
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

/// Runs `working` unless `cancelled` resolves first; `Ok(true)`: it was cancelled (its work
/// dropped where it was).
async fn until_cancelled<T>(
    working: impl Future<Output = Result<T, RunError>>,
    cancelled: impl Future<Output = ()>,
) -> Result<bool, RunError> {
    futures::pin_mut!(working);
    futures::pin_mut!(cancelled);
    match futures::future::select(working, cancelled).await {
        futures::future::Either::Left((done, _)) => done.map(|_| false),
        futures::future::Either::Right(_) => Ok(true),
    }
}
