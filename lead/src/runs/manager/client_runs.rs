//! Runs an MCP client drives (`mcp_server`): the manager keeps each beside the runs it
//! drives, so its events go to its log (`/api/runs/{id}/events`, the inspector) and into
//! the metrics as theirs do, and its view and owner answer as theirs; the manager never
//! drives one. [`HostClientRun`] starts keeping it (the reply is the run's event sink),
//! [`ClientRunEnded`] ends it as an ended drive is (its events kept in the store).

use std::sync::Arc;

use actix::prelude::*;
use antler_engine::catalog::Catalog;
use antler_engine::{RunEvent, SkillStore};

use super::{event_sink, LiveRun, RunManager};
use crate::runs::store::{RunRecord, RunStatus};

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
