//! How a run is made: [`RunBuilder`], the one way to make a [`RunLoop`] (with its
//! [`RunSettings`]): the lead's runs add their journal, custom-agent tools and delegator;
//! a subagent's task graph runs with none of them. `start` journals a new run as step 0
//! (`start_on` the same, from a continued thread's state; `start_for_client` a run a
//! client drives, Antler's MCP server);
//! `resume` rebuilds one from its last checkpoint, giving each issued call without a
//! result the interrupted-call result.

use std::sync::Arc;

use crate::catalog::builtins::TASK;
use crate::catalog::Catalog;
use crate::middleware::dangling;
use crate::middleware::loop_detection::LoopWarnings;
use crate::model::ChatModel;
use crate::run::execute::LeadTools;
use crate::run::journal::{Journal, NoJournal, RunRecord, RunStatus};
use crate::run::run_loop::{BudgetWarning, CancelFlag, RunError, RunLoop};
use crate::run::settings::RunSettings;
use crate::settlement::OutputsSnapshot;
use crate::thread::context::RunContext;
use crate::thread::hosts::ToolHosts;
use crate::thread::lease::SandboxLease;
use crate::thread::state::{Message, StateUpdate, ThreadState};
use crate::tools::task::delegation::Delegator;

impl RunLoop {
    /// The builder of a run of `model` over `catalog`, its tools reached through `hosts`.
    pub fn builder(
        context: RunContext,
        model: Arc<dyn ChatModel>,
        catalog: Arc<Catalog>,
        hosts: Arc<dyn ToolHosts>,
    ) -> RunBuilder {
        RunBuilder {
            model_label: model.name().to_owned(),
            context,
            model,
            catalog,
            hosts,
            journal: Arc::new(NoJournal),
            settings: RunSettings::default(),
            lead_tools: None,
            delegator: None,
            cancel: None,
            files: Vec::new(),
        }
    }
}

/// What a run is made of; [`RunBuilder::start`] and [`RunBuilder::resume`] make the loop.
pub struct RunBuilder {
    context: RunContext,
    model: Arc<dyn ChatModel>,
    model_label: String,
    catalog: Arc<Catalog>,
    hosts: Arc<dyn ToolHosts>,
    journal: Arc<dyn Journal>,
    settings: RunSettings,
    lead_tools: Option<Arc<dyn LeadTools>>,
    delegator: Option<Arc<dyn Delegator>>,
    cancel: Option<Arc<CancelFlag>>,
    /// The uploads the first user turn carries (`additional_kwargs.files`), by name.
    files: Vec<String>,
}

impl RunBuilder {
    /// Where the run is journaled (none by default: nothing is kept).
    pub fn journal(mut self, journal: Arc<dyn Journal>) -> Self {
        self.journal = journal;
        self
    }

    pub fn settings(mut self, settings: RunSettings) -> Self {
        self.settings = settings;
        self
    }

    /// The label the journal records to resume the run with the same model.
    pub fn model_label(mut self, label: impl Into<String>) -> Self {
        self.model_label = label.into();
        self
    }

    /// Tools only the lead runs (`setup_agent`, `update_agent`).
    pub fn lead_tools(mut self, tools: Arc<dyn LeadTools>) -> Self {
        self.lead_tools = Some(tools);
        self
    }

    /// Where the run's `task` calls go.
    pub fn delegator(mut self, delegator: Arc<dyn Delegator>) -> Self {
        self.delegator = Some(delegator);
        self
    }

    /// A cancellation the run checks between steps.
    pub fn cancel(mut self, cancel: Arc<CancelFlag>) -> Self {
        self.cancel = Some(cancel);
        self
    }

    /// The uploads (names in the thread's `uploads/`) the run's user turn carries.
    pub fn files(mut self, files: Vec<String>) -> Self {
        self.files = files;
        self
    }

    fn into_loop(self, state: ThreadState, step: i64) -> RunLoop {
        RunLoop {
            lease: Arc::new(SandboxLease::new(&self.context.run_id)),
            context: self.context,
            state,
            step,
            model: self.model,
            catalog: self.catalog,
            hosts: self.hosts,
            journal: self.journal,
            settings: self.settings,
            events: None,
            budget_warning: BudgetWarning::NotYet,
            compaction: Default::default(),
            title_task: None,
            loop_warnings: LoopWarnings::default(),
            lead_tools: self.lead_tools,
            delegator: self.delegator,
            subagent_thread_rules: Default::default(),
            cancel: self.cancel,
            unsettled: Vec::new(),
            defer_writes: false,
        }
    }

