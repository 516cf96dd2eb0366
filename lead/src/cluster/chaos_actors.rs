//! Chaos mode's actor stops on the lead (`antler up --chaos`): a `ChaosStop` from the CLI
//! stops one named actor as if it had crashed. The lead's own (the catalog actor, a peer
//! link, a run's actor) are stopped here; the others are routed to the processes owning
//! them (mcp-host, sandbox-host, the workers). Outside chaos mode the request is refused
//! with [`CHAOS_OFF`]. The last stop is noted for `antler status` (the lead's `reason`).

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use actix::Addr;
use antler_protocol::{
    calls::{ControlCalls, LinkError, Linked},
    envelope::TraceContext,
    link::CrashLink,
    messages::{ActorRef, ControlReply, CHAOS_OFF},
    RemoteError, RpcError,
};

use crate::cluster::supervisor::{GetLinks, Supervisor};
use crate::runs::manager::{ChaosStopRun, RunManager};
use antler_engine::catalog::{CatalogActor, Crash as CrashCatalog};

/// How long a host gets to answer a routed `ChaosStop`.
const HOST_TIMEOUT: Duration = Duration::from_secs(5);

/// What the lead needs to stop actors in chaos mode.
#[derive(Clone)]
pub struct ChaosActors {
    /// Chaos mode is on (`--chaos`, `ANTLER_CHAOS`).
    pub enabled: bool,
    pub supervisor: Addr<Supervisor>,
    pub runs: Addr<RunManager>,
    pub catalog: Addr<CatalogActor>,
    /// The last actor stop and what it did, for `antler status`.
    last: Arc<Mutex<Option<String>>>,
}

impl ChaosActors {
    pub fn new(
        enabled: bool,
        supervisor: Addr<Supervisor>,
        runs: Addr<RunManager>,
        catalog: Addr<CatalogActor>,
    ) -> ChaosActors {
        ChaosActors {
            enabled,
            supervisor,
            runs,
            catalog,
            last: Arc::default(),
        }
    }

    /// The last actor stop, as `antler status` shows it beside the lead.
    pub fn last_stop(&self) -> Option<String> {
        self.last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Stops `actor` as if it crashed, here or in the process that owns it.
    pub async fn stop(
        &self,
        actor: ActorRef,
        trace: TraceContext,
    ) -> Result<ControlReply, RemoteError> {
        if !self.enabled {
            return Err(RemoteError::Failed(CHAOS_OFF.to_owned()));
        }
        tracing::warn!(%actor, "chaos: stopping {actor} as if it crashed");
        let reply = match &actor {
            ActorRef::Catalog => {
                self.catalog.do_send(CrashCatalog);
                ControlReply::ChaosStopped {
                    stopped: 1,
                    detail: "stopped the catalog actor; its supervisor restarts it with the same \
                             sources, and the next catalog is rebuilt with the same hash"
                        .to_owned(),
                }
            }
            ActorRef::PeerLink { role, index } => {
                let links = self.supervisor.send(GetLinks).await.map_err(gone)?;
                let Some((.., link)) = links.into_iter().find(|(r, i, ..)| r == role && i == index)
                else {
                    return Err(RemoteError::Failed(format!(
                        "no link to {role}-{index} in this cluster"
                    )));
                };
                link.do_send(CrashLink);
                ControlReply::ChaosStopped {
                    stopped: 1,
                    detail: format!(
                        "stopped the link to {role}-{index}: calls in flight on it failed; its \
                         supervisor restarts it and it redials"
                    ),
                }
            }
            ActorRef::Run { run_id } => {
                let detail = self
                    .runs
                    .send(ChaosStopRun(run_id.clone()))
                    .await
                    .map_err(gone)?
                    .map_err(RemoteError::Failed)?;
                ControlReply::ChaosStopped { stopped: 1, detail }
            }
            ActorRef::McpServer { .. } | ActorRef::Sandbox { .. } | ActorRef::TaskGraph { .. } => {
                self.route(&actor, trace).await?
            }
        };
        if let ControlReply::ChaosStopped { detail, .. } = &reply {
            let at = antler_protocol::sys::unix_ms() / 1000;
            *self
                .last
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) =
                Some(format!("chaos stop of {actor} at unix {at}: {detail}"));
        }
        Ok(reply)
    }

    /// Sends the stop to every host of the owning role; the actor was found when one of
    /// them stopped it.
    async fn route(
        &self,
        actor: &ActorRef,
        trace: TraceContext,
    ) -> Result<ControlReply, RemoteError> {
        let owner = actor.owner();
        let links = self.supervisor.send(GetLinks).await.map_err(gone)?;
        let asks =
            links
                .into_iter()
                .filter(|(role, ..)| *role == owner)
                .map(|(role, index, _, link)| {
                    let actor = actor.clone();
                    let trace = trace.clone();
                    async move {
                        let reply = Linked { link: &link, trace }
                            .chaos_stop(actor, HOST_TIMEOUT)
                            .await;
                        (role, index, reply)
                    }
                });
        let answers = futures::future::join_all(asks).await;
        if answers.is_empty() {
            return Err(RemoteError::Failed(format!(
                "no {owner} in this cluster owns {actor}"
            )));
        }
        let (mut stopped, mut details, mut errors) = (0u32, Vec::new(), Vec::new());
        for (role, index, reply) in answers {
            match reply {
                Ok((n, detail)) => {
                    if n > 0 {
                        stopped += n;
                        details.push(format!("{role}-{index}: {detail}"));
                    } else {
                        errors.push(format!("{role}-{index}: {detail}"));
                    }
                }
                Err(LinkError::Rpc(RpcError::Remote(RemoteError::Failed(e)))) => {
                    errors.push(format!("{role}-{index}: {e}"))
                }
                Err(LinkError::Rpc(e)) => errors.push(format!("{role}-{index}: {e}")),
                Err(LinkError::Gone(e)) => {
                    errors.push(format!("{role}-{index}: link unavailable: {e}"))
                }
            }
        }
        if stopped == 0 {
            // One host's chaos mode off says it all.
            if let Some(off) = errors.iter().find(|e| e.contains(CHAOS_OFF)) {
                return Err(RemoteError::Failed(off.clone()));
            }
            return Err(RemoteError::Failed(format!(
                "{actor} was not found: {}",
                errors.join("; ")
            )));
        }
        Ok(ControlReply::ChaosStopped {
            stopped,
            detail: details.join("; "),
        })
    }
}

fn gone(e: impl std::fmt::Display) -> RemoteError {
    RemoteError::Failed(format!("the lead's actors are unavailable: {e}"))
}

/// Whether chaos mode may run with these cluster-mode addresses: only on loopback (a chaos
/// cluster is a test bed, never a deployment). The error names the first address off it.
pub async fn check_loopback(addresses: &[antler_protocol::Address]) -> Result<(), String> {
    for address in addresses {
        let antler_protocol::Address::Tcp(host_port) = address else {
            continue;
        };
        let resolved: Vec<std::net::SocketAddr> = match tokio::net::lookup_host(host_port).await {
            Ok(found) => found.collect(),
            Err(e) => return Err(format!("{address} does not resolve: {e}")),
        };
        if resolved.is_empty() || resolved.iter().any(|a| !a.ip().is_loopback()) {
            return Err(format!("{address} is not a loopback address"));
        }
    }
    Ok(())
}
