//! `Leases`: who holds one sandbox and until when. A hold is a run of a lead incarnation
//! ([`LeaseOwner`]) or an anonymous hold (`antler tool call`, older clients); each lasts
//! the lease TTL from its last renewal. While a call runs in the sandbox none of its
//! leases expire (a long `bash` is not a holder gone). A sandbox with no lease and no call
//! running is idle: warm, and subject to the idle timeout.

use std::{collections::BTreeMap, time::Instant};

use antler_protocol::messages::LeaseOwner;

/// One hold on a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum LeaseKey {
    Run(LeaseOwner),
    Anonymous(u64),
}

impl std::fmt::Display for LeaseKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LeaseKey::Run(o) => write!(f, "run {} of lead {}", o.run_id, o.incarnation),
            LeaseKey::Anonymous(n) => write!(f, "anonymous hold {n}"),
        }
    }
}

/// The leases of one sandbox and the calls running in it.
#[derive(Debug, Default)]
pub struct Leases {
    held: BTreeMap<LeaseKey, Instant>,
    calls: u32,
}

impl Leases {
    /// Holds one lease.
    pub fn held(key: LeaseKey, until: Instant) -> Leases {
        let mut leases = Leases::default();
        leases.hold(key, until);
        leases
    }

    /// Leases held now.
    pub fn count(&self) -> u32 {
        self.held.len() as u32
    }

    /// No lease and no call running: the sandbox is warm.
    pub fn is_idle(&self) -> bool {
        self.held.is_empty() && self.calls == 0
    }

    /// Takes or renews a lease until `until`.
    pub fn hold(&mut self, key: LeaseKey, until: Instant) {
        let at = self.held.entry(key).or_insert(until);
        *at = (*at).max(until);
    }

    /// Renews `owner`'s lease if it holds one.
    pub fn renew(&mut self, owner: &LeaseOwner, until: Instant) -> bool {
        match self.held.get_mut(&LeaseKey::Run(owner.clone())) {
            Some(at) => {
                *at = (*at).max(until);
                true
            }
            None => false,
        }
    }

    /// Ends `owner`'s lease, or (`None`) one anonymous hold, else any one hold (what an
    /// unnamed release of a sandbox did before leases had owners).
    pub fn release(&mut self, owner: Option<&LeaseOwner>) {
        let key = match owner {
            Some(o) => Some(LeaseKey::Run(o.clone())),
            None => self
                .held
                .keys()
                .find(|k| matches!(k, LeaseKey::Anonymous(_)))
                .or_else(|| self.held.keys().next())
                .cloned(),
        };
        if let Some(key) = key {
            self.held.remove(&key);
        }
    }

    /// Removes the leases that expired by `now`, unless a call is running; returns them.
    pub fn expire(&mut self, now: Instant) -> Vec<LeaseKey> {
        if self.calls > 0 {
            return Vec::new();
        }
        let gone: Vec<LeaseKey> = self
            .held
            .iter()
            .filter(|(_, until)| **until <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for k in &gone {
            self.held.remove(k);
        }
        gone
    }

    /// Removes the leases of every lead incarnation but `current`; returns them.
    pub fn reclaim_other_incarnations(&mut self, current: &str) -> Vec<LeaseKey> {
        let gone: Vec<LeaseKey> = self
            .held
            .keys()
            .filter(|k| matches!(k, LeaseKey::Run(o) if o.incarnation != current))
            .cloned()
            .collect();
        for k in &gone {
            self.held.remove(k);
        }
        gone
    }

    pub fn call_started(&mut self) {
        self.calls += 1;
    }

    pub fn call_ended(&mut self) {
        self.calls = self.calls.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn run(incarnation: &str, run_id: &str) -> LeaseOwner {
        LeaseOwner {
            incarnation: incarnation.into(),
            run_id: run_id.into(),
        }
    }

    #[test]
    fn leases_expire_unless_renewed_or_busy() {
        let now = Instant::now();
        let ttl = Duration::from_secs(10);
        let mut l = Leases::held(LeaseKey::Run(run("a", "r1")), now + ttl);
        l.hold(LeaseKey::Run(run("a", "r2")), now + ttl);
        assert_eq!(l.count(), 2);
        assert!(l.renew(&run("a", "r1"), now + ttl * 3));
        assert!(!l.renew(&run("a", "r3"), now + ttl));
        l.call_started();
        assert!(
            l.expire(now + ttl * 2).is_empty(),
            "a running call keeps them"
        );
        l.call_ended();
        assert_eq!(
            l.expire(now + ttl * 2),
            [LeaseKey::Run(run("a", "r2"))],
            "only the lease not renewed expires"
        );
        assert_eq!(l.expire(now + ttl * 3), [LeaseKey::Run(run("a", "r1"))]);
        assert!(l.is_idle());
    }

    #[test]
    fn a_new_incarnation_reclaims_the_old_ones_leases() {
        let until = Instant::now() + Duration::from_secs(60);
        let mut l = Leases::held(LeaseKey::Run(run("old", "r1")), until);
        l.hold(LeaseKey::Run(run("new", "r2")), until);
        l.hold(LeaseKey::Anonymous(1), until);
        assert_eq!(
            l.reclaim_other_incarnations("new"),
            [LeaseKey::Run(run("old", "r1"))]
        );
        assert_eq!(l.count(), 2);
        l.release(None);
        l.release(Some(&run("new", "r2")));
        assert!(l.is_idle());
    }
}
