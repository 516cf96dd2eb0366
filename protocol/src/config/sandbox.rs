//! The `sandbox:` section of `config.yaml` and the host-bash gate of spec §1.1 step 2:
//! bash tools and the `bash` subagent exist only when the provider is not DeerFlow's
//! `LocalSandboxProvider`, or when that provider is configured with `allow_host_bash`.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::app::AppConfig;
use super::diagnostics::FieldPath;
use super::shapes::null_as_default;

/// `sandbox.tmp_size` when unset: the size of the sandbox's private `/tmp` (a tmpfs).
pub const DEFAULT_TMP_SIZE: u64 = 256 << 20;
/// `sandbox.disk_quota` when unset: what a thread's user-data directories may hold.
pub const DEFAULT_DISK_QUOTA: u64 = 10 << 30;
/// `sandbox.background_lifetime` when unset, seconds: how long a process a command left
/// running may live.
pub const DEFAULT_BACKGROUND_LIFETIME_S: u64 = 600;
/// The expectation of a size key.
const SIZE_EXPECTED: &str =
    "expected a size of at least 1 MiB: bytes, or a number with K, M, G or T (KiB, MiB, ...)";

/// A size: an integer of bytes, or a string such as `256MiB`, `1G`, `512k` (binary units).
pub fn parse_size(v: &Value) -> Option<u64> {
    if let Some(n) = v.as_u64() {
        return Some(n);
    }
    let text = v.as_str()?.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits.parse().ok()?;
    let unit = unit.trim().to_ascii_lowercase();
    let unit = unit.trim_end_matches('b').trim_end_matches('i');
    let shift = match unit {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => return None,
    };
    n.checked_mul(1u64 << shift)
}

/// `sandbox:`. Provider settings other than the named fields stay in `extra`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(expecting = "a sandbox with a provider `use` path")]
pub struct SandboxConfig {
    /// The provider class path.
    #[serde(rename = "use")]
    pub use_: String,
    /// Whether host bash may run under the local provider.
    #[serde(default)]
    pub allow_host_bash: bool,
    /// Extra host directories mounted into the sandbox.
    #[serde(default, deserialize_with = "null_as_default")]
    pub mounts: Vec<SandboxMount>,
    /// Every other key, as written.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl SandboxConfig {
    /// Whether `use` names DeerFlow's `LocalSandboxProvider` (spec §1.1 step 2).
    pub fn is_local_provider(&self) -> bool {
        let u = self.use_.as_str();
        u == "deerflow.sandbox.local:LocalSandboxProvider"
            || u == "deerflow.sandbox.local.local_sandbox_provider:LocalSandboxProvider"
            || (u.ends_with(":LocalSandboxProvider") && u.contains("deerflow.sandbox.local"))
    }
}

impl SandboxConfig {
    /// `sandbox.tmp_size` in bytes.
    pub fn tmp_size(&self) -> u64 {
        self.extra
            .get("tmp_size")
            .and_then(parse_size)
            .unwrap_or(DEFAULT_TMP_SIZE)
    }

    /// `sandbox.disk_quota` in bytes.
    pub fn disk_quota(&self) -> u64 {
        self.extra
            .get("disk_quota")
            .and_then(parse_size)
            .unwrap_or(DEFAULT_DISK_QUOTA)
    }

    /// `sandbox.background_lifetime` (seconds in the file).
    pub fn background_lifetime(&self) -> Duration {
        self.extra
            .get("background_lifetime")
            .and_then(Value::as_f64)
            .filter(|s| s.is_finite() && *s > 0.0)
            .map(Duration::from_secs_f64)
            .unwrap_or(Duration::from_secs(DEFAULT_BACKGROUND_LIFETIME_S))
    }

