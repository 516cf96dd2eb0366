#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use super::*;
use crate::config::{parse_app_config, ConfigError, ConfigWarning, WarningKind};

fn parse(text: &str) -> Result<(AppConfig, Vec<ConfigWarning>), ConfigError> {
    parse_app_config(Path::new("config.yaml"), text, &|_| None).map(|l| (l.value, l.warnings))
}

fn refused(text: &str) -> String {
    parse(text).expect_err(text).to_string()
}

#[test]
fn deerflows_defaults_load_quietly_and_read_back() {
    let text = "log_level: info\nlogging: {enhance: {enabled: false, format: text}}\ntoken_usage: {enabled: true}\nmax_recursion_limit: 40\nloop_detection: {warn_threshold: 2, hard_limit: 4, tool_freq_overrides: {bash: {warn: 60, hard_limit: 80}}}\nsuggestions: {enabled: true, max_suggestions: 5}\ninput_polish: {enabled: false, max_chars: 100}\ntool_output: {externalize_min_chars: 500, exempt_tools: [read_file], tool_overrides: {bash: 0}}\nsafety_finish_reason: {enabled: false}\nagents_api: {enabled: false}\nagent_storage: {backend: file}\nscheduler: {enabled: false}\nmcp_tasks: {enabled: false}\nrun_ownership: {lease_seconds: 30, grace_seconds: 10, heartbeat_enabled: false}\ndedupe_storage: {backend: auto}\nchannel_connections: {enabled: false}\nchannels: {telegram: {enabled: false}}\nauth: {local: {allow_registration: false}}\nplugins: [{name: x, enabled: false}]\nextensions: {middlewares: []}\n";
    let (config, warnings) = parse(text).unwrap();
    assert!(warnings.is_empty(), "{warnings:#?}");
    let loops = config.loop_detection();
    assert_eq!(
        (loops.warn_threshold, loops.hard_limit, loops.window_size),
        (2, 4, 20)
    );
    assert_eq!(
        loops.tool_freq_overrides["bash"],
        ToolFreqOverride {
            warn: 60,
            hard_limit: 80
        }
    );
    assert_eq!(config.suggestions().max_suggestions, 5);
    assert!(!config.input_polish().enabled);
    let output = config.tool_output();
    assert_eq!(output.externalize_min_chars, 500);
    assert_eq!(output.fallback_max_chars, 30_000);
    assert_eq!(output.tool_overrides["bash"], 0);
    assert_eq!(config.max_recursion_limit(), 40);
    assert!(!config.safety_finish_reason_enabled());
    // Unset: DeerFlow's defaults.
    let (empty, _) = parse("models: []\n").unwrap();
    assert_eq!(empty.loop_detection(), LoopDetectionConfig::default());
    assert_eq!(empty.max_recursion_limit(), 1000);
    assert!(empty.safety_finish_reason_enabled());
}

#[test]
fn loop_detection_ranges_are_deerflows() {
    let e = refused("loop_detection: {warn_threshold: 6, hard_limit: 5}\n");
    assert!(e.contains("loop_detection.hard_limit"), "{e}");
    assert!(e.contains("hard_limit >= warn_threshold"), "{e}");
    let e = refused("loop_detection: {window_size: 0}\n");
    assert!(e.contains("loop_detection.window_size"), "{e}");
    let e = refused("loop_detection: {tool_freq_overrides: {bash: {warn: 9, hard_limit: 3}}}\n");
    assert!(
        e.contains("loop_detection.tool_freq_overrides.bash.hard_limit"),
        "{e}"
    );
    let e = refused("loop_detection: {tool_freq_warn: 60}\n");
    assert!(e.contains("tool_freq_hard_limit >= tool_freq_warn"), "{e}");
    let (_, warnings) = parse("loop_detection: {window: 3}\n").unwrap();
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].kind, WarningKind::UnknownKey);
    assert_eq!(warnings[0].path.to_string(), "loop_detection.window");
}

