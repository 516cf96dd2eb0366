//! A stdio MCP server's environment (issue 10, item 4): the real server-everything's
//! `get-env` tool shows only the MCP SDK's default variables (`HOME`, `LOGNAME`, `PATH`,
//! `SHELL`, `TERM`, `USER`) plus what the server's `env` configures, never the operator's
//! secrets, on the base session and on a pooled (user, thread) session alike. The
//! variables that configure Antler's own processes (`OTEL_*`, `RUST_LOG`,
//! `ANTLER_LOG_FORMAT`, `ANTLER_LOG_LEVEL`) stay with them too, unless the server's `env`
//! sets one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::mcp_support::{npm_bin, McpCluster};
use serde_json::{json, Map, Value};

const SECRET: &str = "sk-secret-item4-do-not-leak";
/// An OTLP header the operator gives Antler's exporters (a collector's key).
const OTEL_SECRET: &str = "authorization=Bearer otel-secret-do-not-leak";
/// The variables of Antler's processes in mcp-host's environment.
const OWN: &[(&str, &str)] = &[
    ("OTEL_EXPORTER_OTLP_HEADERS", OTEL_SECRET),
    (
        "OTEL_RESOURCE_ATTRIBUTES",
        "deployment.environment=antler-host",
    ),
    ("OTEL_BSP_SCHEDULE_DELAY", "1000"),
    ("ANTLER_LOG_FORMAT", "text"),
    ("ANTLER_LOG_LEVEL", "warning"),
    ("RUST_LOG", "warn"),
];
const INHERITED: &[&str] = &["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"];

/// The server's environment as `get-env` reports it.
fn server_env(c: &McpCluster, extra: &[&str]) -> Map<String, Value> {
    let mut args = vec!["call", "everything", "get-env", "--args", "{}", "--json"];
    args.extend_from_slice(extra);
    let out = c.mcp(&args);
    assert!(
        out.status.success(),
        "get-env failed: {} {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value = serde_json::from_slice(&out.stdout).expect("call json");
    let text = McpCluster::text(&result);
    serde_json::from_str::<Value>(&text)
        .unwrap_or_else(|e| panic!("get-env text is not JSON ({e}): {text}"))
        .as_object()
        .cloned()
        .expect("an object")
}

fn assert_clean(env: &Map<String, Value>, extra_allowed: &[&str]) {
    let text = Value::Object(env.clone()).to_string();
    assert!(
        !text.contains(SECRET),
        "the secret reached the server: {text}"
    );
    assert!(!env.contains_key("OPENAI_API_KEY"), "{text}");
    assert!(
        !text.contains("otel-secret"),
        "the OTLP header reached the server: {text}"
    );
    for (own, _) in OWN {
        assert!(
            !env.contains_key(*own),
            "the server inherited {own}: {text}"
        );
    }
    assert_eq!(env["ANTLER_CONFIGURED"], "configured-value", "{text}");
    // A variable of the same kind the server's own `env` sets is its.
    assert_eq!(env["OTEL_SERVICE_NAME"], "server-own", "{text}");
    for key in env.keys() {
        assert!(
            INHERITED.contains(&key.as_str())
                || extra_allowed.contains(&key.as_str())
                || key == "ANTLER_CONFIGURED"
                || key == "OTEL_SERVICE_NAME",
            "the server inherited {key}: {text}"
        );
    }
    assert!(env.contains_key("PATH"), "PATH is inherited: {text}");
}

#[test]
fn stdio_servers_get_the_sdk_default_environment_and_their_configured_env_only() {
    let everything = npm_bin("mcp-server-everything").display().to_string();
    let c = McpCluster::start_with(
        json!({
            "everything": {
                "type": "stdio",
                "command": everything,
                "args": ["stdio"],
                "env": {"ANTLER_CONFIGURED": "configured-value", "OTEL_SERVICE_NAME": "server-own"},
            },
        }),
        &[
            &[
                ("OPENAI_API_KEY", SECRET),
                ("ANTLER_UNRELATED", "host-only"),
            ],
            OWN,
        ]
        .concat(),
    );
    // The secret is in mcp-host's own environment: the server could have inherited it.
    let host = c
        .cluster
        .process("mcp-host", 0)
        .and_then(|p| p["pid"].as_u64())
        .expect("mcp-host pid");
    let host_env = std::fs::read(format!("/proc/{host}/environ")).expect("environ");
    let host_env = String::from_utf8_lossy(&host_env);
    assert!(host_env.contains(SECRET) && host_env.contains(OTEL_SECRET));

    let base = server_env(&c, &[]);
    assert_clean(&base, &[]);

    let ws = tempfile::tempdir().expect("tempdir");
    let workspace = ws.path().display().to_string();
    let pooled = server_env(
        &c,
        &[
            "--user",
            "alice",
            "--thread",
            "t1",
            "--workspace",
            &workspace,
        ],
    );
    assert_clean(&pooled, &["TMPDIR", "TMP", "TEMP"]);
    let tmp = ws.path().join(".mcp/tmp").display().to_string();
    assert_eq!(pooled["TMPDIR"], tmp.as_str(), "{pooled:?}");
}
