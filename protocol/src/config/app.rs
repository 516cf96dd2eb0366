//! `AppConfig`: DeerFlow's `config.yaml` with the sections Antler reads typed (models, tools,
//! tool groups, tool_search, sandbox, subagents, skill_evolution, acp_agents, authorization,
//! guardrails, approvals, and Antler's own `antler:`). Every other DeerFlow section is kept opaque in
//! `other`, without a warning; a top-level key DeerFlow does not know is kept but warned about.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::antler::{
    AntlerSection, ANTLER_KEYS, MCP_POOL_KEYS, STORE_KEYS, STORE_POSTGRES_KEYS, TELEMETRY_KEYS,
    TLS_KEYS,
};
use super::diagnostics::{
    unknown_key_message, ConfigError, ConfigWarning, FieldPath, PathSegment, WarningKind,
};
use super::document::Document;
use super::env::EnvLookup;
use super::locate::Format;
use super::sandbox::SandboxConfig;
use super::shapes::{null_as_default, NamedMap};
use super::subagents::SubagentsConfig;
use super::Loaded;

/// Top-level keys of DeerFlow's `config.example.yaml` that Antler keeps opaque (set or
/// commented out there); they load without a warning.
pub const DEERFLOW_OPAQUE_KEYS: &[&str] = &[
    "config_version",
    "log_level",
    "logging",
    "extensions",
    "token_usage",
    "token_budget",
    "max_recursion_limit",
    "tool_output",
    "tool_progress",
    "suggestions",
    "input_polish",
    "loop_detection",
    "read_before_write",
    "safety_finish_reason",
    "uploads",
    "skills",
    "skill_scan",
    "title",
    "summarization",
    "memory",
    "agents_api",
    "checkpointer",
    "database",
    "dedupe_storage",
    "run_events",
    "agent_storage",
    "scheduler",
    "mcp_tasks",
    "run_ownership",
    "stream_bridge",
    "channel_connections",
    "channels",
    "circuit_breaker",
    "llm_call",
    "auth",
    "plugins",
];

/// Keys of [`DEERFLOW_OPAQUE_KEYS`] that Antler reads from `other` outside
/// [`super::deerflow::SECTIONS`] (`config_version` is the file's own version stamp); a key
/// in neither does nothing in Antler yet and is warned about ([`WarningKind::Ignored`]).
pub const DEERFLOW_READ_KEYS: &[&str] = &[
    "config_version",
    "token_budget",
    "skills",
    "skill_scan",
    "llm_call",
    "circuit_breaker",
    "summarization",
    "title",
    "uploads",
    "memory",
];

/// Whether Antler reads the DeerFlow key `key` (here or in [`super::deerflow`]).
pub fn reads_deerflow_key(key: &str) -> bool {
    DEERFLOW_READ_KEYS.contains(&key) || super::deerflow::SECTIONS.contains(&key)
}

/// The warning's text for a DeerFlow setting Antler does not act on.
pub const IGNORED_SETTING: &str =
    "a DeerFlow setting Antler does not act on yet: it does nothing here";

/// Top-level keys read into typed fields of `AppConfig`.
pub const TYPED_KEYS: &[&str] = &[
    "models",
    "tools",
    "tool_groups",
    "tool_search",
    "sandbox",
    "subagents",
    "skill_evolution",
    "acp_agents",
    "authorization",
    "guardrails",
    "approvals",
    "antler",
];

