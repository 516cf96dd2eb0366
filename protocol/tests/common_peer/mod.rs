//! A test peer: a real server on a Unix socket in a temporary directory with a service
//! whose behaviour is chosen by the ping payload (slow, stream, big), shared by the
//! protocol's own tests.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    future::Future,
    path::PathBuf,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    task::Poll,
    time::Duration,
};

use antler_protocol::{
    link::dial,
    messages::{ControlReply, ControlRequest, Reply, Request},
    server::Server,
    Address, Call, Connection, ConnectionConfig, Identity, InFlight, RemoteError, Role, RpcError,
    Service, TraceContext,
};
use futures::future::BoxFuture;

pub const TOKEN: &str = "test-token";

#[derive(Default)]
pub struct Counters {
    pub started: AtomicUsize,
    pub finished: AtomicUsize,
    pub dropped_unfinished: AtomicUsize,
}

pub struct TestService {
    pub counters: Arc<Counters>,
}

struct DropProbe {
    counters: Arc<Counters>,
    done: bool,
}

impl Drop for DropProbe {
    fn drop(&mut self) {
        if !self.done {
            self.counters
                .dropped_unfinished
                .fetch_add(1, Ordering::SeqCst);
        }
    }
}

pub fn pong(payload: &[u8]) -> Reply {
    Reply::Control(ControlReply::Pong {
        payload: payload.to_vec(),
    })
}

pub fn ping(payload: &[u8]) -> Request {
    Request::Control(ControlRequest::Ping {
        payload: payload.to_vec(),
    })
}

impl Service for TestService {
    fn call(&self, request: Request, call: Call) -> BoxFuture<'static, Result<Reply, RemoteError>> {
        let counters = self.counters.clone();
        Box::pin(async move {
            counters.started.fetch_add(1, Ordering::SeqCst);
            let mut probe = DropProbe {
                counters: counters.clone(),
                done: false,
            };
            let payload = match request {
                Request::Control(ControlRequest::Ping { payload }) => payload,
                other => return Err(RemoteError::Unsupported(other.kind().into())),
            };
            let text = String::from_utf8_lossy(&payload).to_string();
            let result = if let Some(ms) = text.strip_prefix("sleep:") {
                let ms: u64 = ms.parse().unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok(pong(&payload))
            } else if let Some(n) = text.strip_prefix("stream:") {
                let n: usize = n.parse().unwrap_or(0);
                for i in 0..n {
                    call.send_item(pong(format!("item {i}").as_bytes()))
                        .await
                        .map_err(|e| RemoteError::Failed(e.to_string()))?;
                }
                Ok(pong(b"done"))
            } else if let Some(n) = text.strip_prefix("big:") {
                let n: usize = n.parse().unwrap_or(0);
                Ok(pong(&vec![7u8; n]))
            } else if text == "fail" {
                Err(RemoteError::Failed("asked to fail".into()))
            } else {
                Ok(pong(&payload))
            };
            probe.done = true;
            counters.finished.fetch_add(1, Ordering::SeqCst);
            result
        })
    }
}

pub struct Peer {
    pub dir: tempfile::TempDir,
    pub server: Server,
    pub counters: Arc<Counters>,
    pub address: Address,
}

pub fn socket_in(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("peer.sock")
}

pub async fn start_peer(config: ConnectionConfig) -> Peer {
    let dir = tempfile::tempdir().unwrap();
    let address = Address::Unix(socket_in(&dir));
    let counters = Arc::new(Counters::default());
    let server = serve_at(&address, config, counters.clone()).await;
    Peer {
        dir,
        server,
        counters,
        address,
    }
}

/// The test service (as mcp-host, with the test token) listening at `address`.
pub async fn serve_at(
    address: &Address,
    config: ConnectionConfig,
    counters: Arc<Counters>,
) -> Server {
    let me = Identity::new(Role::McpHost, "peer", Some(TOKEN.into()));
    serve_as(address, me, config, counters).await
}

/// The test service listening at `address` as `identity`.
pub async fn serve_as(
    address: &Address,
    identity: Identity,
    config: ConnectionConfig,
    counters: Arc<Counters>,
) -> Server {
    Server::bind(
        address,
        identity,
        config,
        Arc::new(TestService { counters }),
        Arc::new(InFlight::default()),
    )
    .await
    .unwrap()
}

pub async fn client(peer: &Peer, config: ConnectionConfig) -> Connection {
    dial(
        &peer.address,
        &Identity::new(Role::Lead, "lead", Some(TOKEN.into())),
        config,
        None,
    )
    .await
    .unwrap()
}

/// Sends `ping(payload)` from this runtime as the one request in flight on `c`, and spawns
/// it once its caller watches the socket itself; fails the test with `why` if it never does.
/// Whether a caller takes the socket is decided when its request is first polled: that poll
/// is made here and the socket's holder read right after it, so the I/O thread (which takes
/// a turn back after a heartbeat interval) cannot win the check on a slow machine. A turn is
/// not taken while the reader task is in a pass (a peer's heartbeat being read): such a
/// request is dropped, which cancels it, and made again, up to 50 times.
pub async fn spawn_watching_caller(
    c: &Connection,
    payload: &str,
    trace: TraceContext,
    timeout: Duration,
    why: &str,
) -> tokio::task::JoinHandle<Result<Reply, RpcError>> {
    for _ in 0..50 {
        let mut request = {
            let (c, payload, trace) = (c.clone(), payload.to_owned(), trace.clone());
            Box::pin(async move { c.request(ping(payload.as_bytes()), trace, timeout).await })
        };
        let first = std::future::poll_fn(|cx| Poll::Ready(request.as_mut().poll(cx))).await;
        assert!(first.is_pending(), "the request ended at once: {first:?}");
        if c.watched_by_caller() {
            return tokio::spawn(request);
        }
        drop(request);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{why}");
}

/// Runs `work` on a new thread with a current-thread runtime of its own (another
/// process's caller, or a runtime that ends), and returns the thread's handle.
pub fn on_own_runtime<F, T>(work: impl FnOnce() -> F + Send + 'static) -> std::thread::JoinHandle<T>
where
    F: std::future::Future<Output = T>,
    T: Send + 'static,
{
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(work())
    })
}
