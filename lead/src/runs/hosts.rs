//! [`LinkHosts`]: how runs in the lead reach sandbox-host and mcp-host: the request goes
//! through the supervisor's link to a replica of the host (one link per replica,
//! reconnecting on its own), with the caller's deadline. Which replica follows the
//! request's [`Route`]: a thread's sandbox and pooled stdio sessions stay on the replica
//! its sandbox id hashes to (rendezvous over the replicas' addresses), other calls go to
//! a connected replica in turn, and lease renewals go to all of them. A local cluster has
//! one replica of each. A host that is down fails the call at once with a [`HostError`],
//! which the run turns into an error tool message. The links are the supervisor's,
//! reached through [`HostLinks`] (the cluster implements it): runs never name the
//! supervisor.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix::Addr;
use antler_protocol::{
    calls::{request_kind, SandboxCalls},
    link::{HostLink, Snapshot},
    messages::{Reply, SandboxReply, SandboxRequest},
    placement::{self, Route},
};
use antler_protocol::{messages::Request, Role};
use futures::future::BoxFuture;

use antler_engine::{call_link, stream_link, HostError, HostReadiness, LinkTo, ToolHosts};

/// One replica: its address (its identity for hashing) and its link.
pub type Replica = (String, Addr<HostLink>);

pub use crate::links::{HostLinks, Links};

/// Tool hosts reached through the lead's own links.
#[derive(Clone)]
pub struct LinkHosts {
    links: Arc<dyn HostLinks>,
    /// Where the next spread call starts looking.
    turn: Arc<AtomicUsize>,
}

impl LinkHosts {
    pub fn new(links: impl HostLinks) -> LinkHosts {
        LinkHosts {
            links: Arc::new(links),
            turn: Arc::default(),
        }
    }

    /// The replicas of `role`, by index.
    pub async fn replicas(&self, role: Role) -> Result<Vec<Replica>, HostError> {
        replicas(&*self.links, role).await
    }
}

/// The replicas of `role` the supervisor links to, by index.
pub async fn replicas(links: &dyn HostLinks, role: Role) -> Result<Vec<Replica>, HostError> {
    let mut links = links
        .links()
        .await
        .map_err(|e| HostError::unavailable(format!("the lead's supervisor is gone: {e}")))?;
    links.retain(|(r, ..)| *r == role);
    links.sort_by_key(|(_, i, ..)| *i);
    Ok(links.into_iter().map(|(_, _, a, l)| (a, l)).collect())
}

/// Whether a replica of `role` has a live connection now.
pub async fn any_linked(links: &dyn HostLinks, role: Role) -> bool {
    let Ok(replicas) = replicas(links, role).await else {
        return false;
    };
    for (_, link) in replicas {
        if link.send(Snapshot).await.is_ok_and(|s| s.connected) {
            return true;
        }
    }
    false
}

/// The states of `antler status` in which a child is not coming back by itself (the
/// supervisor gave up on it, or it was stopped).
const GIVEN_UP: [&str; 2] = ["failed", "stopped"];

/// Whether `role` is linked now, and if not whether a replica is on its way (starting or
/// restarting under the supervisor, or a remote one it keeps dialling).
pub async fn host_readiness(links: &dyn HostLinks, role: Role) -> HostReadiness {
    if any_linked(links, role).await {
        return HostReadiness::Linked;
    }
    let processes = links.processes().await;
    let coming = processes
        .iter()
        .any(|p| p.role == role && !GIVEN_UP.contains(&p.state.as_str()));
    if coming {
        HostReadiness::Starting
    } else {
        HostReadiness::Down
    }
}

/// The replica a key (a sandbox id) is pinned to.
pub fn pinned<'a>(replicas: &'a [Replica], key: &str) -> Option<&'a Replica> {
    pinned_by(replicas, |(a, _)| a, key)
}

/// The replica of `replicas` (listed by index) that `key` (a sandbox id) is pinned to:
/// rendezvous hashing over their addresses. Every choice of a thread's replica, the runs'
/// and the forwards', is this one.
pub fn pinned_by<'a, T>(
    replicas: &'a [T],
    address: impl Fn(&T) -> &str,
    key: &str,
) -> Option<&'a T> {
    placement::rendezvous(key, replicas.iter().map(&address)).map(|i| &replicas[i])
}

