//! Configuration: DeerFlow's `config.yaml` (plus Antler's `antler:` section) and
//! `extensions_config.json`, loaded so that DeerFlow's own files load unchanged.
//! A load either fails with one `ConfigError` or succeeds with the typed value and its
//! warnings; every error and warning names the file, line and column, and the field path.
//! `$VAR` strings are resolved from the environment after the raw text has been checked.

mod antler;
mod app;
pub mod approvals;
mod check;
mod cluster;
mod context;
mod deerflow;
mod diagnostics;
mod document;
mod env;
mod extensions;
mod gateway;
mod ha;
mod locate;
mod location;
mod memory;
mod oauth;
mod routing;
mod sandbox;
mod server_params;
mod shapes;
mod subagents;
mod uploads;

use std::path::{Path, PathBuf};

pub use antler::{
    AntlerSection, McpPoolSection, StorePostgresSection, StoreSection, TelemetrySection,
    TlsSection, ANTLER_KEYS, DEFAULT_MAX_FRAME_BYTES, MAX_WORKERS, TELEMETRY_KEYS,
};
pub use app::{
    parse_app_config, reads_deerflow_key, AcpAgentConfig, AppConfig, AuthorizationConfig,
    GuardrailsConfig, ModelConfig, ProviderConfig, SkillEvolutionConfig, ToolConfig,
    ToolGroupConfig, ToolSearchConfig, DEERFLOW_OPAQUE_KEYS, DEERFLOW_READ_KEYS, IGNORED_SETTING,
    TYPED_KEYS,
};
pub use approvals::{ApprovalsConfig, ArgMatcher, Decision, Examples, RuleConfig};
pub use check::{ExtraChecks, Finding};
pub use cluster::{is_loopback, ClusterHosts, ClusterSection, CLUSTER_KEYS};
pub use context::{
    ContextSize, SummarizationConfig, TitleConfig, DEFAULT_SKILL_FILE_READ_TOOL_NAMES,
    DEFAULT_TITLE_PROMPT,
};
pub use deerflow::{
    InputPolishConfig, LogLevel, LoopDetectionConfig, SuggestionsConfig, ToolFreqOverride,
    ToolOutputConfig, DEFAULT_MAX_RECURSION_LIMIT, MAX_SUGGESTIONS_LIMIT, TOOL_RESULTS_SUBDIR,
};
pub use diagnostics::{
    CheckReport, ConfigError, ConfigKind, ConfigWarning, FieldError, FieldPath, Location,
    PathSegment, WarningKind,
};
pub use env::{process_env, resolve_json, resolve_str, resolve_yaml, EnvLookup};
pub use extensions::{
    parse_extensions_config, ElicitationPolicy, ExtensionsConfig, McpProtocol, McpServerConfig,
    McpTaskToolset, SkillStateConfig, DEFAULT_MCP_SESSION_INIT_TIMEOUT,
};
pub use gateway::{
    valid_user, GatewaySection, JwtSection, LimitsSection, McpServerSection, StaticPrincipal,
    GATEWAY_KEYS, JWT_ALGORITHMS, JWT_KEYS, OPERATOR_USER,
};
pub use ha::{
    HaSection, DEFAULT_LEASE_RETENTION_MS, DEFAULT_LEASE_TTL_MS, HA_ADVERTISE_URL_ENV, HA_DSN_ENV,
    HA_KEYS,
};
pub use location::{
    resolve_app_config_path, resolve_extensions_beside, resolve_extensions_path, ANTLER_CONFIG_ENV,
    ANTLER_EXTENSIONS_ENV, DEERFLOW_CONFIG_ENV, DEERFLOW_EXTENSIONS_ENV, EXTENSIONS_FILE_NAMES,
};
pub use memory::{
    DeerMemSettings, MemoryConfig, MemoryManagerKind, MemoryModel, MemoryNote, MemoryProblem,
};
pub use oauth::{GrantType, McpOAuthConfig, OAuthFlow, JWT_BEARER_GRANT, SIGNING_ALGORITHMS};
pub use routing::{clamp_priority, EffectiveRouting, McpRoutingConfig, McpToolConfig, RoutingMode};
pub use sandbox::{
    is_host_bash_allowed, parse_size, SandboxConfig, SandboxMount, DEFAULT_BACKGROUND_LIFETIME_S,
    DEFAULT_DISK_QUOTA, DEFAULT_TMP_SIZE,
};
pub use server_params::{build_server_params, ServerParamsError, Transport, ACCEPTED_TRANSPORTS};
pub use shapes::NamedMap;
pub use subagents::{CustomAgentConfig, SubagentOverride, SubagentsConfig, TokenBudgetConfig};
pub use uploads::{PdfConverter, UploadsConfig, UploadsWarning, UPLOADS_KEYS};

