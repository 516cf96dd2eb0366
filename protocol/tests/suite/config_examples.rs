//! DeerFlow's own example files load unchanged: no errors, a warning for each DeerFlow
//! setting Antler does not act on (and nothing else), and the values a user would notice
//! (tools and groups, tool_search, sandbox, MCP servers, `$VAR`s).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use antler_protocol::config::{
    build_server_params, check_file_with_env, is_host_bash_allowed, load_app_config_with_env,
    load_extensions_config_with_env, parse_app_config, AntlerSection, ConfigWarning, RoutingMode,
    Transport, WarningKind,
};

const APP_EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/conformance/deerflow-config.example.yaml"
);
const EXTENSIONS_EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/conformance/deerflow-extensions_config.example.json"
);

fn no_env(_: &str) -> Option<String> {
    None
}

fn github_env(name: &str) -> Option<String> {
    (name == "GITHUB_TOKEN").then(|| "ghp_example".to_owned())
}

/// The sections of DeerFlow's example that Antler reads but does not act on: none, every
/// section of it works or is at a value Antler honours.
const IGNORED_IN_APP_EXAMPLE: &[&str] = &[];

/// The paths of `warnings`, each of which must be about a setting that does nothing.
fn ignored_paths(warnings: &[ConfigWarning]) -> Vec<String> {
    assert!(
        warnings.iter().all(|w| w.kind == WarningKind::Ignored),
        "unexpected warnings: {warnings:#?}"
    );
    warnings.iter().map(|w| w.path.to_string()).collect()
}

#[test]
fn deerflow_config_example_loads_warning_only_about_settings_that_do_nothing() {
    let loaded = load_app_config_with_env(Path::new(APP_EXAMPLE), &no_env).unwrap();
    assert_eq!(ignored_paths(&loaded.warnings), IGNORED_IN_APP_EXAMPLE);
    let config = loaded.value;
    // The context sections (spec C.1, C.5) parse with DeerFlow's values.
    let summarization = antler_protocol::config::SummarizationConfig::from_section(
        config.other.get("summarization"),
    )
    .unwrap();
    assert!(summarization.enabled);
    antler_protocol::config::TitleConfig::from_section(config.other.get("title")).unwrap();

    // Every model in the example is commented out: `models:` is null.
    assert!(config.models.is_empty());

    let names: Vec<&str> = config.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "web_search",
            "web_fetch",
            "image_search",
            "ls",
            "read_file",
            "glob",
            "grep",
            "write_file",
            "str_replace",
            "bash"
        ]
    );
    let glob = config.tool("glob").unwrap();
    assert_eq!(glob.group, "file:read");
    assert_eq!(glob.use_, "deerflow.sandbox.tools:glob_tool");
    assert_eq!(glob.extra.get("max_results"), Some(&serde_json::json!(200)));
    assert_eq!(config.tool("web_fetch").unwrap().extra["timeout"], 10);
    assert_eq!(config.tool("bash").unwrap().group, "bash");

    let groups: Vec<&str> = config.tool_groups.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(
        groups,
        ["web", "file:read", "file:write", "bash", "browser"]
    );

    assert!(!config.tool_search.enabled);
    assert_eq!(config.tool_search.auto_promote_top_k, 3);
    assert_eq!(config.tool_search.top_k(), 3);

    let sandbox = config.sandbox.as_ref().unwrap();
    assert_eq!(sandbox.use_, "deerflow.sandbox.local:LocalSandboxProvider");
    assert!(sandbox.is_local_provider());
    assert!(!sandbox.allow_host_bash);
    assert_eq!(sandbox.extra["bash_command_timeout"], 600);
    assert!(!is_host_bash_allowed(&config));

    assert!(!config.skill_evolution.enabled);
    assert!(config.skill_evolution.security_fail_closed);
    assert!(!config.authorization.enabled);
    assert!(!config.guardrails.enabled);
    assert!(config.acp_agents.is_empty());
    assert_eq!(config.subagents.max_total_per_run, 6);

    // DeerFlow sections Antler does not type are kept as written.
    assert_eq!(
        config.other.get("config_version"),
        Some(&serde_json::json!(34))
    );
    assert_eq!(config.other.get("database").unwrap()["backend"], "sqlite");
    assert_eq!(config.other.get("memory").unwrap()["mode"], "middleware");

    // No `antler:` section: every default applies.
    assert_eq!(config.antler, AntlerSection::default());
}

