//! Turning a submission into a run loop ready to drive: the config (parsed again when it
//! changed, so an edit applies to the next run; `config_files`), the model (a scripted
//! playbook or a model of `models:`; `model`), the catalog (from the lead's
//! [`CatalogActor`], fed with the config, the extensions and mcp-host's tool list whenever
//! they change, and shared by every run of one catalog version; `catalog`), the thread's
//! directories on sandbox-host's base directory (`hosts`), and the run's record in the
//! checkpoint store. Resuming rebuilds the same from the record. This module owns
//! [`RunEnv`] and the start and resume of a run; the others add to `RunEnv` by concern.
//! A run submitted while its hosts are still starting waits for their links (at most
//! [`HOSTS_START_WAIT`] each); it never waits on an MCP server that is not ready, and an
//! extensions file that does not load (caught half-written) gives way to the last good
//! one: both become warnings of the run.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use actix::Addr;
use antler_protocol::config::{load_extensions_config, AppConfig, ExtensionsConfig};
use antler_protocol::messages::{PlaybookSource, RunSubmission, ThreadFileError};
use futures::future::BoxFuture;

use crate::agents::profile::AgentProfile;
use crate::agents::LeadAgentTools;
use crate::runs::store::{CheckpointError, CheckpointStore, RunRecord, RunStatus};
use crate::subagents::delegator::{DelegatedCatalog, DelegationEnv, LeadDelegator};
use antler_engine::{
    catalog::{AssemblyError, AssemblyRequest, Catalog, CatalogActor, McpSourceTool},
    AgentContext, CancelFlag, ChatModel, Delegator, Guardrail, HostError, ModelError, PromptCache,
    PromptInputs, PromptMount, RunBuilder, RunContext, RunError, RunLoop, RunSettings, SkillStore,
    SubagentLimit, SubagentPromptInputs, ThreadFiles, ThreadFilesMode, ThreadPaths, ThreadState,
    TokenBudget, ToolHosts, WebTools, MAX_PLAYBOOK_BYTES,
};

mod approvals;
use approvals::SkillRules;
mod catalog;
mod config_files;
pub(crate) mod context;
mod hosts;
mod model;
mod session;

use catalog::assembly_request;
use config_files::ConfigFiles;
use model::{label_model, moderation_model, named_playbook};
pub use model::{model_for, shown_model};
pub use session::{ClientSession, CLIENT_SESSION_LABEL};

/// How a run records a scripted model, to resume it with the same playbook.
pub const SCRIPTED_PREFIX: &str = "scripted:";
/// How a run records a playbook sent inline (the YAML follows).
pub const SCRIPTED_INLINE_PREFIX: &str = "scripted-yaml:";
/// How a run records a model of `models:` (empty name: the first).
pub const MODEL_PREFIX: &str = "model:";
/// Deadline of the set-up requests to the hosts (tool listing, status). mcp-host answers
/// a discovery within seconds: it waits only briefly for servers just started.
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);
/// The run's warning when the extensions file did not load. The file holds secrets, so
/// the event does not quote the parse error (the lead's log has it).
pub const EXTENSIONS_FALLBACK_WARNING: &str =
    "the extensions config could not be loaded (see the lead's log); this run uses the last good one";
/// The run's warning when mcp-host does not answer the discovery.
pub const MCP_HOST_UNREACHABLE_WARNING: &str =
    "mcp-host cannot be reached; this run goes on without MCP tools";
