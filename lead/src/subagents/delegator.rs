//! [`LeadDelegator`]: the lead's [`Delegator`] for one run. A `task` call's type is
//! resolved (7.1), its catalog assembled by the `CatalogActor` from the parent's request
//! (`AssemblyRequest::subagent_of`, 1.3: the parent's groups and principal, the type's
//! tools and disallowed tools, authorization, its own deferral and hash), its model and
//! system prompt (spec B) chosen, and the task placed through the
//! [`SubagentDispatcher`]. The worker runs it and calls the model and the hosts itself;
//! the lead streams its events to the parent run and collects its result. A worker lost
//! mid-task ends the task `failed`, naming the worker.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use actix::Addr;
use antler_engine::{
    builtin_system_prompt,
    catalog::{AssemblyRequest, Catalog},
    subagent_system_prompt, ChatModel, Delegator, SkillStore, SubagentLimit, SubagentPromptParts,
    TaskCall, TaskEvent, TaskEventSink, TaskResult, TaskSpec, ThreadFilesMode, TokenBudget,
    ToolHosts, WireCatalog, WireWebTools,
};
use antler_protocol::calls::{attach_task, run_task, TaskItem, Watch, WorkerCalls};
use antler_protocol::config::{AppConfig, TokenBudgetConfig};
use antler_protocol::messages::TaskAssignment;
use antler_protocol::Role;
use antler_protocol::{RemoteError, RpcError};
use futures::future::BoxFuture;

use super::dispatcher::{
    Connections, Placement, Release, Reserve, Reserved, SubagentDispatcher, Unplace,
};
use super::types;

/// Time the lead's stream of a task gets beyond the task's own timeout (the worker ends
/// a task at its timeout; this bounds a worker that stops answering).
const STREAM_MARGIN: Duration = Duration::from_secs(60);
/// Placements tried when a worker refuses a task for a slot race.
const PLACEMENT_ATTEMPTS: usize = 3;
/// How long a task waits for a slot before it says so in a `task_waiting` event.
const QUIET_WAIT: Duration = Duration::from_millis(750);
/// How long a resumed run waits for its workers' links before it decides a task is lost.
const COLLECT_WAIT: Duration = Duration::from_secs(10);
/// After a task's stream breaks, how long the link to its worker is waited for to come
/// back and the task re-attached (the worker goes on with it): a network blip loses
/// nothing; a worker that is gone is reported within the lost-task target (4 s).
const REATTACH_WINDOW: Duration = Duration::from_secs(3);

/// A task's catalog and the tools its policy denied.
pub type DelegatedCatalog = (Arc<Catalog>, Vec<String>);

/// What a delegator takes from the lead's run environment (`runs::RunEnv` implements
/// it): the pieces a task's spec is built from, so that `subagents` never names `runs`.
pub trait DelegationEnv: Send + Sync + 'static {
    /// The catalog assembled for `request` with `app` (cached when the run uses the
    /// cluster's config) and the tools its policy denied; `Err`: why it could not be.
    fn catalog<'a>(
        &'a self,
        app: &'a Arc<AppConfig>,
        own_config: bool,
        request: AssemblyRequest,
        warnings: &'a mut Vec<String>,
    ) -> BoxFuture<'a, Result<DelegatedCatalog, String>>;
    /// The model a run label names (`model:NAME`), built from `app`.
    fn model(&self, label: &str, app: &AppConfig) -> Result<Arc<dyn ChatModel>, String>;
    /// How runs (and their subagent tasks) reach their thread's files.
    fn thread_files_mode(&self) -> ThreadFilesMode;
    /// The tool hosts the lead's runs use.
    fn hosts(&self) -> &Arc<dyn ToolHosts>;
}

/// The delegator of one lead run.
pub struct LeadDelegator {
    pub env: Arc<dyn DelegationEnv>,
    pub app: Arc<AppConfig>,
    pub own_config: bool,
    pub parent_request: AssemblyRequest,
    pub parent_model: Arc<dyn ChatModel>,
    pub dispatcher: Addr<SubagentDispatcher>,
    pub limit: SubagentLimit,
    pub data_root: PathBuf,
    pub tool_timeout: Duration,
    pub skills: SkillStore,
    /// The parent's skills allowlist (`None`: all).
    pub parent_skills: Option<Vec<String>>,
    /// The parent run's approval policy, as its tasks carry it (`None`: none).
    pub approvals: Option<String>,
}

/// A task that ended before reaching a worker, with the model it would have used.
fn failed(text: impl Into<String>) -> TaskResult {
    TaskResult::failed(text)
}

