//! The MCP round trip: server-everything's `echo` over stdio through Antler's two hops
//! (client → lead → mcp-host → server), beside the Python `mcp` client calling the same
//! server directly, in one run; then throughput with 32 calls in flight on one server.
//! The same with OAuth on: a Python SDK echo server over streamable HTTP that answers 401
//! without its bearer token (`tests/peers/bench_http_server.py`), which mcp-host gets with
//! client_credentials at the server's token endpoint and the Python client is handed. The
//! token endpoint's count of requests during the measured calls must stay 0 (a cached token
//! adds no round trip). Reports ratios against the Python baseline; never gates on
//! absolute times.
//!
//! Needs the release binaries and the test peers:
//!   cargo build --release --bins && (cd tests && npm ci) && pip install -r tests/requirements.txt
//!   cargo bench -p antler-mcp-host --bench echo

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{
        atomic::{AtomicI64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use antler_protocol::{
    calls::{Forwarder, McpCalls},
    handshake::Identity,
    link::dial,
    messages::McpCall,
    runtime_dir::RuntimeDir,
    Address, Connection, ConnectionConfig, Role,
};
use anyhow::{bail, Context};

const SEQUENTIAL: usize = 2000;
const CONCURRENT_CALLS: usize = 8000;
const IN_FLIGHT: usize = 32;
/// The OAuth-on server is slower (Python HTTP): fewer calls keep the run short.
const HTTP_SEQUENTIAL: usize = 1000;
const HTTP_CONCURRENT_CALLS: usize = 4000;
/// The OAuth-on server's token, client id and secret.
const TOKEN: &str = "antler-bench-token";
const CLIENT_ID: &str = "antler-bench";
const CLIENT_SECRET: &str = "antler-bench-secret";
/// The servers in the extensions config.
const STDIO_SERVER: &str = "everything";
const OAUTH_SERVER: &str = "echo_oauth";

/// A child process killed when dropped.
struct Peer(std::process::Child);

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn main() -> anyhow::Result<()> {
    if std::env::args().any(|a| a == "--list") {
        println!("echo: bench");
        return Ok(());
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("workspace root")?
        .to_path_buf();
    let server = root.join("tests/node_modules/.bin/mcp-server-everything");
    if !server.exists() {
        bail!("{} is missing: `cd tests && npm ci`", server.display());
    }
    let bin_dir = std::env::current_exe()?
        .parent()
        .and_then(Path::parent)
        .context("target dir")?
        .to_path_buf();
    let antler = bin_dir.join("antler");
    if !antler.exists() || !bin_dir.join("antler-mcp-host").exists() {
        bail!(
            "{} is missing: `cargo build --release --bins` first",
            antler.display()
        );
    }

    let dir = tempfile::Builder::new()
        .prefix("antler-bench")
        .tempdir_in("/tmp")?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let _http = Peer(
        Command::new("python3")
            .arg(root.join("tests/peers/bench_http_server.py"))
            .args([&port.to_string(), TOKEN, CLIENT_ID, CLIENT_SECRET])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("python3 bench_http_server.py")?,
    );
    let base = format!("http://127.0.0.1:{port}");
    wait_port(port)?;
    let config = dir.path().join("extensions_config.json");
    let servers = serde_json::json!({"mcpServers": {
        STDIO_SERVER: {"command": server, "args": ["stdio"]},
        OAUTH_SERVER: {
            "type": "http",
            "url": format!("{base}/mcp"),
            "oauth": {
                "token_url": format!("{base}/token"),
                "client_id": CLIENT_ID,
                "client_secret": CLIENT_SECRET,
            },
        },
    }});
    std::fs::write(&config, serde_json::to_vec(&servers)?)?;
    let run = dir.path().join("run");
    let mut lead = Command::new(&antler)
        .arg("--runtime-dir")
        .arg(&run)
        .args(["up", "--workers", "0"])
        .env("ANTLER_EXTENSIONS_CONFIG_PATH", &config)
        .env("ANTLER_GATEWAY_ADDR", "off")
        .env("RUST_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()?;
    let result = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(measure(run, base.clone()));
    // SAFETY: kill has no memory-safety preconditions.
    unsafe {
        libc::kill(lead.id() as i32, libc::SIGTERM);
    }
    let _ = lead.wait();
    let (stdio, oauth) = result?;

    let client = root.join("tests/peers/bench_client.py");
    let py_stdio = python_baseline(
        Command::new("python3")
            .arg(&client)
            .arg(&server)
            .args([SEQUENTIAL.to_string(), IN_FLIGHT.to_string()]),
    )?;
    let py_oauth = python_baseline(Command::new("python3").arg(&client).args([
        "--url".to_owned(),
        format!("{base}/mcp"),
        "--token".to_owned(),
        TOKEN.to_owned(),
        HTTP_SEQUENTIAL.to_string(),
        IN_FLIGHT.to_string(),
    ]))?;

    println!(
        "{:<58} {:>10} {:>10} {:>12} {:>14}",
        "", "p50 µs", "p99 µs", "calls/s (1)", "calls/s (32)"
    );
    println!("MCP echo over stdio (server-everything), {SEQUENTIAL} calls one at a time, {CONCURRENT_CALLS} with {IN_FLIGHT} in flight");
    row("Python mcp client → server (direct)", &py_stdio);
    row("Antler client → lead → mcp-host → server", &stdio);
    println!("MCP echo over streamable HTTP with OAuth on (Python SDK server, bearer token), {HTTP_SEQUENTIAL} calls one at a time, {HTTP_CONCURRENT_CALLS} with {IN_FLIGHT} in flight");
    row("Python mcp client → server (direct, token)", &py_oauth);
    row(
        "Antler → lead → mcp-host (client_credentials) → server",
        &oauth.figures,
    );
    ratios("stdio", &stdio, &py_stdio);
    ratios("OAuth on", &oauth.figures, &py_oauth);
    println!(
        "token endpoint: {} request(s) before the measured calls, {} during them ({} calls); 401s during them: {}",
        oauth.token_requests_before, oauth.token_requests_during, HTTP_SEQUENTIAL + HTTP_CONCURRENT_CALLS, oauth.unauthorized_during
    );
    if oauth.token_requests_during != 0 || oauth.unauthorized_during != 0 {
        bail!("a cached token must add no round trip: the token endpoint saw {} request(s) and the server answered {} 401(s) during the measured calls", oauth.token_requests_during, oauth.unauthorized_during);
    }
    Ok(())
}

/// Runs the Python baseline and reads its one JSON line.
fn python_baseline(cmd: &mut Command) -> anyhow::Result<Figures> {
    let out = cmd
        .stderr(Stdio::null())
        .output()
        .context("python3 (pip install -r tests/requirements.txt)")?;
    let py: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("the Python baseline's output")?;
    let f = |k: &str| py[k].as_f64().unwrap_or(f64::NAN);
    Ok(Figures {
        p50_us: f("p50_us"),
        p99_us: f("p99_us"),
        seq_rate: f("seq_calls_per_s"),
        conc_rate: f("concurrent_calls_per_s"),
    })
}

fn row(what: &str, f: &Figures) {
    println!(
        "{:<58} {:>10.0} {:>10.0} {:>12.0} {:>14.0}",
        what, f.p50_us, f.p99_us, f.seq_rate, f.conc_rate
    );
}

fn ratios(what: &str, antler: &Figures, py: &Figures) {
    println!(
        "ratios {what} (Antler / Python): p50 {:.2}x (lower is better), throughput one at a time {:.2}x, with {IN_FLIGHT} in flight {:.2}x (higher is better)",
        antler.p50_us / py.p50_us,
        antler.seq_rate / py.seq_rate,
        antler.conc_rate / py.conc_rate,
    );
}

/// Waits until something accepts connections on 127.0.0.1:port.
fn wait_port(port: u16) -> anyhow::Result<()> {
    let until = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > until {
            bail!("bench_http_server.py never listened on {port}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

struct Figures {
    p50_us: f64,
    p99_us: f64,
    seq_rate: f64,
    conc_rate: f64,
}

/// The OAuth-on figures, with what the token endpoint and the server counted.
struct OAuthFigures {
    figures: Figures,
    /// Token requests before the measured calls (the first session's).
    token_requests_before: u64,
    /// Token requests during the measured calls.
    token_requests_during: u64,
    /// 401s the server answered during the measured calls.
    unauthorized_during: u64,
}

fn echo(server: &str, i: usize) -> McpCall {
    McpCall {
        server: server.into(),
        tool: "echo".into(),
        args: serde_json::json!({"message": format!("m{i}")}).into(),
        user: None,
        thread: None,
        workspace: None,
        run_id: None,
        tool_call_id: None,
        clearance: None,
    }
}

async fn call(c: &Connection, server: &str, i: usize) -> anyhow::Result<()> {
    let result = Forwarder::new(c, Role::McpHost, 0, Duration::from_secs(5))
        .call_tool(echo(server, i), Duration::from_secs(10))
        .await?;
    if result.is_error {
        bail!("echo failed: {result:?}");
    }
    Ok(())
}

async fn connect(run: &Path) -> anyhow::Result<Connection> {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let attempt = async {
            let rd = RuntimeDir::open(run)?;
            let token = rd.read_token()?;
            let me = Identity::new(Role::Cli, "bench", Some(token));
            let c = dial(
                &Address::Unix(rd.socket(Role::Lead, 0)),
                &me,
                ConnectionConfig::default(),
                None,
            )
            .await?;
            anyhow::Ok(c)
        };
        match attempt.await {
            Ok(c) => return Ok(c),
            Err(e) if Instant::now() > until => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// The stdio figures, then the OAuth-on ones (`base`: the OAuth-on server's origin).
async fn measure(run: PathBuf, base: String) -> anyhow::Result<(Figures, OAuthFigures)> {
    let c = connect(&run).await?;
    warm(&c, STDIO_SERVER).await?;
    let stdio = measure_server(&c, STDIO_SERVER, SEQUENTIAL, CONCURRENT_CALLS).await?;
    warm(&c, OAUTH_SERVER).await?;
    let before = counts(&base).await?;
    let figures = measure_server(&c, OAUTH_SERVER, HTTP_SEQUENTIAL, HTTP_CONCURRENT_CALLS).await?;
    let after = counts(&base).await?;
    c.close("bench done");
    let n = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or(u64::MAX);
    Ok((
        stdio,
        OAuthFigures {
            figures,
            token_requests_before: n(&before, "token_requests"),
            token_requests_during: n(&after, "token_requests")
                .saturating_sub(n(&before, "token_requests")),
            unauthorized_during: n(&after, "unauthorized")
                .saturating_sub(n(&before, "unauthorized")),
        },
    ))
}

/// What the OAuth-on server counted so far (`/stats`).
async fn counts(base: &str) -> anyhow::Result<serde_json::Value> {
    Ok(reqwest::get(format!("{base}/stats"))
        .await?
        .error_for_status()?
        .json()
        .await?)
}

/// Waits until a call to `server` goes through (mcp-host and the server may still be
/// starting), then warms it with 200 more.
async fn warm(c: &Connection, server: &str) -> anyhow::Result<()> {
    let until = Instant::now() + Duration::from_secs(60);
    while call(c, server, 0).await.is_err() {
        if Instant::now() > until {
            bail!("the echo server {server} never became ready");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for i in 0..200 {
        call(c, server, i).await?;
    }
    Ok(())
}

/// `sequential` calls one at a time, then `concurrent` with [`IN_FLIGHT`] in flight (the
/// server warmed already).
async fn measure_server(
    c: &Connection,
    server: &'static str,
    sequential: usize,
    concurrent: usize,
) -> anyhow::Result<Figures> {
    let mut lat = Vec::with_capacity(sequential);
    let t0 = Instant::now();
    for i in 0..sequential {
        let t = Instant::now();
        call(c, server, i).await?;
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let seq_rate = sequential as f64 / t0.elapsed().as_secs_f64();
    lat.sort_by(f64::total_cmp);

    let left = Arc::new(AtomicI64::new(concurrent as i64));
    let t0 = Instant::now();
    let workers: Vec<_> = (0..IN_FLIGHT)
        .map(|_| {
            let c = c.clone();
            let left = left.clone();
            tokio::spawn(async move {
                while left.fetch_sub(1, Ordering::SeqCst) > 0 {
                    call(&c, server, 1).await?;
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for w in workers {
        w.await??;
    }
    let conc_rate = concurrent as f64 / t0.elapsed().as_secs_f64();
    Ok(Figures {
        p50_us: lat[lat.len() / 2],
        p99_us: lat[lat.len() * 99 / 100 - 1],
        seq_rate,
        conc_rate,
    })
}