/// The error of a cancelled run ("the run was cancelled").
static CANCELLED: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| RunError::Cancelled.to_string());
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
        source: ThreadFileError,
    },
    /// The run's thread files could not be read now (sandbox-host away or too slow).
    #[error("the thread's files are unavailable: {0}")]
    FilesUnavailable(String),
    #[error("no run {0}")]
    UnknownRun(String),
    /// A repeat of a keyed submission that is still being prepared: the client retries
    /// (503 with `Retry-After`) and is answered the run once it is stored, or starts it
    /// afresh when the first attempt died with its lead.
    #[error("run {0} is being submitted; retry")]
    BeingSubmitted(String),
    #[error("the catalog actor is gone")]
    CatalogGone,
    /// A playbook the submitter may not name, or that is not there.
    #[error("{0}")]
    Playbook(String),
    /// An answer for a run that is not waiting for one.
    #[error("run {run_id} is {status}, not waiting for an answer")]
    NotWaiting { run_id: String, status: String },
    /// Another run is active on the thread (spec A.4's `reject`).
    #[error("Thread {thread} already has an active run")]
    ThreadBusy { thread: String, run_id: String },
    #[error("Thread {0} not found")]
    ThreadNotFound(String),
    /// A cancel of a run that has ended already.
    #[error("run {run_id} is {status}, not running")]
    NotRunning { run_id: String, status: String },
    /// A download of a file the run did not present (or that is gone).
    #[error("run {run_id} presented no file {path}")]
    NoArtifact { run_id: String, path: String },
    /// The run's lease could not be taken (`antler.ha`: its database away or slow).
    #[error("cannot take the run's lease: {0}")]
    Leases(String),
}

impl From<crate::runs::store::ThreadRefusal> for PrepareError {
    fn from(refusal: crate::runs::store::ThreadRefusal) -> PrepareError {
        use crate::runs::store::ThreadRefusal;
        match refusal {
            ThreadRefusal::NotFound(thread) => PrepareError::ThreadNotFound(thread),
            ThreadRefusal::Busy { thread, run_id } => PrepareError::ThreadBusy { thread, run_id },
        }
    }
}

/// Seconds a client told to come back (HTTP 503 `Retry-After`) waits before it retries.
pub const RETRY_AFTER_S: u64 = 1;

