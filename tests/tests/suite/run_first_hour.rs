//! What a new user met in the first hour (issue 32), each against the real binaries: runs
//! of one model config share one HTTP client (the lead's `/metrics` counts the builds); a
//! run submitted while sandbox-host is still starting waits for it instead of failing, and
//! `/ready` says 503 until the hosts are linked; a model endpoint's 404 names the URL and
//! the missing `/v1`; usage no provider reported is `null`, not zeros; the default system
//! prompt is Antler's own and names only the tools the model has.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use crate::lead_support::LeadCluster;
use crate::model_support::{antler_run, not_found_server, recording_server, Reply};
use antler_tests::{antler, bin, bin_dir, http, wait_for, Cluster};
use serde_json::{json, Value};

/// config.yaml with one model at `base_url`, the `ls` tool only, and `extra` appended.
fn model_config(base_url: &str, extra: &str) -> String {
    format!(
        "models:\n  - name: rec\n    use: langchain_openai:ChatOpenAI\n    model: recorded\n    base_url: {base_url}\n    api_key: sk-x\ntools:\n  - {{name: ls, group: file:read, use: deerflow.sandbox.tools:ls_tool}}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n{extra}"
    )
}

/// A private directory with config.yaml written.
fn dir_with_config(prefix: &str, config: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::write(dir.path().join("config.yaml"), config).unwrap();
    dir
}

/// The value of an unlabelled sample in a Prometheus exposition.
fn sample(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

#[test]
fn runs_of_one_model_config_share_one_http_client_and_no_web_client_is_built() {
    let server = recording_server(vec![Reply::text("Done.")]);
    let cluster = LeadCluster::up(
        &model_config(&server.base_url, ""),
        &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")],
    );
    let mut run_ids = Vec::new();
    for n in 0..3 {
        let out = antler(
            &cluster.runtime(),
            &["run", &format!("Say hello {n}"), "--json"],
        );
        let view: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
        });
        assert_eq!(view["status"], "success", "{view}");
        run_ids.push(view["run_id"].as_str().unwrap().to_owned());
    }
    assert_eq!(server.requests.lock().unwrap().len(), 3);
    let (status, metrics) = http(&cluster.gateway(), "GET", "/metrics", &[], None);
    assert_eq!(status, 200, "{metrics}");
    // Three runs, one client: the model's. The config has no web tool, so no web client.
    assert_eq!(
        sample(&metrics, "antler_http_clients_built_total"),
        Some(1),
        "{metrics}"
    );
    // The gateway's run view: the stand-in reports no usage, so it is not reported.
    let auth = format!("Bearer {}", cluster.gateway_token());
    let (status, text) = http(
        &cluster.gateway(),
        "GET",
        &format!("/api/runs/{}", run_ids[0]),
        &[("Authorization", &auth)],
        None,
    );
    assert_eq!(status, 200, "{text}");
    let view: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(view["token_usage"], Value::Null, "{view}");
}

/// A bin directory whose sandbox-host starts only once the file `go` exists in it (the
/// real one, after a wait of at most 20 s), the other binaries the build's own.
fn held_sandbox_host_bins() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("antler-bin")
        .tempdir_in("/tmp")
        .unwrap();
    for name in ["antler", "antler-mcp-host", "antler-subagent"] {
        std::os::unix::fs::symlink(bin(name), dir.path().join(name)).unwrap();
    }
    let wrapper = dir.path().join("antler-sandbox-host");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nfor i in $(seq 200); do [ -e {go} ] && break; sleep 0.1; done\nexec {real} \"$@\"\n",
            go = dir.path().join("go").display(),
            real = bin_dir().join("antler-sandbox-host").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

