//! `CatalogActor`: the one owner of the lead's tool sources and the catalogs built from
//! them. Catalogs are cached by (sources version, assembly request); any source change
//! (config, extensions, an MCP tool list) bumps the version, so the next request builds a
//! new catalog with a new hash. A reply is always one whole, immutable catalog: builds
//! happen inside the actor, between messages, never visible half-done. Started with
//! [`CatalogActor::supervised`], a crash (chaos mode's [`Crash`]) restarts it in place with
//! the sources its feeders gave it and an empty cache: the next catalog is rebuilt from the
//! same sources, so it has the same hash, and queued requests wait instead of failing.

use std::{collections::HashMap, sync::Arc};

use actix::prelude::*;
use antler_protocol::config::{AppConfig, ExtensionsConfig};

use super::assembly::{
    assemble, Assembled, AssemblyError, AssemblyRequest, McpSourceTool, Sources,
};

/// Catalogs kept per sources version; older versions are dropped on change.
const CACHE_LIMIT: usize = 64;

/// The actor.
pub struct CatalogActor {
    sources: Sources,
    version: u64,
    cache: HashMap<AssemblyRequest, Arc<Assembled>>,
    /// Times the supervisor restarted it.
    restarts: u32,
}

impl CatalogActor {
    pub fn new(sources: Sources) -> Self {
        Self {
            sources,
            version: 1,
            cache: HashMap::new(),
            restarts: 0,
        }
    }

    fn changed(&mut self) {
        self.version += 1;
        self.cache.clear();
    }
}

impl CatalogActor {
    /// Starts the actor under an actix `Supervisor`, which restarts it when it stops.
    pub fn supervised(self) -> Addr<CatalogActor> {
        actix::Supervisor::start(move |_| self)
    }
}

impl Actor for CatalogActor {
    type Context = Context<Self>;
}

impl actix::Supervised for CatalogActor {
    /// What a crash loses is the cache; the sources are the feeders' and stay.
    fn restarting(&mut self, _: &mut Context<Self>) {
        self.cache.clear();
        self.restarts += 1;
        tracing::warn!(
            restarts = self.restarts,
            "the catalog actor stopped; restarted with the same sources (its catalogs are rebuilt)"
        );
    }
}

/// Chaos mode: stop as if crashed; the supervisor restarts the actor.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Crash;

impl Handler<Crash> for CatalogActor {
    type Result = ();

    fn handle(&mut self, _: Crash, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

/// How many times the actor was restarted.
#[derive(Debug, Message)]
#[rtype(result = "u32")]
pub(crate) struct Restarts;

impl Handler<Restarts> for CatalogActor {
    type Result = u32;

    fn handle(&mut self, _: Restarts, _: &mut Context<Self>) -> u32 {
        self.restarts
    }
}

/// A built catalog and the sources version it was built from.
#[derive(Clone)]
pub struct Built {
    pub version: u64,
    pub assembled: Arc<Assembled>,
}

/// Assemble (or fetch from the cache) the catalog for one request.
#[derive(Debug, Message)]
#[rtype(result = "Result<Built, AssemblyError>")]
pub struct Assemble(pub AssemblyRequest);

impl Handler<Assemble> for CatalogActor {
    type Result = Result<Built, AssemblyError>;

    fn handle(&mut self, msg: Assemble, _: &mut Context<Self>) -> Self::Result {
        if let Some(hit) = self.cache.get(&msg.0) {
            return Ok(Built {
                version: self.version,
                assembled: hit.clone(),
            });
        }
        let assembled = Arc::new(assemble(&self.sources, &msg.0)?);
        if self.cache.len() >= CACHE_LIMIT {
            self.cache.clear();
        }
        self.cache.insert(msg.0, assembled.clone());
        Ok(Built {
            version: self.version,
            assembled,
        })
    }
}

/// A new `config.yaml`.
#[derive(Debug, Message)]
#[rtype(result = "u64")]
pub struct SetConfig(pub Arc<AppConfig>);

impl Handler<SetConfig> for CatalogActor {
    type Result = u64;

    fn handle(&mut self, msg: SetConfig, _: &mut Context<Self>) -> u64 {
        self.sources.config = msg.0;
        self.changed();
        self.version
    }
}

/// A new `extensions_config.json`.
#[derive(Debug, Message)]
#[rtype(result = "u64")]
pub struct SetExtensions(pub Option<Arc<ExtensionsConfig>>);

impl Handler<SetExtensions> for CatalogActor {
    type Result = u64;

    fn handle(&mut self, msg: SetExtensions, _: &mut Context<Self>) -> u64 {
        self.sources.extensions = msg.0;
        self.changed();
        self.version
    }
}

/// The MCP tools of one server changed (or of all, with `server: None`).
#[derive(Debug, Message)]
#[rtype(result = "u64")]
pub struct SetMcpTools {
    /// Replace only this server's tools; `None` replaces the whole list.
    pub server: Option<String>,
    pub tools: Vec<McpSourceTool>,
}

impl Handler<SetMcpTools> for CatalogActor {
    type Result = u64;

    fn handle(&mut self, msg: SetMcpTools, _: &mut Context<Self>) -> u64 {
        self.sources.mcp = self.sources.mcp.replaced(msg.server.as_deref(), msg.tools);
        self.changed();
        self.version
    }
}

/// The current sources version.
#[derive(Debug, Message)]
#[rtype(result = "u64")]
pub(crate) struct Version;

impl Handler<Version> for CatalogActor {
    type Result = u64;

    fn handle(&mut self, _: Version, _: &mut Context<Self>) -> u64 {
        self.version
    }
}