impl PrepareError {
    /// The lead or a host is too busy, away or slow now (not the request's fault): the
    /// submitter should retry later, never get a 4xx for it.
    pub fn is_overload(&self) -> bool {
        match self {
            PrepareError::Host(e) => e.is_unavailable(),
            PrepareError::Checkpoint(e) => e.is_busy(),
            PrepareError::Run(RunError::Journal(e)) => e.busy,
            PrepareError::ThreadDirs {
                source: ThreadFileError::Unavailable(_),
                ..
            }
            | PrepareError::FilesUnavailable(_)
            | PrepareError::BeingSubmitted(_)
            | PrepareError::Leases(_) => true,
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
    /// The last extensions config that loaded (`Some(None)`: there was no file).
    last_good_extensions: Option<Option<Arc<ExtensionsConfig>>>,
}

/// Everything a lead needs to prepare runs.
pub struct RunEnv {
    pub store: CheckpointStore,
    pub hosts: Arc<dyn ToolHosts>,
    pub catalog: Addr<CatalogActor>,
    /// Where `task` calls are placed (`None`: runs are never offered `task`).
    pub dispatcher: Option<Addr<crate::subagents::dispatcher::SubagentDispatcher>>,
    /// The cluster's config.yaml (`None`: defaults).
    pub config_path: Option<PathBuf>,
    /// The cluster's extensions_config.json (mcp-host reads the same file).
    pub extensions_path: PathBuf,
    feed: Mutex<Feed>,
    base_dir: Mutex<Option<PathBuf>>,
    /// System prompts by their inputs, shared by the runs of this lead.
    prompts: PromptCache,
    /// The compiled approval policy of the current config.yaml.
    approvals: approvals::PolicyCache,
    /// How runs (and their subagent tasks) reach their thread's files.
    thread_files: ThreadFilesMode,
    /// The memory worker of a long-lived lead (an ephemeral one only queues updates).
    pub memory_worker: std::sync::OnceLock<Addr<crate::memory::worker::MemoryWorker>>,
    /// config.yaml and the extensions file, parsed once per version.
    files: ConfigFiles,
}

/// A run ready to drive, with what the manager keeps beside it.
pub struct Prepared {
    pub run: RunLoop,
    pub record: RunRecord,
    pub catalog: Arc<Catalog>,
    /// What the set-up worked around, for the run's warning events.
    pub warnings: Vec<String>,
    /// Cancels the run (`antler cancel`): its drive ends `error`, its tasks cancelled.
    pub cancel: Arc<CancelFlag>,
    /// Tools the authorization policy removed for the run's principal.
    pub denied: Vec<String>,
    /// The run's skills, for the skill policy in force (from its active skills).
    pub skills: SkillStore,
    /// The last event the store keeps of a resumed run (`None`: a new run, or none kept):
    /// this lead's log of it goes on after it.
    pub last_event: Option<crate::runs::events::EventId>,
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
        // The file as the cluster starts is the first last good one.
        let last_good_extensions = if extensions_path.exists() {
            load_extensions_config(&extensions_path)
                .ok()
                .map(|loaded| Some(Arc::new(loaded.value)))
        } else {
            Some(None)
        };
        RunEnv {
            store,
            hosts,
            catalog,
            dispatcher: None,
            config_path,
            extensions_path,
            feed: Mutex::new(Feed {
                last_good_extensions,
                ..Feed::default()
            }),
            base_dir: Mutex::new(None),
            prompts: PromptCache::default(),
            approvals: approvals::PolicyCache::default(),
            thread_files: ThreadFilesMode::Local,
            files: ConfigFiles::default(),
            memory_worker: std::sync::OnceLock::new(),
        }
    }

    /// Runs (and their subagent tasks) reach their thread's files through the
    /// sandbox-host replica that owns the thread instead of this machine's disk: for a
    /// cluster whose lead and workers have no access to sandbox-host's volume.
    pub fn thread_files_through_sandbox_host(&mut self) {
        self.thread_files = ThreadFilesMode::SandboxHost;
    }

    /// config.yaml as the next run would read it (the gateway's uploads read `uploads:`).
    pub async fn app_config(&self) -> Result<Arc<AppConfig>, PrepareError> {
        self.load_config(None).await
    }

    /// How runs reach their thread's files.
    pub fn thread_files_mode(&self) -> ThreadFilesMode {
        self.thread_files
    }

    /// The files of (`user`, `thread`), whose directories on this disk would be `paths`.
    pub fn thread_files(
        &self,
        paths: &ThreadPaths,
        user: &str,
        thread: &str,
    ) -> Arc<dyn ThreadFiles> {
        self.thread_files
            .for_thread(paths, Arc::clone(&self.hosts), user, thread)
    }

    fn feed(&self) -> MutexGuard<'_, Feed> {
        self.feed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
        interactive: bool,
    ) -> Result<RunContext, PrepareError> {
        let base = self.base_dir().await?;
        let paths = ThreadPaths::new(&base, user, thread);
        let files = self.thread_files(&paths, user, thread);
        files
            .ensure_dirs()
            .await
            .map_err(|source| PrepareError::ThreadDirs {
                path: paths.user_data().display().to_string(),
                source,
            })?;
        Ok(RunContext {
            run_id: run_id.to_owned(),
            user_id: user.to_owned(),
            thread_id: thread.to_owned(),
            paths,
            files,
            clarification_enabled: clarification,
            agent: AgentContext {
                models: app.models.iter().map(|m| m.name.clone()).collect(),
                agent_name: agent.map(str::to_owned),
                bootstrap,
                non_interactive: !interactive,
                ..AgentContext::new(&base)
            },
            // Set by the run's lease when several leads share the runs (issue 38).
            epoch: None,
        })
    }

    /// A new run, recorded as `running` with its initial state.
    pub async fn start(
        self: &Arc<Self>,
        run_id: &str,
        submission: &RunSubmission,
    ) -> Result<Prepared, PrepareError> {
        check_id("user", &submission.user)?;
        let thread = submission
            .thread
            .clone()
            .unwrap_or_else(|| run_id.to_owned());
        check_id("thread", &thread)?;
        // A named thread continues: it is claimed (one active run per thread) and the run
        // starts from its latest state; a claim whose run is never created is let go of.
        let Some(named) = &submission.thread else {
            return self.start_from(run_id, submission, &thread, None).await;
        };
        let user = submission.user.clone();
        let (id, name) = (run_id.to_owned(), named.clone());
        let claimed = self
            .store
            .call(move |store| {
                let (previous, _) = store.create_thread(&user, &name, &Default::default())?;
                Ok(store
                    .claim_thread(&user, &name, &id)?
                    .map(|state| (previous, state)))
            })
            .await?;
        let (previous, state) = claimed.map_err(PrepareError::from)?;
        let started = self
            .start_from(run_id, submission, &thread, Some(state.unwrap_or_default()))
            .await;
        if started.is_err() {
            let (user, name, id) = (submission.user.clone(), named.clone(), run_id.to_owned());
            drop(
                self.store
                    .call(move |store| store.release_thread(&user, &name, &id, &previous)),
            );
        }
        started
    }