#[test]
fn a_run_submitted_while_the_hosts_start_waits_for_them_and_ready_says_so() {
    let bins = held_sandbox_host_bins();
    let cluster = Cluster::up_with(
        0,
        &[
            ("ANTLER_BIN_DIR", bins.path().to_str().unwrap()),
            ("ANTLER_GATEWAY_ADDR", "127.0.0.1:0"),
        ],
    );
    let addr = cluster.gateway_addr().expect("the gateway listens");
    let live = wait_for(Duration::from_secs(10), || {
        (http(&addr, "GET", "/health", &[], None).0 == 200).then_some(())
    });
    assert!(live.is_some(), "/health never answered");
    // Live, not ready: sandbox-host is held back.
    let (status, text) = http(&addr, "GET", "/ready", &[], None);
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("sandbox-host"), "{text}");
    // Submitted now, the run waits for its hosts (it failed with "SandboxHost
    // unreachable" before) and goes on once sandbox-host is let start.
    let token = cluster.gateway_token();
    let submit = std::thread::spawn(move || {
        let body =
            json!({"task": "x", "playbook_yaml": "turns:\n  - content: Done while starting.\n"});
        let auth = format!("Bearer {token}");
        http(
            &addr,
            "POST",
            "/api/runs",
            &[("Authorization", &auth)],
            Some(&body.to_string()),
        )
    });
    std::thread::sleep(Duration::from_millis(500));
    assert!(!submit.is_finished(), "the submission did not wait");
    std::fs::write(bins.path().join("go"), "").unwrap();
    let (status, text) = submit.join().unwrap();
    assert_eq!(status, 201, "{text}");
    let run_id = serde_json::from_str::<Value>(&text).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let view = wait_for(Duration::from_secs(30), || {
        let (_, text) = cluster.gateway_http("GET", &format!("/api/runs/{run_id}"), None);
        let view: Value = serde_json::from_str(&text).ok()?;
        (view["status"] != "running").then_some(view)
    })
    .expect("the run ends");
    assert_eq!(view["status"], "success", "{view}");
    assert_eq!(view["final_answer"], "Done while starting.");
    let addr = cluster.gateway_addr().unwrap();
    let ready = wait_for(Duration::from_secs(10), || {
        (http(&addr, "GET", "/ready", &[], None).0 == 200).then_some(())
    });
    assert!(ready.is_some(), "/ready never answered 200");
}

#[test]
fn a_model_endpoints_404_names_the_url_and_the_missing_v1() {
    let (base_url, paths) = not_found_server();
    let dir = dir_with_config("antler-404", &model_config(&base_url, ""));
    let (view, stderr) = antler_run(dir.path(), &["Say hello"]);
    assert_eq!(view["status"], "error", "{view}\n{stderr}");
    let error = view["error"].as_str().unwrap();
    assert!(
        error.contains(&format!("HTTP 404 from {base_url}/chat/completions")),
        "{error}"
    );
    assert!(
        error.contains("the base_url is probably missing `/v1`")
            && error.contains(&format!("try base_url: {base_url}/v1")),
        "{error}"
    );
    // A 404 is not retried.
    assert_eq!(*paths.lock().unwrap(), ["/chat/completions"]);
}

#[test]
fn usage_the_provider_does_not_report_is_null_not_zeros() {
    // llama.cpp's server sends no usage: the stand-in's replies carry none.
    let server = recording_server(vec![Reply::text("Done.")]);
    let dir = dir_with_config("antler-nousage", &model_config(&server.base_url, ""));
    let (view, stderr) = antler_run(dir.path(), &["Say hello", "--trace"]);
    assert_eq!(view["status"], "success", "{view}");
    assert_eq!(view["token_usage"], Value::Null, "{view}");
    let finished: Vec<Value> = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|e| e["event"].clone())
        .filter(|e| e["event"] == "model_finished")
        .collect();
    assert_eq!(finished.len(), 1, "{stderr}");
    assert_eq!(finished[0]["total_usage"], Value::Null, "{}", finished[0]);
    assert_eq!(finished[0].get("usage"), None, "{}", finished[0]);
}

/// The system message the model got in the first request of a run with `extra` config.
fn system_prompt_sent(extra: &str) -> String {
    let server = recording_server(vec![Reply::text("Done.")]);
    let dir = dir_with_config("antler-prompt", &model_config(&server.base_url, extra));
    let (view, stderr) = antler_run(dir.path(), &["Say hello"]);
    assert_eq!(view["status"], "success", "{view}\n{stderr}");
    let requests = server.requests.lock().unwrap();
    let messages = requests[0]["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "system");
    messages[0]["content"].as_str().unwrap().to_owned()
}

#[test]
fn the_default_prompt_is_antlers_own_and_names_only_the_tools_offered() {
    let system = system_prompt_sent("");
    assert!(
        system.starts_with("<role>\nYou are Antler, an open-source super agent.\n</role>"),
        "{system}"
    );
    // The run offers `ls` only: no editing tool is named, and no other identity.
    for absent in ["DeerFlow", "str_replace", "write_file", "append=True"] {
        assert!(!system.contains(absent), "{absent}:\n{system}");
    }
    // antler.agent_name gives another name (DeerFlow's own text, here).
    let deerflow = system_prompt_sent("antler:\n  agent_name: DeerFlow 2.0\n");
    assert!(
        deerflow.starts_with("<role>\nYou are DeerFlow 2.0, an open-source super agent.\n</role>"),
        "{deerflow}"
    );
}
