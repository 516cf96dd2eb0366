//! Where each tool call runs (the "Executed" state): builtins in the lead, sandbox
//! tools in sandbox-host (the run's sandbox is acquired on its first sandbox call and
//! its id written to the state; every request names the run's lease, and a call carries
//! its call id so sandbox-host runs it once), MCP tools in mcp-host, the configured web
//! tools in the engine (`web`, async HTTP with deadlines), `skill_manage` in the engine
//! against the skills root (`skill_manage`). An MCP call for a run whose
//! hosts relay stream items carries the run and call ids, and each elicitation its server
//! asks becomes a [`RunEvent::Elicitation`] while the call waits. A failure the model should see
//! is a [`ToolFailure`]; the tool error middleware turns it into the error message.

use crate::middleware::read_before_write as rbw;
use std::collections::HashSet;
use std::time::Duration;

use antler_protocol::{
    calls::{Elicitation, McpCalls, SandboxCalls},
    messages::{
        AcpInvocation, McpCall, Principal, SandboxError, ToolCall as SandboxCall, ToolResult,
    },
    Json,
};

use super::events::{EventSink, RunEvent};
use crate::catalog::builtins::{
    DESCRIBE_SKILL, INVOKE_ACP_AGENT, LIST_UPLOADED_FILES, PRESENT_FILES, SKILL_MANAGE, VIEW_IMAGE,
};
use crate::catalog::{Catalog, ToolSource, TOOL_SEARCH_NAME};
use crate::middleware::tool_error::{FailureClass, ToolFailure};
use crate::model::ChatModel;
use crate::thread::context::RunContext;
use crate::thread::hosts::{HostError, ToolHosts};
use crate::thread::lease::SandboxLease;
use crate::thread::state::{Message, SandboxState, StateUpdate, ThreadState, ToolCall, ToolStatus};
use crate::tools::skill_manage::{SkillManageSettings, SkillManager};
use crate::tools::skills::SkillStore;
use crate::tools::web::WebTools;
use crate::tools::{builtins, mcp_result, view_image};

pub use antler_protocol::messages::SANDBOX_TOOLS;

/// Tools only the lead runs, because they need its state (the custom-agent tools
/// `setup_agent` and `update_agent`, which write the user's agents on disk).
pub trait LeadTools: Send + Sync {
    /// Runs `call` when it is one of these tools (`None`: it is not).
    fn execute(
        &self,
        call: &ToolCall,
        context: &RunContext,
    ) -> Option<Result<StateUpdate, ToolFailure>>;
}

/// Runs tool calls for one run.
pub struct Executor<'a> {
    pub catalog: &'a Catalog,
    pub hosts: &'a dyn ToolHosts,
    pub context: &'a RunContext,
    pub timeout: Duration,
    /// The run's lease on its sandbox.
    pub lease: &'a SandboxLease,
    /// Where the run's skills are, and the agent's skills whitelist (`describe_skill`).
    pub skills: &'a SkillStore,
    pub allowed_skills: Option<&'a HashSet<String>>,
    /// The lead's own tools (none on a worker).
    pub lead_tools: Option<&'a dyn LeadTools>,
    /// The configured web tools (`web_search`, `web_fetch`, `image_search`, `web_capture`).
    pub web: Option<&'a WebTools>,
    /// What `invoke_acp_agent` calls carry.
    pub acp: Option<&'a crate::tools::acp::AcpCalls>,
    /// Where the run's events go (an MCP call's elicitations are told there).
    pub events: Option<&'a EventSink>,
    /// The run's model (`skill_manage`'s security scan asks it).
    pub model: &'a dyn ChatModel,
    /// `skill_manage` when `skill_evolution.enabled` (`None`: not run here).
    pub skill_manage: Option<&'a SkillManageSettings>,
    /// `read_before_write.enabled`: writes to existing files need a read of their current
    /// version (`middleware::read_before_write`).
    pub read_before_write: bool,
    /// The run's approval stage: a sandbox or MCP call a person approved carries that rule
    /// to sandbox-host or mcp-host, which check the policy again (`None`: no policy).
    pub approvals: Option<&'a crate::middleware::approvals::ApprovalGate>,
}

