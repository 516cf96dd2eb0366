//! Shared plumbing of the MCP suites: where the npm and pip peers are (installed by
//! `.ci/run` with `npm ci` in `tests/` and `pip install -r tests/requirements.txt`), a local
//! cluster whose mcp-host reads a given extensions config, and the `antler mcp` commands.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod serve;
pub mod standin;

use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    time::Duration,
};

use antler_tests::{antler, wait_for, Cluster};
use serde_json::Value;

/// The `tests/` directory.
pub fn tests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// An npm peer's executable under `tests/node_modules/.bin`.
pub fn npm_bin(name: &str) -> PathBuf {
    let p = tests_dir().join("node_modules/.bin").join(name);
    assert!(
        p.exists(),
        "{} is missing: install the npm test peers with `cd tests && npm ci` (.ci/run does this)",
        p.display()
    );
    p
}

/// `python3`, checked to have the `mcp` SDK.
pub fn python() -> String {
    let ok = Command::new("python3")
        .args(["-c", "import mcp.server.mcpserver"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(
        ok,
        "python3 with the `mcp` SDK is missing: `pip install -r tests/requirements.txt` (.ci/run does this)"
    );
    "python3".into()
}

/// A pip peer's executable on PATH.
pub fn pip_bin(name: &str) -> String {
    let found = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|d| d.join(name).is_file()))
        .unwrap_or(false);
    assert!(
        found,
        "`{name}` is not on PATH: `pip install -r tests/requirements.txt` (.ci/run does this)"
    );
    name.into()
}

