//! `SandboxSettings`: everything sandbox-host reads from `config.yaml` (the `sandbox` and
//! `authorization` sections), with DeerFlow's defaults. DeerFlow keys (`use`,
//! `allow_host_bash`, `mounts`, `bash_command_timeout`, `bash_output_max_chars`, `replicas`,
//! `idle_timeout`, `environment`, ...) keep their meaning; Antler's own keys (`provider`,
//! `network`, `capacity`, `overflow_policy`, `limits`, `secrets`, ...) sit beside them.

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use antler_protocol::config::{
    parse_size, AppConfig, AuthorizationConfig, DEFAULT_BACKGROUND_LIFETIME_S, DEFAULT_DISK_QUOTA,
    DEFAULT_TMP_SIZE,
};
use serde_json::{Map, Value};

/// Which isolation a sandbox gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    /// DeerFlow's `LocalSandboxProvider`: host directories, host bash (when allowed).
    Local,
    /// A long-lived supervisor inside bubblewrap.
    Bwrap,
}

impl ProviderKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Local => "local",
            ProviderKind::Bwrap => "bwrap",
        }
    }
}

/// What an acquire does when the pool is at capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverflowPolicy {
    /// Wait up to `acquire_timeout` for a sandbox to be released.
    Wait,
    /// Fail at once.
    Reject,
}

/// One `sandbox.mounts` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub host_path: PathBuf,
    pub container_path: String,
    pub read_only: bool,
}

/// Resource limits applied to everything a sandbox runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// RLIMIT_NPROC of the sandbox's user.
    pub max_processes: u64,
    /// RLIMIT_FSIZE, bytes.
    pub max_file_size: u64,
    /// RLIMIT_AS per process, and the memory of all the sandbox's processes together
    /// where cgroups are available, bytes (0: unlimited).
    pub max_memory: u64,
    /// The sandbox's CPU weight against the others (cgroup v2's 1–10000, 100 the default).
    pub cpu_weight: u64,
    /// The memory of all one user's sandboxes together, bytes (0: unlimited).
    pub user_memory: u64,
    /// The processes of all one user's sandboxes together (0: unlimited).
    pub user_max_processes: u64,
    /// Active sandboxes one user may hold at once (0: half the pool's capacity, at least
    /// one), so one user cannot take every slot.
    pub user_max_sandboxes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_processes: 128,
            max_file_size: 1 << 30,
            max_memory: 4 << 30,
            cpu_weight: 100,
            user_memory: 8 << 30,
            user_max_processes: 1024,
            user_max_sandboxes: 0,
        }
    }
}

/// The settings of one sandbox-host.
#[derive(Debug, Clone)]
pub struct SandboxSettings {
    pub provider: ProviderKind,
    /// Serve with `local` when bubblewrap cannot create its namespaces.
    pub allow_local_fallback: bool,
    pub allow_host_bash: bool,
    /// Thread directories live under `{base_dir}/users/{uid}/threads/{tid}`.
    pub base_dir: PathBuf,
    /// The host directory shown read-only at `skills_container_path`.
    pub skills_dir: PathBuf,
    pub skills_container_path: String,
    /// `extensions_config.json` (its `skills.{name}.enabled`), when one is given
    /// (`--extensions`, `ANTLER_EXTENSIONS_CONFIG_PATH`): `ls` of a disabled skill is refused.
    pub extensions_path: Option<PathBuf>,
    pub mounts: Vec<Mount>,
    pub bash_command_timeout: Duration,
    pub bash_output_max_chars: usize,
    pub ls_output_max_chars: usize,
    pub read_file_output_max_chars: usize,
    /// The configured `max_results` of glob and grep (`tools[].max_results`), if any.
    pub glob_max_results: i64,
    pub grep_max_results: i64,
    /// Soft cap on active plus warm sandboxes.
    pub replicas: u32,
    /// Warm sandboxes idle longer than this are destroyed; zero disables.
    pub idle_timeout: Duration,
    pub idle_check_interval: Duration,
    /// Hard cap on sandboxes.
    pub capacity: u32,
    pub overflow: OverflowPolicy,
    pub acquire_timeout: Duration,
    /// How long a lease lasts without renewal (`sandbox.lease_ttl`, seconds); an expired
    /// lease is reclaimed, so a sandbox whose holder is gone goes warm and idles out.
    pub lease_ttl: Duration,
    /// Sandboxes started ahead of any acquire.
    pub prewarm: u32,
    /// Whether sandboxes share the host's network.
    pub network: bool,
    /// The environment of sandboxed commands (nothing else is inherited).
    pub environment: BTreeMap<String, String>,
    /// Names of request-scoped secrets that may be injected into `bash`.
    pub secrets: Vec<String>,
    pub limits: Limits,
    pub authorization: AuthorizationConfig,
    /// The size of the sandbox's private `/tmp` (`sandbox.tmp_size`), bytes.
    pub tmp_size: u64,
    /// What a thread's user-data directories may hold (`sandbox.disk_quota`), bytes.
    pub disk_quota: u64,
    /// How long a process a command left running may live (`sandbox.background_lifetime`).
    pub background_lifetime: Duration,
    /// The size of each user's own filesystem, when the quota is to be enforced by one
    /// (`sandbox.user_disk_quota`, else an explicitly set `sandbox.disk_quota`).
    pub user_disk_quota: Option<u64>,
    /// The users' filesystems, when they could be made here (`None`: the quota is only
    /// reported). Made at start, not configured.
    pub volumes: Option<std::sync::Arc<crate::user_volume::UserVolumes>>,
    /// The cgroups that bound each sandbox and each user's sandboxes (`None`: none are
    /// usable here; per-process rlimits only). Detected at start, not configured.
    pub cgroups: Option<std::sync::Arc<crate::cgroup::Cgroups>>,
}