/// A request that goes to every replica: a lease renewal (a run's leases may sit on any
/// of them), renewed on each with the typed call, the answers made one ([`combine`]); or
/// a user's upload total (its threads hash to several replicas), the sum of every
/// replica's share, unknown (an error) while one of them does not answer.
async fn every(
    role: Role,
    replicas: &[Replica],
    request: Request,
    timeout: Duration,
) -> Result<Reply, HostError> {
    let owner = match request {
        Request::Sandbox(SandboxRequest::RenewLease { owner }) => owner,
        Request::Sandbox(SandboxRequest::UploadsUsage { user_id }) => {
            return uploads_usage(role, replicas, user_id, timeout).await
        }
        other => {
            return Err(HostError::failed(format!(
                "{} goes to one replica, not to every one",
                request_kind(&other)
            )))
        }
    };
    let renewals = replicas.iter().map(|(_, link)| {
        let owner = owner.clone();
        async move { LinkTo { role, link }.renew_lease(owner, timeout).await }
    });
    let renewed = combine(futures::future::join_all(renewals).await)?;
    Ok(Reply::Sandbox(SandboxReply::Renewed(renewed)))
}

/// The sum of every replica's share of `user_id`'s uploads.
async fn uploads_usage(
    role: Role,
    replicas: &[Replica],
    user_id: String,
    timeout: Duration,
) -> Result<Reply, HostError> {
    let shares = replicas.iter().map(|(_, link)| {
        let user_id = user_id.clone();
        async move { LinkTo { role, link }.uploads_usage(user_id, timeout).await }
    });
    let mut total = 0u64;
    for share in futures::future::join_all(shares).await {
        match share? {
            Ok(bytes) => total = total.saturating_add(bytes),
            Err(e) => return Ok(Reply::Sandbox(SandboxReply::UploadsUsage(Err(e)))),
        }
    }
    Ok(Reply::Sandbox(SandboxReply::UploadsUsage(Ok(total))))
}

/// The renewals of every replica as one: they add up when every replica answered;
/// otherwise the first that did, else the first error.
fn combine(renewals: Vec<Result<u32, HostError>>) -> Result<u32, HostError> {
    if !renewals.is_empty() && renewals.iter().all(Result::is_ok) {
        return Ok(renewals.into_iter().flatten().sum());
    }
    let mut first_error = None;
    for renewal in renewals {
        match renewal {
            Ok(renewed) => return Ok(renewed),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Err(first_error.unwrap_or_else(|| HostError::failed("no replica answered")))
}

impl ToolHosts for LinkHosts {
    fn request(
        &self,
        role: Role,
        request: Request,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Reply, HostError>> {
        Box::pin(async move {
            let replicas = self.replicas(role).await?;
            if replicas.is_empty() {
                return Err(HostError::failed(format!("no {role} in this cluster")));
            }
            match placement::route(&request) {
                Route::Pinned(key) => {
                    let Some((_, link)) = pinned(&replicas, &key) else {
                        return Err(HostError::failed(format!("no {role} in this cluster")));
                    };
                    call_link(role, link, request, timeout).await
                }
                Route::Every => every(role, &replicas, request, timeout).await,
                Route::Spread => {
                    let start = self.turn.fetch_add(1, Ordering::Relaxed);
                    let n = replicas.len();
                    let mut chosen = &replicas[start % n].1;
                    if n > 1 {
                        for k in 0..n {
                            let link = &replicas[(start + k) % n].1;
                            if link.send(Snapshot).await.is_ok_and(|s| s.connected) {
                                chosen = link;
                                break;
                            }
                        }
                    }
                    call_link(role, chosen, request, timeout).await
                }
            }
        })
    }

    fn relays_items(&self) -> bool {
        true
    }

    /// A pinned request streams through its replica's connection; others are unary.
    fn request_items<'a>(
        &'a self,
        role: Role,
        request: Request,
        timeout: Duration,
        items: &'a (dyn Fn(Reply) + Send + Sync),
    ) -> BoxFuture<'a, Result<Reply, HostError>> {
        Box::pin(async move {
            let Route::Pinned(key) = placement::route(&request) else {
                return self.request(role, request, timeout).await;
            };
            let replicas = self.replicas(role).await?;
            let Some((_, link)) = pinned(&replicas, &key) else {
                return Err(HostError::failed(format!("no {role} in this cluster")));
            };
            stream_link(role, link, request, timeout, items).await
        })
    }

    fn readiness(&self, role: Role) -> BoxFuture<'_, HostReadiness> {
        Box::pin(host_readiness(&*self.links, role))
    }

    fn pinned_address(&self, role: Role, key: &str) -> BoxFuture<'_, Option<String>> {
        let key = key.to_owned();
        Box::pin(async move {
            let replicas = self.replicas(role).await.ok()?;
            pinned(&replicas, &key).map(|(address, _)| address.clone())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewals_add_up_and_a_success_wins_over_errors() {
        let renewed = Ok;
        assert_eq!(combine(vec![renewed(2), renewed(3)]), Ok(5));
        let down = Err(HostError::unavailable("down"));
        assert_eq!(combine(vec![down.clone(), renewed(1)]), Ok(1));
        assert_eq!(combine(vec![down.clone()]), down);
    }
}
