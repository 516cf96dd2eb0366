//! The client side of one MCP connection as rmcp sees it: our client info (the protocol
//! version proposed in `initialize`, the capabilities declared), the
//! `notifications/tools/list_changed` hook that tells the owning server actor to re-list,
//! the answer to `roots/list` (the session's roots, as `file://` URIs of its workspace),
//! and the answer to `elicitation/create` (the server's `elicitation` policy; under `ask`,
//! the run's user of the call in flight, see `crate::ask`).

use rmcp::{
    model::{
        ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationCapability,
        ErrorData, FormElicitationCapability, Implementation, ProtocolVersion,
    },
    service::{NotificationContext, RequestContext},
    ClientHandler, RoleClient,
};
use std::sync::Arc;

use actix::Recipient;
use tokio::sync::watch;

use crate::ask::AskingCalls;
use crate::elicitation::{self, ElicitationPolicy};
use crate::server::ToolListChanged;

/// The version proposed in `initialize`: the newest one that still has the handshake
/// (`2026-07-28` has none; a server answering an older known version is accepted).
pub const PROPOSED_VERSION: ProtocolVersion = ProtocolVersion::LATEST_WITH_INITIALIZE;

/// Whether Antler speaks `version` (a server's answer to `initialize`).
pub fn speaks(version: &ProtocolVersion) -> bool {
    ProtocolVersion::KNOWN_VERSIONS.contains(version)
}

/// The versions Antler speaks, oldest first, for an error that names them.
pub fn spoken_versions() -> String {
    ProtocolVersion::KNOWN_VERSIONS
        .iter()
        .map(ProtocolVersion::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The handler rmcp drives for one connection.
#[derive(Debug, Clone)]
pub struct Client {
    tools_changed: Recipient<ToolListChanged>,
    /// The session's roots, as directories on this host (none: an empty list).
    roots: watch::Receiver<Vec<String>>,
    /// `roots/list` requests answered on this connection.
    roots_asked: Arc<watch::Sender<u32>>,
    elicitation: ElicitationPolicy,
    /// The server's name, for the elicitations it asks.
    server: Arc<str>,
    /// The session's calls made for runs (their users answer under `ask`).
    asking: Arc<AskingCalls>,
}

impl Client {
    /// A handler that signals `tools_changed` on each `tools/list_changed` notification,
    /// answers `roots/list` with the current `roots`, and elicitation with `elicitation`.
    pub fn new(
        tools_changed: Recipient<ToolListChanged>,
        roots: watch::Receiver<Vec<String>>,
        elicitation: ElicitationPolicy,
        server: Arc<str>,
        asking: Arc<AskingCalls>,
    ) -> Self {
        Self {
            tools_changed,
            roots,
            roots_asked: Arc::new(watch::channel(0).0),
            elicitation,
            server,
            asking,
        }
    }

    /// How many `roots/list` requests this connection has answered.
    pub fn roots_asked(&self) -> watch::Receiver<u32> {
        self.roots_asked.subscribe()
    }
}

/// A directory on this host as a root's `file://` URI (`None`: not an absolute path).
pub fn root_uri(dir: &str) -> Option<String> {
    reqwest::Url::from_file_path(dir).ok().map(String::from)
}

impl ClientHandler for Client {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl std::future::Future<Output = ()> + Send + '_ {
        self.tools_changed.do_send(ToolListChanged);
        std::future::ready(())
    }

    // rmcp marks roots deprecated (SEP-2577, for the stateless revisions); every revision
    // that has `initialize` still has them.
    #[allow(deprecated)]
    fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> impl std::future::Future<Output = Result<rmcp::model::ListRootsResult, ErrorData>> + Send + '_
    {
        self.roots_asked.send_modify(|n| *n += 1);
        let roots = self
            .roots
            .borrow()
            .iter()
            .filter_map(|dir| {
                let uri = root_uri(dir)?;
                let name = std::path::Path::new(dir)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned());
                let mut root = rmcp::model::Root::new(uri);
                root.name = name;
                Some(root)
            })
            .collect();
        std::future::ready(Ok(rmcp::model::ListRootsResult::new(roots)))
    }

    fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> impl std::future::Future<Output = Result<ElicitResult, ErrorData>> + Send + '_ {
        let asking = match (self.elicitation, &request) {
            (ElicitationPolicy::Ask, ElicitRequestParams::FormElicitationParams { .. }) => {
                let call = self.asking.current();
                if call.is_none() {
                    tracing::info!(server = %self.server, "elicitation outside a run's call: declined");
                }
                call
            }
            _ => None,
        };
        async move {
            match (asking, request) {
                (
                    Some(call),
                    ElicitRequestParams::FormElicitationParams {
                        message,
                        requested_schema,
                        ..
                    },
                ) => {
                    let schema =
                        serde_json::to_value(&requested_schema).unwrap_or(serde_json::Value::Null);
                    Ok(call
                        .elicitations
                        .ask(&call, &self.server, message, schema)
                        .await)
                }
                (_, request) => Ok(elicitation::answer(self.elicitation, &request)),
            }
        }
    }

    #[allow(deprecated)]
    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::default();
        info.protocol_version = PROPOSED_VERSION;
        let mut capabilities = ClientCapabilities::default();
        let mut roots = rmcp::model::RootsCapabilities::default();
        roots.list_changed = Some(true);
        capabilities.roots = Some(roots);
        // Form requests only: a URL request has no one here to open it.
        capabilities.elicitation =
            Some(ElicitationCapability::new().with_form(FormElicitationCapability::new()));
        info.capabilities = capabilities;
        info.client_info = Implementation::new("antler-mcp-host", env!("CARGO_PKG_VERSION"));
        info
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn initialize_proposes_the_newest_version_with_a_handshake() {
        assert_eq!(PROPOSED_VERSION.as_str(), "2025-11-25");
        assert!(PROPOSED_VERSION.has_initialize());
        for v in ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"] {
            let v: ProtocolVersion = serde_json::from_value(serde_json::json!(v)).unwrap();
            assert!(speaks(&v), "{v:?}");
        }
        let odd: ProtocolVersion = serde_json::from_value(serde_json::json!("2023-01-01")).unwrap();
        assert!(!speaks(&odd));
    }

    #[test]
    fn a_root_is_the_file_uri_of_its_directory() {
        assert_eq!(
            root_uri("/data/users/u 1/ws").as_deref(),
            Some("file:///data/users/u%201/ws")
        );
        assert_eq!(root_uri("relative/dir"), None);
    }
}
