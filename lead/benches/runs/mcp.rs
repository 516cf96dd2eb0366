//! Section 7 of the runs benchmark: Antler's MCP server. The real gateway (in this
//! process, on loopback, a member's static token) serves `/mcp`; a minimal streamable-HTTP
//! JSON-RPC client on a runtime of its own (as a client process would be) opens a session
//! and calls a builtin (`list_uploaded_files`, answered in the lead) and a sandbox `bash`
//! of `true`. The timed requests are written and read by hand on one kept-alive connection
//! ([`RawHttp`]), so a round trip is the server's and not the client library's; the same
//! calls through reqwest, on a second session, are reported beside. The baseline is the same call through the run loop's client call path that
//! `/mcp` ends in (`RunEnv::start_client_session`, `RunLoop::call_from_client`, the run
//! hosted by the run manager as a session's run is, so its events go through the same sink
//! and event journal), in the same rounds, interleaved, on a run whose state grows as the
//! session's does. (`antler tool call` is another path: a CLI process,
//! and a sandbox acquired and released per call.) Floors locate the added time: a bare
//! `GET /health` (HTTP on loopback, actix-web, the principal), an MCP `ping` on the session
//! (plus rmcp's session layer and the gateway's bridge), `tools/list` (plus the session's
//! actor, on the gateway's worker beside rmcp's session), `RunLoop::visible_tools` and one
//! thread hop (what a session's call made while its actor ran on the lead's arbiter). Then 200
//! sessions opened at once, a call on each, and the heap each idle session holds, opened
//! and with its run bound. Hosts are [`ZeroLatencyHosts`]; when the `antler-sandbox-host`
//! binary is built, the round trips are measured again against the real sandbox-host
//! (`bash true` in a sandbox).

use std::process::{Child, Command, Stdio};

use super::*;
use antler_engine::ToolCall;
use antler_lead::cluster::{RestartPolicy, Runs, Supervisor};
use antler_lead::gateway::{Gateway, GATEWAY_ADDR_ENV};
use antler_lead::runs::{open_client_run, ClientRunEnded};
use antler_lead::subagents::SubagentDispatcher;
use antler_protocol::config::{GatewaySection, StaticPrincipal};
use antler_protocol::{Address, Connection, ConnectionConfig, Identity, TraceContext};
use serde_json::Value;

/// The member whose token the client presents.
const MEMBER: &str = "bench";
const MEMBER_ROLE: &str = "member";
const MEMBER_TOKEN: &str = "bench-member-token-0123456789abcdef";
/// The session revision the client negotiates (rmcp serves sessions up to 2025-11-25).
const PROTOCOL: &str = "2025-06-18";
/// Interleaved rounds; each opens one MCP session and one baseline run, and makes
/// [`CALLS_PER_ROUND`] calls of each kind on both.
const ROUNDS: usize = 8;
const CALLS_PER_ROUND: usize = 25;
/// Sessions opened at once for the concurrency and memory figures.
const SESSIONS: usize = 200;
/// The target: what serving a call over `/mcp` may add to its p50.
const TARGET_ADDED: Duration = Duration::from_micros(300);
/// The config the runs are prepared with: `bash` is a sandbox tool.
const CONFIG: &str = "tools:\n  - {name: bash, group: bash, use: \"deerflow.sandbox.tools:bash_tool\"}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n";

#[derive(Clone, Copy, PartialEq, Eq)]
enum CallKind {
    Builtin,
    Bash,
}

impl CallKind {
    const ALL: [CallKind; 2] = [CallKind::Builtin, CallKind::Bash];

    fn label(self) -> &'static str {
        match self {
            CallKind::Builtin => "builtin (list_uploaded_files)",
            CallKind::Bash => "sandbox (bash true)",
        }
    }

    fn name(self) -> &'static str {
        match self {
            CallKind::Builtin => "list_uploaded_files",
            CallKind::Bash => "bash",
        }
    }

    /// The `k`th call's arguments (they differ from call to call, as a model's do).
    fn args(self, k: usize) -> Value {
        match self {
            CallKind::Builtin => json!({"max_results": 10 + k % 50}),
            CallKind::Bash => json!({"description": format!("check {k}"), "command": "true"}),
        }
    }
}

