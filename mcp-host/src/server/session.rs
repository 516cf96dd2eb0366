//! The tasks a live session runs beside its calls, owned by the session (aborted when it
//! ends): liveness pings, and a stateless-era session's `subscriptions/listen` stream of
//! tool list changes (told to the actor, which re-lists).

use std::time::Duration;

use actix::Recipient;
use rmcp::{model::ClientRequest, Peer, RoleClient};

use super::actor::ToolListChanged;

/// A ping not answered within this says the server is paused, hung or saturated.
const PING_DEADLINE: Duration = Duration::from_secs(1);

/// Aborts a task of the session (its liveness watch, its listen stream) when dropped.
pub(super) struct AbortOnDrop(pub tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Pings the session's server every `every`: a server that stops answering (paused,
/// hung, or too busy to answer a ping) is logged once with how long it has been silent,
/// and again when it answers. Nothing is torn down: calls wait for it as before (their
/// own deadlines apply), and a server that died ends the session by itself.
pub(super) async fn watch_liveness(server: String, peer: Peer<RoleClient>, every: Duration) {
    let mut silent_since: Option<std::time::Instant> = None;
    loop {
        tokio::time::sleep(every).await;
        let asked = std::time::Instant::now();
        let ping = peer.send_request(ClientRequest::PingRequest(Default::default()));
        match tokio::time::timeout(PING_DEADLINE, ping).await {
            Ok(Ok(_)) => {
                if let Some(since) = silent_since.take() {
                    tracing::info!(server = %server, silent_ms = since.elapsed().as_millis() as u64, "MCP server answers pings again");
                }
            }
            // The session is ending: its end is reported there.
            Ok(Err(_)) => return,
            Err(_) => {
                if silent_since.is_none() {
                    silent_since = Some(asked);
                    tracing::warn!(server = %server, deadline_ms = PING_DEADLINE.as_millis() as u64, "MCP server did not answer a ping within the deadline (paused, hung or busy); calls to it wait");
                }
            }
        }
    }
}

/// A stateless-era session's `subscriptions/listen` stream for tool list changes: each
/// `notifications/tools/list_changed` on it is told to the session (which re-lists). A
/// server that does not offer the stream, or ends it, is logged; its tools are listed
/// again when the session reconnects.
pub(super) async fn listen_for_changes(
    server: String,
    peer: Peer<RoleClient>,
    changed: Recipient<ToolListChanged>,
) {
    let filter = rmcp::model::SubscriptionFilter::builder()
        .tools_list_changed()
        .build();
    let mut subscription = match peer.listen(filter).await {
        Ok(s) => s,
        Err(e) => {
            tracing::info!(server = %server, "no subscriptions/listen stream for tool list changes: {e}");
            return;
        }
    };
    if subscription.acknowledged().tools_list_changed != Some(true) {
        tracing::info!(server = %server, "the server does not send tool list changes on subscriptions/listen");
        return;
    }
    loop {
        match subscription.next().await {
            Ok(Some(rmcp::model::ServerNotification::ToolListChangedNotification(_))) => {
                if !changed.connected() {
                    return;
                }
                changed.do_send(ToolListChanged);
            }
            Ok(Some(_)) => {}
            Ok(None) => {
                tracing::info!(server = %server, end = ?subscription.end(), "the subscriptions/listen stream ended");
                return;
            }
            Err(e) => {
                tracing::warn!(server = %server, "the subscriptions/listen stream failed: {e}");
                return;
            }
        }
    }
}

/// Whether the session started with `initialize` (roots and notifications to the server
/// exist only there).
pub(super) fn has_handshake(peer: &Peer<RoleClient>) -> bool {
    peer.peer_info()
        .is_none_or(|info| info.protocol_version.has_initialize())
}
