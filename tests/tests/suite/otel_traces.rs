//! Traces over OTLP into a real collector (Arize Phoenix, tests/requirements.txt, started
//! once for the file): one run through a cluster with sandbox-host, mcp-host and a
//! subagent worker makes ONE trace whose spans come from the lead, sandbox-host, mcp-host
//! and the worker; the hosts' spans are children of the lead's tool-call spans, the model
//! spans carry gen_ai.*. A short `antler run` whose exporters wait a minute between
//! batches still delivers its last spans (the run's, sandbox-host's): every process
//! flushes on its way out; its model span names the vendor (`openai`). So does a run
//! whose `antler run` is stopped with SIGINT midway: the spans recorded so far arrive.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use antler_tests::wait_for;
use serde_json::{json, Value};

use crate::model_support::{recording_server, run_dir, Reply, NO_MCP_SERVERS};
use crate::subagent_support::SubagentCluster;

/// Phoenix on free loopback ports, killed when dropped.
struct Phoenix {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Phoenix {
    fn start() -> Phoenix {
        let dir = tempfile::tempdir().unwrap();
        let (port, grpc) = (free_port(), free_port());
        let child = Command::new("phoenix")
            .arg("serve")
            .env("PHOENIX_WORKING_DIR", dir.path())
            .env("PHOENIX_HOST", "127.0.0.1")
            .env("PHOENIX_PORT", port.to_string())
            .env("PHOENIX_GRPC_PORT", grpc.to_string())
            .env("PHOENIX_TELEMETRY_ENABLED", "false")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("phoenix serve (pip install -r tests/requirements.txt)");
        let phoenix = Phoenix {
            child,
            port,
            _dir: dir,
        };
        let up = wait_for(Duration::from_secs(120), || phoenix.spans().map(|_| ()));
        assert!(up.is_some(), "phoenix did not start");
        phoenix
    }

    /// The spans of the default project, as Phoenix answers them.
    fn spans(&self) -> Option<Vec<Value>> {
        let out = Command::new("curl")
            .args(["-sf", "--max-time", "5"])
            .arg(format!(
                "http://127.0.0.1:{}/v1/projects/default/spans?limit=1000",
                self.port
            ))
            .output()
            .ok()?;
        let body: Value = serde_json::from_slice(&out.stdout).ok()?;
        body["data"].as_array().cloned()
    }
}

impl Drop for Phoenix {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const CONFIG: &str = r#"
tool_search:
  enabled: true
tools:
  - name: read_file
    group: file:read
    use: deerflow.sandbox.tools:read_file_tool
  - name: write_file
    group: file:write
    use: deerflow.sandbox.tools:write_file_tool
sandbox:
  use: deerflow.community.aio_sandbox:AioSandboxProvider
antler:
  worker_slots: 2
  telemetry:
    otlp_endpoint: http://127.0.0.1:PORT
"#;

const PLAYBOOK: &str = r##"
turns:
  - tool_calls:
      - {id: t-search, name: tool_search, args: {query: "select:everything_echo"}}
    usage: {input_tokens: 10, output_tokens: 2, total_tokens: 12}
  - tool_calls:
      - {id: t-write, name: write_file, args: {description: note, path: /mnt/user-data/workspace/a.md, content: "a\n"}}
      - {id: t-echo, name: everything_echo, args: {message: traced}}
  - tool_calls:
      - {id: t-task, name: task, args: {description: read it, prompt: "Read the note", subagent_type: general-purpose}}
  - content: Done.
subagents:
  read it:
    turns:
      - tool_calls:
          - name: read_file
            args: {description: check, path: /mnt/user-data/workspace/a.md}
      - content: "Read it."
"##;

fn attr<'a>(span: &'a Value, key: &str) -> &'a Value {
    &span["attributes"][key]
}

#[test]
fn runs_are_traced_across_the_lead_and_its_hosts_and_flushed_at_exit() {
    let phoenix = Phoenix::start();
    one_run_is_one_trace_across_the_lead_and_its_hosts(&phoenix);
    a_short_run_delivers_its_last_spans_at_exit(&phoenix);
    an_interrupted_run_delivers_its_spans(&phoenix);
}