/// The lead's run side and its gateway, as `antler up` builds them, on a temporary
/// directory, with `hosts` for sandbox-host and mcp-host.
struct ServedLead {
    _dir: tempfile::TempDir,
    gateway: Gateway,
    env: Arc<RunEnv>,
    manager: Addr<RunManager>,
    url: String,
}

impl ServedLead {
    /// Starts it; call inside an actix system.
    async fn start(hosts: &HostsOf) -> ServedLead {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        let hosts = hosts.connect(path.join("data")).await;
        let config = path.join("config.yaml");
        std::fs::write(&config, CONFIG).unwrap();
        let store = CheckpointStore::open(&path.join("checkpoints.sqlite")).unwrap();
        let catalog = CatalogActor::new(Sources {
            config: Arc::default(),
            extensions: None,
            mcp: Default::default(),
        })
        .start();
        let extensions = path.join("extensions_config.json");
        let env = Arc::new(RunEnv::new(
            store.clone(),
            hosts,
            catalog.clone(),
            Some(config),
            extensions.clone(),
        ));
        let metrics = Arc::new(Metrics::default());
        let manager = RunManager::new(env.clone(), metrics.clone(), false).start();
        let supervisor = Supervisor::new(
            Vec::new(),
            Identity::new(Role::Lead, "bench", Some("bench-cluster-token".into())),
            ConnectionConfig::default(),
            RestartPolicy::default(),
        )
        .start();
        let dispatcher = SubagentDispatcher::new(supervisor.clone()).start();
        let runs = Runs {
            manager: manager.clone(),
            metrics,
            dispatcher,
            catalog,
            store,
            env: env.clone(),
            ownership: None,
        };
        let settings = GatewaySection {
            tokens: vec![StaticPrincipal {
                token: MEMBER_TOKEN.into(),
                user: MEMBER.into(),
                role: Some(MEMBER_ROLE.into()),
            }],
            ..GatewaySection::default()
        };
        std::env::set_var(GATEWAY_ADDR_ENV, "127.0.0.1:0");
        let gateway = Gateway::start(&path, extensions, supervisor, runs, &settings, &path)
            .unwrap()
            .expect("the gateway listens");
        let url = format!("http://{}", gateway.address);
        ServedLead {
            _dir: dir,
            gateway,
            env,
            manager,
            url,
        }
    }
}

// ---------------------------------------------------------------------------------------
// A minimal streamable-HTTP MCP client: JSON-RPC posted, the reply read from the JSON or
// SSE body.

#[derive(Clone)]
struct McpClient {
    http: reqwest::Client,
    base: String,
}

struct McpSessionId {
    id: String,
    next: u64,
    /// The session's own connection for the timed requests ([`RawHttp`]), once opened.
    raw: Option<RawHttp>,
}

impl McpClient {
    fn new(base: &str) -> McpClient {
        McpClient {
            http: reqwest::Client::builder().no_proxy().build().unwrap(),
            base: base.to_owned(),
        }
    }

    async fn post(&self, session: Option<&str>, body: &Value) -> reqwest::Response {
        let mut request = self
            .http
            .post(format!("{}/mcp", self.base))
            .bearer_auth(MEMBER_TOKEN)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(id) = session {
            request = request
                .header("mcp-session-id", id)
                .header("mcp-protocol-version", PROTOCOL);
        }
        request.send().await.unwrap()
    }

