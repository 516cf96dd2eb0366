//! The MCP round trip: server-everything's `echo` over stdio through Antler's two hops
//! (client → lead → mcp-host → server), beside the Python `mcp` client calling the same
//! server directly, in one run; then throughput with 32 calls in flight on one server.
//! Reports ratios against the Python baseline; never gates on absolute times.
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
    envelope::TraceContext,
    handshake::Identity,
    link::dial,
    messages::{LeadReply, LeadRequest, McpCall, McpReply, McpRequest, Reply, Request},
    runtime_dir::RuntimeDir,
    Address, Connection, ConnectionConfig, Role,
};
use anyhow::{bail, Context};

const SEQUENTIAL: usize = 2000;
const CONCURRENT_CALLS: usize = 8000;
const IN_FLIGHT: usize = 32;

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
    let config = dir.path().join("extensions_config.json");
    let servers =
        serde_json::json!({"mcpServers": {"everything": {"command": server, "args": ["stdio"]}}});
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
        .block_on(measure(run));
    // SAFETY: kill has no memory-safety preconditions.
    unsafe {
        libc::kill(lead.id() as i32, libc::SIGTERM);
    }
    let _ = lead.wait();
    let antler = result?;

    let py = Command::new("python3")
        .arg(root.join("tests/peers/bench_client.py"))
        .arg(&server)
        .arg(SEQUENTIAL.to_string())
        .arg(IN_FLIGHT.to_string())
        .stderr(Stdio::null())
        .output()
        .context("python3 (pip install -r tests/requirements.txt)")?;
    let py: serde_json::Value =
        serde_json::from_slice(&py.stdout).context("the Python baseline's output")?;
    let f = |k: &str| py[k].as_f64().unwrap_or(f64::NAN);

    println!("MCP echo over stdio (server-everything), {SEQUENTIAL} calls one at a time, {CONCURRENT_CALLS} with {IN_FLIGHT} in flight");
    println!(
        "{:<44} {:>10} {:>10} {:>12} {:>14}",
        "", "p50 µs", "p99 µs", "calls/s (1)", "calls/s (32)"
    );
    println!(
        "{:<44} {:>10.0} {:>10.0} {:>12.0} {:>14.0}",
        "Python mcp client → server (direct)",
        f("p50_us"),
        f("p99_us"),
        f("seq_calls_per_s"),
        f("concurrent_calls_per_s")
    );
    println!(
        "{:<44} {:>10.0} {:>10.0} {:>12.0} {:>14.0}",
        "Antler client → lead → mcp-host → server",
        antler.p50_us,
        antler.p99_us,
        antler.seq_rate,
        antler.conc_rate
    );
    println!(
        "ratios (Antler / Python): p50 {:.2}x (lower is better), throughput one at a time {:.2}x, with {IN_FLIGHT} in flight {:.2}x (higher is better)",
        antler.p50_us / f("p50_us"),
        antler.seq_rate / f("seq_calls_per_s"),
        antler.conc_rate / f("concurrent_calls_per_s"),
    );
    Ok(())
}

struct Figures {
    p50_us: f64,
    p99_us: f64,
    seq_rate: f64,
    conc_rate: f64,
}

fn echo(i: usize) -> Request {
    Request::Lead(LeadRequest::Forward {
        role: Role::McpHost,
        index: 0,
        request: Box::new(Request::Mcp(McpRequest::CallTool(McpCall {
            server: "everything".into(),
            tool: "echo".into(),
            args_json: format!(r#"{{"message":"m{i}"}}"#),
            user: None,
            thread: None,
            workspace: None,
            run_id: None,
            tool_call_id: None,
        }))),
        timeout_ms: 10_000,
    })
}

async fn call(c: &Connection, i: usize) -> anyhow::Result<()> {
    match c
        .request(echo(i), TraceContext::new_root(), Duration::from_secs(15))
        .await?
    {
        Reply::Lead(LeadReply::Forwarded(r)) => match *r {
            Reply::Mcp(McpReply::CallResult(r)) if !r.is_error => Ok(()),
            other => bail!("echo failed: {other:?}"),
        },
        other => bail!("unexpected reply: {other:?}"),
    }
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

async fn measure(run: PathBuf) -> anyhow::Result<Figures> {
    let c = connect(&run).await?;
    // Ready once a call goes through (mcp-host and the server may still be starting).
    let until = Instant::now() + Duration::from_secs(60);
    while call(&c, 0).await.is_err() {
        if Instant::now() > until {
            bail!("the echo server never became ready");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for i in 0..200 {
        call(&c, i).await?;
    }
    let mut lat = Vec::with_capacity(SEQUENTIAL);
    let t0 = Instant::now();
    for i in 0..SEQUENTIAL {
        let t = Instant::now();
        call(&c, i).await?;
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let seq_rate = SEQUENTIAL as f64 / t0.elapsed().as_secs_f64();
    lat.sort_by(f64::total_cmp);

    let left = Arc::new(AtomicI64::new(CONCURRENT_CALLS as i64));
    let t0 = Instant::now();
    let workers: Vec<_> = (0..IN_FLIGHT)
        .map(|_| {
            let c = c.clone();
            let left = left.clone();
            tokio::spawn(async move {
                while left.fetch_sub(1, Ordering::SeqCst) > 0 {
                    call(&c, 1).await?;
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for w in workers {
        w.await??;
    }
    let conc_rate = CONCURRENT_CALLS as f64 / t0.elapsed().as_secs_f64();
    c.close("bench done");
    Ok(Figures {
        p50_us: lat[lat.len() / 2],
        p99_us: lat[lat.len() * 99 / 100 - 1],
        seq_rate,
        conc_rate,
    })
}
