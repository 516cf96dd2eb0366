//! Shared plumbing for Antler's cross-process suites: finding the built binaries, starting
//! a local cluster with `antler up` in a private runtime directory, reading `antler status
//! --json`, and checking processes. Every suite drives the real binaries.

// Test support: a failure to set up is a test failure, so panicking is the right report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod chaos;

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

/// The directory holding the workspace's binaries (`target/debug`).
pub fn bin_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("ANTLER_BIN_DIR") {
        // A relative directory is the workspace's (cargo runs tests and benches in the
        // package's directory).
        return Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(d);
    }
    let exe = std::env::current_exe().expect("test executable path");
    // target/debug/deps/<test> -> target/debug
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target directory")
        .to_path_buf();
    for b in [
        "antler",
        "antler-mcp-host",
        "antler-sandbox-host",
        "antler-subagent",
    ] {
        assert!(
            dir.join(b).exists(),
            "{} is missing: run the tests with `cargo test --workspace`, which builds every binary",
            dir.join(b).display()
        );
    }
    dir
}

/// The path of one binary.
pub fn bin(name: &str) -> PathBuf {
    bin_dir().join(name)
}

/// A command's exit code, stdout and stderr, for an assertion's message.
pub fn output_text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `antler` with the runtime directory and arguments; returns its output.
pub fn antler(runtime_dir: &Path, args: &[&str]) -> Output {
    Command::new(bin("antler"))
        .arg("--runtime-dir")
        .arg(runtime_dir)
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run antler")
}

/// Whether a process exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // The state follows the parenthesised command name.
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next());
            !matches!(state, Some('Z') | Some('X') | None)
        }
        Err(_) => false,
    }
}

/// Whether a process exists at all (zombies included).
pub fn exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Sends a signal.
pub fn signal(pid: u32, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

/// Freezes a process with SIGSTOP and returns once every one of its threads is stopped.
/// `kill` returns before the stop takes effect, so a request sent right after a bare
/// SIGSTOP can still be answered by a thread that has not stopped yet.
pub fn freeze(pid: u32) {
    signal(pid, libc::SIGSTOP);
    let stopped = wait_for(Duration::from_secs(5), || {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
        let all = tasks.flatten().all(|t| {
            std::fs::read_to_string(t.path().join("stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')
                        .and_then(|(_, rest)| rest.trim_start().chars().next())
                })
                .is_none_or(|state| state == 'T' || state == 't')
        });
        all.then_some(())
    });
    assert!(stopped.is_some(), "process {pid} did not stop within 5 s");
}

/// Polls `f` every 20 ms until it returns Some, or `within` passes.
pub fn wait_for<T>(within: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let until = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A local cluster started with `antler up` for one test.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub lead: Child,
    pub workers: u32,
}

impl Cluster {
    /// Starts `antler up --workers N` and waits until `antler status` shows every process healthy.
    pub fn up(workers: u32) -> Cluster {
        Self::up_with(workers, &[])
    }

    /// Like [`Cluster::up`], with extra environment variables for the lead.
    pub fn up_with(workers: u32, env: &[(&str, &str)]) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("antler-t")
            .tempdir_in("/tmp")
            .expect("tempdir");
        let mut cmd = Command::new(bin("antler"));
        cmd.arg("--runtime-dir")
            .arg(dir.path().join("run"))
            .args(["up", "--workers", &workers.to_string()])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let lead = cmd.spawn().expect("start antler up");
        let c = Cluster { dir, lead, workers };
        if env.is_empty() {
            let ok = wait_for(Duration::from_secs(20), || {
                let st = c.status()?;
                (st.len() == 3 + workers as usize && st.iter().all(|p| p["healthy"] == true))
                    .then_some(())
            });
            assert!(
                ok.is_some(),
                "cluster did not become healthy: {:?}",
                c.status()
            );
        }
        c
    }

    /// Like [`Cluster::up_with`], then waits until every process is healthy.
    pub fn up_ready(workers: u32, env: &[(&str, &str)]) -> Cluster {
        let c = Self::up_with(workers, env);
        let ok = wait_for(Duration::from_secs(30), || {
            let st = c.status()?;
            (st.len() == 3 + workers as usize && st.iter().all(|p| p["healthy"] == true))
                .then_some(())
        });
        assert!(ok.is_some(), "cluster not healthy: {:?}", c.status());
        c
    }

    pub fn runtime_dir(&self) -> PathBuf {
        self.dir.path().join("run")
    }

    /// `antler status --json`, or None when it fails.
    pub fn status(&self) -> Option<Vec<Value>> {
        let out = antler(&self.runtime_dir(), &["status", "--json"]);
        if !out.status.success() {
            return None;
        }
        serde_json::from_slice::<Value>(&out.stdout)
            .ok()?
            .as_array()
            .cloned()
    }

    /// The status entry of one process (role and worker index).
    pub fn process(&self, role: &str, index: u64) -> Option<Value> {
        self.status()?
            .into_iter()
            .find(|p| p["role"] == role && p["index"].as_u64() == Some(index))
    }

    /// The gateway's `127.0.0.1:port`, once it has written `gateway.addr`.
    pub fn gateway_addr(&self) -> Option<String> {
        let file = self.runtime_dir().join("gateway.addr");
        let addr = wait_for(Duration::from_secs(10), || {
            std::fs::read_to_string(&file).ok()
        })?;
        let port = addr.trim().rsplit_once(':')?.1.to_owned();
        Some(format!("127.0.0.1:{port}"))
    }

    /// The bearer token the loopback gateway wrote to `gateway.token`.
    pub fn gateway_token(&self) -> String {
        let file = self.runtime_dir().join("gateway.token");
        wait_for(Duration::from_secs(10), || {
            std::fs::read_to_string(&file).ok()
        })
        .expect("gateway.token")
        .trim()
        .to_owned()
    }

    /// One request to the gateway with its bearer token.
    pub fn gateway_http(&self, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        let addr = self.gateway_addr().expect("the gateway listens");
        let auth = format!("Bearer {}", self.gateway_token());
        http(&addr, method, path, &[("Authorization", &auth)], body)
    }

    /// The pids of the children (everything but the lead).
    pub fn child_pids(&self) -> Vec<u32> {
        self.status()
            .unwrap_or_default()
            .iter()
            .filter(|p| p["role"] != "lead")
            .filter_map(|p| p["pid"].as_u64().map(|x| x as u32))
            .collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        signal(self.lead.id(), libc::SIGTERM);
        let until = Instant::now() + Duration::from_secs(15);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.lead.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.lead.kill();
        let _ = self.lead.wait();
    }
}