    /// Opens a session (`initialize`, then `notifications/initialized`).
    async fn open(&self) -> McpSessionId {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL,
            "capabilities": {},
            "clientInfo": {"name": "antler-bench", "version": "0"},
        }});
        let response = self.post(None, &init).await;
        assert!(response.status().is_success(), "{}", response.status());
        let id = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .expect("a session id")
            .to_owned();
        reply_of(&response.text().await.unwrap(), 0);
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let response = self.post(Some(&id), &initialized).await;
        assert_eq!(response.status().as_u16(), 202);
        McpSessionId {
            id,
            next: 1,
            raw: None,
        }
    }

    /// One request on `session`; its result. On the session's [`RawHttp`] connection when
    /// it has one ([`McpClient::open_raw`]), else through reqwest.
    async fn request(&self, session: &mut McpSessionId, method: &str, params: Value) -> Value {
        let id = session.next;
        session.next += 1;
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let Some(raw) = session.raw.as_mut() else {
            let response = self.post(Some(&session.id), &body).await;
            assert!(response.status().is_success(), "{}", response.status());
            return reply_of(&response.text().await.unwrap(), id);
        };
        let headers = [
            ("accept", "application/json, text/event-stream"),
            ("content-type", "application/json"),
            ("mcp-session-id", session.id.as_str()),
            ("mcp-protocol-version", PROTOCOL),
        ];
        let (status, answer) = raw
            .send("POST", "/mcp", &headers, body.to_string().as_bytes())
            .await;
        assert!((200..300).contains(&status), "{status}");
        reply_of(std::str::from_utf8(&answer).unwrap(), id)
    }

    /// A `tools/call`; panics on a tool error (a bench must not measure failures).
    async fn call(&self, session: &mut McpSessionId, kind: CallKind, k: usize) {
        let result = self
            .request(
                session,
                "tools/call",
                json!({"name": kind.name(), "arguments": kind.args(k)}),
            )
            .await;
        assert_eq!(result["isError"], json!(false), "{result}");
    }

    /// [`McpClient::open`], and the session's [`RawHttp`] connection.
    async fn open_raw(&self) -> McpSessionId {
        let mut session = self.open().await;
        session.raw = Some(RawHttp::connect(&self.base).await);
        session
    }

    /// `GET /health` with the member's token, on the session's [`RawHttp`] connection: the
    /// HTTP floor.
    async fn health_raw(&self, session: &mut McpSessionId) {
        let raw = session.raw.as_mut().expect("opened with open_raw");
        let (status, _) = raw.send("GET", "/health", &[], b"").await;
        assert!((200..300).contains(&status), "{status}");
    }

    async fn close(&self, session: McpSessionId) {
        let response = self
            .http
            .delete(format!("{}/mcp", self.base))
            .bearer_auth(MEMBER_TOKEN)
            .header("mcp-session-id", &session.id)
            .header("mcp-protocol-version", PROTOCOL)
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "{}", response.status());
    }
}

/// One kept-alive HTTP/1.1 connection to the gateway, written and read by hand: a request
/// goes out in one write, its answer is read by its `content-length` (the gateway answers
/// a lone JSON-RPC answer as JSON). The timed requests go this way, so that a round trip
/// is the server's and the kernel's: reqwest's own work on a request and its answer (URL
/// parsing, its connection task, hyper's both ways) is the client's, and is reported
/// beside as the same calls made through reqwest.
struct RawHttp {
    stream: tokio::net::TcpStream,
    host: String,
    buf: Vec<u8>,
}

impl RawHttp {
    async fn connect(base: &str) -> RawHttp {
        let host = base.trim_start_matches("http://").to_owned();
        let stream = tokio::net::TcpStream::connect(&host).await.unwrap();
        stream.set_nodelay(true).unwrap();
        RawHttp {
            stream,
            host,
            buf: Vec::with_capacity(16 << 10),
        }
    }

    /// `method path` with the member's token, `headers` and `body`: the answer's status and
    /// body.
    async fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> (u16, Vec<u8>) {
        use std::fmt::Write as _;
        use tokio::io::AsyncWriteExt as _;
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer {MEMBER_TOKEN}\r\ncontent-length: {}\r\n",
            self.host,
            body.len()
        );
        for (name, value) in headers {
            let _ = write!(head, "{name}: {value}\r\n");
        }
        head.push_str("\r\n");
        let mut out = head.into_bytes();
        out.extend_from_slice(body);
        self.stream.write_all(&out).await.unwrap();
        self.answer().await
    }

    async fn answer(&mut self) -> (u16, Vec<u8>) {
        self.buf.clear();
        let end = loop {
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break end;
            }
            self.read_more().await;
        };
        let head = std::str::from_utf8(&self.buf[..end]).unwrap().to_owned();
        let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
        let mut length = None;
        for line in head.split("\r\n").skip(1) {
            let (name, value) = line.split_once(':').unwrap();
            assert!(
                !name.eq_ignore_ascii_case("transfer-encoding"),
                "a streamed answer: {head}"
            );
            if name.eq_ignore_ascii_case("content-length") {
                length = Some(value.trim().parse::<usize>().unwrap());
            }
        }
        let start = end + 4;
        let length = length.unwrap_or_else(|| panic!("no content-length: {head}"));
        while self.buf.len() < start + length {
            self.read_more().await;
        }
        assert_eq!(self.buf.len(), start + length, "bytes after the answer");
        (status, self.buf[start..].to_vec())
    }

    async fn read_more(&mut self) {
        use tokio::io::AsyncReadExt as _;
        let read = self.stream.read_buf(&mut self.buf).await.unwrap();
        assert!(read > 0, "the gateway closed the connection");
    }
}

