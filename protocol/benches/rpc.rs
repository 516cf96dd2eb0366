//! Protocol benchmark: round trip of a small request over a Unix socket, over TCP
//! loopback and over TCP loopback with mutual TLS 1.3 (p50, p99), and pipelined small
//! messages per second on one connection, each beside a raw echo of the same bytes on the
//! same transport (for TLS: a tokio-rustls echo with the same certificates and configs)
//! measured in the same run, in alternating rounds whose times are pooled (drift on a shared
//! machine, its load or a vCPU's idle state, hits both paths alike); then TLS against plain
//! TCP. The RPC server answers pings on
//! its I/O thread, as every host does (`Service::answers_now`).
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

/// A cluster CA and a certificate for the lead and for mcp-host, in memory.
struct BenchTls {
    lead: Arc<ClusterTls>,
    host: Arc<ClusterTls>,
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
        Arc::new(
            ClusterTls::from_pem(
                ca_pem.as_bytes(),
                cert.pem().as_bytes(),
                key.serialize_pem().as_bytes(),
            )
            .expect("tls"),
        )
    };
    BenchTls {
        lead: for_role(Role::Lead),
        host: for_role(Role::McpHost),
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
                        if w.write_all(&buf[..n]).await.is_err() {
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

fn main() {
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
    println!(
        "{:<22} {:>10} {:>10} {:>10} {:>10} {:>8}",
        "transport", "raw p50", "rpc p50", "raw p99", "rpc p99", "p50 x"
    );
    let tls = bench_tls();
    let tcp = |port: u16| Address::Tcp(format!("127.0.0.1:{port}"));
    let plain = Identity::new(Role::Lead, "bench", None);
    let secure = Identity::new(Role::Lead, "bench", None).with_tls(Some(tls.lead.clone()));
    // (name, raw echo, rpc server, the rpc client's identity)
    let paths = [
        (
            "unix socket",
            Raw {
                address: Address::Unix(dir.path().join("raw.sock")),
                tls: None,
            },
            Address::Unix(dir.path().join("rpc.sock")),
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
    ];
    for (_, raw, rpc, server_tls, _) in &paths {
        let (a, t) = (raw.address.clone(), server_tls.clone());
        spawn_peer(move |ready| raw_echo_server(a, t, ready));
        let (a, t) = (rpc.clone(), server_tls.clone());
        spawn_peer(move |ready| rpc_server(a, t, ready));
    }
    let mut rpc_p50s = Vec::new();
    for (name, raw, rpc, _, me) in &paths {
        rt.block_on(async {
            // Warm up both paths, then alternate short rounds (and which goes first) so
            // drift on a shared machine (load, a vCPU's idle state) hits both alike; the
            // ratio is the median of the rounds' ratios.
            raw_round_trips(raw, n / 10).await;
            rpc_round_trips(rpc, me, n / 10).await;
            let (mut raws, mut rpcs) = (Vec::new(), Vec::new());
            for round in 0..ROUNDS {
                if round % 2 == 0 {
                    raws.extend(raw_round_trips(raw, n / ROUNDS).await);
                    rpcs.extend(rpc_round_trips(rpc, me, n / ROUNDS).await);
                } else {
                    rpcs.extend(rpc_round_trips(rpc, me, n / ROUNDS).await);
                    raws.extend(raw_round_trips(raw, n / ROUNDS).await);
                }
            }
            let (raw_f, rpc_f) = (Figures::of(raws), Figures::of(rpcs));
            rpc_p50s.push(rpc_f.p50);
            println!(
                "{:<22} {:>8.1}µs {:>8.1}µs {:>8.1}µs {:>8.1}µs {:>7.2}x",
                name,
                us(raw_f.p50),
                us(rpc_f.p50),
                us(raw_f.p99),
                us(rpc_f.p99),
                rpc_f.p50.as_secs_f64() / raw_f.p50.as_secs_f64()
            );
        });
    }

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
        "\ntls against plain tcp: rpc p50 {:.2}x, pipelined rpc {:.2}x",
        rpc_p50s[2].as_secs_f64() / rpc_p50s[1].as_secs_f64(),
        rpc_rates[2] / rpc_rates[1]
    );
    println!("targets: rpc p50 <= 2.0x raw echo p50 (unix, tcp); over tls <= 1.3x the raw tls echo; >= 200000 pipelined msg/s");
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
