//! The `antler:` section of `config.yaml`: what is Antler's own and not DeerFlow's (runtime
//! directory, workers, frames, heartbeats, deadlines, draining, the cluster token and the
//! supervisor's restart budget, the TLS files of TCP cluster mode). Every field has a
//! default, so the section may be absent.
//! `check` rejects values the runtime cannot work with (a zero worker count, a zero heartbeat).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::cluster::ClusterSection;
use super::diagnostics::FieldPath;
use super::gateway::GatewaySection;
use super::ha::HaSection;
use crate::tls::TlsFiles;

/// 16 MiB, the default maximum frame size.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// The keys of `antler:`, for suggestions on a misspelt one.
pub const ANTLER_KEYS: &[&str] = &[
    "runtime_dir",
    "workers",
    "max_frame_bytes",
    "heartbeat_interval_ms",
    "heartbeat_misses",
    "request_timeout_ms",
    "drain_grace_s",
    "cluster_token",
    "listen",
    "restart_max",
    "restart_window_s",
    "playbook_dirs",
    "mcp_pool",
    "worker_slots",
    "gateway",
    "tls",
    "cluster",
    "agent_name",
    "telemetry",
    "ha",
    "store",
];

/// The keys of `antler.store`.
pub const STORE_KEYS: &[&str] = &["postgres"];

/// The keys of `antler.store.postgres`.
pub const STORE_POSTGRES_KEYS: &[&str] = &["dsn"];

/// The keys of `antler.telemetry`.
pub const TELEMETRY_KEYS: &[&str] = &["otlp_endpoint", "service_name"];

/// The keys of `antler.tls`.
pub const TLS_KEYS: &[&str] = &["ca", "cert", "key"];

/// The most subagent workers one local cluster starts.
pub const MAX_WORKERS: usize = 64;

/// The most tasks one subagent worker runs at once.
pub const MAX_WORKER_SLOTS: u32 = 1024;

/// The keys of `antler.mcp_pool`.
pub const MCP_POOL_KEYS: &[&str] = &["idle_timeout_s", "max_sessions", "max_rss_mb"];

/// Antler's own settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, expecting = "a mapping of Antler settings")]
pub struct AntlerSection {
    /// Where sockets and state live; `None` means the user's runtime or state directory.
    pub runtime_dir: Option<PathBuf>,
    /// Subagent worker processes `antler up` starts.
    pub workers: usize,
    /// The largest frame a peer may send.
    pub max_frame_bytes: usize,
    /// How often peers ping each other.
    pub heartbeat_interval_ms: u64,
    /// Missed heartbeats after which a peer is dead.
    pub heartbeat_misses: u32,
    /// The default deadline of a request across processes.
    pub request_timeout_ms: u64,
    /// How long SIGTERM lets requests in flight finish.
    pub drain_grace_s: u64,
    /// The shared token of TCP cluster mode (`$VAR` reads the environment).
    pub cluster_token: Option<String>,
    /// The TCP address to listen on in cluster mode.
    pub listen: Option<String>,
    /// Crashes within `restart_window_s` after which a child is marked failed.
    pub restart_max: u32,
    /// The window for `restart_max`.
    pub restart_window_s: u64,
    /// Directories whose playbooks `POST /api/runs` may name (`"playbook": "name.yaml"`);
    /// the API reads no other file. Relative entries are relative to config.yaml's directory.
    pub playbook_dirs: Vec<PathBuf>,
    /// mcp-host's stdio session pool (per user and thread sessions).
    pub mcp_pool: McpPoolSection,
    /// Tasks one subagent worker runs at once (its advertised slots).
    pub worker_slots: u32,
    /// Who may use the HTTP gateway: static tokens and JWT principals.
    pub gateway: GatewaySection,
    /// The lead's TLS files for TCP connections (cluster mode).
    pub tls: TlsSection,
    /// The hosts a lead in cluster mode dials instead of starting them.
    pub cluster: ClusterSection,
    /// The agent's name in the lead's system prompt when a run talks as no custom agent
    /// (`None`: Antler's own, "Antler").
    pub agent_name: Option<String>,
    /// Traces over OTLP (docs/telemetry.md); off when no endpoint is given here or in
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub telemetry: TelemetrySection,
    /// Several leads sharing their runs through run leases on PostgreSQL (docs/ha.md).
    pub ha: HaSection,
    /// Where the lead keeps its runs: SQLite in the runtime directory unless
    /// `postgres.dsn` names a PostgreSQL (several leads share it; docs/ha.md).
    pub store: StoreSection,
}