    /// Values of Antler's `sandbox:` keys the runtime cannot work with, as (path,
    /// expectation).
    pub(crate) fn check(&self) -> Vec<(FieldPath, &'static str)> {
        let base = FieldPath::root().key("sandbox");
        let mut problems = Vec::new();
        for key in ["tmp_size", "disk_quota", "user_disk_quota"] {
            if let Some(v) = self.extra.get(key) {
                if parse_size(v).is_none_or(|n| n < 1 << 20) {
                    problems.push((base.key(key), SIZE_EXPECTED));
                }
            }
        }
        if let Some(v) = self.extra.get("background_lifetime") {
            if !v.as_f64().is_some_and(|s| s.is_finite() && s > 0.0) {
                problems.push((
                    base.key("background_lifetime"),
                    "expected a number of seconds greater than 0",
                ));
            }
        }
        problems
    }
}

/// One `sandbox.mounts` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(expecting = "a mount with host_path and container_path")]
pub struct SandboxMount {
    /// An absolute host path.
    pub host_path: String,
    /// An absolute path inside the sandbox.
    pub container_path: String,
    /// Whether the mount is read-only.
    #[serde(default)]
    pub read_only: bool,
}

/// Whether host bash may run (spec §1.1 step 2): no sandbox section → false; a provider
/// that is not local → true; the local provider → `sandbox.allow_host_bash`.
pub fn is_host_bash_allowed(config: &AppConfig) -> bool {
    match &config.sandbox {
        None => false,
        Some(sandbox) if !sandbox.is_local_provider() => true,
        Some(sandbox) => sandbox.allow_host_bash,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn sandbox(use_: &str, allow: bool) -> AppConfig {
        AppConfig {
            sandbox: Some(SandboxConfig {
                use_: use_.into(),
                allow_host_bash: allow,
                mounts: Vec::new(),
                extra: Map::new(),
            }),
            ..AppConfig::default()
        }
    }

    #[test]
    fn sizes_and_lifetimes_parse_and_bad_values_are_named() {
        let v = |s: &str| serde_json::from_str::<Value>(s).unwrap();
        assert_eq!(parse_size(&v("1048576")), Some(1 << 20));
        assert_eq!(parse_size(&v("\"256MiB\"")), Some(256 << 20));
        assert_eq!(parse_size(&v("\"1G\"")), Some(1 << 30));
        assert_eq!(parse_size(&v("\"512 kb\"")), Some(512 << 10));
        assert_eq!(parse_size(&v("\"lots\"")), None);
        let mut config = SandboxConfig {
            use_: "x:Y".into(),
            allow_host_bash: false,
            mounts: Vec::new(),
            extra: Map::new(),
        };
        assert_eq!(config.tmp_size(), DEFAULT_TMP_SIZE);
        assert_eq!(config.disk_quota(), DEFAULT_DISK_QUOTA);
        assert_eq!(config.background_lifetime(), Duration::from_secs(600));
        assert!(config.check().is_empty());
        config.extra.insert("tmp_size".into(), v("\"8MiB\""));
        config.extra.insert("background_lifetime".into(), v("2.5"));
        assert_eq!(config.tmp_size(), 8 << 20);
        assert_eq!(config.background_lifetime(), Duration::from_millis(2500));
        config
            .extra
            .insert("disk_quota".into(), v("\"12 parsecs\""));
        config.extra.insert("background_lifetime".into(), v("0"));
        let named: Vec<String> = config.check().iter().map(|(p, _)| p.to_string()).collect();
        assert_eq!(named, ["sandbox.disk_quota", "sandbox.background_lifetime"]);
    }

    #[test]
    fn host_bash_gate_follows_spec_1_1() {
        assert!(!is_host_bash_allowed(&AppConfig::default()));
        let local = "deerflow.sandbox.local:LocalSandboxProvider";
        assert!(!is_host_bash_allowed(&sandbox(local, false)));
        assert!(is_host_bash_allowed(&sandbox(local, true)));
        let long = "deerflow.sandbox.local.local_sandbox_provider:LocalSandboxProvider";
        assert!(!is_host_bash_allowed(&sandbox(long, false)));
        let alias = "my.deerflow.sandbox.local.shim:LocalSandboxProvider";
        assert!(!is_host_bash_allowed(&sandbox(alias, false)));
        let aio = "deerflow.community.aio_sandbox:AioSandboxProvider";
        assert!(is_host_bash_allowed(&sandbox(aio, false)));
    }
}