/// DeerFlow's `config.yaml`, plus `antler:`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(expecting = "a mapping of config sections (models, tools, sandbox, ...)")]
pub struct AppConfig {
    /// Chat models; the first one is the default.
    #[serde(default, deserialize_with = "null_as_default")]
    pub models: Vec<ModelConfig>,
    /// Configured tools, in file order.
    #[serde(default, deserialize_with = "null_as_default")]
    pub tools: Vec<ToolConfig>,
    /// Tool groups.
    #[serde(default, deserialize_with = "null_as_default")]
    pub tool_groups: Vec<ToolGroupConfig>,
    /// Deferred tool loading.
    #[serde(default, deserialize_with = "null_as_default")]
    pub tool_search: ToolSearchConfig,
    /// The sandbox provider; `None` when the section is absent.
    #[serde(default)]
    pub sandbox: Option<SandboxConfig>,
    /// Subagent limits and custom agents.
    #[serde(default, deserialize_with = "null_as_default")]
    pub subagents: SubagentsConfig,
    /// Agent-managed skill writes.
    #[serde(default, deserialize_with = "null_as_default")]
    pub skill_evolution: SkillEvolutionConfig,
    /// External ACP agents for `invoke_acp_agent`, by name.
    #[serde(default, deserialize_with = "null_as_default")]
    pub acp_agents: NamedMap<AcpAgentConfig>,
    /// Tool authorization (layer 1).
    #[serde(default, deserialize_with = "null_as_default")]
    pub authorization: AuthorizationConfig,
    /// Pre-execution guardrails.
    #[serde(default, deserialize_with = "null_as_default")]
    pub guardrails: GuardrailsConfig,
    /// Approval policies on tool calls (docs/approvals.md).
    #[serde(default, deserialize_with = "null_as_default")]
    pub approvals: super::approvals::ApprovalsConfig,
    /// Antler's own settings.
    #[serde(default, deserialize_with = "null_as_default")]
    pub antler: AntlerSection,
    /// Every other top-level section, as written (after `$VAR` resolution).
    #[serde(flatten)]
    pub other: NamedMap<Value>,
}

impl AppConfig {
    /// The tool config named `name` (DeerFlow's `get_tool_config`).
    pub fn tool(&self, name: &str) -> Option<&ToolConfig> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// The model named `name`, or the first model when `name` is `None`.
    pub fn model(&self, name: Option<&str>) -> Option<&ModelConfig> {
        match name {
            Some(name) => self.models.iter().find(|m| m.name == name),
            None => self.models.first(),
        }
    }
}

/// One `models:` entry. Provider settings other than the named fields stay in `extra`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(expecting = "a model with name, use and model")]
pub struct ModelConfig {
    /// The name agents and subagents refer to.
    pub name: String,
    /// The name shown in the UI.
    #[serde(default)]
    pub display_name: Option<String>,
    /// The provider class path, `module:Class`.
    #[serde(rename = "use")]
    pub use_: String,
    /// The provider's model id.
    pub model: String,
    /// Whether `view_image` is offered with this model.
    #[serde(default)]
    pub supports_vision: bool,
    /// Whether thinking mode is available.
    #[serde(default)]
    pub supports_thinking: bool,
    /// The API key (usually `$VAR`).
    #[serde(default)]
    pub api_key: Option<String>,
    /// The provider's base URL.
    #[serde(default)]
    pub base_url: Option<String>,
    /// Every other key, as written.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One `tools:` entry (`ToolConfig`, spec §1.5); extra keys such as `max_results` are the
/// tool's own settings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(expecting = "a tool with name, group and use")]
pub struct ToolConfig {
    /// The tool name.
    pub name: String,
    /// The tool group, as in `tool_groups`.
    pub group: String,
    /// The implementation path, `module:attr`.
    #[serde(rename = "use")]
    pub use_: String,
    /// Every other key, as written.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One `tool_groups:` entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(expecting = "a tool group with a name")]
pub struct ToolGroupConfig {
    /// The group name.
    pub name: String,
    /// Every other key, as written.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `tool_search:`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, expecting = "a mapping with enabled and auto_promote_top_k")]
pub struct ToolSearchConfig {
    /// Whether MCP tools are deferred behind `tool_search`.
    pub enabled: bool,
    /// Routing auto-promotion per model call, as written; use `top_k()`.
    pub auto_promote_top_k: i64,
}

impl Default for ToolSearchConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            auto_promote_top_k: 3,
        }
    }
}