/// `antler.store`: the runs store's backend. `ANTLER_STORE_DSN` overrides the DSN (a
/// Kubernetes Secret); no DSN is SQLite.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, expecting = "a mapping with postgres")]
pub struct StoreSection {
    pub postgres: StorePostgresSection,
}

/// `antler.store.postgres`: the DSN of the PostgreSQL store (`postgres://user:pw@host/db`
/// or `host=… user=… dbname=…`; `$VAR` reads the environment).
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, expecting = "a mapping with dsn")]
pub struct StorePostgresSection {
    pub dsn: Option<String>,
}

impl std::fmt::Debug for StorePostgresSection {
    /// The DSN may hold a password: it is never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StorePostgresSection")
            .field("dsn", &self.dsn.as_ref().map(|_| "…"))
            .finish()
    }
}

impl StoreSection {
    /// The configured DSN, if set to a non-empty value (an unset `$VAR` resolves to "").
    pub fn postgres_dsn(&self) -> Option<&str> {
        self.postgres
            .dsn
            .as_deref()
            .filter(|d| !d.trim().is_empty())
    }
}

/// `antler.telemetry`: where every process of the cluster exports its spans (OTLP over
/// HTTP, protobuf) and the `service.name` they carry (the lead's; each host appends its
/// role: `antler-sandbox-host`, ...). `$VAR` reads the environment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, expecting = "a mapping with otlp_endpoint and service_name")]
pub struct TelemetrySection {
    /// The collector's OTLP/HTTP base address (`http://host:4318`); `/v1/traces` is added.
    pub otlp_endpoint: Option<String>,
    /// The lead's `service.name` (default `antler`).
    pub service_name: Option<String>,
}

/// `antler.tls`: the cluster CA, the lead's certificate and key (PEM files, as `antler
/// cluster init` writes them: `ca.crt`, `lead.crt`, `lead.key`). With them, the lead's
/// TCP connections are mutual TLS 1.3; without, TCP is plaintext and loopback only.
/// Relative paths are relative to config.yaml's directory; `$VAR` reads the environment.
/// The three are given together or not at all.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, expecting = "a mapping with ca, cert and key")]
pub struct TlsSection {
    /// The cluster CA certificate.
    pub ca: Option<PathBuf>,
    /// The lead's certificate, signed by the CA and naming `lead.antler.cluster`.
    pub cert: Option<PathBuf>,
    /// The lead's private key.
    pub key: Option<PathBuf>,
}

impl TlsSection {
    /// The files, relative ones resolved against `base` (config.yaml's directory);
    /// `None` when TLS is not configured. Assumes [`AntlerSection::check`] passed.
    pub fn files(&self, base: &Path) -> Option<TlsFiles> {
        let at = |p: &Option<PathBuf>| p.as_ref().map(|p| base.join(p));
        Some(TlsFiles {
            ca: at(&self.ca)?,
            cert: at(&self.cert)?,
            key: at(&self.key)?,
        })
    }

    fn given(p: &Option<PathBuf>) -> bool {
        p.as_ref().is_some_and(|p| !p.as_os_str().is_empty())
    }
}

/// `antler.mcp_pool`: bounds of mcp-host's stdio session pool. A pooled session unused
/// for `idle_timeout_s` is stopped; past `max_sessions` sessions, or past `max_rss_mb`
/// of resident memory summed over the pooled servers' processes, the least recently used
/// sessions are stopped.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, expecting = "a mapping of session pool settings")]
pub struct McpPoolSection {
    /// Seconds a pooled session may stay unused.
    pub idle_timeout_s: u64,
    /// Pooled sessions at most.
    pub max_sessions: usize,
    /// Resident memory of the pooled servers at most, in MiB.
    pub max_rss_mb: u64,
}

impl Default for McpPoolSection {
    fn default() -> Self {
        Self {
            idle_timeout_s: 600,
            max_sessions: 256,
            max_rss_mb: 2048,
        }
    }
}

impl McpPoolSection {
    /// How long a pooled session may stay unused.
    pub fn idle_timeout(&self) -> Duration {
        Duration::from_secs(self.idle_timeout_s)
    }

