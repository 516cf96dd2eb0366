//! config.yaml's `log_level` (DeerFlow's key, its level names): with `RUST_LOG` unset it
//! sets the detail of Antler's own lines in the lead's log (`logs/antler.log`) and its
//! hosts'; `debug` adds DEBUG lines, `error` leaves out the INFO ones, and a name DeerFlow
//! does not have is a config error naming the accepted ones.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Output;

use crate::model_support::{run_dir, NO_MCP_SERVERS};

const PLAYBOOK: &str = "turns:\n  - content: Done.\n";

/// `antler run` of a one-turn playbook with `log_level: {level}` and no `RUST_LOG`: the
/// command's output and the lead's log.
fn run_at(level: &str) -> (Output, String) {
    let config =
        format!("log_level: {level}\ntool_search:\n  enabled: false\nantler:\n  workers: 1\n");
    let dir = run_dir("antler-loglevel", &config, NO_MCP_SERVERS);
    let d = dir.path();
    std::fs::write(d.join("playbook.yaml"), PLAYBOOK).unwrap();
    let out = std::process::Command::new(antler_tests::bin("antler"))
        .arg("--runtime-dir")
        .arg(d.join("run"))
        .args(["run", "Say done.", "--json", "--playbook"])
        .arg(d.join("playbook.yaml"))
        .arg("--config")
        .arg(d.join("config.yaml"))
        .current_dir(d)
        .env("ANTLER_SANDBOX_BASE_DIR", d.join("base"))
        .env(
            "ANTLER_EXTENSIONS_CONFIG_PATH",
            d.join("extensions_config.json"),
        )
        .env("ANTLER_GATEWAY_ADDR", "off")
        .env_remove("RUST_LOG")
        .env_remove("ANTLER_LOG_LEVEL")
        .output()
        .unwrap();
    let log = std::fs::read_to_string(d.join("run/logs/antler.log")).unwrap_or_default();
    (out, log)
}

fn succeeded(out: &Output) {
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn log_level_sets_the_detail_of_the_leads_log() {
    // DeerFlow's default: INFO lines, no DEBUG ones.
    let (out, log) = run_at("info");
    succeeded(&out);
    assert!(
        log.contains(" INFO ") && log.contains("cluster started"),
        "{log}"
    );
    assert!(!log.contains(" DEBUG "), "{log}");

    // `debug` (any case, as DeerFlow reads it): the lead's DEBUG lines too.
    let (out, log) = run_at("DEBUG");
    succeeded(&out);
    assert!(
        log.contains(" DEBUG ") && log.contains("link connected"),
        "{log}"
    );
    assert!(log.contains("cluster started"), "{log}");

    // `error`: the INFO lines are left out.
    let (out, log) = run_at("error");
    succeeded(&out);
    assert!(!log.contains("cluster started"), "{log}");
    assert!(!log.contains(" INFO ") && !log.contains(" DEBUG "), "{log}");
}

#[test]
fn a_log_level_deerflow_does_not_have_is_a_config_error_naming_the_accepted_ones() {
    let (out, _) = run_at("verbose");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("log_level")
            && stderr.contains("expected one of debug, info, warning, error, critical"),
        "{stderr}"
    );
}