/// A peer script under `tests/peers`.
pub fn peer_script(name: &str) -> String {
    tests_dir().join("peers").join(name).display().to_string()
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// Waits until something accepts connections on 127.0.0.1:port.
pub fn wait_port(port: u16, within: Duration) {
    let up = wait_for(within, || {
        std::net::TcpStream::connect(("127.0.0.1", port))
            .ok()
            .map(|_| ())
    });
    assert!(up.is_some(), "nothing listens on 127.0.0.1:{port}");
}

/// A peer process killed (with its group) when dropped.
pub struct Peer(pub Child);

impl Drop for Peer {
    fn drop(&mut self) {
        antler_tests::signal(self.0.id(), libc::SIGKILL);
        let _ = self.0.wait();
    }
}

/// Starts a peer with no stdio and waits until it listens on each of `ports`.
pub fn spawn_peer(cmd: &mut Command, what: &str, ports: &[u16]) -> Peer {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {what}: {e}"));
    let peer = Peer(child);
    for port in ports {
        wait_port(*port, Duration::from_secs(20));
    }
    peer
}

/// The npm `@modelcontextprotocol/sdk` example server with `--oauth` (its own
/// authorization server beside it): (peer, MCP port).
pub fn oauth_example_server() -> (Peer, u16) {
    let _ = npm_bin("oauth2-mock-server"); // the npm peers are installed
    let (mcp, auth) = (free_port(), free_port());
    let script = tests_dir().join(
        "node_modules/@modelcontextprotocol/sdk/dist/esm/examples/server/simpleStreamableHttp.js",
    );
    assert!(
        script.exists(),
        "{} is missing: `cd tests && npm ci`",
        script.display()
    );
    let peer = spawn_peer(
        Command::new("node")
            .arg(script)
            .arg("--oauth")
            .env("MCP_PORT", mcp.to_string())
            .env("MCP_AUTH_PORT", auth.to_string()),
        "the sdk's example server",
        &[mcp, auth],
    );
    (peer, mcp)
}

/// What a headless browser notes of each URL it is handed, in a file beside it.
pub enum BrowserLog {
    /// Nothing.
    None,
    /// The URL it was given, in `opened.txt`.
    Opened,
    /// The URL it ended on after the redirects (the callback, with the code), in
    /// `landed.txt`.
    Landed,
}

/// A headless `$BROWSER` in `dir`: curl following the authorization URL's redirects to
/// the callback. Returns its path.
pub fn headless_browser(dir: &Path, log: BrowserLog) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("browser.sh");
    let script = match log {
        BrowserLog::None => "#!/bin/sh\nexec curl -sS -L --max-time 20 -o /dev/null \"$1\"\n".to_owned(),
        BrowserLog::Opened => format!(
            "#!/bin/sh\necho \"$1\" >> '{}'\nexec curl -sS -L --max-time 20 -o /dev/null \"$1\"\n",
            dir.join("opened.txt").display()
        ),
        BrowserLog::Landed => format!(
            "#!/bin/sh\ncurl -sS -L --max-time 20 -o /dev/null -w '%{{url_effective}}\\n' \"$1\" >> '{}'\n",
            dir.join("landed.txt").display()
        ),
    };
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

/// server-everything in an HTTP mode (`streamableHttp` or `sse`) on a free port.
pub fn everything_http(mode: &str) -> (Peer, u16) {
    let port = free_port();
    let child = Command::new(npm_bin("mcp-server-everything"))
        .arg(mode)
        .env("PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start mcp-server-everything");
    let peer = Peer(child);
    wait_port(port, Duration::from_secs(20));
    (peer, port)
}

/// A stdio server entry for the extensions config.
pub fn stdio(command: impl Into<String>, args: &[&str]) -> Value {
    serde_json::json!({"type": "stdio", "command": command.into(), "args": args})
}

/// A local cluster (no subagent workers) whose mcp-host reads `servers` as `mcpServers`.
pub struct McpCluster {
    pub cluster: Cluster,
    pub config: PathBuf,
    _dir: tempfile::TempDir,
}

impl McpCluster {
    pub fn start(servers: Value) -> McpCluster {
        Self::start_with(servers, &[])
    }

    /// Starts the cluster and waits (up to 30 s) until no server is still starting, so a
    /// listing right after sees every server that can start.
    pub fn start_with(servers: Value, env: &[(&str, &str)]) -> McpCluster {
        let c = Self::start_unsettled(servers, env);
        let settled = wait_for(Duration::from_secs(30), || {
            (!c.status().iter().any(|s| s["state"] == "starting")).then_some(())
        });
        assert!(
            settled.is_some(),
            "servers still starting: {:?}",
            c.status()
        );
        c
    }

    /// Starts the cluster without waiting for its servers (one of them may hang).
    pub fn start_unsettled(servers: Value, env: &[(&str, &str)]) -> McpCluster {
        let dir = tempfile::Builder::new()
            .prefix("antler-mcp")
            .tempdir_in("/tmp")
            .expect("tempdir");
        let config = dir.path().join("extensions_config.json");
        std::fs::write(
            &config,
            serde_json::to_vec_pretty(&serde_json::json!({"mcpServers": servers})).expect("json"),
        )
        .expect("write config");
        let config_s = config.display().to_string();
        let mut all = vec![
            ("ANTLER_EXTENSIONS_CONFIG_PATH", config_s.as_str()),
            ("ANTLER_GATEWAY_ADDR", "127.0.0.1:0"),
        ];
        all.extend_from_slice(env);
        let cluster = Cluster::up_with(0, &all);
        let ok = wait_for(Duration::from_secs(30), || {
            let st = cluster.status()?;
            (st.len() == 3 && st.iter().all(|p| p["healthy"] == true)).then_some(())
        });
        assert!(
            ok.is_some(),
            "cluster did not become healthy: {:?}",
            cluster.status()
        );
        McpCluster {
            cluster,
            config,
            _dir: dir,
        }
    }

    pub fn runtime_dir(&self) -> PathBuf {
        self.cluster.runtime_dir()
    }

    /// `antler mcp ARGS...`
    pub fn mcp(&self, args: &[&str]) -> Output {
        let mut all = vec!["mcp"];
        all.extend_from_slice(args);
        antler(&self.runtime_dir(), &all)
    }

    /// `antler mcp tools [SERVER] --json`.
    pub fn tools(&self, server: Option<&str>) -> Vec<Value> {
        let mut args = vec!["tools", "--json"];
        args.extend(server);
        let out = self.mcp(&args);
        assert!(
            out.status.success(),
            "mcp tools failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout)
            .expect("tools json")
            .as_array()
            .cloned()
            .expect("array")
    }

    /// The tool names of one server.
    pub fn tool_names(&self, server: &str) -> Vec<String> {
        self.tools(Some(server))
            .iter()
            .map(|t| t["name"].as_str().unwrap_or("").to_owned())
            .collect()
    }

    /// `antler mcp status --json`.
    pub fn status(&self) -> Vec<Value> {
        let out = self.mcp(&["status", "--json"]);
        assert!(
            out.status.success(),
            "mcp status failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout)
            .expect("status json")
            .as_array()
            .cloned()
            .expect("array")
    }

    /// One server's status entry.
    pub fn server(&self, name: &str) -> Value {
        self.status()
            .into_iter()
            .find(|s| s["name"] == name)
            .unwrap_or(Value::Null)
    }

    /// `antler mcp call SERVER TOOL --args ARGS --json`: (exit code, result JSON).
    pub fn call(&self, server: &str, tool: &str, args: &str) -> (i32, Value) {
        let out = self.mcp(&["call", server, tool, "--args", args, "--json"]);
        let code = out.status.code().unwrap_or(-1);
        let v = serde_json::from_slice::<Value>(&out.stdout).unwrap_or_else(|_| {
            panic!(
                "call output is not JSON (exit {code}): {} / {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (code, v)
    }

    /// The text blocks of a call result, joined.
    pub fn text(result: &Value) -> String {
        result["content"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|c| c["text"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default()
    }

    /// The gateway's address.
    pub fn gateway(&self) -> String {
        let f = self.runtime_dir().join("gateway.addr");
        wait_for(Duration::from_secs(5), || std::fs::read_to_string(&f).ok()).expect("gateway.addr")
    }

    /// The pids of the processes whose command line contains `needle`, children of mcp-host.
    pub fn server_pids(&self, needle: &str) -> Vec<u32> {
        let host = self
            .cluster
            .process("mcp-host", 0)
            .and_then(|p| p["pid"].as_u64())
            .expect("mcp-host pid") as u32;
        descendants(host)
            .into_iter()
            .filter(|pid| cmdline(*pid).contains(needle))
            .collect()
    }
}

/// A process's command line, spaces between arguments.
pub fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// Every descendant of `pid`.
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut frontier = vec![pid];
    while let Some(p) = frontier.pop() {
        let Ok(rd) = std::fs::read_dir("/proc") else {
            break;
        };
        for e in rd.flatten() {
            let Ok(child) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let ppid = std::fs::read_to_string(format!("/proc/{child}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')
                        .map(|(_, r)| r.split_whitespace().nth(1).unwrap_or("").to_owned())
                })
                .and_then(|s| s.parse::<u32>().ok());
            if ppid == Some(p) {
                out.push(child);
                frontier.push(child);
            }
        }
    }
    out
}

pub fn write_config(path: &Path, servers: &Value) {
    let text =
        serde_json::to_vec_pretty(&serde_json::json!({"mcpServers": servers})).expect("json");
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

/// `antler config check` of an extensions file holding `servers`: asserts it is refused
/// (exit 1) and returns what it said (stdout and stderr).
pub fn config_check_refused(servers: &Value) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("extensions_config.json");
    write_config(&file, servers);
    let out = antler_tests::antler(
        dir.path(),
        &["config", "check", file.to_str().expect("utf-8 path")],
    );
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{said}");
    said
}

/// What `antler run --trace --json` printed: its exit code, the run's view, its events.
pub struct RunOutput {
    pub code: i32,
    pub view: Value,
    pub events: Vec<Value>,
    pub stderr: String,
}

impl RunOutput {
    /// The events named `name` (`warning`, `tool_finished`, ...).
    pub fn events_named(&self, name: &str) -> Vec<&Value> {
        self.events.iter().filter(|e| e["event"] == name).collect()
    }

    /// The messages of the run's warning events.
    pub fn warnings(&self) -> Vec<String> {
        self.events_named("warning")
            .iter()
            .filter_map(|e| e["message"].as_str().map(str::to_owned))
            .collect()
    }

    /// Whether the run called `tool` and it did not fail.
    pub fn called_ok(&self, tool: &str) -> bool {
        self.events_named("tool_finished")
            .iter()
            .any(|e| e["name"] == tool && e["error"] == false)
    }
}

impl McpCluster {
    /// `antler run TASK --playbook FILE --trace --json` against this cluster, with the
    /// playbook's text written to a file first.
    pub fn run_playbook(&self, playbook: &str) -> RunOutput {
        let file = self.dir().join(format!("playbook-{}.yaml", free_port()));
        std::fs::write(&file, playbook).expect("write the playbook");
        let out = antler(
            &self.runtime_dir(),
            &[
                "run",
                "Use the MCP tools",
                "--playbook",
                file.to_str().expect("utf8"),
                "--trace",
                "--json",
            ],
        );
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let view = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
        let events = stderr
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|l| l.get("event").cloned())
            .collect();
        RunOutput {
            code: out.status.code().unwrap_or(-1),
            view,
            events,
            stderr,
        }
    }

    /// The directory holding the extensions file (and the tests' scratch files).
    pub fn dir(&self) -> PathBuf {
        self._dir.path().to_path_buf()
    }
}
