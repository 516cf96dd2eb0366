//! Protocol benchmark: round trip of a small request over a Unix socket, over TCP
//! loopback and over TCP loopback with mutual TLS 1.3 (p50, p99), and pipelined small
//! messages per second on one connection, each beside a raw echo of the same bytes on the
//! same transport (for TLS: a tokio-rustls echo with the same certificates and configs)
//! measured in the same run, in alternating rounds whose times are pooled (drift on a shared
//! machine, its load or a vCPU's idle state, hits both paths alike); then TLS against plain
//! TCP. The RPC server answers pings on its I/O thread, as every host does
//! (`Service::answers_now`). Round trips are measured twice: with the servers in this
//! process (whose one I/O thread then serves both ends of each connection), and with them
//! in a child process, as in a cluster (the bench runs itself with `--serve-child`), each
//! with the context switches a round trip costs this process's threads ("cs": with the
//! servers in a child process, 1.0 is the calling thread's own wake, all a raw echo costs;
//! an RPC whose reply crossed the I/O thread on its way costs 2.0, see `antler_protocol::sock`);
//! last, with both processes pinned to one CPU, where no wake waits for an idle vCPU.
//! Run: `cargo bench -p antler-protocol --bench rpc` (ANTLER_BENCH_N to change the count).

#![allow(clippy::expect_used)]

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use antler_protocol::{
    codec, frame,
    link::dial,
    messages::{ControlReply, ControlRequest, Reply, Request},
    server::Server,
    tls::{role_dns_name, ClusterTls},
    transport::{ReadHalf, Stream, WriteHalf},
    Address, Body, Call, ConnectionConfig, Envelope, Identity, InFlight, RemoteError, Role,
    Service, TraceContext,
};
use futures::{future::BoxFuture, stream::FuturesUnordered, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Echo;

impl Service for Echo {
    fn call(&self, request: Request, _: Call) -> BoxFuture<'static, Result<Reply, RemoteError>> {
        Box::pin(async move {
            match request {
                Request::Control(ControlRequest::Ping { payload }) => {
                    Ok(Reply::Control(ControlReply::Pong { payload }))
                }
                _ => Err(RemoteError::Unsupported("bench".into())),
            }
        })
    }

    /// As every host does ([`antler_protocol::host::HostService`]): a ping is answered on
    /// the I/O thread.
    fn answers_now(&self, request: &Request) -> bool {
        matches!(request, Request::Control(ControlRequest::Ping { .. }))
    }
}

fn small_request() -> Request {
    Request::Control(ControlRequest::Ping {
        payload: b"0123456789abcdef".to_vec(),
    })
}

/// The bytes one small request occupies on the wire (frame included).
fn request_frame() -> Vec<u8> {
    let env = Envelope {
        id: 12345,
        reply_to: None,
        deadline: Some(5000),
        trace: TraceContext::for_run("bench-run"),
        body: Body::Request(small_request()),
    };
    frame::frame_bytes(&codec::encode(&env).expect("encode"))
}

/// Rounds of the round-trip comparison: each measures both paths, in turn.
const ROUNDS: usize = 10;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Runs `f` on a dedicated thread with its own current-thread runtime (a stand-in for the
/// peer process), and returns once it signals readiness.
fn spawn_peer<F, Fut>(f: F)
where
    F: FnOnce(std::sync::mpsc::Sender<()>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("rt");
        rt.block_on(f(tx));
    });
    rx.recv().expect("peer ready");
}

/// A cluster CA and a certificate for the lead and for mcp-host, in memory; the host's as
/// PEM too (CA, certificate, key), for servers in a child process.
struct BenchTls {
    lead: Arc<ClusterTls>,
    host: Arc<ClusterTls>,
    host_pem: [String; 3],
}

fn bench_tls() -> BenchTls {
    let ca_key = rcgen::KeyPair::generate().expect("key");
    let mut ca = rcgen::CertificateParams::default();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "bench CA");
    let ca_pem = ca.self_signed(&ca_key).expect("ca").pem();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let for_role = |role: Role| {
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec![role_dns_name(role)])
            .expect("params")
            .signed_by(&key, &issuer)
            .expect("sign");
        [ca_pem.clone(), cert.pem(), key.serialize_pem()]
    };
    let tls = |[ca, cert, key]: &[String; 3]| {
        Arc::new(ClusterTls::from_pem(ca.as_bytes(), cert.as_bytes(), key.as_bytes()).expect("tls"))
    };
    let host_pem = for_role(Role::McpHost);
    BenchTls {
        lead: tls(&for_role(Role::Lead)),
        host: tls(&host_pem),
        host_pem,
    }
}

