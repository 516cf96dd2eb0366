//! `antler run` prints the reply as the model writes it: with `--stream` (the default on a
//! terminal) the streamed text goes to stderr beside the progress lines, and the answer
//! still goes to stdout; with `--json` stdout is the one JSON object as before and no
//! streamed text is printed. The model is `recording_server`, a stand-in for an
//! OpenAI-compatible endpoint that streams its reply.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::model_support::{antler_run, recording_server, run_dir, Reply, NO_MCP_SERVERS};

const ANSWER: &str = "Streamed straight to the terminal.";

fn config(base_url: &str) -> String {
    format!("models:\n  - name: rec\n    use: langchain_openai:ChatOpenAI\n    model: recorded\n    base_url: {base_url}\n    api_key: sk-x\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n")
}

#[test]
fn the_reply_streams_to_stderr_and_json_output_is_unchanged() {
    let server = recording_server(vec![Reply::text(ANSWER)]);
    let dir = run_dir("antler-stream", &config(&server.base_url), NO_MCP_SERVERS);
    let d = dir.path();
    let out = std::process::Command::new(antler_tests::bin("antler"))
        .arg("--runtime-dir")
        .arg(d.join("run"))
        .args([
            "run",
            "Say something",
            "--model",
            "rec",
            "--stream",
            "--config",
        ])
        .arg(d.join("config.yaml"))
        .current_dir(d)
        .env("ANTLER_SANDBOX_BASE_DIR", d.join("base"))
        .env(
            "ANTLER_EXTENSIONS_CONFIG_PATH",
            d.join("extensions_config.json"),
        )
        .env("ANTLER_GATEWAY_ADDR", "off")
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(&format!("· model turn 1\n  {ANSWER}\n")),
        "the reply was not streamed: {stderr}"
    );
    assert!(stdout.contains(ANSWER), "{stdout}");

    let (view, stderr) = antler_run(d, &["Say it again", "--model", "rec"]);
    assert_eq!(view["status"], "success");
    assert_eq!(view["final_answer"], ANSWER);
    assert!(
        !stderr.contains(ANSWER),
        "--json printed the stream: {stderr}"
    );
}
