//! Antler as an MCP server (rmcp's server side): any MCP client gets its principal's
//! tools as a run of Antler would offer them to a model, and calls them through the run's
//! own call path. One MCP session is one run of one thread of its principal
//! (`session::McpSession`); `handler::AntlerTools` is the rmcp handler of a session. The
//! gateway serves it over streamable HTTP at `/mcp` (`gateway::mcp_endpoint`); `antler mcp
//! serve` over stdio ([`serve_stdio`]); `direct` answers a session's plain `tools/call`
//! without rmcp's session worker. A session ends when its client closes it (`DELETE`,
//! the end of stdin) or the gateway closes it idle (`gateway::mcp_sessions`); a close
//! returns only once its run is released (`lifecycle::Released`).

mod approvals;
pub mod direct;
mod elicit;
mod handler;
mod lifecycle;
mod progress;
mod session;

pub use handler::AntlerTools;
pub use lifecycle::Released;
pub use session::Owner;

use std::sync::Arc;

use actix::{Addr, ArbiterHandle};
use rmcp::transport::streamable_http_server::{
    session::local::LocalSessionManager, StreamableHttpServerConfig, StreamableHttpService,
};
use rmcp::ServiceExt as _;

use crate::runs::manager::RunManager;
use crate::runs::prepare::RunEnv;

/// The streamable-HTTP service of the gateway's `/mcp`: sessions kept in this process,
/// each request's principal taken from its extensions (the gateway authenticated it and
/// checked its `Host`). `stop` ends every session.
pub type HttpService = StreamableHttpService<Arc<AntlerTools>, LocalSessionManager>;

/// The `/mcp` service whose sessions (kept in `sessions`, see [`session_manager`]) have
/// their runs prepared by `env`. A session's actor runs on the arbiter serving the session
/// (the gateway's worker); `arbiter` (the lead's) when its requests come from elsewhere.
/// Each session's handler registers in `direct` for the gateway's direct calls.
pub fn http_service(
    env: Arc<RunEnv>,
    manager: Addr<RunManager>,
    arbiter: ArbiterHandle,
    sessions: Arc<LocalSessionManager>,
    direct: Arc<direct::DirectCalls>,
    stop: tokio_util::sync::CancellationToken,
) -> HttpService {
    let config = StreamableHttpServerConfig::default()
        // The gateway's guard checks `Host` and refuses cross-origin requests first.
        .disable_allowed_hosts()
        .with_cancellation_token(stop);
    StreamableHttpService::new(
        move || {
            Ok(AntlerTools::shared(
                env.clone(),
                manager.clone(),
                arbiter.clone(),
                direct.clone(),
            ))
        },
        sessions,
        config,
    )
}

/// rmcp's in-process sessions, without rmcp's own idle limit (it counts a call that runs
/// longer than the limit as idle and ends its session): the gateway ends idle sessions
/// itself (`gateway::mcp_sessions`).
pub fn session_manager() -> Arc<LocalSessionManager> {
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = None;
    Arc::new(sessions)
}

/// Why `antler mcp serve` stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("the MCP client's initialization failed: {0}")]
    Initialize(String),
    #[error("the MCP session failed: {0}")]
    Session(String),
}

/// Serves one MCP session on this process's stdin and stdout, acting for `owner`, until
/// the client closes it or `stop` is cancelled (a signal); returns once the session's run
/// is released. Call inside the actix system whose arbiter runs the session.
pub async fn serve_stdio(
    env: Arc<RunEnv>,
    manager: Addr<RunManager>,
    owner: Owner,
    stop: tokio_util::sync::CancellationToken,
) -> Result<(), ServeError> {
    let released = Released::new();
    let handler = AntlerTools::new(
        env,
        manager,
        actix::Arbiter::current(),
        Some(owner),
        Some(released.claim()),
    );
    let running = tokio::select! {
        running = handler.serve_with_ct(rmcp::transport::stdio(), stop.clone()) => {
            running.map_err(|e| ServeError::Initialize(e.to_string()))?
        }
        // Stopped before the client initialized: no session, nothing to release.
        () = stop.cancelled() => return Ok(()),
    };
    let waited = running
        .waiting()
        .await
        .map_err(|e| ServeError::Session(e.to_string()));
    // The handler is gone with the service: its session is ending.
    released.wait().await;
    waited?;
    Ok(())
}
