//! Turning a submission into a run loop ready to drive: the config (read again for every
//! run, so an edit applies to the next run), the model (a scripted playbook or a model of
//! `models:`), the catalog (from the lead's [`CatalogActor`], fed with the config, the
//! extensions and mcp-host's tool list whenever they change, and shared by every run of
//! one catalog version), the thread's directories on sandbox-host's base directory, and
//! the run's record in the checkpoint store. Resuming rebuilds the same from the record.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use actix::Addr;
use antler_protocol::config::{
    load_app_config, load_extensions_config, AppConfig, ExtensionsConfig,
};
use antler_protocol::messages::{
    ControlRequest, McpReply, McpRequest, Reply, Request, RunSubmission, SandboxReply,
    SandboxRequest,
};
use antler_protocol::Role;

use crate::catalog::actor::{Assemble, CatalogActor, SetConfig, SetExtensions, SetMcpTools};
use crate::catalog::assembly::{assemble, AssemblyError, AssemblyRequest, McpSourceTool, Sources};
use crate::catalog::Catalog;
use crate::run::actor::{RunError, RunLoop, RunSettings};
use crate::run::checkpoint::{CheckpointError, CheckpointStore, RunRecord};
use crate::run::context::{AgentContext, RunContext, ThreadPaths};
use crate::run::hosts::{HostError, ToolHosts};
use crate::run::middleware::guardrail::Guardrail;
use crate::run::model::{ChatModel, ModelError, ScriptedModel};
use crate::run::skills::SkillStore;

/// How a run records a scripted model, to resume it with the same playbook.
pub const SCRIPTED_PREFIX: &str = "scripted:";
/// How a run records a model of `models:` (empty name: the first).
pub const MODEL_PREFIX: &str = "model:";
/// Deadline of the set-up requests to the hosts (tool listing, status).
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a run waits for MCP servers still starting before it lists their tools.
const MCP_START_WAIT: Duration = Duration::from_secs(30);
/// The longest user or thread id.
const MAX_ID_LEN: usize = 128;

/// Why a run could not be started or resumed (the submitter sees it).
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error("invalid {what} {value:?}: use 1 to 128 letters, digits, '-' or '_'")]
    InvalidId { what: &'static str, value: String },
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("cannot assemble the catalog: {0}")]
    Catalog(#[from] AssemblyError),
    #[error("cannot prepare the run: {0}")]
    Host(#[from] HostError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("cannot create the thread's directories {path}: {source}")]
    ThreadDirs {
        path: String,
        source: std::io::Error,
    },
    #[error("no run {0}")]
    UnknownRun(String),
    #[error("the catalog actor is gone")]
    CatalogGone,
}

/// Seconds a client told to come back (HTTP 503 `Retry-After`) waits before it retries.
pub const RETRY_AFTER_S: u64 = 1;

impl PrepareError {
    /// The lead or a host is too busy, away or slow now (not the request's fault): the
    /// submitter should retry later, never get a 4xx for it.
    pub fn is_overload(&self) -> bool {
        match self {
            PrepareError::Host(e) => e.is_unavailable(),
            PrepareError::Checkpoint(e) | PrepareError::Run(RunError::Checkpoint(e)) => e.is_busy(),
            _ => false,
        }
    }
}

/// What the catalog actor was last fed, and the catalog of its last version.
#[derive(Default)]
struct Feed {
    config: Option<Arc<AppConfig>>,
    extensions: Option<Option<Arc<ExtensionsConfig>>>,
    mcp: Option<Vec<McpSourceTool>>,
    /// The sources version whose warnings were logged.
    warned: u64,
}

/// Everything a lead needs to prepare runs.
pub struct RunEnv {
    pub store: CheckpointStore,
    pub hosts: Arc<dyn ToolHosts>,
    pub catalog: Addr<CatalogActor>,
    /// The cluster's config.yaml (`None`: defaults).
    pub config_path: Option<PathBuf>,
    /// The cluster's extensions_config.json (mcp-host reads the same file).
    pub extensions_path: PathBuf,
    feed: Mutex<Feed>,
    base_dir: Mutex<Option<PathBuf>>,
}

/// A run ready to drive, with what the manager keeps beside it.
pub struct Prepared {
    pub run: RunLoop,
    pub record: RunRecord,
    pub catalog: Arc<Catalog>,
}

/// A user or thread id safe to use as a directory name (DeerFlow's thread id rule).
pub fn check_id(what: &'static str, value: &str) -> Result<(), PrepareError> {
    let ok = !value.is_empty()
        && value.len() <= MAX_ID_LEN
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(PrepareError::InvalidId {
            what,
            value: value.chars().take(MAX_ID_LEN + 8).collect(),
        })
    }
}

