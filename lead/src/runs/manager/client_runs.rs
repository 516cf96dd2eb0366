//! Runs an MCP client drives (`mcp_server`): the manager keeps each beside the runs it
//! drives, so its events go to its log (`/api/runs/{id}/events`, the inspector) and into
//! the metrics as theirs do, and its view and owner answer as theirs; the manager never
//! drives one. [`HostClientRun`] starts keeping it (the reply is the run's event sink),
//! [`ClientRunEnded`] ends it as an ended drive is (its events kept in the store);
//! [`open_client_run`] opens a client's run and has the manager keep it, in one step.

use std::sync::Arc;

use actix::prelude::*;
use antler_engine::catalog::Catalog;
use antler_engine::{RunEvent, RunLoop, SkillStore};

use super::{event_sink, LiveRun, RunManager};
use crate::runs::prepare::{ClientSession, PrepareError, RunEnv};
use crate::runs::store::{RunRecord, RunStatus};

/// Why a client's run was not opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenClientRunError {
    #[error(transparent)]
    Prepare(#[from] PrepareError),
    #[error("the run manager did not take the run: {0}")]
    Manager(#[from] MailboxError),
}

/// Opens run `run_id` for a client of `user` (with `role`) on `thread`
/// ([`RunEnv::start_client_session`]) and has `manager` keep it ([`HostClientRun`]): the
/// run, and the sink its events go to (the caller's `on_event` hands each to it).
pub async fn open_client_run(
    env: &Arc<RunEnv>,
    manager: &Addr<RunManager>,
    run_id: &str,
    user: &str,
    role: Option<&str>,
    thread: &str,
) -> Result<(RunLoop, ClientRunEvents), OpenClientRunError> {
    let ClientSession {
        run,
        record,
        catalog,
        skills,
    } = env.start_client_session(run_id, user, role, thread).await?;
    let events = manager
        .send(HostClientRun {
            record,
            catalog,
            skills,
        })
        .await?;
    Ok((run, events))
}

/// Where a client's run reports its events.
pub type ClientRunEvents = Box<dyn Fn(&RunEvent) + Send + Sync>;

/// Keep the client's run of `record`, which sees `catalog`.
#[derive(Message)]
#[rtype(result = "ClientRunEvents")]
pub struct HostClientRun {
    pub record: RunRecord,
    pub catalog: Arc<Catalog>,
    pub skills: SkillStore,
}

impl Handler<HostClientRun> for RunManager {
    type Result = MessageResult<HostClientRun>;

    fn handle(&mut self, msg: HostClientRun, _: &mut Context<Self>) -> Self::Result {
        let log = self.journaled_log(&msg.record.run_id, None, None);
        let live = LiveRun {
            record: msg.record,
            log,
            actor: None,
            // Its client drives it: a resume or an answer leaves it be.
            driving: true,
            timing: Arc::default(),
            cancel: Arc::default(),
            catalog: msg.catalog,
            denied: Vec::new(),
            skills: msg.skills,
            elicitations: Arc::default(),
            // A client's session holds no lease.
            epoch: None,
        };
        let sink = event_sink(
            live.log.clone(),
            self.metrics.clone(),
            live.catalog.clone(),
            live.timing.clone(),
            live.elicitations.clone(),
        );
        live.log.driving();
        self.metrics.drive_started(true);
        self.runs.insert(live.record.run_id.clone(), live);
        let events: ClientRunEvents = Box::new(sink);
        MessageResult(events)
    }
}

/// The client's run `run_id` ended (its session closed), recorded as `status`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ClientRunEnded {
    pub run_id: String,
    pub status: RunStatus,
}

impl Handler<ClientRunEnded> for RunManager {
    type Result = ();

    fn handle(&mut self, msg: ClientRunEnded, _: &mut Context<Self>) {
        let Some(live) = self.runs.get_mut(&msg.run_id) else {
            return;
        };
        live.driving = false;
        self.metrics.drive_stopped(msg.status.as_str());
        // The view of a run that ended without a model: no answer, nothing presented.
        let ended = serde_json::json!({
            "run_id": live.record.run_id,
            "status": msg.status,
            "user": live.record.user_id,
            "thread": live.record.thread_id,
            "task": live.record.task,
            "final_answer": null,
            "question": null,
            "error": null,
            "artifacts": [],
            "delivery": null,
            "stop_reason": null,
            "token_usage": null,
        });
        // Its events are in the store already (journaled as they came).
        live.log.stop(ended.to_string());
        self.ended.push_back(msg.run_id);
        self.forget_old_ended();
    }
}