/// The JSON-RPC result for request `id` in a JSON or SSE body (a server may answer
/// either way); panics on an error reply.
fn reply_of(body: &str, id: u64) -> Value {
    if body.starts_with('{') {
        let message: Value = serde_json::from_str(body).unwrap();
        assert_eq!(message["id"], json!(id), "{message}");
        assert!(message.get("error").is_none(), "{message}");
        return message["result"].clone();
    }
    for line in body.lines() {
        let Some(data) = line.strip_prefix("data:").map(str::trim) else {
            continue;
        };
        if data.is_empty() {
            continue;
        }
        let message: Value = serde_json::from_str(data).unwrap();
        if message["id"] == json!(id) {
            assert!(message.get("error").is_none(), "{message}");
            return message["result"].clone();
        }
    }
    panic!("no reply to request {id} in {body:?}")
}

/// Runs `work` on the client's runtime (its own thread) and waits for it here.
async fn on_client<T: Send + 'static>(
    client: &tokio::runtime::Runtime,
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    client.spawn(work).await.unwrap()
}

fn client_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

// ---------------------------------------------------------------------------------------
// Round trips.

/// An actor on the lead's arbiter that answers at once: the cost of a thread hop.
struct Echo;

impl Actor for Echo {
    type Context = Context<Self>;
}

#[derive(Message)]
#[rtype(result = "()")]
struct Knock;

impl Handler<Knock> for Echo {
    type Result = ();

    fn handle(&mut self, _: Knock, _: &mut Context<Self>) {}
}

#[derive(Default)]
struct TripSamples {
    /// By kind: over `/mcp` ([`RawHttp`]), over `/mcp` through reqwest, and through the
    /// run loop.
    mcp: [Vec<Duration>; 2],
    reqwest: [Vec<Duration>; 2],
    direct: [Vec<Duration>; 2],
    health: Vec<Duration>,
    ping: Vec<Duration>,
    list: Vec<Duration>,
    /// `RunLoop::visible_tools` alone (an MCP call computes it twice, to see whether the
    /// call changed the client's tools).
    visible: Vec<Duration>,
    /// An empty actix message to an actor on the lead's arbiter and back, sent from the
    /// client's thread: one thread hop each way, as a session's request makes.
    hop: Vec<Duration>,
}

pub struct TripFigures {
    /// By kind: (MCP p50, p90), (MCP through reqwest p50, p90), (run loop p50, p90).
    pub mcp: [(Duration, Duration); 2],
    pub reqwest: [(Duration, Duration); 2],
    pub direct: [(Duration, Duration); 2],
    pub health_p50: Duration,
    pub ping_p50: Duration,
    pub list_p50: Duration,
    pub visible_p50: Duration,
    pub hop_p50: Duration,
    pub samples: usize,
}

impl TripFigures {
    fn added(&self, kind: usize) -> Duration {
        self.mcp[kind].0.saturating_sub(self.direct[kind].0)
    }
}

fn p50_p90(samples: &mut [Duration]) -> (Duration, Duration) {
    (percentile(samples, 0.5), percentile(samples, 0.9))
}