/// How a raw echo is reached: plaintext, or TLS with this side's material.
#[derive(Clone)]
struct Raw {
    address: Address,
    tls: Option<Arc<ClusterTls>>,
}

async fn raw_connect(raw: &Raw) -> (ReadHalf, WriteHalf) {
    let stream = Stream::connect(&raw.address).await.expect("connect");
    match (stream, &raw.tls) {
        (Stream::Tcp(tcp), Some(tls)) => {
            let (r, w, _) = tls
                .connect(tcp, Some(Role::McpHost))
                .await
                .expect("tls connect");
            (r, w)
        }
        (stream, _) => stream.into_halves(),
    }
}

async fn raw_echo_server(
    addr: Address,
    tls: Option<Arc<ClusterTls>>,
    ready: std::sync::mpsc::Sender<()>,
) {
    let listener = antler_protocol::transport::Listener::bind(&addr)
        .await
        .expect("bind");
    let _ = ready.send(());
    loop {
        let Ok((stream, _)) = listener.accept_stream().await else {
            return;
        };
        let tls = tls.clone();
        tokio::spawn(async move {
            let (mut r, mut w) = match (stream, tls) {
                (Stream::Tcp(tcp), Some(tls)) => {
                    let Ok((r, w, _)) = tls.accept(tcp).await else {
                        return;
                    };
                    (r, w)
                }
                (stream, _) => stream.into_halves(),
            };
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match r.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        // TLS keeps what the socket did not take until flushed (nothing
                        // to do, and no system call, when it took it all).
                        if w.write_all(&buf[..n]).await.is_err() || w.flush().await.is_err() {
                            return;
                        }
                    }
                }
            }
        });
    }
}

async fn rpc_server(
    addr: Address,
    tls: Option<Arc<ClusterTls>>,
    ready: std::sync::mpsc::Sender<()>,
) {
    let _server = Server::bind(
        &addr,
        Identity::new(Role::McpHost, "bench", None).with_tls(tls),
        ConnectionConfig::default(),
        Arc::new(Echo),
        Arc::new(InFlight::default()),
    )
    .await
    .expect("bind");
    let _ = ready.send(());
    std::future::pending::<()>().await;
}

struct Figures {
    p50: Duration,
    p99: Duration,
}

impl Figures {
    fn of(mut lat: Vec<Duration>) -> Figures {
        lat.sort();
        Figures {
            p50: percentile(&lat, 0.5),
            p99: percentile(&lat, 0.99),
        }
    }
}

async fn raw_round_trips(raw: &Raw, n: usize) -> Vec<Duration> {
    let (mut r, mut w) = raw_connect(raw).await;
    let msg = request_frame();
    let mut back = vec![0u8; msg.len()];
    let mut lat = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        w.write_all(&msg).await.expect("write");
        w.flush().await.expect("flush");
        r.read_exact(&mut back).await.expect("read");
        lat.push(t.elapsed());
    }
    lat
}

async fn rpc_round_trips(addr: &Address, me: &Identity, n: usize) -> Vec<Duration> {
    let c = dial(addr, me, ConnectionConfig::default(), None)
        .await
        .expect("dial");
    let mut lat = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        c.request(
            small_request(),
            TraceContext::for_run("bench-run"),
            Duration::from_secs(5),
        )
        .await
        .expect("reply");
        lat.push(t.elapsed());
    }
    lat
}

async fn raw_pipelined(raw: &Raw, n: usize) -> f64 {
    let (mut r, mut w) = raw_connect(raw).await;
    let msg = request_frame();
    let total = msg.len() * n;
    let t = Instant::now();
    let writer = async {
        let batch: Vec<u8> = msg.iter().copied().cycle().take(msg.len() * 256).collect();
        let mut sent = 0;
        while sent < total {
            let k = batch.len().min(total - sent);
            w.write_all(&batch[..k]).await.expect("write");
            sent += k;
        }
        // Else TLS may keep the last records, and the echo never comes.
        w.flush().await.expect("flush");
    };
    let reader = async {
        let mut buf = vec![0u8; 256 * 1024];
        let mut got = 0;
        while got < total {
            got += r.read(&mut buf).await.expect("read");
        }
    };
    // A deadline, as on every request here: a stalled echo fails the bench, not hangs it.
    tokio::time::timeout(Duration::from_secs(120), async {
        tokio::join!(writer, reader);
    })
    .await
    .expect("the raw echo stalled: no reply within 120 s");
    n as f64 / t.elapsed().as_secs_f64()
}