impl ToolSearchConfig {
    /// `auto_promote_top_k` clamped to 1..=5, as DeerFlow uses it.
    pub fn top_k(&self) -> usize {
        // Clamped to 1..=5 first, so the cast cannot truncate.
        self.auto_promote_top_k.clamp(1, 5) as usize
    }
}

/// `skill_evolution:`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, expecting = "a mapping with enabled")]
pub struct SkillEvolutionConfig {
    /// Whether `skill_manage` is offered.
    pub enabled: bool,
    /// The model for security scanning; `None` means the default model.
    pub moderation_model_name: Option<String>,
    /// Whether writes are blocked when the moderation model is unavailable.
    pub security_fail_closed: bool,
}

impl Default for SkillEvolutionConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            moderation_model_name: None,
            security_fail_closed: true,
        }
    }
}

/// One `acp_agents:` entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(expecting = "an ACP agent with a command")]
pub struct AcpAgentConfig {
    /// The executable.
    pub command: String,
    /// Its arguments.
    #[serde(default, deserialize_with = "null_as_default")]
    pub args: Vec<String>,
    /// Extra environment for the subprocess (`$VAR` reads the host's).
    #[serde(default, deserialize_with = "null_as_default")]
    pub env: NamedMap<String>,
    /// What the agent is for; the lead reads it.
    #[serde(default)]
    pub description: String,
    /// A model override.
    #[serde(default)]
    pub model: Option<String>,
    /// Whether permission requests are approved without asking.
    #[serde(default)]
    pub auto_approve_permissions: bool,
    /// Seconds before the subprocess is aborted.
    #[serde(default = "default_acp_timeout")]
    pub timeout_seconds: u64,
}

fn default_acp_timeout() -> u64 {
    1800
}

/// A provider named by class path with its settings (`authorization.provider`,
/// `guardrails.provider`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(expecting = "a provider with a `use` path")]
pub struct ProviderConfig {
    /// The provider class path.
    #[serde(rename = "use")]
    pub use_: String,
    /// Settings handed to the provider as written.
    #[serde(default, deserialize_with = "null_as_default")]
    pub config: Map<String, Value>,
}

/// `authorization:`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(
    default,
    expecting = "a mapping with enabled, fail_closed, default_role, provider"
)]
pub struct AuthorizationConfig {
    /// Layer 1 runs only when this is true.
    pub enabled: bool,
    /// Deny on provider error or unresolved identity.
    pub fail_closed: bool,
    /// The role applied when a user has none.
    pub default_role: Option<String>,
    /// The authorization provider.
    pub provider: Option<ProviderConfig>,
}

impl Default for AuthorizationConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            fail_closed: true,
            default_role: None,
            provider: None,
        }
    }
}

/// `guardrails:` (spec §4.4).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(
    default,
    expecting = "a mapping with enabled, fail_closed, passport, provider"
)]
pub struct GuardrailsConfig {
    /// Whether tool calls pass through the provider.
    pub enabled: bool,
    /// Deny on provider error (`oap.evaluator_error`).
    pub fail_closed: bool,
    /// The agent passport sent as `agent_id`.
    pub passport: Option<String>,
    /// The guardrail provider.
    pub provider: Option<ProviderConfig>,
}

impl Default for GuardrailsConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            fail_closed: true,
            passport: None,
            provider: None,
        }
    }
}

/// Parses `config.yaml` text; `file` is only used in diagnostics.
pub fn parse_app_config(
    file: &Path,
    text: &str,
    env: EnvLookup<'_>,
) -> Result<Loaded<AppConfig>, ConfigError> {
    let doc = Document {
        file,
        text,
        format: Format::Yaml,
    };
    let (config, warnings) = load_app(&doc, env)?;
    if let Some(error) = semantic_errors(&doc, &config).into_iter().next() {
        return Err(error);
    }
    Ok(Loaded {
        value: config,
        path: Some(file.to_path_buf()),
        warnings,
    })
}

