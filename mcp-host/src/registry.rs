//! `McpRegistry`: owns the extensions config of this host (its path, the signature of the
//! last applied file, the servers it skipped) and the set of server actors, in file order.
//! Applying a config starts added servers, stops removed ones, restarts changed ones and
//! leaves unchanged ones connected. A file that fails to load keeps the old set.

use std::{path::PathBuf, sync::Arc};

use actix::prelude::*;
use antler_protocol::{
    config::{build_server_params, load_extensions_config, ExtensionsConfig, WarningKind},
    messages::{McpReloadSummary, McpServerStatus},
};
use tokio::sync::broadcast;

use crate::{
    oauth::OAuthBroker,
    server::{McpServer, ToolsChanged},
    transport::OpenOptions,
    watch::Signature,
};

/// The registry actor.
pub struct McpRegistry {
    path: Option<PathBuf>,
    servers: Vec<McpServer>,
    /// Enabled servers the config could not start, with DeerFlow's message.
    skipped: Vec<(String, String)>,
    signature: Option<Signature>,
    /// What applying the file of `signature` changed: a reload that finds the file as it
    /// was answers with it, so a writer whose change the watcher applied first still
    /// learns what its write did.
    last_applied: McpReloadSummary,
    changes: broadcast::Sender<ToolsChanged>,
    /// The OAuth authorizers every server actor shares.
    oauth: Arc<OAuthBroker>,
}

impl McpRegistry {
    pub fn new(path: Option<PathBuf>, oauth: Arc<OAuthBroker>) -> Self {
        Self {
            oauth,
            path,
            servers: Vec::new(),
            skipped: Vec::new(),
            signature: None,
            last_applied: McpReloadSummary::default(),
            changes: broadcast::channel(256).0,
        }
    }

    fn apply(
        &mut self,
        config: ExtensionsConfig,
        skipped: Vec<(String, String)>,
    ) -> McpReloadSummary {
        let mut summary = McpReloadSummary::default();
        let mut next = Vec::new();
        let mut old: Vec<Option<McpServer>> = self.servers.drain(..).map(Some).collect();
        for (name, server) in config.enabled_servers() {
            let transport = match build_server_params(name, server) {
                Ok(t) => t,
                Err(e) => {
                    tracing::warn!("{e}");
                    continue;
                }
            };
            let existing = old
                .iter_mut()
                .find(|h| h.as_ref().is_some_and(|h| h.name() == name))
                .and_then(Option::take);
            match existing {
                Some(h) if h.config() == server => {
                    summary.unchanged.push(name.to_owned());
                    next.push(h);
                }
                Some(h) => {
                    h.stop();
                    summary.restarted.push(name.to_owned());
                    next.push(self.spawn(name, server.clone(), transport));
                }
                None => {
                    summary.started.push(name.to_owned());
                    next.push(self.spawn(name, server.clone(), transport));
                }
            }
        }
        for h in old.into_iter().flatten() {
            h.stop();
            summary.stopped.push(h.name().to_owned());
        }
        self.servers = next;
        self.skipped = skipped;
        tracing::info!(
            started = ?summary.started,
            stopped = ?summary.stopped,
            restarted = ?summary.restarted,
            unchanged = summary.unchanged.len(),
            "MCP config applied"
        );
        summary
    }

    fn spawn(
        &self,
        name: &str,
        config: antler_protocol::config::McpServerConfig,
        transport: antler_protocol::config::Transport,
    ) -> McpServer {
        McpServer::spawn(
            name.to_owned(),
            config,
            transport,
            self.changes.clone(),
            OpenOptions {
                oauth: Some(self.oauth.clone()),
                ..OpenOptions::default()
            },
        )
    }

    /// Loads the file and applies it when its signature changed (or always, with `force`).
    fn reload(&mut self, force: bool) -> McpReloadSummary {
        let Some(path) = self.path.clone() else {
            return McpReloadSummary::default();
        };
        let signature = Signature::of(&path);
        if !signature.is_complete() {
            // Deleted or unreadable: keep the last known good set (spec 5.5, fail-soft).
            if self.signature.is_some() || force {
                tracing::warn!(path = %path.display(), "extensions config unreadable; keeping the last known good servers");
            }
            return McpReloadSummary {
                unchanged: self.servers.iter().map(|h| h.name().to_owned()).collect(),
                error: Some(format!(
                    "{}: the file is missing or unreadable; keeping the current servers",
                    path.display()
                )),
                ..Default::default()
            };
        }
        if !force && self.signature.as_ref() == Some(&signature) {
            return self.last_applied.clone();
        }
        self.signature = Some(signature);
        let summary = match load_extensions_config(&path) {
            Ok(loaded) => {
                let mut skipped = Vec::new();
                for w in &loaded.warnings {
                    tracing::warn!("{w}");
                    if w.kind == WarningKind::ServerSkipped {
                        let name = w.message.split('\'').nth(1).unwrap_or("").to_owned();
                        skipped.push((name, w.message.clone()));
                    }
                }
                self.apply(loaded.value, skipped)
            }
            Err(e) => {
                tracing::error!("{e}; keeping the current MCP servers");
                McpReloadSummary {
                    unchanged: self.servers.iter().map(|h| h.name().to_owned()).collect(),
                    error: Some(e.to_string()),
                    ..Default::default()
                }
            }
        };
        self.last_applied = summary.clone();
        summary
    }
}