    /// The memory cap in bytes.
    pub fn max_rss_bytes(&self) -> u64 {
        self.max_rss_mb.saturating_mul(1024 * 1024)
    }
}

impl Default for AntlerSection {
    fn default() -> Self {
        Self {
            runtime_dir: None,
            workers: 2,
            worker_slots: 4,
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            heartbeat_interval_ms: 1000,
            heartbeat_misses: 3,
            request_timeout_ms: 30_000,
            drain_grace_s: 10,
            cluster_token: None,
            listen: None,
            restart_max: 5,
            restart_window_s: 60,
            playbook_dirs: Vec::new(),
            mcp_pool: McpPoolSection::default(),
            gateway: GatewaySection::default(),
            tls: TlsSection::default(),
            cluster: ClusterSection::default(),
            agent_name: None,
            telemetry: TelemetrySection::default(),
            ha: HaSection::default(),
            store: StoreSection::default(),
        }
    }
}

impl AntlerSection {
    /// The cluster token, if set to a non-empty value (an unset `$VAR` resolves to "").
    pub fn cluster_token(&self) -> Option<&str> {
        self.cluster_token.as_deref().filter(|t| !t.is_empty())
    }

    /// The heartbeat period.
    pub fn heartbeat_interval(&self) -> Duration {
        Duration::from_millis(self.heartbeat_interval_ms)
    }

    /// The default request deadline.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    /// The drain grace period.
    pub fn drain_grace(&self) -> Duration {
        Duration::from_secs(self.drain_grace_s)
    }

    /// The restart-budget window.
    pub fn restart_window(&self) -> Duration {
        Duration::from_secs(self.restart_window_s)
    }

    /// The `antler.tls` files missing beside one that is given, as (path, expectation).
    pub(crate) fn check_tls(&self) -> Vec<(FieldPath, &'static str)> {
        let base = FieldPath::root().key("antler");
        let mut problems = Vec::new();
        let tls = [
            ("ca", TlsSection::given(&self.tls.ca)),
            ("cert", TlsSection::given(&self.tls.cert)),
            ("key", TlsSection::given(&self.tls.key)),
        ];
        if tls.iter().any(|(_, given)| *given) {
            for (field, _) in tls.iter().filter(|(_, given)| !given) {
                problems.push((
                    base.key("tls").key(*field),
                    "expected a file path: antler.tls takes ca, cert and key together",
                ));
            }
        }
        problems
    }

    /// Values the runtime cannot work with, as (path under `antler`, expectation).
    pub(crate) fn check(&self) -> Vec<(FieldPath, &'static str)> {
        let base = FieldPath::root().key("antler");
        let at_least_one = "expected an integer of at least 1";
        let mut problems = Vec::new();
        let mut require = |ok: bool, field: &str, expected: &'static str| {
            if !ok {
                problems.push((base.key(field), expected));
            }
        };
        require(
            (1..=MAX_WORKERS).contains(&self.workers),
            "workers",
            "expected an integer from 1 to 64",
        );
        require(
            (1..=MAX_WORKER_SLOTS).contains(&self.worker_slots),
            "worker_slots",
            "expected an integer from 1 to 1024",
        );
        require(
            self.max_frame_bytes >= 1024,
            "max_frame_bytes",
            "expected an integer of at least 1024",
        );
        require(
            self.heartbeat_interval_ms >= 1,
            "heartbeat_interval_ms",
            at_least_one,
        );
        require(self.heartbeat_misses >= 1, "heartbeat_misses", at_least_one);
        require(
            self.request_timeout_ms >= 1,
            "request_timeout_ms",
            at_least_one,
        );
        require(self.restart_max >= 1, "restart_max", at_least_one);
        require(self.restart_window_s >= 1, "restart_window_s", at_least_one);
        let pool = base.key("mcp_pool");
        for (ok, field) in [
            (self.mcp_pool.idle_timeout_s >= 1, "idle_timeout_s"),
            (self.mcp_pool.max_sessions >= 1, "max_sessions"),
            (self.mcp_pool.max_rss_mb >= 1, "max_rss_mb"),
        ] {
            if !ok {
                problems.push((pool.key(field), at_least_one));
            }
        }
        problems.extend(self.gateway.check(&base));
        problems.extend(self.ha.check(&base));
        let tls = TlsSection::given(&self.tls.ca);
        problems.extend(self.cluster.check(&base, tls));
        problems
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_issue() {
        let a: AntlerSection = serde_yaml::from_str("{}").unwrap();
        assert_eq!(a, AntlerSection::default());
        assert_eq!(a.workers, 2);
        assert_eq!(a.max_frame_bytes, 16 * 1024 * 1024);
        assert_eq!(a.heartbeat_interval(), Duration::from_secs(1));
        assert_eq!(a.heartbeat_misses, 3);
        assert_eq!(a.request_timeout(), Duration::from_secs(30));
        assert_eq!(a.drain_grace(), Duration::from_secs(10));
        assert_eq!((a.restart_max, a.restart_window_s), (5, 60));
        assert!(a.check().is_empty());
    }