impl RunEnv {
    pub fn new(
        store: CheckpointStore,
        hosts: Arc<dyn ToolHosts>,
        catalog: Addr<CatalogActor>,
        config_path: Option<PathBuf>,
        extensions_path: PathBuf,
    ) -> RunEnv {
        RunEnv {
            store,
            hosts,
            catalog,
            config_path,
            extensions_path,
            feed: Mutex::new(Feed::default()),
            base_dir: Mutex::new(None),
        }
    }

    fn feed(&self) -> MutexGuard<'_, Feed> {
        self.feed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Reads config.yaml (`override_path` for this run, else the cluster's).
    fn load_config(&self, override_path: Option<&Path>) -> Result<Arc<AppConfig>, PrepareError> {
        match override_path.or(self.config_path.as_deref()) {
            Some(path) => {
                let loaded =
                    load_app_config(path).map_err(|e| PrepareError::Config(e.to_string()))?;
                Ok(Arc::new(loaded.value))
            }
            None => Ok(Arc::new(AppConfig::default())),
        }
    }

    fn load_extensions(&self) -> Result<Option<Arc<ExtensionsConfig>>, PrepareError> {
        if !self.extensions_path.exists() {
            return Ok(None);
        }
        load_extensions_config(&self.extensions_path)
            .map(|loaded| Some(Arc::new(loaded.value)))
            .map_err(|e| PrepareError::Config(e.to_string()))
    }

    /// The catalog for a run with `app`: the actor's (cached per sources version) when
    /// the run uses the cluster's config, else one assembled for this run alone.
    async fn catalog(
        &self,
        app: &Arc<AppConfig>,
        own_config: bool,
        request: AssemblyRequest,
    ) -> Result<Arc<Catalog>, PrepareError> {
        let extensions = self.load_extensions()?;
        let any_server = extensions
            .as_ref()
            .is_some_and(|e| e.mcp_servers.values().any(|s| s.enabled));
        let mcp = if any_server {
            wait_for_mcp_servers(self.hosts.as_ref()).await;
            mcp_tools(self.hosts.as_ref()).await?
        } else {
            Vec::new()
        };
        if own_config {
            let sources = Sources {
                config: app.clone(),
                extensions,
                mcp: crate::catalog::assembly::McpTools::new(mcp),
            };
            let assembled = assemble(&sources, &request)?;
            for warning in &assembled.warnings {
                tracing::warn!("{warning}");
            }
            return Ok(assembled.catalog);
        }
        let (new_config, new_extensions, new_mcp) = {
            let feed = self.feed();
            (
                feed.config.as_ref() != Some(app),
                feed.extensions.as_ref() != Some(&extensions),
                feed.mcp.as_ref() != Some(&mcp),
            )
        };
        if new_config {
            self.catalog
                .send(SetConfig(app.clone()))
                .await
                .map_err(|_| PrepareError::CatalogGone)?;
            self.feed().config = Some(app.clone());
        }
        if new_extensions {
            self.catalog
                .send(SetExtensions(extensions.clone()))
                .await
                .map_err(|_| PrepareError::CatalogGone)?;
            self.feed().extensions = Some(extensions);
        }
        if new_mcp {
            self.catalog
                .send(SetMcpTools {
                    server: None,
                    tools: mcp.clone(),
                })
                .await
                .map_err(|_| PrepareError::CatalogGone)?;
            self.feed().mcp = Some(mcp);
        }
        // The actor caches one catalog per (sources version, request): every run of a
        // version shares it.
        let built = self
            .catalog
            .send(Assemble(request))
            .await
            .map_err(|_| PrepareError::CatalogGone)??;
        let mut feed = self.feed();
        if feed.warned != built.version {
            feed.warned = built.version;
            for warning in &built.assembled.warnings {
                tracing::warn!("{warning}");
            }
        }
        Ok(built.assembled.catalog.clone())
    }

    /// Waits (at most `within`) until sandbox-host and mcp-host answer a ping.
    pub async fn wait_for_hosts(&self, within: Duration) {
        let until = std::time::Instant::now() + within;
        for role in [Role::SandboxHost, Role::McpHost] {
            while std::time::Instant::now() < until {
                let ping = Request::Control(ControlRequest::Ping {
                    payload: Vec::new(),
                });
                if self
                    .hosts
                    .request(role, ping, Duration::from_secs(1))
                    .await
                    .is_ok()
                {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// Where sandbox-host keeps thread directories (asked once, then remembered).
    async fn base_dir(&self) -> Result<PathBuf, PrepareError> {
        if let Some(dir) = self
            .base_dir
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
        {
            return Ok(dir);
        }
        let reply = self
            .hosts
            .request(
                Role::SandboxHost,
                Request::Sandbox(SandboxRequest::Status),
                SETUP_TIMEOUT,
            )
            .await?;
        let dir = match reply {
            Reply::Sandbox(SandboxReply::Status(status)) => PathBuf::from(status.base_dir),
            other => {
                return Err(PrepareError::Host(HostError::failed(format!(
                    "unexpected reply from sandbox-host: {other:?}"
                ))))
            }
        };
        *self
            .base_dir
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(dir.clone());
        Ok(dir)
    }

    #[allow(clippy::too_many_arguments)]
    async fn context(
        &self,
        app: &AppConfig,
        run_id: &str,
        user: &str,
        thread: &str,
        clarification: bool,
        agent: Option<&str>,
        bootstrap: bool,
    ) -> Result<RunContext, PrepareError> {
        let base = self.base_dir().await?;
        let paths = ThreadPaths::new(&base, user, thread);
        paths.create().map_err(|source| PrepareError::ThreadDirs {
            path: paths.user_data().display().to_string(),
            source,
        })?;
        Ok(RunContext {
            run_id: run_id.to_owned(),
            user_id: user.to_owned(),
            thread_id: thread.to_owned(),
            paths,
            clarification_enabled: clarification,
            agent: AgentContext {
                models: app.models.iter().map(|m| m.name.clone()).collect(),
                agent_name: agent.map(str::to_owned),
                bootstrap,
                ..AgentContext::new(&base)
            },
        })
    }

    /// A new run, recorded as `running` with its initial state.
    pub async fn start(
        &self,
        run_id: &str,
        submission: &RunSubmission,
    ) -> Result<Prepared, PrepareError> {
        check_id("user", &submission.user)?;
        let thread = submission
            .thread
            .clone()
            .unwrap_or_else(|| run_id.to_owned());
        check_id("thread", &thread)?;
        let config_override = submission.config.as_deref().map(Path::new);
        let app = self.load_config(config_override)?;
        let label = match &submission.playbook {
            Some(path) => format!("{SCRIPTED_PREFIX}{path}"),
            None => format!(
                "{MODEL_PREFIX}{}",
                submission.model.as_deref().unwrap_or("")
            ),
        };
        let model = model_for(&label, &app)?;
        let request = assembly_request(
            submission.model.clone(),
            submission.agent.clone(),
            submission.bootstrap,
        );
        let catalog = self
            .catalog(&app, config_override.is_some(), request)
            .await?;
        let context = self
            .context(
                &app,
                run_id,
                &submission.user,
                &thread,
                submission.clarification,
                submission.agent.as_deref(),
                submission.bootstrap,
            )
            .await?;
        let settings = self.settings(&app, &context)?;
        let run = RunLoop::start(
            context,
            &submission.task,
            model,
            &label,
            catalog.clone(),
            self.hosts.clone(),
            self.store.clone(),
            settings,
        )?;
        let record = self
            .store
            .run(run_id)?
            .ok_or_else(|| PrepareError::UnknownRun(run_id.to_owned()))?;
        Ok(Prepared {
            run,
            record,
            catalog,
        })
    }

    /// A stopped run from its last checkpoint, with `answer` added as the user's turn.
    pub async fn resume(
        &self,
        run_id: &str,
        answer: Option<&str>,
        playbook: Option<&str>,
    ) -> Result<Prepared, PrepareError> {
        let record = self
            .store
            .run(run_id)?
            .ok_or_else(|| PrepareError::UnknownRun(run_id.to_owned()))?;
        let app = self.load_config(None)?;
        let label = match playbook {
            Some(path) => format!("{SCRIPTED_PREFIX}{path}"),
            None => record.model.clone(),
        };
        let model = model_for(&label, &app)?;
        let model_name = label
            .strip_prefix(MODEL_PREFIX)
            .filter(|n| !n.is_empty())
            .map(str::to_owned);
        let request = assembly_request(model_name, record.agent.clone(), record.bootstrap);
        let catalog = self.catalog(&app, false, request).await?;
        let context = self
            .context(
                &app,
                run_id,
                &record.user_id,
                &record.thread_id,
                record.clarification,
                record.agent.as_deref(),
                record.bootstrap,
            )
            .await?;
        let settings = self.settings(&app, &context)?;
        let mut run = RunLoop::resume(
            context,
            model,
            catalog.clone(),
            self.hosts.clone(),
            self.store.clone(),
            settings,
        )?;
        if let Some(answer) = answer {
            run.answer(answer)?;
        }
        Ok(Prepared {
            run,
            record,
            catalog,
        })
    }
}

impl RunEnv {
    /// A run's settings from config.yaml; its skills are where sandbox-host mounts them
    /// (under the same data root), enabled by the cluster's extensions file.
    fn settings(&self, app: &AppConfig, context: &RunContext) -> Result<RunSettings, PrepareError> {
        Ok(RunSettings {
            auto_promote_top_k: app.tool_search.top_k(),
            guardrail: Guardrail::from_config(&app.guardrails)
                .map_err(|e| PrepareError::Config(e.to_string()))?,
            skills: SkillStore::from_config(
                app,
                &context.agent.base_dir,
                Some(self.extensions_path.clone()),
            ),
            ..RunSettings::default()
        })
    }
}

/// The lead's assembly request for a run: the model decides `view_image`, a custom
/// agent's chat offers `update_agent`, a bootstrap run `setup_agent`.
fn assembly_request(
    model: Option<String>,
    agent: Option<String>,
    bootstrap: bool,
) -> AssemblyRequest {
    let mut request = AssemblyRequest::lead();
    request.model_name = model;
    request.builtins.agent_name = agent;
    request.builtins.bootstrap = bootstrap;
    request
}

/// The model a run label names: `scripted:PATH` or `model:NAME`.
pub fn model_for(label: &str, app: &AppConfig) -> Result<Arc<dyn ChatModel>, PrepareError> {
    if let Some(path) = label.strip_prefix(SCRIPTED_PREFIX) {
        return Ok(Arc::new(ScriptedModel::from_file(Path::new(path))?));
    }
    let name = label.strip_prefix(MODEL_PREFIX).filter(|n| !n.is_empty());
    named_model(app, name)
}

/// A model of config.yaml's `models:` (the first when unnamed), or the endpoint the
/// environment names when `models:` is empty: any OpenAI-compatible server.
fn named_model(app: &AppConfig, name: Option<&str>) -> Result<Arc<dyn ChatModel>, PrepareError> {
    Ok(crate::run::openai::model_from_config(
        app,
        name,
        &antler_protocol::config::process_env,
    )?)
}

/// Waits until no MCP server is `starting` (each is ready or has failed), or the time
/// is up; the run then uses the tools of the servers that are ready.
async fn wait_for_mcp_servers(hosts: &dyn ToolHosts) {
    let until = std::time::Instant::now() + MCP_START_WAIT;
    while std::time::Instant::now() < until {
        let request = Request::Mcp(McpRequest::Status);
        match hosts.request(Role::McpHost, request, SETUP_TIMEOUT).await {
            Ok(Reply::Mcp(McpReply::Status(servers)))
                if servers.iter().all(|s| s.state != "starting") =>
            {
                return
            }
            Ok(_) | Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    tracing::warn!(
        "MCP servers still starting after {MCP_START_WAIT:?}; running with the tools listed now"
    );
}

/// mcp-host's tools, in its order, with each server's positions.
async fn mcp_tools(hosts: &dyn ToolHosts) -> Result<Vec<McpSourceTool>, PrepareError> {
    let request = Request::Mcp(McpRequest::ListTools { server: None });
    let reply = hosts.request(Role::McpHost, request, SETUP_TIMEOUT).await?;
    let Reply::Mcp(McpReply::Tools(tools)) = reply else {
        return Err(PrepareError::Host(HostError::failed(format!(
            "unexpected reply from mcp-host: {reply:?}"
        ))));
    };
    let mut positions = std::collections::HashMap::<String, u32>::new();
    let mut out = Vec::with_capacity(tools.len());
    for tool in tools {
        let position = positions.entry(tool.server.clone()).or_default();
        let input_schema = match serde_json::from_str(&tool.input_schema_json) {
            Ok(schema) => schema,
            Err(e) => {
                tracing::warn!(
                    "tool {} of {} has a schema that is not JSON ({e}); left out",
                    tool.name,
                    tool.server
                );
                continue;
            }
        };
        out.push(McpSourceTool {
            input_schema,
            server: tool.server,
            name: tool.name,
            original_name: tool.original_name,
            description: tool.description,
            position: *position,
        });
        *position += 1;
    }
    Ok(out)
}