    /// [`RunEnv::start`] once the thread is known: `state` is a named thread's latest (the
    /// default state for one that has none yet), `None` for a run on a thread of its own.
    async fn start_from(
        self: &Arc<Self>,
        run_id: &str,
        submission: &RunSubmission,
        thread: &str,
        state: Option<ThreadState>,
    ) -> Result<Prepared, PrepareError> {
        self.wait_for_sandbox_host().await;
        let config_override = submission.config.as_deref().map(Path::new);
        let app = self.load_config(config_override).await?;
        // The custom agent's files: its model and tool groups shape the run from the start.
        let profile = AgentProfile::load(
            &AgentContext {
                agent_name: submission.agent.clone(),
                bootstrap: submission.bootstrap,
                ..AgentContext::new(&self.base_dir().await?)
            },
            &submission.user,
        );
        let label = match &submission.playbook {
            Some(PlaybookSource::File(path)) => format!("{SCRIPTED_PREFIX}{path}"),
            Some(PlaybookSource::Named(name)) => {
                let dir_base = config_override
                    .or(self.config_path.as_deref())
                    .and_then(Path::parent);
                let path = named_playbook(&app.antler.playbook_dirs, dir_base, name)?;
                format!("{SCRIPTED_PREFIX}{}", path.display())
            }
            Some(PlaybookSource::Inline(yaml)) => {
                if yaml.len() > MAX_PLAYBOOK_BYTES {
                    return Err(PrepareError::Playbook(format!(
                        "the playbook is larger than {} KiB",
                        MAX_PLAYBOOK_BYTES / 1024
                    )));
                }
                format!("{SCRIPTED_INLINE_PREFIX}{yaml}")
            }
            None => format!(
                "{MODEL_PREFIX}{}",
                submission
                    .model
                    .as_deref()
                    .or(profile.model.as_deref())
                    .unwrap_or("")
            ),
        };
        let model = model_for(&label, &app)?;
        let subagents =
            self.dispatcher.is_some() && submission.subagents.unwrap_or(app.subagents.enabled);
        let mut request = assembly_request(
            label_model(&label),
            submission.agent.clone(),
            submission.bootstrap,
            submission.interactive,
            profile.tool_groups.clone(),
        );
        request.builtins.subagent_enabled = subagents;
        request.principal = antler_engine::catalog::Principal {
            user: Some(submission.user.clone()),
            role: submission.role.clone(),
            agent: submission.agent.clone(),
        };
        let mut warnings = Vec::new();
        let (catalog, denied) = self
            .catalog(
                &app,
                config_override.is_some(),
                request.clone(),
                &mut warnings,
            )
            .await?;
        let mut context = self
            .context(
                &app,
                run_id,
                &submission.user,
                thread,
                submission.clarification,
                submission.agent.as_deref(),
                submission.bootstrap,
                submission.interactive,
            )
            .await?;
        context.agent.subagents = subagents;
        context.agent.role = submission.role.clone();
        let prompt_catalog = model.reads_prompt().then_some(&catalog);
        let (settings, skill_rules) = self.settings(&app, &context, &profile, prompt_catalog)?;
        let mut settings = context::with_context(settings, &app, &label)?;
        self.add_memory(&app, &context, &label, &mut settings)
            .await?;
        let skills = settings.skills.clone();
        let delegator = self.delegator(
            &app,
            config_override.is_some(),
            request,
            &model,
            &context,
            &settings,
            &profile,
            &skill_rules,
        );
        let cancel = Arc::new(CancelFlag::default());
        let builder = self
            .builder(context, model, &catalog, settings, delegator)
            .cancel(Arc::clone(&cancel))
            .model_label(&label)
            .files(submission.files.clone());
        let run = match state {
            // A thread with no message yet (created, never run) starts as a new one, unless
            // a goal was set on it first (the goal carries over).
            Some(state) if !state.messages.is_empty() || state.goal.is_some() => {
                builder.start_on(state, &submission.task).await?
            }
            _ => builder.start(&submission.task).await?,
        };
        let id = run_id.to_owned();
        let record = self
            .store
            .call(move |store| store.run(&id))
            .await?
            .ok_or_else(|| PrepareError::UnknownRun(run_id.to_owned()))?;
        Ok(Prepared {
            run,
            record,
            catalog,
            warnings,
            cancel,
            denied,
            skills,
            last_event: None,
        })
    }

