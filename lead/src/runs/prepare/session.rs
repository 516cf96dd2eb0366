//! A run a client drives (Antler's MCP server, `mcp_server`): prepared as a run of the
//! client's thread is (the thread created or continued and claimed, one active run per
//! thread; the principal's authorized catalog; the run's settings, guardrail and skills;
//! the thread's directories; the run recorded), but with no model of its own and no system
//! prompt: the client's model drives it through `RunLoop::call_from_client`. Its record's
//! model is [`CLIENT_SESSION_LABEL`], so a lead that restarts never drives it with a model:
//! it ends it (`resume`). When the cluster has workers and `subagents.enabled`, it gets a
//! run's delegator (`task` on the workers); its subagents run with the model a run of the
//! principal would (the custom agent's, else `models:`' first).

use std::sync::Arc;

use antler_engine::catalog::Catalog;
use antler_engine::{AgentContext, RunLoop, SkillStore, ThreadState, UnavailableModel};

use super::catalog::assembly_request;
use super::model::model_for;
use super::{check_id, PrepareError, RunEnv, MODEL_PREFIX};
use crate::agents::profile::AgentProfile;
use crate::runs::store::RunRecord;

/// A client's run, ready for its calls, with what the run manager keeps beside it.
pub struct ClientSession {
    pub run: RunLoop,
    pub record: RunRecord,
    pub catalog: Arc<Catalog>,
    pub skills: SkillStore,
}

/// The model label of a client's session run.
pub const CLIENT_SESSION_LABEL: &str = "mcp-client";
/// The task its record names.
const SESSION_TASK: &str = "(an MCP client's session)";
/// Why a session has no model (`skill_manage`'s scan fails closed with it).
const NO_MODEL: &str = "an MCP session has no model of its own: its client's model drives it";
/// How a session run left `running` by a stopped lead ends.
pub const SESSION_ENDED_WITH_LEAD: &str = "the MCP session ended with the lead that served it";

impl RunEnv {
    /// Opens run `run_id` for a client of `user` (with `role`) on `thread`: created when
    /// new, continued from its latest state, and claimed until the session ends
    /// (`ThreadBusy` while another run is active on it).
    pub async fn start_client_session(
        self: &Arc<Self>,
        run_id: &str,
        user: &str,
        role: Option<&str>,
        thread: &str,
    ) -> Result<ClientSession, PrepareError> {
        check_id("user", user)?;
        check_id("thread", thread)?;
        let (u, t, id) = (user.to_owned(), thread.to_owned(), run_id.to_owned());
        let claimed = self
            .store
            .call(move |store| {
                let (previous, _) = store.create_thread(&u, &t, &Default::default())?;
                Ok(store
                    .claim_thread(&u, &t, &id)?
                    .map(|state| (previous, state)))
            })
            .await?;
        let (previous, state) = claimed.map_err(PrepareError::from)?;
        let started = self
            .session_from(run_id, user, role, thread, state.unwrap_or_default())
            .await;
        if started.is_err() {
            let (u, t, id) = (user.to_owned(), thread.to_owned(), run_id.to_owned());
            drop(
                self.store
                    .call(move |store| store.release_thread(&u, &t, &id, &previous)),
            );
        }
        started
    }

    async fn session_from(
        self: &Arc<Self>,
        run_id: &str,
        user: &str,
        role: Option<&str>,
        thread: &str,
        state: ThreadState,
    ) -> Result<ClientSession, PrepareError> {
        self.wait_for_sandbox_host().await;
        let app = self.load_config(None).await?;
        let profile = AgentProfile::load(&AgentContext::new(&self.base_dir().await?), user);
        // The model a run of the principal's would have, handed to its subagents; without
        // one, `task` is not offered.
        let subagent_model = (self.dispatcher.is_some() && app.subagents.enabled)
            .then(|| {
                let label = format!("{MODEL_PREFIX}{}", profile.model.as_deref().unwrap_or(""));
                model_for(&label, &app)
                    .inspect_err(|e| {
                        tracing::warn!(run = %run_id, "no model for the MCP session's subagents, task is not offered: {e}");
                    })
                    .ok()
            })
            .flatten();
        // Nobody answers a clarification in the middle of a client's call.
        let mut request = assembly_request(None, None, false, false, profile.tool_groups.clone());
        request.builtins.subagent_enabled = subagent_model.is_some();
        request.principal = antler_engine::catalog::Principal {
            user: Some(user.to_owned()),
            role: role.map(str::to_owned),
            agent: None,
        };
        let mut warnings = Vec::new();
        let (catalog, _denied) = self
            .catalog(&app, false, request.clone(), &mut warnings)
            .await?;
        for warning in &warnings {
            tracing::warn!(run = %run_id, "{warning}");
        }
        // Interactive for the approval stage: its asks are put to the client
        // (`mcp_server::approvals`).
        let mut context = self
            .context(&app, run_id, user, thread, false, None, false, true)
            .await?;
        context.agent.role = role.map(str::to_owned);
        context.agent.subagents = subagent_model.is_some();
        let (mut settings, skill_rules) = self.settings(&app, &context, &profile, None)?;
        // The client presents nothing to settle against.
        settings.settle = false;
        let model = Arc::new(UnavailableModel {
            name: CLIENT_SESSION_LABEL.to_owned(),
            reason: NO_MODEL.to_owned(),
        });
        let skills = settings.skills.clone();
        let delegator = subagent_model.and_then(|subagent_model| {
            self.delegator(
                &app,
                false,
                request,
                &subagent_model,
                &context,
                &settings,
                &profile,
                &skill_rules,
            )
        });
        let run = self
            .builder(context, model, &catalog, settings, delegator)
            .model_label(CLIENT_SESSION_LABEL)
            .start_for_client(state, SESSION_TASK)
            .await?;
        let id = run_id.to_owned();
        let record = self
            .store
            .call(move |store| store.run(&id))
            .await?
            .ok_or_else(|| PrepareError::UnknownRun(run_id.to_owned()))?;
        Ok(ClientSession {
            run,
            record,
            catalog,
            skills,
        })
    }
}
