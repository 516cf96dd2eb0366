//! Antler as an MCP server (rmcp's server side): any MCP client gets its principal's
//! tools as a run of Antler would offer them to a model, and calls them through the run's
//! own call path. One MCP session is one run of one thread of its principal
//! (`session::McpSession`); `handler::AntlerTools` is the rmcp handler of a session. The
//! gateway serves it over streamable HTTP at `/mcp` (`gateway::mcp_endpoint`); `antler mcp
//! serve` over stdio ([`serve_stdio`]).

mod approvals;
mod elicit;
mod handler;
mod progress;
mod session;

pub use handler::AntlerTools;
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
pub type HttpService = StreamableHttpService<AntlerTools, LocalSessionManager>;

/// The `/mcp` service whose sessions' runs are prepared by `env` on `arbiter`.
pub fn http_service(
    env: Arc<RunEnv>,
    manager: Addr<RunManager>,
    arbiter: ArbiterHandle,
    stop: tokio_util::sync::CancellationToken,
) -> HttpService {
    let config = StreamableHttpServerConfig::default()
        // The gateway's guard checks `Host` and refuses cross-origin requests first.
        .disable_allowed_hosts()
        .with_cancellation_token(stop);
    StreamableHttpService::new(
        move || {
            Ok(AntlerTools::new(
                env.clone(),
                manager.clone(),
                arbiter.clone(),
                None,
            ))
        },
        Arc::new(LocalSessionManager::default()),
        config,
    )
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
/// the client closes it. Call inside the actix system whose arbiter runs the session.
pub async fn serve_stdio(
    env: Arc<RunEnv>,
    manager: Addr<RunManager>,
    owner: Owner,
) -> Result<(), ServeError> {
    let handler = AntlerTools::new(env, manager, actix::Arbiter::current(), Some(owner));
    let running = handler
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| ServeError::Initialize(e.to_string()))?;
    running
        .waiting()
        .await
        .map_err(|e| ServeError::Session(e.to_string()))?;
    Ok(())
}