/// Where thread directories go when neither the config nor the command line says.
pub fn default_base_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("antler");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(h).join(".local/state/antler");
    }
    PathBuf::from("/var/lib/antler")
}

impl Default for SandboxSettings {
    fn default() -> Self {
        Self::from_config(&AppConfig::default(), None)
    }
}

impl SandboxSettings {
    /// Settings from a loaded config; `base_dir` (the command line) wins over the config.
    pub fn from_config(config: &AppConfig, base_dir: Option<PathBuf>) -> Self {
        let sandbox = config.sandbox.as_ref();
        let extra = sandbox.map(|s| s.extra.clone()).unwrap_or_default();
        let provider = match (sandbox, str_key(&extra, "provider").as_deref()) {
            (_, Some("local")) => ProviderKind::Local,
            (_, Some("bwrap")) => ProviderKind::Bwrap,
            (Some(s), _) if s.is_local_provider() => ProviderKind::Local,
            _ => ProviderKind::Bwrap,
        };
        let base_dir = base_dir
            .or_else(|| str_key(&extra, "base_dir").map(PathBuf::from))
            .unwrap_or_else(default_base_dir);
        let skills = config.other.get("skills").and_then(Value::as_object);
        let skills_dir = skills
            .and_then(|s| s.get("path"))
            .and_then(Value::as_str)
            .map(PathBuf::from)
            .unwrap_or_else(|| base_dir.join("skills"));
        let skills_container_path = skills
            .and_then(|s| s.get("container_path"))
            .and_then(Value::as_str)
            .map(|s| s.trim_end_matches('/').to_string())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "/mnt/skills".to_string());
        let mounts = sandbox
            .map(|s| {
                s.mounts
                    .iter()
                    .map(|m| Mount {
                        host_path: PathBuf::from(&m.host_path),
                        container_path: m.container_path.trim_end_matches('/').to_string(),
                        read_only: m.read_only,
                    })
                    .collect()
            })
            .unwrap_or_default();
        let limits_map = extra
            .get("limits")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let d = Limits::default();
        let limits = Limits {
            max_processes: u64_key(&limits_map, "max_processes").unwrap_or(d.max_processes),
            max_file_size: u64_key(&limits_map, "max_file_size_mb")
                .map(|m| m << 20)
                .unwrap_or(d.max_file_size),
            max_memory: u64_key(&limits_map, "max_memory_mb")
                .map(|m| m << 20)
                .unwrap_or(d.max_memory),
            cpu_weight: u64_key(&limits_map, "cpu_weight")
                .map(|w| w.clamp(1, 10_000))
                .unwrap_or(d.cpu_weight),
            user_memory: u64_key(&limits_map, "user_max_memory_mb")
                .map(|m| m << 20)
                .unwrap_or(d.user_memory),
            user_max_processes: u64_key(&limits_map, "user_max_processes")
                .unwrap_or(d.user_max_processes),
            user_max_sandboxes: u64_key(&limits_map, "user_max_sandboxes")
                .unwrap_or(d.user_max_sandboxes),
        };
        let environment = extra
            .get("environment")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| {
                        (
                            k.clone(),
                            v.as_str()
                                .map(str::to_string)
                                .unwrap_or_else(|| v.to_string()),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let secrets = extra
            .get("secrets")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let tool_max = |name: &str, default: i64| {
            config
                .tool(name)
                .and_then(|t| t.extra.get("max_results").and_then(Value::as_i64))
                .unwrap_or(default)
        };
        Self {
            provider,
            allow_local_fallback: bool_key(&extra, "allow_local_fallback").unwrap_or(false),
            allow_host_bash: sandbox.map(|s| s.allow_host_bash).unwrap_or(false),
            base_dir,
            skills_dir,
            skills_container_path,
            extensions_path: None,
            mounts,
            bash_command_timeout: secs_key(&extra, "bash_command_timeout")
                .unwrap_or(Duration::from_secs(600)),
            bash_output_max_chars: u64_key(&extra, "bash_output_max_chars").unwrap_or(20_000)
                as usize,
            ls_output_max_chars: u64_key(&extra, "ls_output_max_chars").unwrap_or(20_000) as usize,
            read_file_output_max_chars: u64_key(&extra, "read_file_output_max_chars")
                .unwrap_or(50_000) as usize,
            glob_max_results: tool_max("glob", 200),
            grep_max_results: tool_max("grep", 100),
            replicas: u64_key(&extra, "replicas").unwrap_or(3) as u32,
            idle_timeout: secs_key(&extra, "idle_timeout").unwrap_or(Duration::from_secs(600)),
            idle_check_interval: secs_key(&extra, "idle_check_interval")
                .unwrap_or(Duration::from_secs(60)),
            capacity: u64_key(&extra, "capacity").unwrap_or(64).max(1) as u32,
            overflow: match str_key(&extra, "overflow_policy").as_deref() {
                Some("reject") => OverflowPolicy::Reject,
                _ => OverflowPolicy::Wait,
            },
            acquire_timeout: secs_key(&extra, "acquire_timeout").unwrap_or(Duration::from_secs(30)),
            lease_ttl: secs_key(&extra, "lease_ttl")
                .unwrap_or(Duration::from_secs(30))
                .max(Duration::from_millis(100)),
            prewarm: u64_key(&extra, "prewarm").unwrap_or(0) as u32,
            network: bool_key(&extra, "network").unwrap_or(false),
            environment,
            secrets,
            limits,
            authorization: config.authorization.clone(),
            tmp_size: sandbox.map(|s| s.tmp_size()).unwrap_or(DEFAULT_TMP_SIZE),
            disk_quota: sandbox
                .map(|s| s.disk_quota())
                .unwrap_or(DEFAULT_DISK_QUOTA),
            background_lifetime: sandbox
                .map(|s| s.background_lifetime())
                .unwrap_or(Duration::from_secs(DEFAULT_BACKGROUND_LIFETIME_S)),
            user_disk_quota: extra
                .get("user_disk_quota")
                .and_then(parse_size)
                .or_else(|| extra.get("disk_quota").and_then(parse_size)),
            volumes: None,
            cgroups: None,
        }
    }
}

fn str_key(m: &Map<String, Value>, k: &str) -> Option<String> {
    m.get(k).and_then(Value::as_str).map(str::to_string)
}

fn bool_key(m: &Map<String, Value>, k: &str) -> Option<bool> {
    m.get(k).and_then(Value::as_bool)
}

fn u64_key(m: &Map<String, Value>, k: &str) -> Option<u64> {
    m.get(k).and_then(|v| {
        v.as_u64()
            .or_else(|| v.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
    })
}

fn secs_key(m: &Map<String, Value>, k: &str) -> Option<Duration> {
    m.get(k)
        .and_then(Value::as_f64)
        .filter(|f| f.is_finite() && *f >= 0.0)
        .map(Duration::from_secs_f64)
}