#[test]
fn deerflow_extensions_example_loads_every_server() {
    let loaded =
        load_extensions_config_with_env(Path::new(EXTENSIONS_EXAMPLE), &github_env).unwrap();
    // Its interceptor is read but nothing runs it yet.
    assert_eq!(ignored_paths(&loaded.warnings), ["mcpInterceptors"]);
    let config = loaded.value;
    assert_eq!(
        config.mcp_servers.keys().collect::<Vec<_>>(),
        ["github", "openviking", "postgres", "long-running-reports"]
    );
    assert_eq!(
        config.mcp_interceptors,
        ["my_package.mcp.auth:build_auth_interceptor"]
    );
    assert!(config.middlewares.is_empty() && config.skills.is_empty());
    // Every server in the example is disabled.
    assert_eq!(config.enabled_servers().count(), 0);

    let github = config.mcp_servers.get("github").unwrap();
    assert_eq!(github.transport_name(), "stdio");
    assert_eq!(build_server_params("github", github), Ok(Transport::Stdio));
    assert_eq!(github.command.as_deref(), Some("npx"));
    assert_eq!(github.args, ["-y", "@modelcontextprotocol/server-github"]);
    assert_eq!(
        github.env.get("GITHUB_TOKEN").map(String::as_str),
        Some("ghp_example")
    );
    assert_eq!(github.session_init_timeout, 60.0);
    assert_eq!(github.tool_call_timeout, Some(60.0));
    assert!(github.tool_name_prefix);

    let openviking = config.mcp_servers.get("openviking").unwrap();
    assert_eq!(openviking.transport_name(), "http");
    assert_eq!(openviking.url.as_deref(), Some("http://127.0.0.1:1933/mcp"));
    // `$OPENVIKING_API_KEY` is unset here: DeerFlow resolves it to "".
    assert_eq!(
        openviking.headers.get("X-API-Key").map(String::as_str),
        Some("")
    );

    let postgres = config.mcp_servers.get("postgres").unwrap();
    let server_routing = postgres.effective_routing("list_tables");
    assert_eq!(server_routing.mode, RoutingMode::Prefer);
    assert_eq!(server_routing.priority, 50);
    assert_eq!(
        server_routing.keywords,
        ["database", "SQL", "table", "订单", "用户"]
    );
    let query = postgres.effective_routing("query");
    assert_eq!(query.priority, 100);
    assert_eq!(query.keywords, ["查库", "订单表", "指标"]);

    let reports = config.mcp_servers.get("long-running-reports").unwrap();
    assert_eq!(reports.task_toolsets.len(), 1);
    assert_eq!(reports.task_toolsets[0].submit_tool, "submit_report");
    assert_eq!(
        build_server_params("long-running-reports", reports),
        Ok(Transport::Http)
    );
    assert!(reports.oauth.is_none());
}

#[test]
fn github_token_resolves_from_the_environment_or_to_empty() {
    let path = Path::new(EXTENSIONS_EXAMPLE);
    let set = load_extensions_config_with_env(path, &github_env)
        .unwrap()
        .value;
    let unset = load_extensions_config_with_env(path, &no_env)
        .unwrap()
        .value;
    let token = |c: &antler_protocol::config::ExtensionsConfig| {
        c.mcp_servers
            .get("github")
            .unwrap()
            .env
            .get("GITHUB_TOKEN")
            .cloned()
    };
    assert_eq!(token(&set).as_deref(), Some("ghp_example"));
    assert_eq!(token(&unset).as_deref(), Some(""));
}

#[test]
fn config_check_passes_both_examples_and_strict_refuses_what_does_nothing() {
    // DeerFlow's config.yaml: every section works or is at a value Antler honours, so it
    // has nothing to warn about; its extensions file names interceptors, which do nothing.
    for (file, warns) in [(APP_EXAMPLE, false), (EXTENSIONS_EXAMPLE, true)] {
        let report = check_file_with_env(Path::new(file), &no_env);
        assert!(report.is_ok(), "{report}");
        let warned = ignored_paths(&report.warnings);
        assert_eq!(!warned.is_empty(), warns, "{report}");
        let strict = check_file_with_env(Path::new(file), &no_env).strict();
        assert_eq!(strict.errors.len(), warned.len(), "{strict}");
        assert!(strict.warnings.is_empty(), "{strict}");
    }
}

#[test]
fn model_entries_from_the_examples_comments_load_with_their_extras() {
    // The commented-out OpenAI and Ollama entries of DeerFlow's example, uncommented.
    let text = "\
models:
  - name: gpt-4
    display_name: GPT-4
    use: langchain_openai:ChatOpenAI
    model: gpt-4
    api_key: $OPENAI_API_KEY # Use environment variable
    request_timeout: 600.0
    max_retries: 2
    max_tokens: 4096
    context_window: 128000
    temperature: 0.7
    supports_vision: true
  - name: qwen3-local
    display_name: Qwen3 32B (Ollama)
    use: langchain_ollama:ChatOllama
    model: qwen3:32b
    base_url: http://localhost:11434
    num_predict: 8192
    reasoning: true
    supports_thinking: true
    supports_vision: false
";
    let env = |name: &str| (name == "OPENAI_API_KEY").then(|| "sk-test".to_owned());
    let loaded = parse_app_config(Path::new("config.yaml"), text, &env).unwrap();
    assert!(loaded.warnings.is_empty(), "{:#?}", loaded.warnings);
    let config = loaded.value;
    let default = config.model(None).unwrap();
    assert_eq!(default.name, "gpt-4");
    assert_eq!(default.api_key.as_deref(), Some("sk-test"));
    assert!(default.supports_vision && !default.supports_thinking);
    assert_eq!(default.extra["context_window"], 128000);
    assert_eq!(default.extra["temperature"], 0.7);
    let qwen = config.model(Some("qwen3-local")).unwrap();
    assert_eq!(qwen.base_url.as_deref(), Some("http://localhost:11434"));
    assert!(qwen.supports_thinking);
    assert_eq!(qwen.extra["reasoning"], true);
}