/// The round trips against `hosts`.
fn bench_trips(hosts: &HostsOf) -> TripFigures {
    let client_rt = client_runtime();
    let system = actix::System::new();
    let mut samples = TripSamples::default();
    system.block_on(async {
        let lead = ServedLead::start(hosts).await;
        let client = McpClient::new(&lead.url);
        // Warm-up round (connections, catalog, SQLite, sandbox), not counted.
        let mut warm = TripSamples::default();
        trip_round(&lead, &client, &client_rt, usize::MAX, 5, &mut warm).await;
        for round in 0..ROUNDS {
            trip_round(
                &lead,
                &client,
                &client_rt,
                round,
                CALLS_PER_ROUND,
                &mut samples,
            )
            .await;
        }
        lead.gateway.stop().await;
    });
    drop(client_rt);
    let [mut mcp0, mut mcp1] = samples.mcp;
    let [mut reqwest0, mut reqwest1] = samples.reqwest;
    let [mut direct0, mut direct1] = samples.direct;
    TripFigures {
        samples: mcp0.len(),
        mcp: [p50_p90(&mut mcp0), p50_p90(&mut mcp1)],
        reqwest: [p50_p90(&mut reqwest0), p50_p90(&mut reqwest1)],
        direct: [p50_p90(&mut direct0), p50_p90(&mut direct1)],
        health_p50: percentile(&mut samples.health, 0.5),
        ping_p50: percentile(&mut samples.ping, 0.5),
        list_p50: percentile(&mut samples.list, 0.5),
        visible_p50: percentile(&mut samples.visible, 0.5),
        hop_p50: percentile(&mut samples.hop, 0.5),
    }
}

/// How a call of a round is made.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Via {
    /// Over `/mcp`, the client [`RawHttp`].
    Raw,
    /// Over `/mcp`, the client reqwest (another session).
    Reqwest,
    /// Through the run loop.
    Loop,
}

/// One round: two MCP sessions (one called over [`RawHttp`], one through reqwest) and a
/// run of the baseline, `calls` calls of each kind on each, in rotating order, with the
/// floors between them.
async fn trip_round(
    lead: &ServedLead,
    client: &McpClient,
    client_rt: &tokio::runtime::Runtime,
    round: usize,
    calls: usize,
    samples: &mut TripSamples,
) {
    // Opened and hosted by the run manager as a session's run is: its events go through
    // the same sink (the run's log, its metrics, the event journal's writes to the runs
    // store).
    let run_id = format!("direct-{round}");
    let (mut run, events) = open_client_run(
        &lead.env,
        &lead.manager,
        &run_id,
        MEMBER,
        Some(MEMBER_ROLE),
        &format!("direct-thread-{round}"),
    )
    .await
    .unwrap();
    run.on_event(move |event: &antler_engine::RunEvent| events(event));
    let echo = Echo.start();
    let renewal = actix::spawn(run.lease_renewal());
    let opening = client.clone();
    let (mut session, mut through_reqwest) = on_client(client_rt, async move {
        (opening.open_raw().await, opening.open().await)
    })
    .await;
    for k in 0..calls {
        for (i, kind) in CallKind::ALL.into_iter().enumerate() {
            // Each path first, second and last in turn.
            let mut paths = [Via::Raw, Via::Reqwest, Via::Loop];
            paths.rotate_left((k + i) % 3);
            for path in paths {
                if path == Via::Raw {
                    let calling = client.clone();
                    let (back, took) = on_client(client_rt, async move {
                        let started = Instant::now();
                        calling.call(&mut session, kind, k).await;
                        (session, started.elapsed())
                    })
                    .await;
                    session = back;
                    samples.mcp[i].push(took);
                } else if path == Via::Reqwest {
                    let calling = client.clone();
                    let (back, took) = on_client(client_rt, async move {
                        let started = Instant::now();
                        calling.call(&mut through_reqwest, kind, k).await;
                        (through_reqwest, started.elapsed())
                    })
                    .await;
                    through_reqwest = back;
                    samples.reqwest[i].push(took);
                } else {
                    let call = ToolCall {
                        id: format!("direct-{round}-{i}-{k}"),
                        name: kind.name().to_owned(),
                        args: kind.args(k),
                    };
                    let started = Instant::now();
                    let messages = run
                        .call_from_client(call, std::future::pending::<()>())
                        .await
                        .unwrap();
                    samples.direct[i].push(started.elapsed());
                    assert_eq!(messages.len(), 1);
                }
            }
        }
        let pinging = client.clone();
        let knocking = echo.clone();
        let (back, health, ping, list, hop) = on_client(client_rt, async move {
            let started = Instant::now();
            pinging.health_raw(&mut session).await;
            let health = started.elapsed();
            let started = Instant::now();
            pinging.request(&mut session, "ping", json!({})).await;
            let ping = started.elapsed();
            let started = Instant::now();
            pinging.request(&mut session, "tools/list", json!({})).await;
            let list = started.elapsed();
            let started = Instant::now();
            knocking.send(Knock).await.unwrap();
            (session, health, ping, list, started.elapsed())
        })
        .await;
        session = back;
        samples.health.push(health);
        samples.ping.push(ping);
        samples.list.push(list);
        samples.hop.push(hop);
        let started = Instant::now();
        std::hint::black_box(run.visible_tools());
        samples.visible.push(started.elapsed());
    }
    let closing = client.clone();
    on_client(client_rt, async move {
        closing.close(through_reqwest).await;
        closing.close(session).await;
    })
    .await;
    run.end_client_session().await;
    lead.manager
        .send(ClientRunEnded {
            run_id,
            status: RunStatus::Success,
        })
        .await
        .unwrap();
    renewal.abort();
}

