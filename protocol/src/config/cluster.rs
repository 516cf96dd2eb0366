//! `antler.cluster`: where the hosts of a cluster on other machines are, for a lead that
//! dials them instead of starting them (cluster mode). `sandbox_hosts` lists each
//! sandbox-host replica by a stable name (a StatefulSet pod's DNS name): a thread's
//! sandbox lives on the one its id hashes to. `mcp_hosts` and `workers` name addresses
//! that are resolved again every `resolve_interval_s`: every address a name resolves to
//! is one replica (a headless Service), so replicas that appear are dialed and replicas
//! that vanish are dropped. Without the section, the lead starts a local cluster.

use std::time::Duration;

use serde::Deserialize;

use super::diagnostics::FieldPath;
use crate::transport::Address;

/// The keys of `antler.cluster`.
pub const CLUSTER_KEYS: &[&str] = &[
    "sandbox_hosts",
    "mcp_hosts",
    "workers",
    "resolve_interval_s",
];

/// The cluster's host addresses, as `unix:PATH` or `tcp:HOST:PORT` strings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(
    default,
    expecting = "a mapping with sandbox_hosts, mcp_hosts and workers"
)]
pub struct ClusterSection {
    /// One entry per sandbox-host replica; the entry is the replica's identity.
    pub sandbox_hosts: Vec<String>,
    /// mcp-host addresses; each resolves to one or more replicas.
    pub mcp_hosts: Vec<String>,
    /// Subagent worker addresses; each resolves to one or more workers.
    pub workers: Vec<String>,
    /// How often names are resolved again, in seconds.
    pub resolve_interval_s: u64,
}

impl Default for ClusterSection {
    fn default() -> Self {
        Self {
            sandbox_hosts: Vec::new(),
            mcp_hosts: Vec::new(),
            workers: Vec::new(),
            resolve_interval_s: 5,
        }
    }
}

/// The parsed addresses of a cluster section in use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterHosts {
    pub sandbox_hosts: Vec<Address>,
    pub mcp_hosts: Vec<Address>,
    pub workers: Vec<Address>,
    pub resolve_interval: Duration,
}

impl ClusterSection {
    /// Whether the lead dials a cluster instead of starting one.
    pub fn enabled(&self) -> bool {
        !(self.sandbox_hosts.is_empty() && self.mcp_hosts.is_empty() && self.workers.is_empty())
    }

    /// The addresses, when the section is in use. Assumes [`ClusterSection::check`] passed.
    pub fn hosts(&self) -> Option<ClusterHosts> {
        if !self.enabled() {
            return None;
        }
        let parse = |v: &[String]| v.iter().filter_map(|a| a.parse().ok()).collect();
        Some(ClusterHosts {
            sandbox_hosts: parse(&self.sandbox_hosts),
            mcp_hosts: parse(&self.mcp_hosts),
            workers: parse(&self.workers),
            resolve_interval: Duration::from_secs(self.resolve_interval_s.max(1)),
        })
    }

    /// Values the lead cannot dial, as (path, expectation). `tls` says whether
    /// `antler.tls` is configured: TCP beyond loopback needs it.
    pub(crate) fn check(&self, base: &FieldPath, tls: bool) -> Vec<(FieldPath, &'static str)> {
        let at = base.key("cluster");
        let mut problems = Vec::new();
        if !self.enabled() {
            return problems;
        }
        for (field, list) in [
            ("sandbox_hosts", &self.sandbox_hosts),
            ("mcp_hosts", &self.mcp_hosts),
            ("workers", &self.workers),
        ] {
            for (i, entry) in list.iter().enumerate() {
                match entry.parse::<Address>() {
                    Err(_) => problems.push((
                        at.key(field).index(i),
                        "expected an address: unix:PATH or tcp:HOST:PORT",
                    )),
                    Ok(Address::Tcp(a)) if !tls && !is_loopback(&a) => problems.push((
                        at.key(field).index(i),
                        "expected a loopback address: TCP beyond loopback needs antler.tls (mutual TLS)",
                    )),
                    Ok(_) => {}
                }
            }
            if list.iter().collect::<std::collections::HashSet<_>>().len() != list.len() {
                problems.push((at.key(field), "expected each address once"));
            }
        }
        if self.sandbox_hosts.is_empty() {
            problems.push((
                at.key("sandbox_hosts"),
                "expected at least one sandbox-host address in cluster mode",
            ));
        }
        if self.mcp_hosts.is_empty() {
            problems.push((
                at.key("mcp_hosts"),
                "expected at least one mcp-host address in cluster mode",
            ));
        }
        if self.resolve_interval_s == 0 {
            problems.push((
                at.key("resolve_interval_s"),
                "expected an integer of at least 1",
            ));
        }
        problems
    }
}

/// Whether `host:port` names a loopback address (`localhost` included).
pub fn is_loopback(host_port: &str) -> bool {
    let host = host_port
        .rsplit_once(':')
        .map(|(h, _)| h)
        .unwrap_or(host_port)
        .trim_start_matches('[')
        .trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn check(yaml: &str, tls: bool) -> Vec<String> {
        let c: ClusterSection = serde_yaml::from_str(yaml).unwrap();
        c.check(&FieldPath::root().key("antler"), tls)
            .into_iter()
            .map(|(p, e)| format!("{p}: {e}"))
            .collect()
    }

    #[test]
    fn absent_means_local_mode() {
        let c: ClusterSection = serde_yaml::from_str("{}").unwrap();
        assert!(!c.enabled());
        assert_eq!(c.hosts(), None);
        assert!(check("{}", false).is_empty());
    }

    #[test]
    fn addresses_parse_and_off_loopback_tcp_needs_tls() {
        let yaml = "sandbox_hosts: [tcp:sandbox-0.sandbox:7103, tcp:sandbox-1.sandbox:7103]\nmcp_hosts: [tcp:mcp:7102]\nworkers: [tcp:workers:7104]\n";
        assert!(check(yaml, true).is_empty());
        let problems = check(yaml, false);
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert!(problems[0].contains("antler.cluster.sandbox_hosts[0]"));
        assert!(problems[0].contains("needs antler.tls"));
        let local = "sandbox_hosts: [tcp:127.0.0.1:7103]\nmcp_hosts: ['unix:/run/m.sock']\n";
        assert!(check(local, false).is_empty());
        let c: ClusterSection = serde_yaml::from_str(yaml).unwrap();
        let hosts = c.hosts().unwrap();
        assert_eq!(hosts.sandbox_hosts.len(), 2);
        assert_eq!(hosts.resolve_interval, Duration::from_secs(5));
    }

    #[test]
    fn bad_entries_are_named() {
        let problems = check(
            "sandbox_hosts: ['tcp:nowhere', 'tcp:nowhere']\nworkers: ['tcp:w:1']\nresolve_interval_s: 0\n",
            true,
        );
        let all = problems.join("\n");
        assert!(all.contains("antler.cluster.sandbox_hosts[0]: expected an address"));
        assert!(all.contains("antler.cluster.sandbox_hosts: expected each address once"));
        assert!(all.contains("antler.cluster.mcp_hosts: expected at least one"));
        assert!(all.contains("antler.cluster.resolve_interval_s"));
    }
}
