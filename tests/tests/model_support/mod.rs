//! `recording_server`: the suites' own stand-in for an OpenAI-compatible endpoint. It
//! records every request body and answers each with the next scripted reply (the last one
//! again when they run out), streamed like OpenAI's: content, then a finish reason, then
//! the usage chunk `stream_options.include_usage` asks for.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod peers;
pub mod standin;

use std::io::Write;

use standin::{standin, Serve};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

/// One scripted reply.
#[derive(Clone)]
pub struct Reply {
    pub content: String,
    pub tool_calls: Vec<(String, Value)>,
    pub finish_reason: String,
    /// (prompt, completion, total) tokens reported.
    pub usage: Option<(u64, u64, u64)>,
}

impl Reply {
    pub fn text(content: &str) -> Reply {
        Reply {
            content: content.to_owned(),
            tool_calls: Vec::new(),
            finish_reason: "stop".to_owned(),
            usage: None,
        }
    }

    pub fn call(name: &str, args: Value) -> Reply {
        Reply {
            content: String::new(),
            tool_calls: vec![(name.to_owned(), args)],
            finish_reason: "tool_calls".to_owned(),
            usage: None,
        }
    }

    pub fn with_usage(mut self, prompt: u64, completion: u64, total: u64) -> Reply {
        self.usage = Some((prompt, completion, total));
        self
    }

    pub fn finished(mut self, reason: &str) -> Reply {
        self.finish_reason = reason.to_owned();
        self
    }

    fn sse(&self, n: usize) -> String {
        let mut delta = json!({"role": "assistant", "content": self.content});
        if !self.tool_calls.is_empty() {
            let calls: Vec<Value> = self
                .tool_calls
                .iter()
                .enumerate()
                .map(|(i, (name, args))| {
                    json!({"index": i, "id": format!("call_{n}_{i}"), "type": "function",
                           "function": {"name": name, "arguments": args.to_string()}})
                })
                .collect();
            delta["tool_calls"] = Value::Array(calls);
        }
        let chunk = |choices: Value| json!({"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": choices});
        let mut out = format!(
            "data: {}\n\ndata: {}\n\n",
            chunk(json!([{"index": 0, "delta": delta, "finish_reason": null}])),
            chunk(json!([{"index": 0, "delta": {}, "finish_reason": self.finish_reason}]))
        );
        if let Some((p, c, t)) = self.usage {
            let mut usage = chunk(json!([]));
            usage["usage"] = json!({"prompt_tokens": p, "completion_tokens": c, "total_tokens": t});
            out.push_str(&format!("data: {usage}\n\n"));
        }
        out.push_str("data: [DONE]\n\n");
        out
    }
}

/// The running stand-in.
pub struct RecordingServer {
    pub base_url: String,
    pub requests: Arc<Mutex<Vec<Value>>>,
}

/// DeerFlow's opening of the memory update's system text (a long-lived lead asks it after
/// runs; `memory_users` tests it).
pub const MEMORY_UPDATE_OPENING: &str = "You are a memory management system. Your task is to analyze a conversation and update the user's memory profile.";

/// Whether `request` is a memory update call (not a run's turn).
pub fn is_memory_update(request: &Value) -> bool {
    request["messages"][0]["content"]
        .as_str()
        .is_some_and(|s| s.starts_with(MEMORY_UPDATE_OPENING))
}

/// Starts the stand-in on a free loopback port; it lives as long as the test process. A
/// memory update call (a long-lived lead makes one after a user's runs) is answered with
/// an update that changes nothing, and neither recorded nor given a scripted reply, so
/// the runs' requests and replies keep their order.
pub fn recording_server(replies: Vec<Reply>) -> RecordingServer {
    serve(
        move |request, index| {
            if is_memory_update(request) {
                return Reply::text(r#"{"user": {}, "history": {}, "newFacts": []}"#);
            }
            replies
                .get(index)
                .or(replies.last())
                .cloned()
                .unwrap_or_else(|| Reply::text("Done."))
        },
        false,
    )
}

/// [`recording_server`] whose reply to each request `respond` chooses from the request's
/// body and its index (0 for the first request).
pub fn recording_server_by(
    respond: impl Fn(&Value, usize) -> Reply + Send + Sync + 'static,
) -> RecordingServer {
    serve(respond, true)
}

/// The stand-in; memory update calls are recorded (and counted) only with `updates`.
fn serve(
    respond: impl Fn(&Value, usize) -> Reply + Send + Sync + 'static,
    updates: bool,
) -> RecordingServer {
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = requests.clone();
    let base = standin(Serve::InOrder, move |request, stream| {
        let n = request.n;
        let request = request.json();
        let index = {
            let mut seen = seen.lock().unwrap();
            if !request.is_null() && (updates || !is_memory_update(&request)) {
                seen.push(request.clone());
            }
            seen.len().saturating_sub(1)
        };
        let reply = respond(&request, index);
        standin::respond(stream, "200 OK", "text/event-stream", &reply.sse(n));
    });
    RecordingServer {
        base_url: format!("{base}/v1"),
        requests,
    }
}

/// A recording proxy in front of a real OpenAI-compatible server (`upstream`,
/// `host:port`): each request body is recorded, then the request is passed on and the
/// reply streamed back as it comes.
pub fn recording_proxy(upstream: &str) -> RecordingServer {
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = requests.clone();
    let upstream = upstream.to_owned();
    let base = standin(Serve::Concurrently, move |request, client| {
        let value = request.json();
        if !value.is_null() {
            seen.lock().unwrap().push(value);
        }
        let Ok(mut up) = std::net::TcpStream::connect(&upstream) else {
            return;
        };
        let _ = up.write_all(request.request_line.as_bytes());
        for line in &request.headers {
            if !line.to_ascii_lowercase().starts_with("connection:") {
                let _ = up.write_all(line.as_bytes());
            }
        }
        let _ = up.write_all(b"Connection: close\r\n\r\n");
        let _ = up.write_all(&request.body);
        let _ = std::io::copy(&mut up, client);
    });
    RecordingServer {
        base_url: format!("{base}/v1"),
        requests,
    }
}

/// An `extensions_config.json` with no MCP server.
pub const NO_MCP_SERVERS: &str = r#"{"mcpServers": {}}"#;

/// A directory for [`antler_run`] under /tmp (0755, so a sandbox's user reaches its
/// threads) holding `config` as config.yaml and `extensions` as extensions_config.json.
pub fn run_dir(prefix: &str, config: &str, extensions: &str) -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/tmp")
        .unwrap();
    let d = dir.path();
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(d.join("config.yaml"), config).unwrap();
    std::fs::write(d.join("extensions_config.json"), extensions).unwrap();
    dir
}