/// The typed config and its warnings (unknown keys, ignored DeerFlow settings, clamped
/// values), in file order; values out of range are [`semantic_errors`]' to find.
pub(crate) fn load_app(
    doc: &Document<'_>,
    env: EnvLookup<'_>,
) -> Result<(AppConfig, Vec<ConfigWarning>), ConfigError> {
    let (config, unknown) = doc.load::<AppConfig>(env)?;
    let mut warnings: Vec<ConfigWarning> = unknown
        .into_iter()
        .map(|path| unknown_key_warning(doc, path))
        .collect();
    for (key, value) in config.other.iter() {
        if !DEERFLOW_OPAQUE_KEYS.contains(&key) {
            warnings.push(unknown_key_warning(doc, FieldPath::root().key(key)));
        } else if !reads_deerflow_key(key) && !value.is_null() {
            // An empty section (DeerFlow's example comments them out) sets nothing.
            let path = FieldPath::root().key(key);
            warnings.push(doc.warning(WarningKind::Ignored, path, IGNORED_SETTING));
        }
    }
    for finding in super::deerflow::check(&config) {
        match finding {
            super::deerflow::Finding::UnknownKey { path, known } => {
                let message = unknown_key_message(&path, known);
                warnings.push(doc.warning(WarningKind::UnknownKey, path, message));
            }
            super::deerflow::Finding::Error { .. } => {}
        }
    }
    for note in super::memory::parse(config.other.get("memory")).1 {
        let kind = match note.unknown {
            true => WarningKind::UnknownKey,
            false => WarningKind::Ignored,
        };
        warnings.push(doc.warning(kind, note.path, note.message));
    }
    // `uploads:` values that fall back to their defaults, and its unknown keys.
    for w in super::uploads::UploadsConfig::from_section(config.other.get("uploads")).1 {
        let mut path = FieldPath::root().key("uploads");
        if let Some(key) = &w.key {
            path = path.key(key);
        }
        if w.unknown {
            warnings.push(unknown_key_warning(doc, path));
        } else {
            warnings.push(doc.warning(WarningKind::Clamped, path, w.message.clone()));
        }
    }
    let top_k = config.tool_search.auto_promote_top_k;
    if !(1..=5).contains(&top_k) {
        let path = FieldPath::root()
            .key("tool_search")
            .key("auto_promote_top_k");
        let message = format!(
            "{top_k} is outside 1..=5; {} is used",
            config.tool_search.top_k()
        );
        warnings.push(doc.warning(WarningKind::Clamped, path, message));
    }
    warnings.sort_by_key(|w| w.location.map(|l| (l.line, l.column)));
    Ok((config, warnings))
}

/// Every value that type-checks but is out of range or incomplete, in file order.
pub(crate) fn semantic_errors(doc: &Document<'_>, config: &AppConfig) -> Vec<ConfigError> {
    let mut errors = Vec::new();
    for (path, expected) in config.antler.check() {
        errors.push(doc.invalid(path, "value out of range", Some(expected.to_owned())));
    }
    for (path, expected) in config.antler.check_tls() {
        errors.push(doc.invalid(path, "missing", Some(expected.to_owned())));
    }
    let sandbox_problems = config
        .sandbox
        .as_ref()
        .map(|s| s.check())
        .unwrap_or_default();
    for (path, expected) in sandbox_problems {
        errors.push(doc.invalid(path, "value out of range", Some(expected.to_owned())));
    }
    if !(1..=50).contains(&config.subagents.max_total_per_run) {
        let path = FieldPath::root().key("subagents").key("max_total_per_run");
        let expected = Some("expected an integer from 1 to 50".to_owned());
        errors.push(doc.invalid(path, "value out of range", expected));
    }
    for finding in super::deerflow::check(config) {
        if let super::deerflow::Finding::Error {
            path,
            message,
            expected,
        } = finding
        {
            errors.push(doc.invalid(path, message, expected));
        }
    }
    for problem in super::memory::parse(config.other.get("memory")).2 {
        errors.push(doc.invalid(problem.path, problem.message, Some(problem.expected)));
    }
    for (path, message, expected) in super::approvals::check(&config.approvals) {
        errors.push(doc.invalid(path, message, expected));
    }
    let env = crate::approvals::PolicyEnv::from_sandbox(config.sandbox.as_ref());
    for (path, message) in crate::approvals::config_problems(&config.approvals, &env) {
        errors.push(doc.invalid(path, message, None));
    }
    errors.sort_by_key(|e| e.location().map(|l| (l.line, l.column)));
    errors
}