fn budget(config: Option<&TokenBudgetConfig>) -> Option<TokenBudget> {
    let config = config?;
    let mut value = serde_json::Map::new();
    if let Some(enabled) = config.enabled {
        value.insert("enabled".into(), enabled.into());
    }
    if let Some(max) = config.max_tokens {
        value.insert("max_tokens".into(), max.into());
    }
    if let Some(warn) = config.warn_threshold {
        value.insert("warn_threshold".into(), warn.into());
    }
    TokenBudget::from_config(Some(&serde_json::Value::Object(value)))
        .ok()
        .flatten()
}

impl LeadDelegator {
    /// The task's spec: type, catalog, model, prompt and limits.
    async fn spec(&self, call: &TaskCall) -> Result<TaskSpec, String> {
        let ty = types::resolve(&self.app, &call.args.subagent_type)?;
        let mut request = AssemblyRequest::subagent_of(
            &self.parent_request,
            ty.tools.clone(),
            ty.disallowed_tools.clone(),
        );
        if let Some(model) = &ty.model {
            request.model_name = Some(model.clone());
        }
        let mut warnings = Vec::new();
        let (catalog, _denied) = self
            .env
            .catalog(&self.app, self.own_config, request, &mut warnings)
            .await
            .map_err(|e| format!("the subagent's tools could not be assembled: {e}"))?;
        let model = match &ty.model {
            Some(name) => self
                .env
                .model(&format!("model:{name}"), &self.app)?
                .for_subagent(&call.args),
            None => self.parent_model.for_subagent(&call.args),
        }
        .ok_or_else(|| "this run's model cannot be handed to a subagent worker".to_owned())?;
        let skills = types::skills_for(ty.skills.as_deref(), self.parent_skills.as_deref());
        let installed = if skills.as_ref().is_some_and(Vec::is_empty) {
            Vec::new()
        } else {
            self.skills.scan()
        };
        let allowed: Option<HashSet<String>> = skills.map(|s| s.into_iter().collect());
        let own_prompt = ty
            .system_prompt
            .as_deref()
            .or_else(|| builtin_system_prompt(&ty.name));
        let system_prompt = subagent_system_prompt(&SubagentPromptParts {
            catalog: &catalog,
            system_prompt: own_prompt,
            skills: &installed,
            allowed_skills: allowed.as_ref(),
            skills_container_root: &self.skills.container_root,
            skill_evolution: self.app.skill_evolution.enabled,
            skill_index: antler_engine::catalog::skills_deferred_discovery(&self.app),
        });
        let key = antler_protocol::placement::sandbox_id(&call.user_id, &call.thread_id);
        Ok(TaskSpec {
            run_id: call.run_id.clone(),
            tool_call_id: call.tool_call_id.clone(),
            user_id: call.user_id.clone(),
            thread_id: call.thread_id.clone(),
            data_root: self.data_root.clone(),
            thread_files: self.env.thread_files_mode(),
            subagent_type: ty.name.clone(),
            description: call.args.description.clone(),
            prompt: call.args.prompt.clone(),
            system_prompt,
            catalog: WireCatalog::of(&catalog, self.app.tool_search.enabled),
            model,
            max_turns: ty.max_turns as usize,
            timeout_s: ty.timeout_seconds,
            tool_timeout_s: self.tool_timeout.as_secs().max(1),
            token_budget: budget(ty.token_budget.as_ref()),
            web_tools: WireWebTools::of(&self.app.tools),
            sandbox_host: self
                .env
                .hosts()
                .pinned_address(Role::SandboxHost, &key)
                .await,
            mcp_host: self.env.hosts().pinned_address(Role::McpHost, &key).await,
            // Subagents summarize too (spec C.1), with their own model.
            summarization: antler_protocol::config::SummarizationConfig::from_section(
                self.app.other.get("summarization"),
            )
            .ok()
            .filter(|s| s.enabled),
            // The task's loop detection and output budget are the lead's (spec C.7, C.8).
            loop_detection: self.app.loop_detection(),
            tool_output: self.app.tool_output(),
            // The parent's approval policy decides the subagent's calls too (issue 37).
            approvals: self.approvals.as_deref().map(|wire| {
                antler_engine::TaskApprovals::for_task(
                    wire,
                    &call.thread_rules,
                    call.parent_answers,
                )
            }),
        })
    }