/// The spans of `run_id`'s trace, once `ready` holds for them (every process exports
/// on its own schedule).
fn trace_of_run(
    phoenix: &Phoenix,
    run_id: &str,
    ready: impl Fn(&[Value]) -> bool,
) -> Option<Vec<Value>> {
    wait_for(Duration::from_secs(60), || {
        let spans = phoenix.spans()?;
        let run_span = spans.iter().find(|s| {
            s["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("invoke_agent"))
                && attr(s, "antler.run_id") == run_id
        })?;
        let trace_id = &run_span["context"]["trace_id"];
        let in_trace: Vec<Value> = spans
            .iter()
            .filter(|s| s["context"]["trace_id"] == *trace_id)
            .cloned()
            .collect();
        ready(&in_trace).then_some(in_trace)
    })
}

/// A config.yaml for a short run against the recording model server at `base_url`,
/// exporting to `port`.
fn short_run_config(base_url: &str, port: u16) -> String {
    format!(
        r#"
models:
  - name: gpt
    use: langchain_openai:ChatOpenAI
    model: gpt-4o-mini
    base_url: {base_url}
tools:
  - name: write_file
    group: file:write
    use: deerflow.sandbox.tools:write_file_tool
tool_search:
  enabled: false
sandbox:
  use: deerflow.community.aio_sandbox:AioSandboxProvider
antler:
  workers: 1
  telemetry:
    otlp_endpoint: http://127.0.0.1:{port}
"#
    )
}

/// A short `antler run` (its own ephemeral cluster) whose processes export only once a
/// minute: the spans that end last (the run's `invoke_agent`, sandbox-host's) reach the
/// collector only because each process flushes as it exits. Its model span names the
/// vendor under both attribute names.
fn a_short_run_delivers_its_last_spans_at_exit(phoenix: &Phoenix) {
    let server = recording_server(vec![
        Reply::call(
            "write_file",
            json!({"description": "note", "path": "/mnt/user-data/workspace/b.md", "content": "b\n"}),
        )
        .with_usage(7, 3, 10),
        Reply::text("Done.").with_usage(9, 1, 10),
    ]);
    let dir = run_dir(
        "antler-otel",
        &short_run_config(&server.base_url, phoenix.port),
        NO_MCP_SERVERS,
    );
    let d = dir.path();
    let out = Command::new(antler_tests::bin("antler"))
        .arg("--runtime-dir")
        .arg(d.join("run"))
        .args(["run", "Write the note.", "--json", "--config"])
        .arg(d.join("config.yaml"))
        .current_dir(d)
        .env("ANTLER_SANDBOX_BASE_DIR", d.join("base"))
        .env(
            "ANTLER_EXTENSIONS_CONFIG_PATH",
            d.join("extensions_config.json"),
        )
        .env("ANTLER_GATEWAY_ADDR", "off")
        .env("RUST_LOG", "error")
        // A minute between batches: only the flush at exit can deliver in time.
        .env("OTEL_BSP_SCHEDULE_DELAY", "60000")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let view: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(view["status"], "success", "{view:#}");
    let run_id = view["run_id"].as_str().unwrap();
    // Every process of the run has exited: what is in the collector was flushed.
    let in_trace = trace_of_run(phoenix, run_id, |spans| {
        spans.iter().any(|s| {
            s["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("sandbox "))
        }) && spans.iter().any(|s| s["name"] == "execute_tool write_file")
    });
    let in_trace = in_trace.unwrap_or_else(|| panic!("spans missing: {:#?}", phoenix.spans()));
    let chats: Vec<&Value> = in_trace
        .iter()
        .filter(|s| s["name"].as_str().is_some_and(|n| n.starts_with("chat ")))
        .collect();
    assert!(!chats.is_empty(), "{in_trace:#?}");
    for chat in chats {
        assert_eq!(attr(chat, "gen_ai.provider.name"), "openai", "{chat:#}");
        assert_eq!(attr(chat, "gen_ai.system"), "openai", "{chat:#}");
        assert_eq!(attr(chat, "gen_ai.request.model"), "gpt", "{chat:#}");
    }
}

/// A playbook that writes a note, then thinks for two minutes (the run is interrupted
/// there).
const SLOW_PLAYBOOK: &str = r##"
turns:
  - tool_calls:
      - {id: t-write, name: write_file, args: {description: note, path: /mnt/user-data/workspace/c.md, content: "c\n"}}
  - delay_ms: 120000
    content: Too late.
"##;

/// `antler run` (its own ephemeral cluster) on a slow playbook, its exporters waiting a
/// minute between batches, stopped with SIGINT once the note is written: it exits 130
/// saying so, and the spans recorded so far (the run's own, ended at the interruption, its
/// model call, its tool call and sandbox-host's request) reach the collector, exported by
/// the lead and by sandbox-host as the ephemeral cluster stops.
fn an_interrupted_run_delivers_its_spans(phoenix: &Phoenix) {
    use std::io::{BufRead, BufReader};
    let config = short_run_config("http://127.0.0.1:9/v1", phoenix.port);
    let dir = run_dir("antler-otel-int", &config, NO_MCP_SERVERS);
    let d = dir.path();
    std::fs::write(d.join("slow.yaml"), SLOW_PLAYBOOK).unwrap();
    let mut child = Command::new(antler_tests::bin("antler"))
        .arg("--runtime-dir")
        .arg(d.join("run"))
        .args(["run", "Write the note, slowly.", "--trace", "--playbook"])
        .arg(d.join("slow.yaml"))
        .arg("--config")
        .arg(d.join("config.yaml"))
        .current_dir(d)
        .env("ANTLER_SANDBOX_BASE_DIR", d.join("base"))
        .env(
            "ANTLER_EXTENSIONS_CONFIG_PATH",
            d.join("extensions_config.json"),
        )
        .env("ANTLER_GATEWAY_ADDR", "off")
        .env("RUST_LOG", "error")
        // A minute between batches: only the flush on the way out can deliver in time.
        .env("OTEL_BSP_SCHEDULE_DELAY", "60000")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let stderr = child.stderr.take().unwrap();
    let (lines_tx, lines_rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    // The note is written (its tool call finished): the run now waits on its model.
    let mut seen = Vec::new();
    let run_id = loop {
        let line = lines_rx
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|e| panic!("{e}: the note was not written: {seen:#?}"));
        let traced: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        seen.push(line);
        let event = &traced["event"];
        if event["event"] == "tool_finished" && event["name"] == "write_file" {
            assert_eq!(event["error"], false, "{seen:#?}");
            break traced["run_id"].as_str().unwrap().to_owned();
        }
    };
    antler_tests::signal(pid, libc::SIGINT);
    let status = wait_for(Duration::from_secs(60), || child.try_wait().ok().flatten())
        .unwrap_or_else(|| {
            let _ = child.kill();
            let _ = child.wait();
            panic!("antler run did not stop after SIGINT")
        });
    reader.join().unwrap();
    let said: Vec<String> = lines_rx.try_iter().collect();
    assert_eq!(status.code(), Some(130), "{said:#?}");
    assert!(
        said.iter()
            .any(|l| l.contains("interrupted")
                && l.contains(&format!("antler run --resume {run_id}"))),
        "{said:#?}"
    );
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
    assert!(!stdout.contains("Too late."), "{stdout}");
    // The process is gone: what is in the collector was flushed on the way out.
    let in_trace = trace_of_run(phoenix, &run_id, |spans| {
        let named = |p: &str| {
            spans
                .iter()
                .any(|s| s["name"].as_str().is_some_and(|n| n.starts_with(p)))
        };
        named("chat ") && named("execute_tool write_file") && named("sandbox ")
    });
    let in_trace = in_trace.unwrap_or_else(|| panic!("spans missing: {:#?}", phoenix.spans()));
    let names: Vec<&str> = in_trace.iter().filter_map(|s| s["name"].as_str()).collect();
    assert!(names.contains(&"invoke_agent antler"), "{names:?}");
}

/// One run through a cluster with a subagent worker: one trace across every process.
fn one_run_is_one_trace_across_the_lead_and_its_hosts(phoenix: &Phoenix) {
    let cluster = SubagentCluster::up(&CONFIG.replace("PORT", &phoenix.port.to_string()), 1);
    let run = cluster.run(PLAYBOOK, &[]);
    assert_eq!(
        run.view["status"], "success",
        "{:#}\n{}",
        run.view, run.stderr
    );
    let run_id = run.run_id();

    // Every process exports on its own schedule: wait until the worker's spans are in.
    let spans = wait_for(Duration::from_secs(60), || {
        let spans = phoenix.spans()?;
        let names: Vec<&str> = spans.iter().filter_map(|s| s["name"].as_str()).collect();
        (names.contains(&"invoke_agent antler")
            && names
                .iter()
                .filter(|n| n.starts_with("invoke_agent"))
                .count()
                >= 2
            && names.iter().any(|n| n.starts_with("sandbox "))
            && names.iter().any(|n| n.starts_with("mcp "))
            && names.iter().any(|n| n.starts_with("worker ")))
        .then_some(spans)
    });
    let spans = spans.unwrap_or_else(|| panic!("spans missing: {:#?}", phoenix.spans()));
    let run_span = spans
        .iter()
        .find(|s| s["name"] == "invoke_agent antler" && attr(s, "antler.run_id") == run_id.as_str())
        .expect("the run's span");
    let trace_id = run_span["context"]["trace_id"].clone();
    let in_trace: Vec<&Value> = spans
        .iter()
        .filter(|s| s["context"]["trace_id"] == trace_id)
        .collect();
    let by_id = |id: &Value| in_trace.iter().find(|s| s["context"]["span_id"] == *id);
    let parent_name = |s: &Value| -> String {
        by_id(&s["parent_id"])
            .and_then(|p| p["name"].as_str())
            .unwrap_or("")
            .to_owned()
    };
    let names: Vec<String> = in_trace
        .iter()
        .map(|s| s["name"].as_str().unwrap_or("").to_owned())
        .collect();
    for host in ["sandbox ", "mcp ", "worker "] {
        assert!(
            names.iter().any(|n| n.starts_with(host)),
            "{host} in {names:?}"
        );
    }
    // The sandbox's and the MCP host's spans hang under the lead's tool-call spans.
    let write = in_trace.iter().any(|s| {
        s["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("sandbox "))
            && parent_name(s) == "execute_tool write_file"
    });
    assert!(write, "{names:?}");
    let mcp = in_trace.iter().any(|s| {
        s["name"].as_str().is_some_and(|n| n.starts_with("mcp "))
            && parent_name(s) == "execute_tool everything_echo"
    });
    assert!(mcp, "{names:?}");
    // The subagent's run and its turns are in the same trace, under the worker's span.
    let sub_run = in_trace
        .iter()
        .find(|s| {
            s["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("invoke_agent"))
                && s["context"]["span_id"] != run_span["context"]["span_id"]
        })
        .expect("the subagent's run span");
    assert!(parent_name(sub_run).starts_with("worker "), "{sub_run:#}");
    // The model spans: the conventions' attributes (a playbook has no vendor: Antler
    // answers).
    let chat = in_trace
        .iter()
        .find(|s| {
            s["name"].as_str().is_some_and(|n| n.starts_with("chat "))
                && attr(s, "gen_ai.usage.input_tokens") == 10
        })
        .expect("the first model call's span");
    assert_eq!(attr(chat, "gen_ai.operation.name"), "chat");
    assert_eq!(attr(chat, "gen_ai.provider.name"), "antler");
    assert_eq!(attr(chat, "gen_ai.system"), "antler");
    assert!(attr(chat, "gen_ai.request.model").is_string(), "{chat:#}");
    assert!(attr(chat, "gen_ai.response.model").is_string(), "{chat:#}");
    assert_eq!(attr(chat, "gen_ai.usage.output_tokens"), 2);
    assert_eq!(
        attr(chat, "gen_ai.response.finish_reasons"),
        &serde_json::json!(["tool_calls"])
    );
}