/// The warning for a key neither DeerFlow nor Antler knows.
fn unknown_key_warning(doc: &Document<'_>, path: FieldPath) -> ConfigWarning {
    let known: Vec<&str> = match path.segments() {
        [_] => TYPED_KEYS
            .iter()
            .chain(DEERFLOW_OPAQUE_KEYS)
            .copied()
            .collect(),
        [PathSegment::Key(section), _] if section == "antler" => ANTLER_KEYS.to_vec(),
        [PathSegment::Key(section), PathSegment::Key(sub), _]
            if section == "antler" && sub == "mcp_pool" =>
        {
            MCP_POOL_KEYS.to_vec()
        }
        [PathSegment::Key(section), PathSegment::Key(sub), _]
            if section == "antler" && sub == "telemetry" =>
        {
            TELEMETRY_KEYS.to_vec()
        }
        [PathSegment::Key(section), PathSegment::Key(sub), _]
            if section == "antler" && sub == "ha" =>
        {
            super::ha::HA_KEYS.to_vec()
        }
        [PathSegment::Key(section), PathSegment::Key(sub), _]
            if section == "antler" && sub == "gateway" =>
        {
            super::gateway::GATEWAY_KEYS.to_vec()
        }
        [PathSegment::Key(section), PathSegment::Key(sub), PathSegment::Key(jwt), _]
            if section == "antler" && sub == "gateway" && jwt == "jwt" =>
        {
            super::gateway::JWT_KEYS.to_vec()
        }
        [PathSegment::Key(section), PathSegment::Key(sub), PathSegment::Key(limits), _]
            if section == "antler" && sub == "gateway" && limits == "limits" =>
        {
            super::gateway::LIMITS_KEYS.to_vec()
        }
        [PathSegment::Key(section), PathSegment::Key(sub), PathSegment::Key(server), _]
            if section == "antler" && sub == "gateway" && server == "mcp_server" =>
        {
            super::gateway::MCP_SERVER_KEYS.to_vec()
        }
        [PathSegment::Key(section), PathSegment::Key(sub), _]
            if section == "antler" && sub == "store" =>
        {
            STORE_KEYS.to_vec()
        }
        [PathSegment::Key(section), PathSegment::Key(sub), PathSegment::Key(pg), _]
            if section == "antler" && sub == "store" && pg == "postgres" =>
        {
            STORE_POSTGRES_KEYS.to_vec()
        }
        [PathSegment::Key(section), PathSegment::Key(sub), _]
            if section == "antler" && sub == "tls" =>
        {
            TLS_KEYS.to_vec()
        }
        [PathSegment::Key(section), PathSegment::Key(sub), _]
            if section == "antler" && sub == "cluster" =>
        {
            super::cluster::CLUSTER_KEYS.to_vec()
        }
        _ => Vec::new(),
    };
    let message = unknown_key_message(&path, &known);
    doc.warning(WarningKind::UnknownKey, path, message)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn top_k_is_clamped() {
        let mut t = ToolSearchConfig::default();
        assert_eq!(t.top_k(), 3);
        t.auto_promote_top_k = 0;
        assert_eq!(t.top_k(), 1);
        t.auto_promote_top_k = 9;
        assert_eq!(t.top_k(), 5);
    }
}