impl Executor<'_> {
    /// Runs one call already admitted by the middlewares. The returned update holds the
    /// tool message (and any state the tool sets).
    pub async fn execute(
        &self,
        call: &ToolCall,
        state: &ThreadState,
    ) -> Result<StateUpdate, ToolFailure> {
        match call.name.as_str() {
            PRESENT_FILES => return Ok(builtins::present_files(call, self.context).await),
            TOOL_SEARCH_NAME => return builtins::tool_search(call, self.catalog),
            VIEW_IMAGE => return Ok(view_image::view_image(call, self.context).await),
            LIST_UPLOADED_FILES => {
                return builtins::list_uploaded_files(call, self.context, &state.uploaded_files)
                    .await
            }
            DESCRIBE_SKILL => return self.describe_skill(call),
            INVOKE_ACP_AGENT if self.acp.is_some() => return self.acp(call).await,
            SKILL_MANAGE if self.skill_manage.is_some() => {
                if let Some(settings) = self.skill_manage {
                    return self.manage_skill(call, settings).await;
                }
            }
            _ => {}
        }
        if let Some(result) = self
            .lead_tools
            .and_then(|tools| tools.execute(call, self.context))
        {
            return result;
        }
        let spec = self.catalog.get(&call.name).ok_or_else(|| {
            ToolFailure::new(
                FailureClass::ToolUnavailable,
                format!("{} is not in the catalog", call.name),
            )
        })?;
        if let (ToolSource::Config { .. }, Some(web)) = (&spec.source, self.web) {
            if let Some(result) = web
                .execute(call, self.timeout, self.context.files.as_ref())
                .await
            {
                return result;
            }
        }
        match &spec.source {
            ToolSource::Mcp {
                server: Some(server),
                original_name,
            } => self.mcp(call, state, server, original_name).await,
            _ if SANDBOX_TOOLS.contains(&call.name.as_str()) => self.sandbox(call, state).await,
            _ => Err(ToolFailure::new(
                FailureClass::ToolUnavailable,
                format!("no executor runs {} in this version of Antler", call.name),
            )),
        }
    }

    /// `describe_skill`: the installed skill `name` (or `query`) as the run may see it.
    fn describe_skill(&self, call: &ToolCall) -> Result<StateUpdate, ToolFailure> {
        let query = call
            .args
            .get("name")
            .or_else(|| call.args.get("query"))
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| {
                ToolFailure::new(
                    FailureClass::ValidationError,
                    "name: field required (a string)",
                )
            })?;
        let text = self.skills.describe(query, self.allowed_skills);
        Ok(StateUpdate::messages([Message::tool(
            &call.id,
            DESCRIBE_SKILL,
            text,
            ToolStatus::Success,
        )]))
    }

    /// `skill_manage` with the run's settings and the model its security scan asks.
    async fn manage_skill(
        &self,
        call: &ToolCall,
        settings: &SkillManageSettings,
    ) -> Result<StateUpdate, ToolFailure> {
        // A scripted run never judges its own writes: with no moderation
        // model of the operator's, the scan is unavailable and fails closed.
        let (closed, unavailable);
        let (settings, model): (_, &dyn ChatModel) =
            if settings.moderation_model.is_none() && self.model.is_scripted() {
                closed = crate::tools::skill_manage::SkillManageSettings {
                    fail_closed: true,
                    ..settings.clone()
                };
                unavailable = crate::tools::skill_manage::UnavailableModel {
                    name: self.model.name().to_owned(),
                    reason: crate::tools::skill_manage::moderation::SCRIPTED_RUN.to_owned(),
                };
                (&closed, &unavailable)
            } else {
                (
                    settings,
                    settings.moderation_model.as_deref().unwrap_or(self.model),
                )
            };
        let manager = SkillManager {
            store: self.skills,
            settings,
            model,
            thread_id: &self.context.thread_id,
        };
        manager.execute(call).await
    }

    fn principal(&self) -> Principal {
        Principal {
            user_id: self.context.user_id.clone(),
            thread_id: self.context.thread_id.clone(),
            roles: self.context.agent.role.iter().cloned().collect(),
        }
    }

    /// Acquires the run's sandbox (once; the id goes to the state) and runs the tool. A
    /// sandbox-host that restarted no longer knows the id: the sandbox is acquired again
    /// under the same deterministic id (the state's id, so a different one is a
    /// conflict) and the call is made once more.
    async fn sandbox(
        &self,
        call: &ToolCall,
        state: &ThreadState,
    ) -> Result<StateUpdate, ToolFailure> {
        let mut update = StateUpdate::default();
        let sandbox_id = match &state.sandbox {
            Some(sandbox) => sandbox.sandbox_id.clone(),
            None => {
                let id = self.acquire(None).await?;
                update.sandbox = Some(SandboxState {
                    sandbox_id: id.clone(),
                });
                id
            }
        };
        let gated_path = self
            .read_before_write
            .then(|| call.args.get("path").and_then(serde_json::Value::as_str))
            .flatten();
        if let Some(path) = gated_path.filter(|_| rbw::GATED_TOOLS.contains(&call.name.as_str())) {
            if let Some(current) = self.current_content(path, &sandbox_id).await {
                if !rbw::has_read(&state.messages, path, &current) {
                    update.messages.push(Message::tool(
                        &call.id,
                        &call.name,
                        rbw::block_message(&call.name, path),
                        ToolStatus::Error,
                    ));
                    return Ok(update);
                }
            }
        }
        let clearance = self.clearance(call, state);
        let result = match self
            .sandbox_call(call, &sandbox_id, clearance.clone())
            .await?
        {
            Err(SandboxError::UnknownSandbox(_)) => {
                let id = self.acquire(Some(sandbox_id.clone())).await?;
                self.sandbox_call(call, &id, clearance).await?
            }
            other => other,
        };
        let result =
            result.map_err(|e| ToolFailure::new(FailureClass::SandboxError, e.to_string()))?;
        let status = if result.is_error {
            ToolStatus::Error
        } else {
            ToolStatus::Success
        };
        let mut message = Message::tool(&call.id, &call.name, result.content, status);
        // A read is stamped with the version of the whole file it saw.
        if let (Some(path), false, true) =
            (gated_path, result.is_error, call.name == rbw::READ_TOOL)
        {
            if let Some(current) = self.current_content(path, &sandbox_id).await {
                if let Message::Tool {
                    additional_kwargs, ..
                } = &mut message
                {
                    *additional_kwargs = rbw::stamped(additional_kwargs.take(), path, &current);
                }
            }
        }
        update.messages.push(message);
        Ok(update)
    }

    /// The whole of the file `path` as the sandbox reads it now, for the read-before-write
    /// gate (`None`: missing, unreadable, or the sandbox did not answer: not gated). Not a
    /// call of the run's: it has no call id.
    async fn current_content(&self, path: &str, sandbox_id: &str) -> Option<String> {
        let read = SandboxCall {
            tool: rbw::READ_TOOL.to_owned(),
            args: Json::from(&serde_json::json!({
                "description": "read-before-write check",
                "path": path,
            })),
            secrets: Vec::new(),
            clearance: None,
        };
        let owner = Some(self.lease.owner().clone());
        let result = self
            .hosts
            .call(sandbox_id.to_owned(), read, owner, None, self.timeout)
            .await
            .ok()?
            .ok()?;
        rbw::inspectable(&result.content, result.is_error).map(str::to_owned)
    }

    async fn acquire(&self, known_id: Option<String>) -> Result<String, ToolFailure> {
        let owner = Some(self.lease.owner().clone());
        let acquired = self
            .hosts
            .acquire(self.principal(), known_id, owner, self.timeout)
            .await
            .map_err(host_failure)?
            .map_err(|e| ToolFailure::new(FailureClass::SandboxError, e.to_string()))?;
        self.lease
            .taken(Some(Duration::from_millis(acquired.lease_ttl_ms)));
        Ok(acquired.sandbox_id)
    }

    /// The rule a person approved `call` under (now, or for the thread), as the hosts'
    /// second check of the approval policy needs it.
    fn clearance(&self, call: &ToolCall, state: &ThreadState) -> Option<String> {
        use crate::middleware::approvals::Gate;
        match self
            .approvals?
            .check(call, self.catalog.get(&call.name), &state.approvals, false)
        {
            Gate::Pass(Some(record))
                if matches!(
                    record.decision,
                    "approve" | "approve_for_thread" | "thread_rule"
                ) =>
            {
                record.verdict.rule
            }
            _ => None,
        }
    }

    async fn sandbox_call(
        &self,
        call: &ToolCall,
        sandbox_id: &str,
        clearance: Option<String>,
    ) -> Result<Result<ToolResult, SandboxError>, ToolFailure> {
        let tool_call = SandboxCall {
            tool: call.name.clone(),
            args: Json::from(&call.args),
            secrets: Vec::new(),
            clearance,
        };
        let owner = Some(self.lease.owner().clone());
        let result = self
            .hosts
            .call(
                sandbox_id.to_owned(),
                tool_call,
                owner,
                Some(call.id.clone()),
                self.timeout,
            )
            .await
            .map_err(host_failure)?;
        if result.is_ok() {
            // The call took the lease again if it had lapsed.
            self.lease.taken(None);
        }
        Ok(result)
    }

    /// Calls the tool on its MCP server; an error result is DeerFlow's `ToolException`.
    /// `invoke_acp_agent`: sandbox-host runs the agent; its activity becomes run events.
    async fn acp(&self, call: &ToolCall) -> Result<StateUpdate, ToolFailure> {
        let field = |name: &str| {
            call.args
                .get(name)
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| {
                    ToolFailure::new(
                        FailureClass::ValidationError,
                        format!("{name}: field required (a string)"),
                    )
                })
        };
        let (agent, prompt) = (field("agent")?, field("prompt")?);
        let Some(acp) = self.acp else {
            return Err(ToolFailure::new(
                FailureClass::ToolUnavailable,
                "no ACP agent is configured",
            ));
        };
        let principal = self.principal();
        let invocation = AcpInvocation {
            principal,
            agent: agent.clone(),
            prompt,
            mcp_servers: acp.mcp_servers.clone(),
        };
        let told = |update: Json| {
            let Some(events) = self.events else {
                return;
            };
            events(&RunEvent::AcpActivity {
                tool_call_id: call.id.clone(),
                agent: agent.clone(),
                update: update.into(),
            });
        };
        let outcome = self
            .hosts
            .invoke_acp(invocation, acp.deadline(&agent), &told)
            .await
            .map_err(host_failure)?
            .map_err(|e| ToolFailure::new(FailureClass::SandboxError, e.to_string()))?;
        let status = if outcome.is_error {
            ToolStatus::Error
        } else {
            ToolStatus::Success
        };
        Ok(StateUpdate::messages([Message::tool(
            &call.id,
            INVOKE_ACP_AGENT,
            outcome.text,
            status,
        )]))
    }

    async fn mcp(
        &self,
        call: &ToolCall,
        state: &ThreadState,
        server: &str,
        tool: &str,
    ) -> Result<StateUpdate, ToolFailure> {
        // Elicitations are asked for only when someone will see them.
        let events = self.events.filter(|_| self.hosts.relays_items());
        let request = McpCall {
            server: server.to_owned(),
            tool: tool.to_owned(),
            args: Json::from(&call.args),
            user: Some(self.context.user_id.clone()),
            thread: Some(self.context.thread_id.clone()),
            workspace: Some(self.context.paths.workspace().display().to_string()),
            run_id: events.map(|_| self.context.run_id.clone()),
            tool_call_id: events.map(|_| call.id.clone()),
            clearance: self.clearance(call, state),
        };
        let told = |elicitation: Elicitation| {
            let Some(events) = events else {
                return;
            };
            events(&RunEvent::Elicitation {
                tool_call_id: call.id.clone(),
                id: elicitation.id,
                server: elicitation.server,
                message: elicitation.message,
                requested_schema: elicitation.requested_schema.into(),
            });
        };
        let result = self
            .hosts
            .call_tool_elicited(request, self.timeout, &told)
            .await
            .map_err(host_failure)?;
        if result.is_error {
            return Err(ToolFailure::new(FailureClass::ToolException, result.text()));
        }
        // A vision model is one offered `view_image`: it sees the result's images.
        let vision = self.catalog.get(VIEW_IMAGE).is_some();
        let rendered = mcp_result::render(&result, vision);
        let mut message = Message::tool(&call.id, &call.name, rendered.text, ToolStatus::Success);
        if let (
            false,
            Message::Tool {
                additional_kwargs, ..
            },
        ) = (rendered.images.is_empty(), &mut message)
        {
            *additional_kwargs = Some(Box::new(serde_json::json!({
                mcp_result::IMAGES_KEY: rendered.images
            })));
        }
        Ok(StateUpdate::messages([message]))
    }

    /// Releases the run's sandbox to the warm pool (at the end of the run's drive); a
    /// release that fails leaves the lease to expire, since it is no longer renewed.
    pub async fn release(&self, state: &ThreadState) {
        let Some(sandbox) = &state.sandbox else {
            return;
        };
        let owner = Some(self.lease.owner().clone());
        self.lease.released();
        match self
            .hosts
            .release(sandbox.sandbox_id.clone(), owner, self.timeout)
            .await
        {
            Ok(Ok(())) => {}
            other => {
                tracing::warn!(sandbox = %sandbox.sandbox_id, "sandbox release failed: {other:?}")
            }
        }
    }
}

/// A host that could not be had, or answered out of protocol: the run goes on.
fn host_failure(error: HostError) -> ToolFailure {
    ToolFailure::new(FailureClass::HostUnavailable, error.message)
}