    /// A slot for the task, waiting for one at most `subagents.slot_wait_s`.
    async fn place(
        &self,
        run_id: &str,
        task_id: &str,
        events: &TaskEventSink,
    ) -> Result<Placement, String> {
        let wait = Duration::from_secs(self.app.subagents.slot_wait_s);
        let reserved = self
            .dispatcher
            .send(Reserve {
                run_id: run_id.to_owned(),
                max_concurrent: self.limit.max_concurrent(),
                max_total: self.limit.max_total(),
                wait,
            })
            .await
            .map_err(|e| format!("the subagent dispatcher is gone: {e}"))?;
        match reserved {
            Reserved::Placed(placement) => Ok(placement),
            Reserved::Refused(text) => Err(text),
            Reserved::Queued(mut slot) => {
                // Membership is re-read at once: a slot that comes within a moment is
                // not worth a waiting event.
                let quick = tokio::time::timeout(QUIET_WAIT, &mut slot).await;
                if let Ok(Ok(placed)) = quick {
                    return placed;
                }
                events(TaskEvent::TaskWaiting {
                    task_id: task_id.to_owned(),
                    deadline_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                });
                match tokio::time::timeout(wait + Duration::from_secs(1), slot).await {
                    Ok(Ok(placed)) => placed,
                    _ => Err(super::dispatcher::no_slot_text(0, 0, 1)),
                }
            }
        }
    }
}

/// Reads a task's stream to its end: events to `events`, the result last. A stream that
/// breaks is a lost worker.
async fn follow(
    stream: impl std::future::Future<Output = Result<Watch<TaskItem>, RpcError>>,
    node: &str,
    events: &TaskEventSink,
) -> Result<TaskResult, RpcError> {
    let mut stream = stream.await?;
    while let Some(item) = stream.next().await {
        match item {
            Ok(TaskItem::Event(event)) => events(TaskEvent::from(event)),
            Ok(TaskItem::Ended(result)) => return Ok(TaskResult::from(result)),
            Ok(TaskItem::Unknown) => {
                return Err(RpcError::Remote(RemoteError::Failed("unknown task".into())))
            }
            Err(RpcError::Unexpected(unexpected)) => {
                return Ok(failed(format!(
                    "unexpected reply from {node}: {}",
                    unexpected.reply
                )));
            }
            Err(e) => return Err(e),
        }
    }
    Err(RpcError::PeerUnavailable(format!(
        "{node} closed the task's stream"
    )))
}

/// A placed task's slot, given back to the dispatcher when the task's future ends,
/// however it ends: a run that is cancelled drops its task's future mid-stream.
struct Slot {
    dispatcher: Addr<SubagentDispatcher>,
    index: u32,
    run_id: String,
    /// Given back already (as `Unplace`).
    returned: bool,
}

impl Slot {
    /// The task did not start there after all: its slot and its run's counts go back.
    fn unplace(mut self) {
        self.returned = true;
        self.dispatcher.do_send(Unplace {
            index: self.index,
            run_id: self.run_id.clone(),
        });
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if !self.returned {
            self.dispatcher.do_send(Release {
                index: self.index,
                run_id: std::mem::take(&mut self.run_id),
            });
        }
    }
}