async fn rpc_pipelined(addr: &Address, me: &Identity, n: usize, window: usize) -> f64 {
    let c = dial(addr, me, ConnectionConfig::default(), None)
        .await
        .expect("dial");
    let t = Instant::now();
    let mut inflight = FuturesUnordered::new();
    let mut issued = 0;
    let mut done = 0;
    while done < n {
        while issued < n && inflight.len() < window {
            let c = c.clone();
            inflight.push(async move {
                c.request(
                    small_request(),
                    TraceContext::default(),
                    Duration::from_secs(30),
                )
                .await
            });
            issued += 1;
        }
        if let Some(r) = inflight.next().await {
            r.expect("reply");
            done += 1;
        }
    }
    n as f64 / t.elapsed().as_secs_f64()
}

/// One transport measured: its name, the raw echo, the RPC server, the server's TLS and
/// the RPC client's identity.
type Path = (
    &'static str,
    Raw,
    Address,
    Option<Arc<ClusterTls>>,
    Identity,
);

/// The three transports, at fresh addresses in `dir` (`tag` tells two sets apart).
fn paths(dir: &std::path::Path, tag: &str, tls: &BenchTls) -> [Path; 3] {
    let tcp = |port: u16| Address::Tcp(format!("127.0.0.1:{port}"));
    let plain = Identity::new(Role::Lead, "bench", None);
    let secure = Identity::new(Role::Lead, "bench", None).with_tls(Some(tls.lead.clone()));
    [
        (
            "unix socket",
            Raw {
                address: Address::Unix(dir.join(format!("raw-{tag}.sock"))),
                tls: None,
            },
            Address::Unix(dir.join(format!("rpc-{tag}.sock"))),
            None,
            plain.clone(),
        ),
        (
            "tcp loopback",
            Raw {
                address: tcp(free_port()),
                tls: None,
            },
            tcp(free_port()),
            None,
            plain,
        ),
        (
            "tcp + tls 1.3",
            Raw {
                address: tcp(free_port()),
                tls: Some(tls.lead.clone()),
            },
            tcp(free_port()),
            Some(tls.host.clone()),
            secure,
        ),
    ]
}

/// Starts the raw echo and the RPC server of each transport in this process.
fn serve(servers: Vec<(Address, Address, Option<Arc<ClusterTls>>)>) {
    for (raw, rpc, tls) in servers {
        let t = tls.clone();
        spawn_peer(move |ready| raw_echo_server(raw, t, ready));
        spawn_peer(move |ready| rpc_server(rpc, tls, ready));
    }
}

/// The child process's part (`--serve-child PEM_DIR RAW RPC RAW RPC RAW RPC`): the servers
/// of the three transports (the last over TLS with the host's PEM files), "ready" on
/// stdout, then serving until stdin closes (the parent ended).
fn serve_child(args: &[String]) {
    let pem = |name: &str| std::fs::read(format!("{}/{name}", args[0])).expect("pem");
    let tls = Arc::new(
        ClusterTls::from_pem(&pem("ca.pem"), &pem("host.crt"), &pem("host.key")).expect("tls"),
    );
    let addr = |i: usize| -> Address { args[i].parse().expect("address") };
    serve(vec![
        (addr(1), addr(2), None),
        (addr(3), addr(4), None),
        (addr(5), addr(6), Some(tls)),
    ]);
    println!("ready");
    let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
}

/// The servers in a child process of this bench, killed when dropped.
struct Child(std::process::Child);

