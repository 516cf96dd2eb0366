//! The `sandbox:` section of `config.yaml` and the host-bash gate of spec §1.1 step 2:
//! bash tools and the `bash` subagent exist only when the provider is not DeerFlow's
//! `LocalSandboxProvider`, or when that provider is configured with `allow_host_bash`.

use serde::Deserialize;
use serde_json::{Map, Value};

use super::app::AppConfig;
use super::shapes::null_as_default;

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