/// Follows a task again on worker `index` once its link is back, for at most
/// [`REATTACH_WINDOW`] of trying; `None`: the worker does not have the task (a new
/// process) or did not come back in time.
async fn reattach(
    dispatcher: &Addr<SubagentDispatcher>,
    index: u32,
    run_id: &str,
    tool_call_id: &str,
    timeout: Duration,
    events: &TaskEventSink,
) -> Option<TaskResult> {
    let until = tokio::time::Instant::now() + REATTACH_WINDOW;
    while tokio::time::Instant::now() < until {
        let workers = dispatcher.send(Connections).await.unwrap_or_default();
        if let Some((_, node, connection)) = workers.into_iter().find(|(i, _, _)| *i == index) {
            let attach = attach_task(
                &connection,
                run_id.to_owned(),
                tool_call_id.to_owned(),
                timeout,
            );
            match follow(attach, &node, events).await {
                Ok(result) => {
                    tracing::info!(worker = %node, run = %run_id, call = %tool_call_id, "followed the task again after its link came back");
                    return Some(result);
                }
                // The worker there does not know the task: its work is gone.
                Err(RpcError::Remote(_)) => return None,
                Err(_) => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

fn lost(node: &str, error: &RpcError) -> TaskResult {
    failed(format!(
        "the subagent worker {node} was lost mid-task ({error}); its work is gone"
    ))
}

impl Delegator for LeadDelegator {
    fn delegate(&self, call: TaskCall, events: TaskEventSink) -> BoxFuture<'static, TaskResult> {
        let this = LeadDelegator {
            env: Arc::clone(&self.env),
            app: Arc::clone(&self.app),
            own_config: self.own_config,
            parent_request: self.parent_request.clone(),
            parent_model: Arc::clone(&self.parent_model),
            dispatcher: self.dispatcher.clone(),
            limit: self.limit,
            data_root: self.data_root.clone(),
            tool_timeout: self.tool_timeout,
            skills: self.skills.clone(),
            parent_skills: self.parent_skills.clone(),
            approvals: self.approvals.clone(),
        };
        Box::pin(async move {
            let spec = match this.spec(&call).await {
                Ok(spec) => spec,
                Err(text) => return failed(text),
            };
            let model_name = spec.model.name().to_owned();
            let timeout = Duration::from_secs(spec.timeout_s) + STREAM_MARGIN;
            let wire_spec = match spec.to_wire() {
                Ok(wire_spec) => Box::new(wire_spec),
                Err(e) => return failed(format!("the task does not encode: {e}")),
            };
            for attempt in 1..=PLACEMENT_ATTEMPTS {
                let placement = match this.place(&call.run_id, &call.tool_call_id, &events).await {
                    Ok(placement) => placement,
                    Err(text) => {
                        return TaskResult {
                            model_name: Some(model_name),
                            ..failed(text)
                        }
                    }
                };
                let slot = Slot {
                    dispatcher: this.dispatcher.clone(),
                    index: placement.index,
                    run_id: call.run_id.clone(),
                    returned: false,
                };
                let assignment = TaskAssignment {
                    run_id: call.run_id.clone(),
                    tool_call_id: call.tool_call_id.clone(),
                    spec: wire_spec.clone(),
                };
                let run = run_task(&placement.connection, assignment, timeout);
                let outcome = follow(run, &placement.node, &events).await;
                match outcome {
                    Err(RpcError::Remote(
                        RemoteError::Overloaded(_) | RemoteError::ShuttingDown,
                    )) if attempt < PLACEMENT_ATTEMPTS => {
                        slot.unplace();
                        continue;
                    }
                    Err(e @ RpcError::PeerUnavailable(_)) => {
                        // The stream broke: the link, or the worker. A worker that is
                        // still there has the task still; its result is followed again.
                        let again = reattach(
                            &this.dispatcher,
                            placement.index,
                            &call.run_id,
                            &call.tool_call_id,
                            timeout,
                            &events,
                        )
                        .await;
                        drop(slot);
                        return again.unwrap_or_else(|| TaskResult {
                            model_name: Some(model_name),
                            worker: Some(placement.node.clone()),
                            ..lost(&placement.node, &e)
                        });
                    }
                    result => {
                        drop(slot);
                        return match result {
                            Ok(result) => result,
                            Err(e) => TaskResult {
                                model_name: Some(model_name),
                                worker: Some(placement.node.clone()),
                                ..lost(&placement.node, &e)
                            },
                        };
                    }
                }
            }
            failed("no subagent worker took the task")
        })
    }

    fn collect(
        &self,
        run_id: &str,
        tool_call_id: &str,
        events: TaskEventSink,
    ) -> BoxFuture<'static, Option<TaskResult>> {
        let dispatcher = self.dispatcher.clone();
        let run_id = run_id.to_owned();
        let tool_call_id = tool_call_id.to_owned();
        Box::pin(async move {
            // The links of a lead that just started may still be dialling.
            let until = tokio::time::Instant::now() + COLLECT_WAIT;
            let mut asked = HashSet::new();
            loop {
                let workers = dispatcher.send(Connections).await.unwrap_or_default();
                for (index, node, connection) in workers {
                    if !asked.insert(index) {
                        continue;
                    }
                    let timeout = Duration::from_secs(3600);
                    let attach =
                        attach_task(&connection, run_id.clone(), tool_call_id.clone(), timeout);
                    match follow(attach, &node, &events).await {
                        Ok(result) => return Some(result),
                        Err(RpcError::Remote(_)) => {}
                        Err(e) => return Some(lost(&node, &e)),
                    }
                }
                if tokio::time::Instant::now() >= until {
                    return None;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    }

    fn cancel_run(&self, run_id: &str) {
        let dispatcher = self.dispatcher.clone();
        let run_id = run_id.to_owned();
        // Sent under the caller's trace: a fenced run's cancel carries its lease epoch.
        let trace = antler_protocol::TraceContext::current();
        actix::spawn(antler_protocol::telemetry::within(trace, async move {
            let workers = dispatcher.send(Connections).await.unwrap_or_default();
            for (_, node, connection) in workers {
                if let Err(e) = connection
                    .cancel_tasks(run_id.clone(), None, Duration::from_secs(5))
                    .await
                {
                    tracing::warn!(worker = %node, run = %run_id, "cancel not delivered: {e}");
                }
            }
        }));
    }
}
