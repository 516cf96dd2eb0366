//! `Discovery`: the replicas of a cluster mode lead that come and go. Every
//! `resolve_interval` it resolves the configured `mcp_hosts` and `workers` names (a
//! headless Service resolves to one address per pod); every address is one replica,
//! which the supervisor dials. A replica whose address no longer resolves is removed
//! (its link closed, so the tasks on a vanished worker end as a lost worker's do). A
//! name that fails to resolve keeps the replicas it had: a DNS hiccup drops nobody.
//! Sandbox-host replicas are not discovered: each is named in the config, since a
//! thread's sandbox is pinned to its replica's identity.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use actix::prelude::*;
use antler_protocol::{handshake::Role, transport::Address};

use crate::cluster::supervisor::{AddChildren, ChildSpec, RemoveChild, Supervisor};

/// Resolves and follows the replicas of the discovered roles.
pub struct Discovery {
    supervisor: Addr<Supervisor>,
    /// (role, configured address) pairs to resolve.
    entries: Vec<(Role, Address)>,
    interval: Duration,
    /// The replicas dialled now: (role, resolved address) → index.
    known: BTreeMap<(Role, String), u32>,
    /// What each entry resolved to last time it resolved.
    last: BTreeMap<(Role, String), BTreeSet<String>>,
    next_index: BTreeMap<Role, u32>,
    resolving: bool,
}

impl Discovery {
    pub fn new(
        supervisor: Addr<Supervisor>,
        entries: Vec<(Role, Address)>,
        interval: Duration,
    ) -> Discovery {
        Discovery {
            supervisor,
            entries,
            interval,
            known: BTreeMap::new(),
            last: BTreeMap::new(),
            next_index: BTreeMap::new(),
            resolving: false,
        }
    }

    fn resolve_all(&mut self, ctx: &mut Context<Self>) {
        if self.resolving {
            return;
        }
        self.resolving = true;
        let entries = self.entries.clone();
        actix::fut::wrap_future::<_, Self>(async move {
            let mut out = Vec::with_capacity(entries.len());
            for (role, address) in entries {
                let key = (role, address.to_string());
                out.push((key, resolve(&address).await));
            }
            out
        })
        .map(|resolved, act, _| {
            act.resolving = false;
            for (key, result) in resolved {
                match result {
                    Ok(set) => {
                        act.last.insert(key, set);
                    }
                    Err(e) => {
                        tracing::warn!(role = %key.0, address = %key.1, error = %e, "cannot resolve; keeping its replicas");
                    }
                }
            }
            act.apply();
        })
        .spawn(ctx);
    }

    /// Dials replicas that appeared and drops those that vanished.
    fn apply(&mut self) {
        let wanted: BTreeSet<(Role, String)> = self
            .last
            .iter()
            .flat_map(|((role, _), set)| set.iter().map(move |a| (*role, a.clone())))
            .collect();
        let gone: Vec<((Role, String), u32)> = self
            .known
            .iter()
            .filter(|(k, _)| !wanted.contains(*k))
            .map(|(k, i)| (k.clone(), *i))
            .collect();
        for ((role, address), index) in gone {
            tracing::info!(%role, index, %address, "replica no longer resolves; dropping it");
            self.known.remove(&(role, address));
            self.supervisor.do_send(RemoveChild {
                role,
                index,
                grace: Duration::ZERO,
            });
        }
        let mut added = Vec::new();
        for (role, address) in wanted {
            if self.known.contains_key(&(role, address.clone())) {
                continue;
            }
            let Ok(parsed) = address.parse::<Address>() else {
                continue;
            };
            let next = self.next_index.entry(role).or_insert(0);
            let index = *next;
            *next += 1;
            tracing::info!(%role, index, %address, "replica found; dialing it");
            self.known.insert((role, address), index);
            added.push(ChildSpec::remote(role, index, parsed));
        }
        if !added.is_empty() {
            self.supervisor.do_send(AddChildren(added));
        }
    }
}

impl Actor for Discovery {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if crate::teardown::tearing_down() {
            return;
        }
        self.resolve_all(ctx);
        ctx.run_interval(self.interval, |act, ctx| act.resolve_all(ctx));
    }
}

/// The replicas one configured address stands for: a Unix socket or an IP address is
/// itself; a name is every address it resolves to (IPv4 ones when there are both, so a
/// dual-stack pod counts once).
async fn resolve(address: &Address) -> std::io::Result<BTreeSet<String>> {
    let host_port = match address {
        Address::Unix(_) => return Ok(BTreeSet::from([address.to_string()])),
        Address::Tcp(a) => a.clone(),
    };
    if host_port.parse::<SocketAddr>().is_ok() {
        return Ok(BTreeSet::from([address.to_string()]));
    }
    let found: Vec<SocketAddr> = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::net::lookup_host(host_port.clone()),
    )
    .await
    .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "resolution timed out"))??
    .collect();
    let v4 = found.iter().any(SocketAddr::is_ipv4);
    Ok(found
        .into_iter()
        .filter(|a| a.is_ipv4() == v4)
        .map(|a| format!("tcp:{a}"))
        .collect())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[actix_rt::test]
    async fn ip_addresses_and_sockets_are_themselves_and_names_resolve() {
        let ip: Address = "tcp:10.1.2.3:7104".parse().unwrap();
        assert_eq!(
            resolve(&ip).await.unwrap(),
            BTreeSet::from(["tcp:10.1.2.3:7104".to_string()])
        );
        let local: Address = "tcp:localhost:7104".parse().unwrap();
        let set = resolve(&local).await.unwrap();
        assert_eq!(set, BTreeSet::from(["tcp:127.0.0.1:7104".to_string()]));
        let nowhere: Address = "tcp:no-such-host.invalid:1".parse().unwrap();
        assert!(resolve(&nowhere).await.is_err());
    }
}