// ---------------------------------------------------------------------------------------
// 200 sessions.

pub struct SessionFigures {
    /// Wall time to open the sessions at once.
    pub open_wall: Duration,
    /// Wall time to then make one call on each at once.
    pub wall: Duration,
    /// Heap per session opened, before its run is bound (rmcp's session, the handler).
    pub opened_heap_per_session: f64,
    /// The one-call latency under that load.
    pub call_p50: Duration,
    pub call_p90: Duration,
    pub failed: usize,
    /// Per idle session, the client's connections closed.
    pub heap_per_session: f64,
    pub rss_per_session: f64,
    /// Heap left per session after each was closed (what a closed session leaks).
    pub heap_after_close_per_session: f64,
}

fn bench_sessions() -> SessionFigures {
    let client_rt = client_runtime();
    let system = actix::System::new();
    system.block_on(async {
        let lead = ServedLead::start(&HostsOf::StandIn).await;
        // Warm-up: one session with its run bound, then closed; its client dropped.
        let warm = McpClient::new(&lead.url);
        on_client(&client_rt, async move {
            let mut session = warm.open().await;
            warm.call(&mut session, CallKind::Bash, 0).await;
            warm.close(session).await;
        })
        .await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (heap_before, rss_before) = (live(), rss());
        // All sessions opened at once.
        let client = McpClient::new(&lead.url);
        let opening = client.clone();
        let (open_wall, sessions, open_failed) = on_client(&client_rt, async move {
            let started = Instant::now();
            let opened = (0..SESSIONS).map(|_| {
                let client = opening.clone();
                tokio::spawn(async move { client.open().await })
            });
            let opened = futures::future::join_all(opened).await;
            let wall = started.elapsed();
            let failed = opened.iter().filter(|o| o.is_err()).count();
            (
                wall,
                opened.into_iter().flatten().collect::<Vec<_>>(),
                failed,
            )
        })
        .await;
        // The client's connections go: an idle session needs none.
        drop(client);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let opened_heap = live() - heap_before;
        // Then one call on each at once: each session binds its run.
        let client = McpClient::new(&lead.url);
        let calling = client.clone();
        let (wall, sessions, mut calls, call_failed) = on_client(&client_rt, async move {
            let started = Instant::now();
            let called = sessions.into_iter().enumerate().map(|(k, mut session)| {
                let client = calling.clone();
                tokio::spawn(async move {
                    let t = Instant::now();
                    client.call(&mut session, CallKind::Bash, k).await;
                    (session, t.elapsed())
                })
            });
            let called = futures::future::join_all(called).await;
            let wall = started.elapsed();
            let failed = called.iter().filter(|o| o.is_err()).count();
            let (sessions, calls): (Vec<_>, Vec<_>) = called.into_iter().flatten().unzip();
            (wall, sessions, calls, failed)
        })
        .await;
        drop(client);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let idle_heap = live() - heap_before;
        let idle_rss = rss() as i64 - rss_before as i64;
        let n = sessions.len().max(1) as f64;
        let closer = McpClient::new(&lead.url);
        on_client(&client_rt, async move {
            let closing = sessions.into_iter().map(|s| closer.close(s));
            futures::future::join_all(closing).await;
        })
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let after_close = live() - heap_before;
        lead.gateway.stop().await;
        SessionFigures {
            open_wall,
            wall,
            opened_heap_per_session: opened_heap as f64 / n,
            call_p50: percentile(&mut calls, 0.5),
            call_p90: percentile(&mut calls, 0.9),
            failed: open_failed + call_failed,
            heap_per_session: idle_heap as f64 / n,
            rss_per_session: idle_rss as f64 / n,
            heap_after_close_per_session: after_close as f64 / n,
        }
    })
}