    /// Starts a new run: its record and initial state are journaled as step 0.
    pub async fn start(self, task: &str) -> Result<RunLoop, RunError> {
        self.start_with(ThreadState::new(task), task).await
    }

    /// Starts a new run on a thread that has run before: from the thread's last `state`,
    /// with spec A.6's carry-over ([`ThreadState::continued`]) and `task` appended as the
    /// user's new message; journaled as step 0 like [`RunBuilder::start`].
    pub async fn start_on(self, state: ThreadState, task: &str) -> Result<RunLoop, RunError> {
        self.start_with(state.continued(task), task).await
    }

    /// Starts a run driven by a client (Antler's MCP server) on a thread's `state` (the
    /// default state for a new thread): journaled as step 0 like [`RunBuilder::start`],
    /// with spec A.6's carry-over but no user turn; `task` only names the run's record.
    pub async fn start_for_client(
        self,
        state: ThreadState,
        task: &str,
    ) -> Result<RunLoop, RunError> {
        let turns_before = state.turns();
        let state = ThreadState {
            stop_reason: None,
            token_usage: Default::default(),
            turns_before,
            ..state
        };
        self.start_with(state, task).await
    }

    async fn start_with(self, state: ThreadState, task: &str) -> Result<RunLoop, RunError> {
        let mut state = state;
        if !self.files.is_empty() {
            if let Some(last @ Message::Human { .. }) = state.messages.last_mut() {
                *last = Message::human_with_files(task, &self.files);
            }
        }
        let context = &self.context;
        let record = RunRecord {
            run_id: context.run_id.clone(),
            user_id: context.user_id.clone(),
            thread_id: context.thread_id.clone(),
            task: task.to_owned(),
            model: self.model_label.clone(),
            status: RunStatus::Running,
            detail: None,
            clarification: context.clarification_enabled,
            agent: context.agent.agent_name.clone(),
            bootstrap: context.agent.bootstrap,
            non_interactive: context.agent.non_interactive,
            subagents: context.agent.subagents,
            role: context.agent.role.clone(),
        };
        self.journal.create_run(&record, &state).await?;
        if self.settings.settle {
            let before = OutputsSnapshot::take_through(&*context.files).await?;
            self.journal
                .save_outputs_snapshot(&context.run_id, before)
                .await?;
        }
        Ok(self.into_loop(state, 0))
    }

    /// Resumes a run from its last checkpoint. Every call of the journaled model reply
    /// without a journaled result was issued (it may have reached its host and had its
    /// effects): it gets the interrupted-call result, merged and checkpointed as a step of
    /// its own, and is never sent again. A `task` call is the exception when the run has
    /// a delegator: its task may still run, or have finished, on a worker, and the drive
    /// collects it first; so are the calls the state says wait on approval (or behind
    /// one): never sent, they run once answered.
    pub async fn resume(self) -> Result<RunLoop, RunError> {
        let run_id = self.context.run_id.clone();
        let (step, state) = self
            .journal
            .latest(&run_id)
            .await?
            .ok_or_else(|| RunError::UnknownRun(run_id.clone()))?;
        self.journal
            .set_status(&run_id, RunStatus::Running, None)
            .await?;
        let collect_tasks = self.delegator.is_some();
        let mut run = self.into_loop(state, step);
        let approvals = &run.state.approvals;
        // Calls that wait on approval, or behind one, were never sent: they run once answered.
        let never_sent = |id: &str| {
            approvals.pending_call(id).is_some() || approvals.held.iter().any(|h| h == id)
        };
        let interrupted: Vec<Message> = dangling::interrupted_results(&run.state.messages)
            .into_iter()
            .filter(|m| !(collect_tasks && matches!(m, Message::Tool { name, .. } if name == TASK)))
            .filter(
                |m| !matches!(m, Message::Tool { tool_call_id, .. } if never_sent(tool_call_id)),
            )
            .collect();
        if !interrupted.is_empty() {
            run.merge(StateUpdate::messages(interrupted)).await?;
        }
        Ok(run)
    }
}