impl Drop for Child {
    /// Closes the child's stdin, which ends it; kills it if it is still there after 2 s.
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(2);
        while matches!(self.0.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_child(dir: &std::path::Path, tls: &BenchTls, paths: &[Path; 3]) -> Child {
    for (name, pem) in ["ca.pem", "host.crt", "host.key"].iter().zip(&tls.host_pem) {
        std::fs::write(dir.join(name), pem).expect("pem");
    }
    let mut cmd = std::process::Command::new(std::env::current_exe().expect("exe"));
    cmd.arg("--serve-child").arg(dir);
    for (_, raw, rpc, _, _) in paths {
        cmd.arg(raw.address.to_string()).arg(rpc.to_string());
    }
    let mut child = Child(
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn the servers' process"),
    );
    let mut line = String::new();
    let out = child.0.stdout.as_mut().expect("stdout");
    std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line).expect("ready");
    assert_eq!(line.trim(), "ready", "the servers' process did not start");
    child
}

/// Context switches of every thread of this process so far (voluntary and not).
fn context_switches() -> u64 {
    // SAFETY: `getrusage` fills the zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    (usage.ru_nvcsw + usage.ru_nivcsw) as u64
}

/// Times `n` round trips of `f`, adding the context switches they cost this process.
async fn counted<F: std::future::Future<Output = Vec<Duration>>>(
    switches: &mut u64,
    f: F,
) -> Vec<Duration> {
    let before = context_switches();
    let lat = f.await;
    *switches += context_switches() - before;
    lat
}

/// Round trips of each transport, raw and RPC, in alternating rounds whose times are
/// pooled, so drift on a shared machine (load, a vCPU's idle state) hits both alike, with
/// the context switches per round trip of this process's threads (the calling thread's
/// own wake is one; each thread a reply crosses on its way to the caller is another).
/// Prints a row per transport and returns the RPC p50s.
fn round_trips(rt: &tokio::runtime::Runtime, paths: &[Path; 3], n: usize) -> Vec<Duration> {
    let mut rpc_p50s = Vec::new();
    // `ANTLER_BENCH_PROFILE=rpc|raw`: only that path over TLS, n round trips, no table (for
    // an instruction count of one path, taken as the difference of two counts of n).
    if let Ok(path) = std::env::var("ANTLER_BENCH_PROFILE") {
        let (_, raw, rpc, _, me) = &paths[2];
        rt.block_on(async {
            match path.as_str() {
                "raw" => drop(raw_round_trips(raw, n).await),
                _ => drop(rpc_round_trips(rpc, me, n).await),
            }
        });
        return rpc_p50s;
    }
    for (name, raw, rpc, _, me) in paths {
        rt.block_on(async {
            raw_round_trips(raw, n / 10).await;
            rpc_round_trips(rpc, me, n / 10).await;
            let (mut raws, mut rpcs) = (Vec::new(), Vec::new());
            let (mut raw_cs, mut rpc_cs) = (0, 0);
            let each = n / ROUNDS;
            for round in 0..ROUNDS {
                if round % 2 == 0 {
                    raws.extend(counted(&mut raw_cs, raw_round_trips(raw, each)).await);
                    rpcs.extend(counted(&mut rpc_cs, rpc_round_trips(rpc, me, each)).await);
                } else {
                    rpcs.extend(counted(&mut rpc_cs, rpc_round_trips(rpc, me, each)).await);
                    raws.extend(counted(&mut raw_cs, raw_round_trips(raw, each)).await);
                }
            }
            let (raw_f, rpc_f) = (Figures::of(raws), Figures::of(rpcs));
            rpc_p50s.push(rpc_f.p50);
            let per = |cs: u64| cs as f64 / (each * ROUNDS) as f64;
            println!(
                "{:<22} {:>8.1}µs {:>8.1}µs {:>8.1}µs {:>8.1}µs {:>7.2}x {:>7.2} {:>7.2}",
                name,
                us(raw_f.p50),
                us(rpc_f.p50),
                us(raw_f.p99),
                us(rpc_f.p99),
                rpc_f.p50.as_secs_f64() / raw_f.p50.as_secs_f64(),
                per(raw_cs),
                per(rpc_cs),
            );
        });
    }
    rpc_p50s
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--serve-child") {
        return serve_child(&args[i + 1..]);
    }
    // `cargo bench` passes `--bench`; a filter argument other than that is ignored.
    let n: usize = std::env::var("ANTLER_BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let dir = tempfile::tempdir().expect("tmp");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");