// ---------------------------------------------------------------------------------------
// The real sandbox-host.

/// sandbox-host, spawned; killed when dropped.
struct SandboxHost {
    child: Child,
    _dir: tempfile::TempDir,
    socket: PathBuf,
}

impl Drop for SandboxHost {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const SANDBOX_HOST_TOKEN: &str = "bench-sandbox-token";

/// The `antler-sandbox-host` binary beside this bench's target directory (or in
/// `ANTLER_BIN_DIR`), when built.
fn sandbox_host_binary() -> Option<PathBuf> {
    let dir = match std::env::var_os("ANTLER_BIN_DIR") {
        Some(dir) => PathBuf::from(dir),
        // target/<profile>/deps/runs-… → target/<profile>
        None => std::env::current_exe()
            .ok()?
            .parent()?
            .parent()?
            .to_path_buf(),
    };
    Some(dir.join("antler-sandbox-host")).filter(|p| p.exists())
}

fn spawn_sandbox_host(binary: &Path) -> SandboxHost {
    let dir = tempfile::Builder::new()
        .prefix("antler-bench-mcp")
        .tempdir_in("/tmp")
        .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, SANDBOX_HOST_TOKEN).unwrap();
    let socket = dir.path().join("sb.sock");
    let child = Command::new(binary)
        .arg("--listen")
        .arg(format!("unix:{}", socket.display()))
        .arg("--token-file")
        .arg(&token)
        .arg("--config")
        .arg(&config)
        .arg("--base-dir")
        .arg(dir.path().join("base"))
        .env("RUST_LOG", "error")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        assert!(Instant::now() < until, "sandbox-host did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    SandboxHost {
        child,
        _dir: dir,
        socket,
    }
}

/// sandbox-host's requests over a connection to the real one; mcp-host's answered by
/// the stand-in.
struct RealSandboxHost {
    connection: Connection,
    others: ZeroLatencyHosts,
}