    /// A stopped run from its last checkpoint, with `answer` added as the user's turn.
    pub async fn resume(
        self: &Arc<Self>,
        run_id: &str,
        answer: Option<&str>,
        playbook: Option<&str>,
    ) -> Result<Prepared, PrepareError> {
        let id = run_id.to_owned();
        let (record, last_event) = self
            .store
            .call(move |store| Ok((store.run(&id)?, store.last_event(&id)?)))
            .await?;
        let record = record.ok_or_else(|| PrepareError::UnknownRun(run_id.to_owned()))?;
        // Only a run stopped at a question takes an answer; a finished run is never re-driven.
        if answer.is_some() && record.status != RunStatus::Interrupted {
            return Err(PrepareError::NotWaiting {
                run_id: run_id.to_owned(),
                status: record.status.as_str().to_owned(),
            });
        }
        // A client's session run is never driven by a model: one a stopped lead left
        // `running` ends here.
        if record.model == CLIENT_SESSION_LABEL {
            if record.status == RunStatus::Running {
                let id = run_id.to_owned();
                self.store
                    .call(move |store| {
                        store.set_status(
                            &id,
                            RunStatus::Error,
                            Some(session::SESSION_ENDED_WITH_LEAD),
                        )
                    })
                    .await?;
            }
            return Err(PrepareError::NotRunning {
                run_id: run_id.to_owned(),
                status: "an ended MCP session".to_owned(),
            });
        }
        // A cancelled run stays cancelled: it is never driven again.
        if record.status == RunStatus::Error && record.detail.as_deref() == Some(CANCELLED.as_str())
        {
            return Err(PrepareError::NotRunning {
                run_id: run_id.to_owned(),
                status: "cancelled".to_owned(),
            });
        }
        self.wait_for_sandbox_host().await;
        let app = self.load_config(None).await?;
        let label = match playbook {
            Some(path) => format!("{SCRIPTED_PREFIX}{path}"),
            None => record.model.clone(),
        };
        let model = model_for(&label, &app)?;
        let profile = AgentProfile::load(
            &AgentContext {
                agent_name: record.agent.clone(),
                bootstrap: record.bootstrap,
                ..AgentContext::new(&self.base_dir().await?)
            },
            &record.user_id,
        );
        let subagents = self.dispatcher.is_some() && record.subagents;
        let mut request = assembly_request(
            label_model(&label),
            record.agent.clone(),
            record.bootstrap,
            !record.non_interactive,
            profile.tool_groups.clone(),
        );
        request.builtins.subagent_enabled = subagents;
        request.principal = antler_engine::catalog::Principal {
            user: Some(record.user_id.clone()),
            role: record.role.clone(),
            agent: record.agent.clone(),
        };
        let mut warnings = Vec::new();
        let (catalog, denied) = self
            .catalog(&app, false, request.clone(), &mut warnings)
            .await?;
        let mut context = self
            .context(
                &app,
                run_id,
                &record.user_id,
                &record.thread_id,
                record.clarification,
                record.agent.as_deref(),
                record.bootstrap,
                !record.non_interactive,
            )
            .await?;
        context.agent.subagents = subagents;
        context.agent.role = record.role.clone();
        let prompt_catalog = model.reads_prompt().then_some(&catalog);
        let (settings, skill_rules) = self.settings(&app, &context, &profile, prompt_catalog)?;
        let mut settings = context::with_context(settings, &app, &label)?;
        self.add_memory(&app, &context, &label, &mut settings)
            .await?;
        let skills = settings.skills.clone();
        let delegator = self.delegator(
            &app,
            false,
            request,
            &model,
            &context,
            &settings,
            &profile,
            &skill_rules,
        );
        let cancel = Arc::new(CancelFlag::default());
        let mut run = self
            .builder(context, model, &catalog, settings, delegator)
            .cancel(Arc::clone(&cancel))
            .resume()
            .await?;
        if record.status == RunStatus::Interrupted && !run.state().approvals.pending.is_empty() {
            // A run waiting on approvals takes them, never a clarification's answer.
            if answer.is_some() {
                return Err(PrepareError::NotWaiting {
                    run_id: run_id.to_owned(),
                    status: "waiting for approvals, not an answer".to_owned(),
                });
            }
            let id = run_id.to_owned();
            let decisions = self
                .store
                .call(move |store| store.approval_decisions(&id))
                .await?;
            run.decide(decisions).await?;
        } else if let Some(answer) = answer {
            run.answer(answer).await?;
        }
        Ok(Prepared {
            run,
            record,
            catalog,
            warnings,
            cancel,
            denied,
            skills,
            last_event,
        })
    }
}