/// `antler run ARGS --json --config DIR/config.yaml` in `dir`: runtime directory `dir/run`,
/// data root `dir/base`, extensions `dir/extensions_config.json` (absent: none), no
/// gateway. The run's view (it must be JSON) and the command's stderr.
pub fn antler_run(dir: &std::path::Path, args: &[&str]) -> (Value, String) {
    let out = antler_in(dir, "run", args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let view = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\n{stderr}"));
    (view, stderr)
}

/// `antler COMMAND ARGS --json` in the [`run_dir`] `dir` (its config, its runtime and base
/// directories, no gateway), to its end.
pub fn antler_in(dir: &std::path::Path, command: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(antler_tests::bin("antler"))
        .arg("--runtime-dir")
        .arg(dir.join("run"))
        .arg(command)
        .args(args)
        .args(["--json", "--config"])
        .arg(dir.join("config.yaml"))
        .current_dir(dir)
        .env("ANTLER_SANDBOX_BASE_DIR", dir.join("base"))
        .env(
            "ANTLER_EXTENSIONS_CONFIG_PATH",
            dir.join("extensions_config.json"),
        )
        .env("ANTLER_GATEWAY_ADDR", "off")
        .env("RUST_LOG", "error")
        .output()
        .unwrap()
}

/// `playbook` written to `dir/playbook.yaml` and run with [`antler_run`] on `task`: the
/// run's view and the tool messages of its last checkpoint.
pub fn run_playbook(dir: &std::path::Path, task: &str, playbook: &str) -> (Value, Vec<Value>) {
    let path = dir.join("playbook.yaml");
    std::fs::write(&path, playbook).unwrap();
    let (view, _) = antler_run(dir, &[task, "--playbook", &path.display().to_string()]);
    let tools = tool_messages(
        &dir.join("run/runs.sqlite"),
        view["run_id"].as_str().unwrap(),
    );
    (view, tools)
}

/// The tool messages of the last checkpoint of `run_id` in the runs database `store`.
pub fn tool_messages(store: &std::path::Path, run_id: &str) -> Vec<Value> {
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import sqlite3,sys,json;c=sqlite3.connect(sys.argv[1]);\
             s=json.loads(c.execute('select state from checkpoints where run_id=? order by step desc limit 1',(sys.argv[2],)).fetchone()[0]);\
             print(json.dumps([m for m in s['messages'] if m['role']=='tool']))",
        )
        .arg(store)
        .arg(run_id)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
}

/// A stand-in for a server that has no route at the URL Antler posts to (a base URL
/// without `/v1` on llama.cpp, say): every request is answered `404 Not Found` with that
/// text as its body. Its `http://127.0.0.1:PORT` (no path) and the requests' paths.
pub fn not_found_server() -> (String, Arc<Mutex<Vec<String>>>) {
    let paths = Arc::new(Mutex::new(Vec::new()));
    let seen = paths.clone();
    let base_url = standin(Serve::InOrder, move |request, stream| {
        seen.lock().unwrap().push(request.path);
        standin::respond(stream, "404 Not Found", "text/plain", "Not Found");
    });
    (base_url, paths)
}

/// A PNG for the providers' vision tests: its signature, then bytes whose base64 holds
/// `+` and `/` (so a URL-safe encoding would not pass for the standard one).
pub const VIEWED_PNG: &[u8] = &[
    0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0xFB, 0xEF, 0xFF, 0xFE,
];
/// [`VIEWED_PNG`] in standard base64, as the providers' APIs take images.
pub const VIEWED_PNG_BASE64: &str = "iVBORw0KGgr77//+";
/// Where [`put_viewed_png`] puts it, as the model names it to `view_image`.
pub const VIEWED_PNG_PATH: &str = "/mnt/user-data/outputs/chart.png";

/// Writes [`VIEWED_PNG`] into the outputs of thread `t1` of user `default` under the
/// [`antler_run`] directory `dir` (run with `--thread t1`), at [`VIEWED_PNG_PATH`].
pub fn put_viewed_png(dir: &std::path::Path) {
    let outputs = dir.join("base/users/default/threads/t1/user-data/outputs");
    std::fs::create_dir_all(&outputs).unwrap();
    std::fs::write(outputs.join("chart.png"), VIEWED_PNG).unwrap();
}

/// The events named `kind` of a `--trace` run's stderr.
pub fn trace_events(stderr: &str, kind: &str) -> Vec<Value> {
    stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|l| l["event"].clone())
        .filter(|e| e["event"] == kind)
        .collect()
}