    println!(
        "antler-protocol bench: {n} round trips each; small request = {} bytes on the wire",
        request_frame().len()
    );
    // `ANTLER_BENCH_ONLY=pinned` runs only the pinned layout (for a profiler or strace).
    let only_pinned = std::env::var("ANTLER_BENCH_ONLY").is_ok_and(|v| v == "pinned");
    let tls = bench_tls();
    if only_pinned {
        return pinned_round_trips(&rt, dir.path(), &tls, n);
    }
    let paths = paths(dir.path(), "in", &tls);
    serve(
        paths
            .iter()
            .map(|(_, raw, rpc, t, _)| (raw.address.clone(), rpc.clone(), t.clone()))
            .collect(),
    );
    header("servers in this process: its one I/O thread serves both ends");
    let rpc_p50s = round_trips(&rt, &paths, n);
    // As in a cluster: the servers in another process, so a reply crosses the server's
    // I/O thread, this process's I/O thread and the calling task.
    let apart = self::paths(dir.path(), "apart", &tls);
    let _child = spawn_child(dir.path(), &tls, &apart);
    println!();
    header("servers in a child process, as in a cluster");
    let apart_p50s = round_trips(&rt, &apart, n);

    let pipelined = n * 10;
    println!();
    println!(
        "{:<22} {:>14} {:>14} {:>8}",
        "pipelined (1 conn)", "raw msg/s", "rpc msg/s", "rpc/raw"
    );
    let mut rpc_rates = Vec::new();
    for (name, raw, rpc, _, me) in &paths {
        rt.block_on(async {
            rpc_pipelined(rpc, me, pipelined / 10, 256).await;
            let raw_rate = raw_pipelined(raw, pipelined).await;
            let rpc_rate = rpc_pipelined(rpc, me, pipelined, 256).await;
            rpc_rates.push(rpc_rate);
            println!(
                "{:<22} {:>14.0} {:>14.0} {:>8.2}",
                name,
                raw_rate,
                rpc_rate,
                rpc_rate / raw_rate
            );
        });
    }
    println!(
        "\ntls against plain tcp: rpc p50 {:.2}x (in a child process {:.2}x), pipelined rpc {:.2}x",
        rpc_p50s[2].as_secs_f64() / rpc_p50s[1].as_secs_f64(),
        apart_p50s[2].as_secs_f64() / apart_p50s[1].as_secs_f64(),
        rpc_rates[2] / rpc_rates[1]
    );

    // Last, as it cannot be undone: every thread of this process and of a new child on one
    // CPU, so a wake is a context switch, never a vCPU brought out of idle (whose latency
    // on a VM swings the figures above by a factor of two either way).
    pinned_round_trips(&rt, dir.path(), &tls, n);
    println!("targets: rpc p50 <= 2.0x raw echo p50 (unix, tcp); over tls <= 1.3x the raw tls echo; >= 200000 pipelined msg/s");
}

/// The head of a round-trip table of one layout.
fn header(layout: &str) {
    println!(
        "{:<22} {:>10} {:>10} {:>10} {:>10} {:>8} {:>7} {:>7}   ({layout})",
        "transport", "raw p50", "rpc p50", "raw p99", "rpc p99", "p50 x", "raw cs", "rpc cs"
    )
}

/// The round trips with this process and the servers' child pinned to one CPU.
fn pinned_round_trips(
    rt: &tokio::runtime::Runtime,
    dir: &std::path::Path,
    tls: &BenchTls,
    n: usize,
) {
    if pin_to_one_cpu() {
        let pinned = paths(dir, "pinned", tls);
        let _pinned_child = spawn_child(dir, tls, &pinned);
        println!();
        header("servers in a child process, both processes on one CPU");
        round_trips(rt, &pinned, n);
    } else {
        println!("\n(this machine would not pin the bench to one CPU: that layout is left out)");
    }
}

/// Pins every thread of this process to CPU 0; processes it starts later inherit it.
fn pin_to_one_cpu() -> bool {
    // SAFETY: a zeroed `cpu_set_t` is the empty set, which `CPU_SET` fills in.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe { libc::CPU_SET(0, &mut set) };
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return false;
    };
    tasks.flatten().all(|task| {
        let tid: libc::pid_t = task.file_name().to_string_lossy().parse().unwrap_or(0);
        // SAFETY: `set` is a valid CPU set of the size given.
        tid > 0
            && unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) }
                == 0
    })
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}