impl ToolHosts for RealSandboxHost {
    fn request(
        &self,
        role: Role,
        request: Request,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Reply, HostError>> {
        if role != Role::SandboxHost {
            return Box::pin(futures::future::ready(self.others.answer(request)));
        }
        Box::pin(async move {
            self.connection
                .request(request, TraceContext::new_root(), timeout)
                .await
                .map_err(|e| HostError::from_rpc(role, e))
        })
    }
}

/// The hosts a bench's lead calls.
enum HostsOf {
    StandIn,
    /// The real sandbox-host listening on this socket.
    SandboxHost(PathBuf),
}

impl HostsOf {
    /// Connected inside the actix system that uses them.
    async fn connect(&self, base_dir: PathBuf) -> Arc<dyn ToolHosts> {
        let stand_in = ZeroLatencyHosts { base_dir };
        match self {
            HostsOf::StandIn => Arc::new(stand_in),
            HostsOf::SandboxHost(socket) => {
                let connection = antler_protocol::link::dial(
                    &Address::Unix(socket.clone()),
                    &Identity::new(Role::Lead, "bench", Some(SANDBOX_HOST_TOKEN.into())),
                    ConnectionConfig::default(),
                    None,
                )
                .await
                .unwrap();
                Arc::new(RealSandboxHost {
                    connection,
                    others: stand_in,
                })
            }
        }
    }
}

// ---------------------------------------------------------------------------------------

fn print_trips(title: &str, t: &TripFigures) -> bool {
    println!("   {title}, {} calls of each kind per path:", t.samples);
    println!(
        "   {:<32} | {:>9} | {:>9} | {:>9} | {:>9} | {:>9} | {:>6}",
        "call", "MCP p50", "MCP p90", "loop p50", "loop p90", "added", "ratio"
    );
    let mut pass = true;
    for (i, kind) in CallKind::ALL.into_iter().enumerate() {
        let added = t.added(i);
        pass &= added <= TARGET_ADDED;
        println!(
            "   {:<32} | {:>9} | {:>9} | {:>9} | {:>9} | {:>9} | {:>5.2}x",
            kind.label(),
            fmt(t.mcp[i].0),
            fmt(t.mcp[i].1),
            fmt(t.direct[i].0),
            fmt(t.direct[i].1),
            fmt(added),
            t.mcp[i].0.as_secs_f64() / t.direct[i].0.as_secs_f64().max(1e-9)
        );
    }
    println!(
        "   the same calls with reqwest as the client (its own work on a request and its answer counted in):"
    );
    for (i, kind) in CallKind::ALL.into_iter().enumerate() {
        println!(
            "   {:<32} | {:>9} | {:>9} | {:>9} | {:>9} | {:>9} |",
            kind.label(),
            fmt(t.reqwest[i].0),
            fmt(t.reqwest[i].1),
            fmt(t.direct[i].0),
            fmt(t.direct[i].1),
            fmt(t.reqwest[i].0.saturating_sub(t.direct[i].0)),
        );
    }
    println!(
        "   floors: GET /health p50 {} (HTTP + actix-web + principal); MCP ping p50 {} (+ rmcp's session",
        fmt(t.health_p50),
        fmt(t.ping_p50)
    );
    println!(
        "   layer and the gateway's bridge); tools/list p50 {} (+ the session's actor, on the gateway's worker);",
        fmt(t.list_p50)
    );
    println!(
        "   RunLoop::visible_tools p50 {} (an MCP call computes it twice); an actix message to the lead's",
        fmt(t.visible_p50)
    );
    println!(
        "   arbiter from another thread and back p50 {} (a session's call no longer makes that hop)",
        fmt(t.hop_p50)
    );
    pass
}

/// Section 7; whether the added p50 met its target on every call kind.
pub fn print_mcp() -> bool {
    println!(
        "\n7. MCP server: a call over /mcp (streamable HTTP on loopback, a member's token) against the same"
    );
    println!(
        "   call through the run loop's client path (RunLoop::call_from_client), interleaved rounds. The"
    );
    println!(
        "   client writes and reads HTTP/1.1 by hand on one kept-alive connection (a round trip is the server's)."
    );
    let stand_in = bench_trips(&HostsOf::StandIn);
    let mut pass = print_trips("ZeroLatencyHosts", &stand_in);
    match sandbox_host_binary() {
        Some(binary) => {
            let host = spawn_sandbox_host(&binary);
            let real = bench_trips(&HostsOf::SandboxHost(host.socket.clone()));
            drop(host);
            pass &= print_trips("the real sandbox-host", &real);
        }
        None => println!(
            "   the real sandbox-host: skipped (build it: cargo build -p antler-sandbox-host --bins)"
        ),
    }
    let s = bench_sessions();
    println!(
        "   {SESSIONS} sessions opened at once: wall {}; then one bash call on each at once: wall {}, call p50 {}",
        fmt(s.open_wall),
        fmt(s.wall),
        fmt(s.call_p50),
    );
    println!("   (p90 {}); {} failed", fmt(s.call_p90), s.failed);
    println!(
        "   idle sessions (client disconnected): {:.1} KiB of heap per session opened; {:.1} KiB once its run is",
        s.opened_heap_per_session / 1024.0,
        s.heap_per_session / 1024.0,
    );
    println!(
        "   bound (RSS growth {:.1} KiB per session);",
        s.rss_per_session / 1024.0
    );
    println!(
        "   after all closed: {:.2} KiB of heap left per session",
        s.heap_after_close_per_session / 1024.0
    );
    println!(
        "   MCP serving added p50   target <= 0.3 ms on each call   {}",
        verdict(pass)
    );
    pass && s.failed == 0
}