/// A loaded config and what the operator should know about it.
#[derive(Debug, Clone)]
pub struct Loaded<T> {
    /// The effective config (after `$VAR` resolution).
    pub value: T,
    /// The file it came from; `None` when no file was found and the config is empty.
    pub path: Option<PathBuf>,
    /// Unknown keys, clamped values, skipped MCP servers.
    pub warnings: Vec<ConfigWarning>,
}

/// Loads `config.yaml` from `path`, reading `$VAR`s from the process environment.
pub fn load_app_config(path: &Path) -> Result<Loaded<AppConfig>, ConfigError> {
    load_app_config_with_env(path, &process_env)
}

/// Loads `config.yaml` from `path` with `env` as the environment.
pub fn load_app_config_with_env(
    path: &Path,
    env: EnvLookup<'_>,
) -> Result<Loaded<AppConfig>, ConfigError> {
    parse_app_config(path, &read(path)?, env)
}

/// Loads `extensions_config.json` from `path`, reading `$VAR`s from the process environment.
pub fn load_extensions_config(path: &Path) -> Result<Loaded<ExtensionsConfig>, ConfigError> {
    load_extensions_config_with_env(path, &process_env)
}

/// Loads `extensions_config.json` from `path` with `env` as the environment.
pub fn load_extensions_config_with_env(
    path: &Path,
    env: EnvLookup<'_>,
) -> Result<Loaded<ExtensionsConfig>, ConfigError> {
    parse_extensions_config(path, &read(path)?, env)
}

/// Finds the extensions file (`resolve_extensions_path`) and loads it; no file is an empty
/// config with `path: None`.
pub fn discover_extensions_config(
    explicit: Option<&Path>,
    project_dir: &Path,
    env: EnvLookup<'_>,
) -> Result<Loaded<ExtensionsConfig>, ConfigError> {
    match resolve_extensions_path(explicit, project_dir, env)? {
        Some(path) => load_extensions_config_with_env(&path, env),
        None => Ok(Loaded {
            value: ExtensionsConfig::default(),
            path: None,
            warnings: Vec::new(),
        }),
    }
}

/// Validates one file for `antler config check`: the kind comes from the extension (or the
/// content), and an enabled MCP server that would be skipped counts as an error.
pub fn check_file(path: &Path) -> CheckReport {
    check_file_with_env(path, &process_env)
}

/// `check_file` with `env` as the environment.
pub fn check_file_with_env(path: &Path, env: EnvLookup<'_>) -> CheckReport {
    check_file_with(path, env, &|_| Vec::new())
}

/// `check_file` with `env` as the environment and `extra` run on a `config.yaml` that
/// loads. Every error is reported, not only the first.
pub fn check_file_with(path: &Path, env: EnvLookup<'_>, extra: ExtraChecks<'_>) -> CheckReport {
    let file = path.to_path_buf();
    let text = match read(path) {
        Ok(text) => text,
        Err(error) => {
            let kind = ConfigKind::detect(path, "");
            return CheckReport {
                file,
                kind,
                errors: vec![error],
                warnings: Vec::new(),
            };
        }
    };
    let kind = ConfigKind::detect(path, &text);
    let outcome = match kind {
        ConfigKind::App => {
            let (errors, warnings) = check::check_app(path, &text, env, extra);
            return CheckReport {
                file,
                kind,
                errors,
                warnings,
            };
        }
        ConfigKind::Extensions => parse_extensions_config(path, &text, env).map(|l| l.warnings),
    };
    match outcome {
        Ok(all) => {
            let (skipped, warnings): (Vec<_>, Vec<_>) = all
                .into_iter()
                .partition(|w| w.kind == WarningKind::ServerSkipped);
            CheckReport {
                file,
                kind,
                errors: skipped.into_iter().map(ConfigWarning::into_error).collect(),
                warnings,
            }
        }
        Err(error) => CheckReport {
            file,
            kind,
            errors: vec![error],
            warnings: Vec::new(),
        },
    }
}

fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })
}
