//! What a user sees when a config file is wrong: the file, line and column, the field path
//! and what would be accepted; unknown keys as warnings; DeerFlow's own texts for invalid
//! JSON and unusable MCP servers, which are skipped while the others load.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use antler_protocol::config::{
    check_file_with_env, discover_extensions_config, is_host_bash_allowed,
    load_app_config_with_env, load_extensions_config_with_env, parse_app_config,
    parse_extensions_config, resolve_app_config_path, resolve_extensions_path, ConfigError,
    Location, WarningKind, ANTLER_CONFIG_ENV, ANTLER_EXTENSIONS_ENV, DEERFLOW_CONFIG_ENV,
    DEERFLOW_EXTENSIONS_ENV,
};

fn fixture(name: &str) -> PathBuf {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/config"
    ))
    .join(name)
}

fn no_env(_: &str) -> Option<String> {
    None
}

fn at(line: usize, column: usize) -> Option<Location> {
    Some(Location { line, column })
}

#[test]
fn wrong_type_names_file_line_column_path_and_expectation() {
    let path = fixture("bad_tool_group.yaml");
    let error = load_app_config_with_env(&path, &no_env).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "{}:17:5: tools[3].group: invalid type: integer `5`, expected a string",
            path.display()
        )
    );
    assert_eq!(error.location(), at(17, 5));
    assert_eq!(error.field_path().unwrap().to_string(), "tools[3].group");
}

#[test]
fn wrong_type_in_antler_section_says_what_is_accepted() {
    let text = "log_level: info\nantler:\n  workers: many\n";
    let error = parse_app_config(Path::new("config.yaml"), text, &no_env).unwrap_err();
    assert_eq!(
        error.to_string(),
        "config.yaml:3:12: antler.workers: invalid type: string \"many\", \
         expected a non-negative integer"
    );
}

#[test]
fn out_of_range_values_fail_with_the_accepted_range() {
    let text = "antler:\n  workers: 0\n";
    let error = parse_app_config(Path::new("config.yaml"), text, &no_env).unwrap_err();
    assert_eq!(
        error.to_string(),
        "config.yaml:2:3: antler.workers: value out of range; expected an integer from 1 to 64"
    );
    let text = "antler:\n  workers: 100000\n";
    let error = parse_app_config(Path::new("config.yaml"), text, &no_env).unwrap_err();
    assert_eq!(
        error.to_string(),
        "config.yaml:2:3: antler.workers: value out of range; expected an integer from 1 to 64"
    );
    let text = "subagents:\n  max_total_per_run: 80\n";
    let error = parse_app_config(Path::new("config.yaml"), text, &no_env).unwrap_err();
    assert_eq!(
        error.to_string(),
        "config.yaml:2:3: subagents.max_total_per_run: value out of range; \
         expected an integer from 1 to 50"
    );
}

#[test]
fn missing_required_field_names_the_entry() {
    let text = "tools:\n  - name: ls\n    use: deerflow.sandbox.tools:ls_tool\n";
    let error = parse_app_config(Path::new("config.yaml"), text, &no_env).unwrap_err();
    assert_eq!(
        error.to_string(),
        "config.yaml:2:5: tools[0]: missing field `group`"
    );
    let text = "sandbox:\n  allow_host_bash: true\n";
    let error = parse_app_config(Path::new("config.yaml"), text, &no_env).unwrap_err();
    assert_eq!(
        error.to_string(),
        "config.yaml:2:3: sandbox: missing field `use`"
    );
}

#[test]
fn yaml_syntax_error_names_line_and_column() {
    let text = "tools:\n  - name: ls\n    group: [file:read\n";
    let error = parse_app_config(Path::new("config.yaml"), text, &no_env).unwrap_err();
    assert_eq!(
        error.to_string(),
        "config.yaml:4:1: invalid YAML: did not find expected ',' or ']', \
         while parsing a flow sequence at line 3 column 12"
    );
}

#[test]
fn wrong_shape_at_the_top_says_what_is_accepted() {
    let error = parse_app_config(Path::new("config.yaml"), "- a\n- b\n", &no_env).unwrap_err();
    assert_eq!(
        error.to_string(),
        "config.yaml:1:1: invalid type: sequence, \
         expected a mapping of config sections (models, tools, sandbox, ...)"
    );
    let error = parse_app_config(Path::new("config.yaml"), "tools: 5\n", &no_env).unwrap_err();
    assert_eq!(
        error.to_string(),
        "config.yaml:1:8: tools: invalid type: integer `5`, expected a list"
    );
    let error = parse_extensions_config(Path::new("ext.json"), "\n  [1]", &no_env).unwrap_err();
    assert_eq!(
        error.to_string(),
        "ext.json:2:3: invalid type: array, expected an object"
    );
}