    #[test]
    fn empty_token_counts_as_unset() {
        let a = AntlerSection {
            cluster_token: Some(String::new()),
            ..AntlerSection::default()
        };
        assert_eq!(a.cluster_token(), None);
    }

    #[test]
    fn the_store_dsn_is_read_blank_is_none_and_never_printed() {
        let a: AntlerSection =
            serde_yaml::from_str("store: {postgres: {dsn: 'postgres://a:hunter2@db/antler'}}")
                .unwrap();
        assert_eq!(
            a.store.postgres_dsn(),
            Some("postgres://a:hunter2@db/antler")
        );
        assert!(!format!("{a:?}").contains("hunter2"));
        let blank: AntlerSection = serde_yaml::from_str("store: {postgres: {dsn: ' '}}").unwrap();
        assert_eq!(blank.store.postgres_dsn(), None);
        assert_eq!(AntlerSection::default().store.postgres_dsn(), None);
    }

    #[test]
    fn too_many_workers_is_named() {
        let a = AntlerSection {
            workers: MAX_WORKERS + 1,
            ..AntlerSection::default()
        };
        let problems = a.check();
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].0.to_string(), "antler.workers");
        assert_eq!(problems[0].1, "expected an integer from 1 to 64");
    }

    #[test]
    fn the_mcp_pool_has_bounds_by_default_and_rejects_zero() {
        let a: AntlerSection =
            serde_yaml::from_str("mcp_pool: {idle_timeout_s: 30, max_rss_mb: 512}").unwrap();
        assert_eq!(a.mcp_pool.idle_timeout(), Duration::from_secs(30));
        assert_eq!(a.mcp_pool.max_sessions, 256);
        assert_eq!(a.mcp_pool.max_rss_bytes(), 512 * 1024 * 1024);
        assert_eq!(AntlerSection::default().mcp_pool.idle_timeout_s, 600);
        let zero: AntlerSection = serde_yaml::from_str("mcp_pool: {max_sessions: 0}").unwrap();
        let problems = zero.check();
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].0.to_string(), "antler.mcp_pool.max_sessions");
    }

    #[test]
    fn tls_takes_its_three_files_together() {
        let a: AntlerSection =
            serde_yaml::from_str("tls: {ca: ca.crt, cert: /s/lead.crt, key: lead.key}").unwrap();
        assert!(a.check_tls().is_empty());
        let files = a.tls.files(Path::new("/etc/antler")).unwrap();
        assert_eq!(files.ca, PathBuf::from("/etc/antler/ca.crt"));
        assert_eq!(files.cert, PathBuf::from("/s/lead.crt"));
        assert_eq!(files.key, PathBuf::from("/etc/antler/lead.key"));
        assert_eq!(AntlerSection::default().tls.files(Path::new("/")), None);
        let half: AntlerSection = serde_yaml::from_str("tls: {ca: ca.crt}").unwrap();
        assert!(half.check().is_empty());
        let problems = half.check_tls();
        let paths: Vec<String> = problems.iter().map(|p| p.0.to_string()).collect();
        assert_eq!(paths, ["antler.tls.cert", "antler.tls.key"]);
        assert!(problems[0].1.contains("ca, cert and key together"));
    }

    #[test]
    fn zero_workers_is_named() {
        let a = AntlerSection {
            workers: 0,
            ..AntlerSection::default()
        };
        let problems = a.check();
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].0.to_string(), "antler.workers");
    }
}
