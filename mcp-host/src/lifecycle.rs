//! Which MCP lifecycle a session starts with: the `initialize` handshake (every revision up
//! to `2025-11-25`), or the stateless `2026-07-28` discovery (`server/discover`; each request
//! then carries its own version and capabilities, and the server sends no requests back).
//! A server configured `protocol: auto` is probed with discovery within [`PROBE_WINDOW`];
//! whichever lifecycle opened its session is kept, so its reconnects do not probe again.
//! `legacy` (the default) and legacy HTTP+SSE always use `initialize`.

use std::time::Duration;

use antler_protocol::config::{McpProtocol, Transport};
use rmcp::{
    model::ProtocolVersion,
    service::{serve_client_with_lifecycle, ClientInitializeError, ClientLifecycleMode},
    transport::IntoTransport,
};

use crate::{client::Client, transport::Session};

/// How long a server gets to answer `server/discover` before it is taken for one that
/// only knows `initialize` (a stdio server's own start-up counts: an interpreter that
/// imports its SDK on a busy machine takes seconds before it reads its first line).
pub const PROBE_WINDOW: Duration = Duration::from_secs(10);

/// The version proposed in `server/discover`.
pub const DISCOVERED_VERSION: ProtocolVersion = ProtocolVersion::V_2026_07_28;

/// How a session starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    /// `initialize` and `notifications/initialized`, proposing `2025-11-25`.
    Initialize,
    /// `server/discover`, proposing `2026-07-28`, with no fallback on this connection.
    Discover,
}

impl Lifecycle {
    /// The name `antler mcp status` shows.
    pub fn as_str(self) -> &'static str {
        match self {
            Lifecycle::Initialize => "initialize",
            Lifecycle::Discover => "discover",
        }
    }

    fn mode(self) -> ClientLifecycleMode {
        match self {
            Lifecycle::Initialize => ClientLifecycleMode::Initialize,
            Lifecycle::Discover => ClientLifecycleMode::Discover {
                preferred_versions: vec![DISCOVERED_VERSION],
            },
        }
    }

    /// Starts `client` on `transport` with this lifecycle.
    pub async fn serve<T, E, A>(
        self,
        client: Client,
        transport: T,
    ) -> Result<Session, ClientInitializeError>
    where
        T: IntoTransport<rmcp::RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        serve_client_with_lifecycle(client, transport, self.mode()).await
    }
}

/// What the next session of a server does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Start with this lifecycle.
    Use(Lifecycle),
    /// Try [`Lifecycle::Discover`] within [`PROBE_WINDOW`]; on any failure, start a fresh
    /// connection with [`Lifecycle::Initialize`].
    Probe,
}

/// The plan for a server's next session: `kept` is the lifecycle its last session opened
/// with, if any.
pub fn plan(protocol: McpProtocol, transport: Transport, kept: Option<Lifecycle>) -> Plan {
    match (protocol, transport, kept) {
        (McpProtocol::Legacy, _, _) | (_, Transport::Sse, _) => Plan::Use(Lifecycle::Initialize),
        (McpProtocol::Auto, _, Some(kept)) => Plan::Use(kept),
        (McpProtocol::Auto, _, None) => Plan::Probe,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_auto_probes_and_only_until_a_lifecycle_is_kept() {
        use Lifecycle::*;
        let legacy = McpProtocol::Legacy;
        let auto = McpProtocol::Auto;
        assert_eq!(plan(legacy, Transport::Http, None), Plan::Use(Initialize));
        assert_eq!(
            plan(legacy, Transport::Stdio, Some(Discover)),
            Plan::Use(Initialize)
        );
        assert_eq!(plan(auto, Transport::Sse, None), Plan::Use(Initialize));
        assert_eq!(plan(auto, Transport::Stdio, None), Plan::Probe);
        assert_eq!(plan(auto, Transport::Http, None), Plan::Probe);
        assert_eq!(
            plan(auto, Transport::Http, Some(Discover)),
            Plan::Use(Discover)
        );
        assert_eq!(
            plan(auto, Transport::Stdio, Some(Initialize)),
            Plan::Use(Initialize)
        );
        assert_eq!(DISCOVERED_VERSION.as_str(), "2026-07-28");
        assert!(!DISCOVERED_VERSION.has_initialize());
    }
}