#[test]
fn a_value_asking_for_what_antler_lacks_is_refused_naming_the_key_and_the_alternative() {
    for (text, path, instead) in [
        (
            "scheduler: {enabled: true}\n",
            "scheduler.enabled",
            "antler run",
        ),
        (
            "mcp_tasks: {enabled: true}\n",
            "mcp_tasks.enabled",
            "deadline",
        ),
        (
            "tool_progress: {enabled: true}\n",
            "tool_progress.enabled",
            "loop_detection",
        ),
        (
            "agents_api: {enabled: true}\n",
            "agents_api.enabled",
            "update_agent",
        ),
        (
            "agent_storage: {backend: db}\n",
            "agent_storage.backend",
            "backend: file",
        ),
        (
            "run_ownership: {heartbeat_enabled: true}\n",
            "run_ownership.heartbeat_enabled",
            "resumes",
        ),
        (
            "dedupe_storage: {backend: postgres}\n",
            "dedupe_storage.backend",
            "IM channels",
        ),
        (
            "channel_connections: {enabled: true}\n",
            "channel_connections.enabled",
            "gateway",
        ),
        (
            "channels: {slack: {enabled: true}}\n",
            "channels.slack.enabled",
            "gateway",
        ),
        (
            "auth: {oidc: {enabled: true}}\n",
            "auth.oidc.enabled",
            "antler.gateway.jwt",
        ),
        (
            "auth: {local: {allow_registration: true}}\n",
            "auth.local.allow_registration",
            "antler.gateway.tokens",
        ),
        (
            "plugins: [{name: x, use: 'a:b'}]\n",
            "plugins[0]",
            "enabled: false",
        ),
        (
            "extensions: {middlewares: ['a:B']}\n",
            "extensions.middlewares",
            "guardrails.provider",
        ),
        (
            "logging: {enhance: {enabled: true}}\n",
            "logging.enhance.enabled",
            "RUST_LOG",
        ),
        (
            "log_level: verbose\n",
            "log_level",
            "debug, info, warning, error, critical",
        ),
        (
            "token_usage: {enabled: false}\n",
            "token_usage.enabled",
            "always records",
        ),
        (
            "safety_finish_reason: {detectors: [{use: 'a:B'}]}\n",
            "safety_finish_reason.detectors",
            "built-in detectors",
        ),
        (
            "tool_output: {storage_subdir: cache}\n",
            "tool_output.storage_subdir",
            ".tool-results",
        ),
        (
            "suggestions: {max_suggestions: 6}\n",
            "suggestions.max_suggestions",
            "1 to 5",
        ),
        (
            "input_polish: {model_name: nope}\n",
            "input_polish.model_name",
            "models:",
        ),
        (
            "max_recursion_limit: 0\n",
            "max_recursion_limit",
            "at least 1",
        ),
    ] {
        let e = refused(text);
        assert!(e.contains(path), "{text}: {e}");
        assert!(e.contains(instead), "{text}: {e}");
    }
}

#[test]
fn read_before_write_is_read_and_the_storage_sections_take_only_antlers_store() {
    let (config, warnings) = parse("read_before_write: {enabled: true}\n").unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert!(config.read_before_write_enabled());
    let (config, _) = parse("read_before_write: {enabled: false}\n").unwrap();
    assert!(!config.read_before_write_enabled());
    // DeerFlow's defaults load quietly; another backend is refused by its key.
    let (_, warnings) = parse(
        "database: {backend: sqlite, checkpoint_channel_mode: full}\nrun_events: {backend: memory}\nstream_bridge: {type: memory}\ncheckpointer: {type: sqlite}\n",
    )
    .unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    for (text, key) in [
        ("database: {backend: postgres}\n", "database.backend"),
        (
            "database: {checkpoint_channel_mode: delta}\n",
            "database.checkpoint_channel_mode",
        ),
        ("checkpointer: {type: postgres}\n", "checkpointer.type"),
        ("run_events: {backend: jsonl}\n", "run_events.backend"),
        ("stream_bridge: {type: redis}\n", "stream_bridge.type"),
    ] {
        let error = refused(text);
        assert!(error.contains(key), "{text}: {error}");
    }
}

#[test]
fn log_level_takes_deerflows_names_in_any_case() {
    for (text, level) in [
        ("log_level: debug\n", LogLevel::Debug),
        ("log_level: INFO\n", LogLevel::Info),
        ("log_level: warning\n", LogLevel::Warning),
        ("log_level: warn\n", LogLevel::Warning),
        ("log_level: error\n", LogLevel::Error),
        ("log_level: CRITICAL\n", LogLevel::Error),
        ("max_recursion_limit: 3\n", LogLevel::Info),
    ] {
        assert_eq!(parse(text).unwrap().0.log_level(), level, "{text}");
    }
    let message = refused("log_level: 10\n");
    assert!(message.contains("log_level"), "{message}");
}