impl DelegationEnv for RunEnv {
    fn catalog<'a>(
        &'a self,
        app: &'a Arc<AppConfig>,
        own_config: bool,
        request: AssemblyRequest,
        warnings: &'a mut Vec<String>,
    ) -> BoxFuture<'a, Result<DelegatedCatalog, String>> {
        Box::pin(async move {
            RunEnv::catalog(self, app, own_config, request, warnings)
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn model(&self, label: &str, app: &AppConfig) -> Result<Arc<dyn ChatModel>, String> {
        model_for(label, app).map_err(|e| e.to_string())
    }

    fn thread_files_mode(&self) -> ThreadFilesMode {
        self.thread_files
    }

    fn hosts(&self) -> &Arc<dyn ToolHosts> {
        &self.hosts
    }
}

impl RunEnv {
    /// The lead's run of `model` over `catalog`: journaled in the checkpoint store, with
    /// the custom-agent tools.
    fn builder(
        &self,
        context: RunContext,
        model: Arc<dyn ChatModel>,
        catalog: &Arc<Catalog>,
        settings: RunSettings,
        delegator: Option<Arc<dyn Delegator>>,
    ) -> RunBuilder {
        let builder = RunLoop::builder(context, model, Arc::clone(catalog), self.hosts.clone())
            .journal(Arc::new(self.store.clone()))
            .lead_tools(Arc::new(LeadAgentTools))
            .settings(settings);
        match delegator {
            Some(delegator) => builder.delegator(delegator),
            None => builder,
        }
    }

    /// The run's delegator when it is offered `task`: its tasks are placed through the
    /// cluster's dispatcher, with the parent's assembly request, model and skills.
    #[allow(clippy::too_many_arguments)]
    fn delegator(
        self: &Arc<Self>,
        app: &Arc<AppConfig>,
        own_config: bool,
        request: AssemblyRequest,
        model: &Arc<dyn ChatModel>,
        context: &RunContext,
        settings: &RunSettings,
        profile: &AgentProfile,
        skill_rules: &SkillRules,
    ) -> Option<Arc<dyn Delegator>> {
        let dispatcher = self
            .dispatcher
            .clone()
            .filter(|_| context.agent.subagents)?;
        Some(Arc::new(LeadDelegator {
            env: Arc::clone(self) as Arc<dyn DelegationEnv>,
            app: Arc::clone(app),
            own_config,
            parent_request: request,
            parent_model: Arc::clone(model),
            dispatcher,
            limit: settings.subagent_limit,
            data_root: context.agent.base_dir.clone(),
            tool_timeout: settings.tool_timeout,
            skills: settings.skills.clone(),
            parent_skills: profile.skills.as_ref().map(|s| s.iter().cloned().collect()),
            approvals: approvals::task_approvals(
                app,
                approvals::RunLayers {
                    role: context.agent.role.as_deref(),
                    agent: context
                        .agent
                        .agent_name
                        .as_deref()
                        .zip(profile.approvals.as_deref().ok()),
                    skills: skill_rules,
                },
            ),
        }))
    }

    /// A run's settings from config.yaml, and its skills' approval rules (the delegator's
    /// tasks carry them too); its skills are where sandbox-host mounts them
    /// (under the same data root), enabled by the cluster's extensions file.
    /// `prompt_catalog`: the run's catalog when its model reads a system prompt.
    fn settings(
        &self,
        app: &Arc<AppConfig>,
        context: &RunContext,
        profile: &AgentProfile,
        prompt_catalog: Option<&Arc<Catalog>>,
    ) -> Result<(RunSettings, SkillRules), PrepareError> {
        let skills = SkillStore::from_config(
            app,
            &context.agent.base_dir,
            Some(self.extensions_path.clone()),
        )
        .for_user(&context.user_id);
        // Scanned once: the prompt lists the skills, the approval stage takes their rules.
        let installed = skills.scan();
        let system_prompt = prompt_catalog
            .map(|catalog| self.system_prompt(app, context, &skills, &installed, catalog, profile));
        let token_budget = TokenBudget::from_config(app.other.get("token_budget"))
            .map_err(PrepareError::Config)?;
        let invalid_calls = antler_engine::InvalidCallLimit::from_config(app.other.get("llm_call"))
            .map_err(PrepareError::Config)?;
        let agent_rules = profile.approvals.as_deref().map_err(|e| {
            PrepareError::Config(format!(
                "the config.yaml of agent {}: {e}",
                context.agent.agent_name.as_deref().unwrap_or("?")
            ))
        })?;
        let skill_rules = approvals::skill_rules(&installed, profile.skills.as_ref());
        let approvals = self.approvals.gate(
            app,
            approvals::RunLayers {
                role: context.agent.role.as_deref(),
                agent: context
                    .agent
                    .agent_name
                    .as_deref()
                    .map(|name| (name, agent_rules)),
                skills: &skill_rules,
            },
        )?;
        let settings = RunSettings {
            approvals,
            token_budget,
            invalid_calls,
            // DeerFlow's sections read by `config::deerflow` (checked when the config loaded).
            loop_detection: antler_engine::LoopDetection::from_config(&app.loop_detection()),
            output_budget: antler_engine::OutputBudget::from_config(&app.tool_output()),
            safety_finish_reason: antler_engine::SafetyFinishReason {
                enabled: app.safety_finish_reason_enabled(),
            },
            read_before_write: antler_engine::ReadBeforeWrite {
                enabled: app.read_before_write_enabled(),
            },
            max_turns: usize::try_from(app.max_recursion_limit())
                .unwrap_or(usize::MAX)
                .min(RunSettings::default().max_turns),
            allowed_skills: profile.skills.clone(),
            auto_promote_top_k: app.tool_search.top_k(),
            guardrail: Guardrail::from_config(&app.guardrails)
                .map_err(|e| PrepareError::Config(e.to_string()))?,
            skills,
            system_prompt,
            subagent_limit: SubagentLimit::new(
                app.subagents.max_concurrent as usize,
                app.subagents.max_total_per_run as usize,
            ),
            web: Some(WebTools::from_config(&app.tools))
                .filter(|web| !web.is_empty())
                .map(Arc::new),
            acp: {
                let extensions = self.feed().last_good_extensions.clone().flatten();
                antler_engine::AcpCalls::from_config(app, extensions.as_deref()).map(Arc::new)
            },
            skill_manage: antler_engine::SkillManageSettings::from_config(app).map(
                |mut settings| {
                    // A scripted run's scans are answered by its playbook.
                    if prompt_catalog.is_some() {
                        settings.moderation_model = moderation_model(app);
                    }
                    settings
                },
            ),
            ..RunSettings::default()
        };
        Ok((settings, skill_rules))
    }

    /// The run's user's memory after its system prompt (spec C.6, prompts A.7), read now,
    /// so a new run of any thread sees what earlier runs taught, and the flush of what its
    /// summaries remove into the memory queue (a scripted run, `label`, is not remembered);
    /// `memory:` refused is the run's config error.
    async fn add_memory(
        self: &Arc<Self>,
        app: &AppConfig,
        context: &RunContext,
        label: &str,
        settings: &mut RunSettings,
    ) -> Result<(), PrepareError> {
        let memory = crate::memory::config(app)?;
        let scripted =
            label.starts_with(SCRIPTED_PREFIX) || label.starts_with(SCRIPTED_INLINE_PREFIX);
        if !memory.is_off() && !scripted {
            let key = crate::runs::store::memory::QueueKey {
                user: context.user_id.clone(),
                agent: crate::memory::agent_key(context.agent.agent_name.as_deref()),
                thread: context.thread_id.clone(),
            };
            settings.before_summarization = Some(crate::memory::flush::hook(Arc::clone(self), key));
        }
        let Some(prompt) = settings.system_prompt.clone() else {
            return crate::memory::config(app).map(|_| ());
        };
        let body = crate::memory::block_for_run(
            self,
            app,
            &context.user_id,
            context.agent.agent_name.as_deref(),
        )
        .await?;
        if !body.is_empty() {
            settings.system_prompt = Some(Arc::from(crate::memory::inject::with_memory(
                &prompt, &body,
            )));
        }
        Ok(())
    }

    /// The lead's system prompt for this run (spec A), from the cache when its inputs are
    /// those of an earlier run.
    fn system_prompt(
        &self,
        app: &AppConfig,
        context: &RunContext,
        skills: &SkillStore,
        installed: &[antler_engine::InstalledSkill],
        catalog: &Arc<Catalog>,
        profile: &AgentProfile,
    ) -> Arc<str> {
        let subagent_inputs: Option<Vec<(String, String)>> = context.agent.subagents.then(|| {
            crate::subagents::types::available(app)
                .into_iter()
                .map(|t| (t.name, t.description))
                .collect()
        });
        let mounts: Vec<PromptMount> = app
            .sandbox
            .iter()
            .flat_map(|s| s.mounts.iter())
            .map(|m| PromptMount {
                container_path: m.container_path.clone(),
                read_only: m.read_only,
            })
            .collect();
        let agent_name = context
            .agent
            .agent_name
            .as_deref()
            .filter(|_| !context.agent.bootstrap);
        self.prompts.get(&PromptInputs {
            catalog,
            agent_name,
            default_agent_name: app.antler.agent_name.as_deref(),
            soul: profile.soul.as_deref(),
            skills: installed,
            allowed_skills: profile.skills.as_ref(),
            skills_container_root: &skills.container_root,
            skill_evolution: app.skill_evolution.enabled,
            skill_index: antler_engine::catalog::skills_deferred_discovery(app),
            acp_agents: !app.acp_agents.is_empty(),
            mounts: &mounts,
            subagents: subagent_inputs
                .as_ref()
                .map(|available| SubagentPromptInputs {
                    max_concurrent: app.subagents.max_concurrent as usize,
                    max_total: app.subagents.max_total_per_run as usize,
                    available,
                    bash_available: antler_protocol::config::is_host_bash_allowed(app),
                }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::catalog::not_ready_warning;
    use super::*;
    use antler_protocol::messages::McpServerStatus;

    #[test]
    fn a_run_label_reads_as_the_model_a_person_knows() {
        assert_eq!(shown_model("model:"), "default");
        assert_eq!(shown_model("model:smol"), "smol");
        assert_eq!(
            shown_model("scripted:/p/playbook.yaml"),
            "scripted (/p/playbook.yaml)"
        );
        assert_eq!(
            shown_model("scripted-yaml:turns: []"),
            "scripted (inline playbook)"
        );
    }

    fn status(name: &str, state: &str, error: Option<&str>) -> McpServerStatus {
        McpServerStatus {
            name: name.into(),
            transport: "http".into(),
            state: state.into(),
            tools: 0,
            last_error: error.map(str::to_owned),
            reconnects: 0,
            in_flight: 0,
            protocol_version: None,
            lifecycle: None,
            auth: None,
        }
    }

    #[test]
    fn the_not_ready_warning_names_each_server_and_its_state_only() {
        assert_eq!(not_ready_warning(&[]), None);
        let warning = not_ready_warning(&[
            status("hung", "starting", None),
            status("dies", "failed", Some("stderr: SECRET=sk-1")),
        ]);
        assert_eq!(
            warning.as_deref(),
            Some("MCP servers not ready, this run goes without their tools: 'hung' (starting), 'dies' (failed)")
        );
    }
}