#[test]
fn oauth_errors_name_the_field_and_the_accepted_values() {
    let text = r#"{"mcpServers": {"a": {"oauth": {"grant_type": "password", "token_url": "x"}}}}"#;
    let error = parse_extensions_config(Path::new("ext.json"), text, &no_env).unwrap_err();
    assert_eq!(
        error.to_string(),
        "ext.json:1:33: mcpServers.a.oauth.grant_type: unknown variant `password`, \
         expected one of `client_credentials`, `refresh_token`, `authorization_code`, `jwt_bearer`"
    );
    let text = r#"{"mcpServers": {"a": {"oauth": 5}}}"#;
    let error = parse_extensions_config(Path::new("ext.json"), text, &no_env).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("mcpServers.a.oauth: invalid type: integer `5`, expected an oauth mapping"),
        "{error}"
    );
}

#[test]
fn unknown_keys_are_warnings_naming_the_key() {
    let path = fixture("unknown_keys.yaml");
    let loaded = load_app_config_with_env(&path, &no_env).unwrap();
    let shown: Vec<String> = loaded.warnings.iter().map(|w| w.to_string()).collect();
    let file = path.display();
    assert_eq!(
        shown,
        [
            format!("{file}:5:1: tool_serch: unknown key, ignored (did you mean `tool_search`?)"),
            format!("{file}:10:3: tool_search.promote_everything: unknown key, ignored"),
            format!("{file}:13:3: antler.wokers: unknown key, ignored (did you mean `workers`?)"),
        ]
    );
    // DeerFlow's sections (log_level, memory, tool_search) are read; the rest are unknown.
    let kinds: Vec<WarningKind> = loaded.warnings.iter().map(|w| w.kind).collect();
    assert!(
        kinds.iter().all(|k| *k == WarningKind::UnknownKey),
        "{kinds:?}"
    );
    // The rest of the file still loads.
    assert!(loaded.value.tool_search.enabled);
    assert_eq!(loaded.value.antler.workers, 4);
}

#[test]
fn deerflow_sections_commented_out_in_its_example_do_not_warn() {
    let keys = [
        "extensions",
        "tool_progress",
        "subagents",
        "acp_agents",
        "checkpointer",
        "dedupe_storage",
        "stream_bridge",
        "channel_connections",
        "channels",
        "guardrails",
        "circuit_breaker",
        "llm_call",
        "auth",
        "plugins",
    ];
    let text: String = keys.iter().map(|k| format!("{k}:\n")).collect();
    let loaded = parse_app_config(Path::new("config.yaml"), &text, &no_env).unwrap();
    assert!(loaded.warnings.is_empty(), "{:#?}", loaded.warnings);
}

#[test]
fn antler_section_reads_the_cluster_token_from_the_environment() {
    let path = fixture("antler_section.yaml");
    let with_token = |name: &str| (name == "ANTLER_CLUSTER_TOKEN").then(|| "s3cret".to_owned());
    let set = load_app_config_with_env(&path, &with_token).unwrap().value;
    assert_eq!(set.antler.cluster_token(), Some("s3cret"));
    assert_eq!(set.antler.workers, 4);
    assert_eq!(set.antler.max_frame_bytes, 1_048_576);
    assert_eq!(set.antler.heartbeat_interval_ms, 500);
    assert_eq!(set.antler.listen.as_deref(), Some("0.0.0.0:7400"));
    assert_eq!(
        set.antler.runtime_dir,
        Some(PathBuf::from("/run/antler-test"))
    );
    assert_eq!(set.antler.restart_max, 5);
    assert!(
        is_host_bash_allowed(&set),
        "a non-local sandbox allows bash"
    );

    let unset = load_app_config_with_env(&path, &no_env).unwrap().value;
    assert_eq!(unset.antler.cluster_token(), None);
}

#[test]
fn invalid_json_gives_deerflows_message() {
    let path = fixture("invalid.json");
    let error = load_extensions_config_with_env(&path, &no_env).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "Extensions config file at {} is not valid JSON: expected `,` or `}}` at line 5 column 7",
            path.display()
        )
    );
    assert_eq!(error.location(), at(5, 7));
}

