//! Answering an elicitation a run's MCP call waits on: the answer goes, as the run's
//! user, to the mcp-host replica of the run's thread; taken, it leaves the run's pending
//! elicitations (the gateway's `POST /api/runs/{id}/elicitations/{eid}` and the CLI's
//! `antler run --resume RUN --elicitation ID --answer ...`).

use super::{GetElicitations, RunManager};
use crate::runs::elicitations::AnswerError;
use crate::runs::hosts::{HostLinks, LinkHosts};

/// How long mcp-host gets to take an answer.
const ANSWER_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// Hands the run's user's answer to elicitation `id` of `run_id` to the mcp-host replica of
/// the run's thread (the gateway's `POST /api/runs/{id}/elicitations/{eid}` and the CLI's
/// `antler run --resume RUN --elicitation ID --answer ...`).
pub async fn answer(
    manager: &actix::Addr<RunManager>,
    links: &(impl HostLinks + Clone),
    run_id: &str,
    id: &str,
    action: antler_protocol::messages::ElicitationAction,
    content: Option<antler_protocol::Json>,
) -> Result<(), AnswerError> {
    let hosts = LinkHosts::new(links.clone());
    answer_through(manager, &hosts, run_id, id, action, content).await
}

/// [`answer`] through `hosts` (a run's own, as an MCP session's answer goes).
pub async fn answer_through(
    manager: &actix::Addr<RunManager>,
    hosts: &dyn antler_engine::ToolHosts,
    run_id: &str,
    id: &str,
    action: antler_protocol::messages::ElicitationAction,
    content: Option<antler_protocol::Json>,
) -> Result<(), AnswerError> {
    use antler_protocol::calls::McpCalls;
    use antler_protocol::messages::{ElicitationRefusal, McpElicitationAnswer};
    let not_pending = || AnswerError::NotPending {
        run_id: run_id.to_owned(),
        id: id.to_owned(),
    };
    let run = manager
        .send(GetElicitations(run_id.to_owned()))
        .await
        .map_err(|e| AnswerError::Unavailable(e.to_string()))?
        .ok_or_else(not_pending)?;
    let Some(pending) = run.pending.get(id) else {
        return Err(not_pending());
    };
    let answer = McpElicitationAnswer {
        id: id.to_owned(),
        user: run.user,
        thread: run.thread,
        run_id: pending.mcp_run_id.unwrap_or_else(|| run_id.to_owned()),
        action,
        content,
    };
    match hosts.answer_elicitation(answer, ANSWER_DEADLINE).await {
        Ok(Ok(())) => {
            run.pending.answered(id);
            Ok(())
        }
        Ok(Err(ElicitationRefusal::Unknown(_))) => {
            // mcp-host no longer holds it (its call ended): nor does the run.
            run.pending.answered(id);
            Err(not_pending())
        }
        Ok(Err(e @ ElicitationRefusal::Invalid(_))) => Err(AnswerError::Invalid(e.to_string())),
        Err(e) if e.is_unavailable() => Err(AnswerError::Unavailable(e.message)),
        Err(e) => Err(AnswerError::Failed(e.message)),
    }
}