impl Actor for McpRegistry {
    type Context = Context<Self>;

    fn started(&mut self, _: &mut Context<Self>) {
        if let Some(path) = &self.path {
            if !path.exists() {
                tracing::error!(path = %path.display(), "the extensions config does not exist; no MCP servers until it does");
            }
        }
        self.reload(true);
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        for h in &self.servers {
            h.stop();
        }
    }
}

/// The live server actors, in file order.
#[derive(Debug, Message)]
#[rtype(result = "Vec<McpServer>")]
pub struct Servers;

impl Handler<Servers> for McpRegistry {
    type Result = MessageResult<Servers>;

    fn handle(&mut self, _: Servers, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.servers.clone())
    }
}

/// The status lines of the servers the config skipped.
#[derive(Debug, Message)]
#[rtype(result = "Vec<McpServerStatus>")]
pub struct Skipped;

impl Handler<Skipped> for McpRegistry {
    type Result = MessageResult<Skipped>;

    fn handle(&mut self, _: Skipped, _: &mut Context<Self>) -> Self::Result {
        MessageResult(
            self.skipped
                .iter()
                .map(|(name, why)| McpServerStatus {
                    name: name.clone(),
                    transport: String::new(),
                    state: "invalid".into(),
                    tools: 0,
                    last_error: Some(why.clone()),
                    reconnects: 0,
                    in_flight: 0,
                    protocol_version: None,
                    lifecycle: None,
                    auth: None,
                })
                .collect(),
        )
    }
}

/// Re-read the config file (when its signature changed, or always with `force`); the reply
/// says what applying the file as it now is changed.
#[derive(Debug, Message)]
#[rtype(result = "McpReloadSummary")]
pub struct Reload {
    pub force: bool,
}

impl Handler<Reload> for McpRegistry {
    type Result = MessageResult<Reload>;

    fn handle(&mut self, msg: Reload, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.reload(msg.force))
    }
}

/// Subscribe to tool list changes.
#[derive(Debug, Message)]
#[rtype(result = "broadcast::Receiver<ToolsChanged>")]
pub struct Subscribe;

impl Handler<Subscribe> for McpRegistry {
    type Result = MessageResult<Subscribe>;

    fn handle(&mut self, _: Subscribe, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.changes.subscribe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &std::path::Path, servers: &[&str]) {
        let servers: serde_json::Map<String, serde_json::Value> = servers
            .iter()
            .map(|name| {
                // Nothing listens on port 1: the server actors only retry in the background.
                let url = format!("http://127.0.0.1:1/{name}");
                (
                    (*name).to_owned(),
                    serde_json::json!({"type": "http", "url": url}),
                )
            })
            .collect();
        let text = serde_json::json!({ "mcpServers": servers }).to_string();
        std::fs::write(path, text).expect("write config");
    }

    /// The gateway writes the file and then asks for a reload; the watcher may have applied
    /// the write in between, and the reload must still say what the write changed.
    #[actix::test]
    async fn a_reload_after_the_watcher_applied_the_file_says_what_it_changed() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("extensions_config.json");
        write(&path, &["a"]);
        let mut registry = McpRegistry::new(Some(path.clone()), OAuthBroker::new(None));
        assert_eq!(registry.reload(true).started, ["a"]);

        write(&path, &["a", "b"]);
        let by_watcher = registry.reload(false);
        assert_eq!(
            (by_watcher.started.clone(), by_watcher.unchanged.clone()),
            (vec!["b".to_owned()], vec!["a".to_owned()])
        );
        assert_eq!(registry.reload(false), by_watcher);

        // A later write of the same servers changes nothing, and says so.
        std::thread::sleep(std::time::Duration::from_millis(20));
        write(&path, &["a", "b"]);
        let again = registry.reload(false);
        assert!(again.started.is_empty(), "{again:?}");
        assert_eq!(again.unchanged, ["a", "b"]);
        for h in &registry.servers {
            h.stop();
        }
    }
}