#[test]
fn unusable_servers_are_skipped_with_deerflows_message_and_the_others_load() {
    let path = fixture("servers.json");
    let loaded = load_extensions_config_with_env(&path, &no_env).unwrap();
    let file = path.display();
    let shown: Vec<String> = loaded.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(
        shown,
        [
            format!(
                "{file}:3:5: mcpServers.no-command.command: \
                 MCP server 'no-command' with stdio transport requires 'command' field"
            ),
            format!(
                "{file}:20:5: mcpServers.no-url.url: \
                 MCP server 'no-url' with sse transport requires 'url' field"
            ),
            format!(
                "{file}:24:7: mcpServers.websocket.type: \
                 MCP server 'websocket' has unsupported transport type: ws; \
                 expected one of: stdio, sse, http, streamable_http"
            ),
        ]
    );
    assert_eq!(
        loaded.warnings[0].message,
        "MCP server 'no-command' with stdio transport requires 'command' field"
    );
    assert!(loaded
        .warnings
        .iter()
        .all(|w| w.kind == WarningKind::ServerSkipped));

    let servers = &loaded.value.mcp_servers;
    assert_eq!(
        servers.keys().collect::<Vec<_>>(),
        ["files", "events", "both", "off-and-broken"]
    );
    let files = servers.get("files").unwrap();
    assert_eq!(files.transport_name(), "stdio");
    assert_eq!(files.args[1], "@modelcontextprotocol/server-filesystem");
    // `transport` is an alias of `type` ...
    assert_eq!(servers.get("events").unwrap().transport_name(), "sse");
    // ... and `type` wins when both are given.
    assert_eq!(servers.get("both").unwrap().transport_name(), "http");
    // A disabled server is not checked, as DeerFlow only builds enabled ones.
    assert!(!servers.get("off-and-broken").unwrap().enabled);
}

#[test]
fn config_check_counts_skipped_servers_as_errors() {
    let report = check_file_with_env(&fixture("servers.json"), &no_env);
    assert!(!report.is_ok());
    assert_eq!(report.errors.len(), 3);
    assert!(report.warnings.is_empty());
    assert_eq!(report.errors[0].location(), at(3, 5));
    assert_eq!(
        report.errors[0].field_path().unwrap().to_string(),
        "mcpServers.no-command.command"
    );
    let first_line = report.to_string().lines().next().unwrap().to_owned();
    assert!(
        first_line.starts_with("error: ") && first_line.ends_with("requires 'command' field"),
        "{first_line}"
    );
}

#[test]
fn json_wrong_type_points_at_the_key() {
    let path = fixture("bad_args.json");
    let error = load_extensions_config_with_env(&path, &no_env).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "{}:5:7: mcpServers.github.args: invalid type: string \
             \"-y @modelcontextprotocol/server-github\", expected a list",
            path.display()
        )
    );
}

#[test]
fn unknown_server_keys_warn_and_priority_is_clamped() {
    let path = fixture("unknown_server_key.json");
    let loaded = load_extensions_config_with_env(&path, &no_env).unwrap();
    let file = path.display();
    let shown: Vec<String> = loaded.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(
        shown,
        [
            format!("{file}:4:7: mcpServers.github.comand: unknown key, ignored (did you mean `command`?)"),
            format!("{file}:6:37: mcpServers.github.routing.priority: priority 150 is outside 0..=100; 100 is used"),
            format!("{file}:9:3: mcpIntercepters: unknown key, ignored (did you mean `mcpInterceptors`?)"),
        ]
    );
    let github = loaded.value.mcp_servers.get("github").unwrap();
    assert_eq!(github.effective_routing("search").priority, 100);
}

#[test]
fn routing_rejects_unknown_keys_like_deerflows_extra_forbid() {
    let text = r#"{"mcpServers": {"db": {"command": "x",
  "routing": {"mode": "prefer", "boost": 2}}}}"#;
    let error = parse_extensions_config(Path::new("ext.json"), text, &no_env).unwrap_err();
    assert_eq!(
        error.to_string(),
        "ext.json:2:33: mcpServers.db.routing.boost: unknown field `boost`, \
         expected one of `mode`, `priority`, `keywords`"
    );
}

#[test]
fn interceptors_accept_a_single_string() {
    let text = r#"{"mcpInterceptors": "pkg.mod:build"}"#;
    let loaded = parse_extensions_config(Path::new("ext.json"), text, &no_env).unwrap();
    assert_eq!(loaded.value.mcp_interceptors, ["pkg.mod:build"]);
    let text = r#"{"mcpInterceptors": 3}"#;
    let error = parse_extensions_config(Path::new("ext.json"), text, &no_env).unwrap_err();
    assert_eq!(
        error.to_string(),
        "ext.json:1:2: mcpInterceptors: invalid type: integer `3`, \
         expected a string or a list of strings"
    );
}

