//! The client side of one MCP connection as rmcp sees it: our client info, and the
//! `notifications/tools/list_changed` hook that tells the owning server actor to re-list.

use rmcp::{
    model::{ClientCapabilities, ClientConfig, Implementation},
    service::NotificationContext,
    ClientHandler, RoleClient,
};
use tokio::sync::mpsc;

/// The handler rmcp drives for one connection.
#[derive(Debug, Clone)]
pub struct Client {
    tools_changed: mpsc::UnboundedSender<()>,
}

impl Client {
    /// A handler that signals `tools_changed` on each `tools/list_changed` notification.
    pub fn new(tools_changed: mpsc::UnboundedSender<()>) -> Self {
        Self { tools_changed }
    }
}

impl ClientHandler for Client {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl std::future::Future<Output = ()> + Send + '_ {
        let _ = self.tools_changed.send(());
        std::future::ready(())
    }

    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::default();
        info.capabilities = ClientCapabilities::default();
        info.client_info = Implementation::new("antler-mcp-host", env!("CARGO_PKG_VERSION"));
        info
    }
}