/// One host process started directly (not through `antler up`) on a socket in a private
/// directory, with a token file; killed when dropped.
pub struct Host {
    pub dir: tempfile::TempDir,
    pub child: Child,
    pub socket: PathBuf,
    pub token: String,
}

impl Host {
    /// Starts `binary` (e.g. `antler-mcp-host`) and waits for its socket.
    pub fn start(binary: &str) -> Host {
        let dir = tempfile::Builder::new()
            .prefix("antler-h")
            .tempdir_in("/tmp")
            .expect("tempdir");
        let token = "host-test-token".to_string();
        let token_file = dir.path().join("token");
        std::fs::write(&token_file, &token).expect("token");
        let socket = dir.path().join("host.sock");
        let child = Command::new(bin(binary))
            .arg("--listen")
            .arg(format!("unix:{}", socket.display()))
            .arg("--token-file")
            .arg(&token_file)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start host");
        let up = wait_for(Duration::from_secs(10), || socket.exists().then_some(()));
        assert!(up.is_some(), "{binary} did not listen");
        Host {
            dir,
            child,
            socket,
            token,
        }
    }

    pub fn address(&self) -> antler_protocol::Address {
        antler_protocol::Address::Unix(self.socket.clone())
    }

    pub fn identity(&self) -> antler_protocol::Identity {
        antler_protocol::Identity::new(
            antler_protocol::Role::Lead,
            "test-lead",
            Some(self.token.clone()),
        )
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 request to `addr` (`host:port`) with `Connection: close`; the status and
/// the body (read to the end, chunked bodies decoded). For the gateway's tests. `Host`
/// (default: `addr`) and `Content-Type` (default: JSON, when there is a body) may be
/// given in `headers`.
pub fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to the gateway");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let has = |name: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name));
    let mut request = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !has("Host") {
        request.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    let body = body.unwrap_or("");
    if !body.is_empty() || method == "POST" || method == "PUT" {
        if !has("Content-Type") {
            request.push_str("Content-Type: application/json\r\n");
        }
        request.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).expect("send");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read the reply");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_owned()
    };
    (status, body)
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || after.len() < size {
            break;
        }
        out.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
    out
}

/// One typed call (`call`) straight to process `index` of `role` of the cluster in
/// `runtime_dir`, on its socket with the cluster's token (the lead may be stopped); `None`
/// when it cannot be reached or fails.
pub fn host_call<T>(
    runtime_dir: &Path,
    role: antler_protocol::Role,
    index: u32,
    call: impl AsyncFnOnce(&antler_protocol::Connection) -> Result<T, antler_protocol::RpcError>,
) -> Option<T> {
    use antler_protocol::{
        link::dial, runtime_dir::RuntimeDir, Address, ConnectionConfig, Identity,
    };
    let rd = RuntimeDir::open(runtime_dir).ok()?;
    let token = rd.read_token().ok()?;
    let address = Address::Unix(rd.socket(role, index));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    rt.block_on(async move {
        let identity = Identity::new(antler_protocol::Role::Lead, "test-probe", Some(token));
        let conn = dial(&address, &identity, ConnectionConfig::default(), None)
            .await
            .ok()?;
        let reply = call(&conn).await;
        conn.close("done");
        reply.ok()
    })
}