#[test]
fn extensions_file_location_follows_spec_5_1_with_antlers_variable_first() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path();
    let no_file = resolve_extensions_path(None, project, &no_env).unwrap();
    assert_eq!(no_file, None);
    let empty = discover_extensions_config(None, project, &no_env).unwrap();
    assert!(empty.path.is_none() && empty.value.mcp_servers.is_empty());

    let legacy = project.join("mcp_config.json");
    std::fs::write(&legacy, r#"{"mcpServers": {}}"#).unwrap();
    assert_eq!(
        resolve_extensions_path(None, project, &no_env).unwrap(),
        Some(legacy.clone())
    );
    let main = project.join("extensions_config.json");
    std::fs::write(&main, r#"{"mcpServers": {"a": {"command": "x"}}}"#).unwrap();
    assert_eq!(
        resolve_extensions_path(None, project, &no_env).unwrap(),
        Some(main.clone())
    );

    let antler_file = project.join("antler.json");
    std::fs::write(&antler_file, "{}").unwrap();
    let antler_path = antler_file.to_string_lossy().into_owned();
    let legacy_path = legacy.to_string_lossy().into_owned();
    let both = |name: &str| match name {
        ANTLER_EXTENSIONS_ENV => Some(antler_path.clone()),
        DEERFLOW_EXTENSIONS_ENV => Some(legacy_path.clone()),
        _ => None,
    };
    assert_eq!(
        resolve_extensions_path(None, project, &both).unwrap(),
        Some(antler_file.clone())
    );
    // An explicit path beats both variables.
    assert_eq!(
        resolve_extensions_path(Some(&main), project, &both).unwrap(),
        Some(main.clone())
    );

    let missing = project.join("nope.json");
    let missing_path = missing.to_string_lossy().into_owned();
    let deerflow_missing =
        |name: &str| (name == DEERFLOW_EXTENSIONS_ENV).then(|| missing_path.clone());
    let error = resolve_extensions_path(None, project, &deerflow_missing).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "Extensions config file specified by environment variable \
             `DEER_FLOW_EXTENSIONS_CONFIG_PATH` not found at {}",
            missing.display()
        )
    );
    let error = resolve_extensions_path(Some(&missing), project, &no_env).unwrap_err();
    assert!(matches!(error, ConfigError::NotFound { .. }));
    assert_eq!(
        error.to_string(),
        format!(
            "Extensions config file specified by param `config_path` not found at {}",
            missing.display()
        )
    );
}

#[test]
fn unreadable_file_is_named() {
    let error =
        load_app_config_with_env(Path::new("/nonexistent/config.yaml"), &no_env).unwrap_err();
    assert!(error
        .to_string()
        .starts_with("/nonexistent/config.yaml: cannot read the file: "));
}

#[test]
fn empty_config_yaml_is_an_empty_config() {
    let loaded = parse_app_config(Path::new("config.yaml"), "# nothing yet\n", &no_env).unwrap();
    assert!(loaded.value.tools.is_empty());
    assert_eq!(loaded.value.antler.workers, 2);
}

#[test]
fn app_config_location_prefers_explicit_then_variables_then_project_dir() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path();
    assert_eq!(
        resolve_app_config_path(None, project, &no_env).unwrap(),
        None
    );
    let default = project.join("config.yaml");
    std::fs::write(&default, "tools: []\n").unwrap();
    assert_eq!(
        resolve_app_config_path(None, project, &no_env).unwrap(),
        Some(default.clone())
    );
    let missing = project
        .join("elsewhere.yaml")
        .to_string_lossy()
        .into_owned();
    let deerflow = |name: &str| (name == DEERFLOW_CONFIG_ENV).then(|| missing.clone());
    let error = resolve_app_config_path(None, project, &deerflow).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "Config file specified by environment variable `DEER_FLOW_CONFIG_PATH` not found at {missing}"
        )
    );
    let default_str = default.to_string_lossy().into_owned();
    let antler = |name: &str| (name == ANTLER_CONFIG_ENV).then(|| default_str.clone());
    assert_eq!(
        resolve_app_config_path(None, project, &antler).unwrap(),
        Some(default)
    );
}
