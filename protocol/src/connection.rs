//! One established connection and its RPC: request/reply correlation, deadlines,
//! cancellation, streamed replies, heartbeats, bounded queues, and serving requests.
//! Owns four tasks (reader, writer, heartbeat, deadlines) that run on the process's I/O thread
//! ([`crate::io`]) and all stop when the connection closes; requests are served on the
//! runtime that started the connection, so no amount of work there delays a heartbeat,
//! except those the service answers at once ([`Service::answers_now`]), which the reader
//! answers itself, and relays to another connection ([`Service::relays`]), which run on the
//! I/O thread. Frames are written by the task that sends them unless the socket
//! would block, and then by the writer task ([`crate::outbox`]); the reader decodes every
//! frame of one read before writing the replies they made in one go. A caller waiting
//! alone for its reply reads the socket itself, on its own thread, while its request is in
//! flight ([`Connection::request`], [`crate::sock`]); the I/O thread takes the socket
//! back at its next heartbeat tick after the caller is done, or after a whole heartbeat
//! interval should the caller's thread be busy. A due heartbeat goes before any queued
//! frame. On close every pending request fails at once
//! with `PeerUnavailable`.

use std::{
    collections::HashMap,
    future::Future,
    pin::Pin,
    sync::{
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    task::{Context, Poll},
    time::{Duration, Instant},
};

use bytes::{Buf, BytesMut};
use futures::future::BoxFuture;
use tokio::io::AsyncReadExt;
use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot, watch, Notify};

use crate::{
    clock, codec,
    deadline::Deadlines,
    envelope::{Body, Envelope, RemoteError, RequestId, TraceContext},
    frame::WriteError,
    handshake::{FrameReader, FrameWriter, PeerInfo},
    messages::{Reply, Request},
    outbox::{Outbox, PushError},
    sock::{Held, Sock},
    transport::ReadHalf,
};

/// Tunables of a connection.
#[derive(Debug, Clone)]
pub struct ConnectionConfig {
    /// Frames larger than this are refused (outgoing) or close the connection (incoming).
    pub max_frame_bytes: usize,
    /// How often each side sends a heartbeat.
    pub heartbeat_interval: Duration,
    /// Heartbeat intervals without any frame after which the peer is declared dead.
    pub heartbeat_misses: u32,
    /// Outgoing frames queued before senders are slowed down.
    pub outbound_queue: usize,
    /// Requests this side serves at once on one connection before answering `Overloaded`.
    pub max_in_flight: usize,
    /// Stream items buffered per streamed request before the reader waits for the consumer.
    pub stream_buffer: usize,
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        Self {
            max_frame_bytes: crate::frame::DEFAULT_MAX_FRAME_BYTES,
            heartbeat_interval: Duration::from_secs(1),
            heartbeat_misses: 3,
            outbound_queue: 4096,
            max_in_flight: 1024,
            stream_buffer: 64,
        }
    }
}

/// A reply that does not answer the request it came back to: the peer spoke out of
/// protocol. It names the request's kind and the reply's kind, never a payload (a reply
/// may carry a secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unexpected reply from {peer}: {reply} to {request}")]
pub struct UnexpectedReply {
    /// Who was asked: `sandbox-host`, `mcp-host`, `a worker`, `the lead`, `the peer`.
    pub peer: &'static str,
    /// The request's kind, e.g. `Sandbox::Call`.
    pub request: &'static str,
    /// The reply's kind, e.g. `Mcp::Tools`.
    pub reply: &'static str,
}

/// Why a request did not get a reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RpcError {
    /// The peer is not connected, or the connection died while the request was in flight.
    #[error("peer unavailable: {0}")]
    PeerUnavailable(String),
    /// The request's deadline passed before a reply came.
    #[error("deadline exceeded after {0:?}")]
    DeadlineExceeded(Duration),
    /// The outgoing queue stayed full until the deadline, or the peer refused for load.
    #[error("overloaded: {0}")]
    Overloaded(String),
    /// The encoded request is larger than the frame limit.
    #[error("message of {size} bytes exceeds the {max}-byte frame limit")]
    TooLarge { size: usize, max: usize },
    /// The peer answered with an error.
    #[error(transparent)]
    Remote(RemoteError),
    /// The peer answered with a reply that does not answer the request.
    #[error(transparent)]
    Unexpected(UnexpectedReply),
}

impl From<UnexpectedReply> for RpcError {
    fn from(unexpected: UnexpectedReply) -> RpcError {
        RpcError::Unexpected(unexpected)
    }
}

/// Serves the requests a peer sends on a connection.
pub trait Service: Send + Sync + 'static {
    /// Handles one request. Items sent through `call` before the returned future resolves
    /// are streamed to the requester; the resolved value is the final reply.
    fn call(&self, request: Request, call: Call) -> BoxFuture<'static, Result<Reply, RemoteError>>;

    /// Whether `call` answers `request` at once: the call and the first poll of its future
    /// take microseconds and neither block, wait nor stream (a ping, a counter read). Such
    /// requests are answered on the connection's I/O thread, in the serving runtime's
    /// context, without the hop to that runtime; should the future not be ready after
    /// all, it finishes on the serving runtime. Anything slower answered this way delays
    /// the heartbeats and reads of every connection of the process. Default: none.
    fn answers_now(&self, _request: &Request) -> bool {
        false
    }

    /// Whether `call` only relays `request` to another connection and awaits its reply
    /// (a proxy's forward): its future then runs on the connection's I/O thread from start
    /// to end, so the request and its reply cross no thread but the I/O thread's, instead
    /// of hopping to the serving runtime and back on each side. Its future must do nothing
    /// but look up a connection without waiting, send and await (no actor message, no
    /// blocking, no work that takes time). Default: none.
    fn relays(&self, _request: &Request) -> bool {
        false
    }
}

/// Counts requests being served across the connections of one process (for health and drain).
#[derive(Debug, Default)]
pub struct InFlight {
    count: AtomicUsize,
    idle: Notify,
    draining: AtomicBool,
}

impl InFlight {
    /// Requests being served now.
    pub fn current(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Marks the process as draining: new requests are refused with `ShuttingDown`.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Resolves when no request is in flight.
    pub async fn wait_idle(&self) {
        loop {
            let notified = self.idle.notified();
            if self.current() == 0 {
                return;
            }
            notified.await;
        }
    }

    fn enter(self: &Arc<Self>) -> InFlightGuard {
        self.count.fetch_add(1, Ordering::SeqCst);
        InFlightGuard(self.clone())
    }
}

struct InFlightGuard(Arc<InFlight>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// The serving side's handle on one request: its trace, deadline, and the stream sink.
pub struct Call {
    pub trace: TraceContext,
    /// When the requester gives up.
    pub deadline: Option<Instant>,
    /// The peer that asked (shared by every call of the connection).
    pub peer: Arc<PeerInfo>,
    id: RequestId,
    shared: Arc<Shared>,
}

impl Call {
    /// Streams one item of the reply. Waits while the outgoing queue is full. An item
    /// over the frame limit ends the requester's stream with an error reply (and is
    /// `TooLarge` here).
    pub async fn send_item(&self, item: Reply) -> Result<(), RpcError> {
        let env = Envelope {
            id: 0,
            reply_to: Some(self.id),
            deadline: None,
            // As a reply, an item carries no trace.
            trace: TraceContext::default(),
            body: Body::StreamItem(item),
        };
        self.shared.send_reply(env).await
    }
}

enum Pending {
    Unary(Waiting),
    Stream(mpsc::Sender<Result<Reply, RpcError>>),
}

/// Where a unary request's reply goes.
type ReplyTx = oneshot::Sender<Result<Reply, RpcError>>;

/// A caller waiting for one reply, until its due time (see [`crate::deadline`]).
struct Waiting {
    tx: ReplyTx,
    /// Milliseconds since the connection started.
    due: u64,
    timeout: Duration,
}

/// Hashes this side's request ids: sequential numbers it assigned itself, so a
/// multiplication spreads them and no peer can choose them (the peer's ids, in `serving`,
/// keep the default hasher).
#[derive(Default, Clone, Copy)]
struct OwnIdHasher(u64);

impl std::hash::Hasher for OwnIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type PendingMap = HashMap<RequestId, Pending, std::hash::BuildHasherDefault<OwnIdHasher>>;

struct Shared {
    out: Outbox,
    pending: Mutex<PendingMap>,
    serving: Mutex<HashMap<RequestId, tokio::task::AbortHandle>>,
    next_id: AtomicU64,
    closed: watch::Sender<Option<String>>,
    /// Set once `closed` is (read on every request and every read, without the watch's lock).
    is_closed: AtomicBool,
    /// The reader task, woken when the connection closes (it watches nothing else for it).
    reader_wake: futures::task::AtomicWaker,
    /// The coarse clock when the connection started, and when a frame last came
    /// ([`clock::coarse_ms`]).
    started_ms: u64,
    last_seen_ms: AtomicU64,
    peer: Arc<PeerInfo>,
    config: ConnectionConfig,
    peer_going_away: AtomicBool,
    /// The runtime that serves the peer's requests (the one that started the connection).
    home: Handle,
    /// The reader waits for a local stream consumer, so the peer's silence is ours.
    reader_parked: AtomicBool,
    /// The latest a heartbeat tick ran after its time, in microseconds (the measure of
    /// how far heartbeats starve).
    heartbeat_lag_us: AtomicU64,
    /// The read side; `None` once the connection closed.
    read: Mutex<Option<ReadState>>,
    /// The socket, whose read readiness a caller waiting alone for its reply may watch
    /// itself (see [`Connection::request`]); `None` for a stream that is no [`Sock`].
    sock: Option<Sock>,
    /// When the unary requests in `pending` give up.
    deadlines: Deadlines,
}

impl Shared {
    fn close(&self, reason: &str) {
        // The first closer sets the flag before anything else: whoever sees the watch
        // change sees the flag set, and the flag is set before the pending table is drained
        // (see `Connection::register`).
        if self.is_closed.swap(true, Ordering::SeqCst) {
            return;
        }
        self.closed.send_replace(Some(reason.to_string()));
        tracing::debug!(peer = %self.peer.address, role = %self.peer.role, reason, "connection closed");
        self.out.close();
        let drained: Vec<Pending> = match self.pending.lock() {
            Ok(mut p) => p.drain().map(|(_, v)| v).collect(),
            Err(_) => Vec::new(),
        };
        for p in drained {
            let err = RpcError::PeerUnavailable(reason.to_string());
            match p {
                Pending::Unary(w) => {
                    let _ = w.tx.send(Err(err));
                }
                Pending::Stream(tx) => {
                    let _ = tx.try_send(Err(err));
                }
            }
        }
        if let Ok(mut s) = self.serving.lock() {
            for (_, h) in s.drain() {
                h.abort();
            }
        }
        self.reader_wake.wake();
    }

    fn is_closed(&self) -> bool {
        self.is_closed.load(Ordering::SeqCst)
    }

    /// Resolves once the connection has closed, also when it closed before the call (a
    /// task that subscribed to the watch after the close would wait for a change forever).
    fn on_close(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.closed.subscribe();
        async move {
            let _ = rx.wait_for(Option::is_some).await;
        }
    }

    fn take_pending(&self, id: RequestId) -> Option<Pending> {
        self.pending.lock().ok().and_then(|mut p| p.remove(&id))
    }

    /// Fails the unary requests past their due time with `DeadlineExceeded`, tells the peer
    /// to stop each (here, not by its caller, which may be gone before it reads the error),
    /// and sets the next due time.
    fn expire(&self) {
        let overdue: Vec<(RequestId, Waiting)> = {
            let Ok(mut map) = self.pending.lock() else {
                // Nothing can register on a poisoned table: sleep until woken.
                self.deadlines.set_next(None);
                return;
            };
            let now = self.deadlines.now_ms();
            let overdue: Vec<(RequestId, Waiting)> = map
                .extract_if(|_, p| matches!(p, Pending::Unary(w) if w.due <= now))
                .filter_map(|(id, p)| match p {
                    Pending::Unary(w) => Some((id, w)),
                    Pending::Stream(_) => None,
                })
                .collect();
            let next = map
                .values()
                .filter_map(|p| match p {
                    Pending::Unary(w) => Some(w.due),
                    Pending::Stream(_) => None,
                })
                .min();
            self.deadlines.set_next(next);
            overdue
        };
        for (id, w) in overdue {
            let _ = w.tx.send(Err(RpcError::DeadlineExceeded(w.timeout)));
            // Should the request not be queued yet, its caller sends one more once it is.
            self.send_cancel(id, TraceContext::default());
        }
    }

    fn touch(&self) {
        self.last_seen_ms
            .store(self.since_start_ms(), Ordering::Relaxed);
    }

    /// Milliseconds since the connection started, on the coarse clock.
    fn since_start_ms(&self) -> u64 {
        clock::coarse_ms().saturating_sub(self.started_ms)
    }

    /// A failed write kills the connection; anything else is the caller's to report.
    fn written(&self, r: Result<(), PushError>) -> Result<(), PushError> {
        match r {
            Err(PushError::Io(e)) => {
                self.close(&format!("write failed: {e}"));
                Err(PushError::Closed)
            }
            other => other,
        }
    }

    /// Tells the peer to stop serving request `id`. Not bounded by the queue: a cancel is
    /// a few bytes that ends work, and one dropped for a full queue would leave the peer
    /// serving a request nobody waits for.
    fn send_cancel(&self, id: RequestId, trace: TraceContext) {
        if !self.is_closed() {
            self.push_now(&cancel_frame(id, trace), false, true);
        }
    }

    /// Queues a frame that is dropped should the queue be full (refusals, going-away);
    /// with `write`, writes it now.
    fn send_or_drop(&self, env: &Envelope, write: bool) {
        self.push_now(env, true, write);
    }

    /// Queues a frame without waiting for room; a frame that is not queued is dropped.
    fn push_now(&self, env: &Envelope, bounded: bool, write: bool) {
        if let Err(PushError::Encode(e)) = self.written(self.out.try_push(env, bounded, write)) {
            tracing::error!(error = %e, "dropping a message that does not encode");
        }
    }

    /// Sends a reply or stream item, waiting while the queue is full. One that does not
    /// fit a frame (or encode) is answered with an error reply instead.
    async fn send_reply(&self, env: Envelope) -> Result<(), RpcError> {
        let r = self.written(self.out.push(&env, None).await);
        self.reply_sent(&env, r)
    }

    fn reply_sent(&self, env: &Envelope, r: Result<(), PushError>) -> Result<(), RpcError> {
        match r {
            Ok(()) => Ok(()),
            Err(PushError::Closed) | Err(PushError::Io(_)) => {
                Err(RpcError::PeerUnavailable("connection closed".into()))
            }
            Err(PushError::Full) => Err(RpcError::Overloaded("outgoing queue full".into())),
            Err(PushError::Encode(e)) => {
                let err = encode_error(e);
                match &err {
                    RpcError::TooLarge { size, max } => {
                        tracing::warn!(size, max, "refusing to send an oversize frame")
                    }
                    other => {
                        tracing::error!(error = %other, "dropping a message that does not encode")
                    }
                }
                self.send_or_drop(
                    &Envelope {
                        id: 0,
                        reply_to: env.reply_to,
                        deadline: None,
                        trace: env.trace.clone(),
                        body: Body::Reply(Err(RemoteError::Failed(format!(
                            "reply not sent: {err}"
                        )))),
                    },
                    true,
                );
                Err(err)
            }
        }
    }
}

fn encode_error(e: WriteError) -> RpcError {
    match e {
        WriteError::TooLarge { size, max } => RpcError::TooLarge { size, max },
        WriteError::Encode(e) => RpcError::Remote(RemoteError::Failed(e)),
        WriteError::Io(e) => RpcError::PeerUnavailable(format!("write failed: {e}")),
    }
}

/// A handle on a live connection; cheap to clone. Dropping handles does not close it:
/// call [`Connection::close`], or it closes when the peer goes away.
#[derive(Clone)]
pub struct Connection {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("peer", &self.shared.peer)
            .field("closed", &self.shared.is_closed())
            .finish()
    }
}

impl Connection {
    /// Starts the connection's tasks on the I/O thread over framed halves that completed
    /// the handshake (made on the I/O thread too, see [`crate::io`]). `service` answers
    /// the peer's requests on `home`; without one, requests get `Unsupported`. With `sock`,
    /// the socket under the halves, a caller that waits alone for its reply reads it on its
    /// own thread (see [`Connection::request`]).
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        reader: FrameReader,
        writer: FrameWriter,
        peer: PeerInfo,
        config: ConnectionConfig,
        service: Option<Arc<dyn Service>>,
        in_flight: Arc<InFlight>,
        home: Handle,
        sock: Option<Sock>,
    ) -> Connection {
        let read = reader.into_parts();
        let write = writer.into_parts();
        let out = Outbox::new(
            write.io,
            write.write_buf,
            config.outbound_queue,
            config.max_frame_bytes,
        );
        let (closed_tx, _) = watch::channel(None);
        let started = Instant::now();
        let shared = Arc::new(Shared {
            out,
            pending: Mutex::new(PendingMap::default()),
            serving: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            closed: closed_tx,
            is_closed: AtomicBool::new(false),
            reader_wake: futures::task::AtomicWaker::new(),
            started_ms: clock::coarse_ms(),
            last_seen_ms: AtomicU64::new(0),
            peer: Arc::new(peer),
            config,
            peer_going_away: AtomicBool::new(false),
            home,
            reader_parked: AtomicBool::new(false),
            heartbeat_lag_us: AtomicU64::new(0),
            read: Mutex::new(Some(ReadState {
                reader: read.io,
                buf: read.read_buf,
                task: std::task::Waker::noop().clone(),
                stalled: None,
                service,
                in_flight,
            })),
            sock,
            deadlines: Deadlines::new(started),
        });
        let io = crate::io::handle();
        io.spawn(write_loop(shared.clone()));
        io.spawn(read_loop(shared.clone()));
        io.spawn(heartbeat_loop(shared.clone()));
        io.spawn(deadline_loop(shared.clone()));
        Connection { shared }
    }

    /// The latest any heartbeat tick of this connection ran after its time: how much the
    /// I/O thread was starved (a few milliseconds on a healthy process).
    pub fn heartbeat_lag(&self) -> Duration {
        Duration::from_micros(self.shared.heartbeat_lag_us.load(Ordering::Relaxed))
    }

    /// Whether a caller waiting alone for its reply watches the socket now, rather than
    /// the I/O thread (see [`Connection::request`]).
    pub fn watched_by_caller(&self) -> bool {
        matches!(
            self.shared.sock.as_ref().map(Sock::holder),
            Some(Held::Turn(_))
        )
    }

    /// The peer at the other end.
    pub fn peer(&self) -> &PeerInfo {
        &self.shared.peer
    }

    /// Whether `other` is a handle of this same connection (not another to the peer).
    pub fn same(&self, other: &Connection) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// Whether the connection has closed.
    pub fn is_closed(&self) -> bool {
        self.shared.is_closed()
    }

    /// Whether the peer said it is draining.
    pub fn peer_going_away(&self) -> bool {
        self.shared.peer_going_away.load(Ordering::SeqCst)
    }

    /// Why the connection closed, once it has.
    pub fn close_reason(&self) -> Option<String> {
        self.shared.closed.borrow().clone()
    }

    /// Milliseconds since any frame (heartbeats included) arrived from the peer.
    pub fn since_last_heard(&self) -> Duration {
        let now = self.shared.since_start_ms();
        Duration::from_millis(now.saturating_sub(self.shared.last_seen_ms.load(Ordering::Relaxed)))
    }

    /// Closes the connection; pending requests fail with `PeerUnavailable(reason)`.
    pub fn close(&self, reason: &str) {
        self.shared.close(reason);
    }

    /// Resolves when the connection has closed, with the reason.
    pub async fn closed(&self) -> String {
        let mut rx = self.shared.closed.subscribe();
        loop {
            if let Some(r) = rx.borrow_and_update().clone() {
                return r;
            }
            if rx.changed().await.is_err() {
                return "connection dropped".into();
            }
        }
    }

    /// Tells the peer this side is draining and takes no new requests.
    pub fn send_going_away(&self, reason: &str) {
        self.shared.send_or_drop(
            &Envelope {
                id: 0,
                reply_to: None,
                deadline: None,
                trace: TraceContext::default(),
                body: Body::GoingAway {
                    reason: reason.to_string(),
                },
            },
            true,
        );
    }

    /// Registers a pending request: its id, and whether it is alone in flight.
    fn register(&self, pending: Pending) -> Result<(RequestId, bool), RpcError> {
        if self.is_closed() {
            return Err(RpcError::PeerUnavailable(
                self.close_reason()
                    .unwrap_or_else(|| "connection closed".into()),
            ));
        }
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let (alone, earlier) = {
            let mut map = self
                .shared
                .pending
                .lock()
                .map_err(|_| RpcError::PeerUnavailable("connection state poisoned".into()))?;
            let earlier = match &pending {
                Pending::Unary(w) => self.shared.deadlines.registered(w.due),
                Pending::Stream(_) => false,
            };
            map.insert(id, pending);
            (map.len() == 1, earlier)
        };
        if earlier {
            self.shared.deadlines.wake();
        }
        // Close may have drained the map just before the insert: check again.
        if self.is_closed() {
            self.shared.take_pending(id);
            return Err(RpcError::PeerUnavailable(
                self.close_reason()
                    .unwrap_or_else(|| "connection closed".into()),
            ));
        }
        Ok((id, alone))
    }

    /// Queues (and, if the socket takes it, writes) a request. On error nothing was sent
    /// and the request is no longer pending.
    async fn enqueue(
        &self,
        env: Envelope,
        guard: &mut CancelGuard,
        deadline: Instant,
    ) -> Result<(), RpcError> {
        let r = match self
            .shared
            .written(self.shared.out.push(&env, Some(deadline)).await)
        {
            Ok(()) => {
                // A cancel carries the request's trace.
                guard.trace = env.trace;
                return Ok(());
            }
            Err(PushError::Closed) | Err(PushError::Io(_)) => Err(RpcError::PeerUnavailable(
                self.close_reason()
                    .unwrap_or_else(|| "connection closed".into()),
            )),
            Err(PushError::Full) => Err(RpcError::Overloaded(format!(
                "outgoing queue to {} stayed full until the deadline",
                self.shared.peer.role
            ))),
            Err(PushError::Encode(e)) => {
                let err = encode_error(e);
                if let RpcError::TooLarge { size, max } = &err {
                    tracing::warn!(size, max, "refusing to send an oversize frame");
                }
                Err(err)
            }
        };
        guard.armed = false;
        self.shared.take_pending(guard.id);
        r
    }

    fn envelope(
        id: RequestId,
        request: Request,
        trace: TraceContext,
        timeout: Duration,
    ) -> Envelope {
        Envelope {
            id,
            reply_to: None,
            deadline: Some(timeout.as_millis().min(u32::MAX as u128) as u32),
            trace,
            body: Body::Request(request),
        }
    }

    /// Sends a request and waits for its reply, at most `timeout`. Dropping the returned
    /// future cancels the request at the peer. Alone in flight, the caller reads its reply
    /// on its own thread ([`Connection::watch_here`]). The deadline is kept by the
    /// connection's task on the I/O thread, in whole milliseconds rounded up: the request
    /// fails with `DeadlineExceeded` (and the peer is told to stop) no earlier than
    /// `timeout`, and later by as long as the I/O thread is starved.
    pub async fn request(
        &self,
        request: Request,
        trace: TraceContext,
        timeout: Duration,
    ) -> Result<Reply, RpcError> {
        let now = Instant::now();
        let deadline = far(now, timeout);
        let due = self.shared.deadlines.due_at(now, timeout);
        let (tx, rx) = oneshot::channel();
        let (id, alone) = self.register(Pending::Unary(Waiting { tx, due, timeout }))?;
        let mut guard = CancelGuard {
            shared: self.shared.clone(),
            id,
            trace: TraceContext::default(),
            armed: true,
        };
        // Given back when dropped, should the send fail too.
        let turn = if alone { self.watch_here() } else { None }.map(|turn| GiveBack {
            shared: &self.shared,
            turn,
        });
        let sent = self
            .enqueue(
                Self::envelope(id, request, trace, timeout),
                &mut guard,
                deadline,
            )
            .await;
        let reply = async {
            match turn {
                Some(turn) => self.read_own_reply(id, turn, rx).await,
                None => rx.await.ok(),
            }
        };
        if let Err(e) = sent {
            drop(reply);
            return Err(e);
        }
        // Queued at or past its due time (this thread was preempted before the push): the
        // deadline task may have failed it and sent its cancel before the request, which
        // the peer ignores. One more, behind it (a second one is a no-op at the peer).
        if self.shared.deadlines.now_ms() >= due {
            self.shared.send_cancel(id, guard.trace.clone());
        }
        // No timer here: the connection's deadline task fails the request when due.
        match reply.await {
            Some(result) => {
                guard.armed = false;
                result
            }
            None => {
                guard.armed = false;
                Err(RpcError::PeerUnavailable(
                    self.close_reason()
                        .unwrap_or_else(|| "connection closed".into()),
                ))
            }
        }
    }

    /// Has a caller that waits alone for its reply watch the socket itself: its read
    /// readiness moves to the caller's runtime, so the kernel wakes the caller's thread
    /// when the reply arrives and the caller reads it there, instead of waking the I/O
    /// thread, which would then wake the caller (on a shared or busy machine each wake is
    /// a context switch, or a vCPU brought out of idle). Only for a request alone in flight
    /// (with others, the reader task reads their replies in batches, cheaper per reply).
    /// Returns the caller's turn; `None` on the I/O thread (its reader is there already),
    /// while the read side is busy, or on a runtime without an I/O driver. Moving readiness here costs two
    /// system calls, and nothing if this thread held it for its last turn.
    fn watch_here(&self) -> Option<u64> {
        let sock = self.shared.sock.as_ref()?;
        if crate::io::on_io_thread() {
            return None;
        }
        // Not while a pass is under way (which may be this very thread's, serving a
        // request that answers at once).
        let read = self.shared.read.try_lock().ok()?;
        sock.watch_here(&read.as_ref()?.task)
    }

    /// Waits for this caller's reply, reading the socket whenever the kernel says it is
    /// readable (see [`Connection::watch_here`]), and ends its turn when done, or dropped
    /// (the reader task reads through this thread's registration until the I/O thread
    /// takes it back). Should the I/O thread take it back first (this thread was busy for a
    /// heartbeat interval), the reply comes by the reader task. `None`: the connection
    /// closed.
    async fn read_own_reply(
        &self,
        id: RequestId,
        back: GiveBack<'_>,
        mut rx: oneshot::Receiver<Result<Reply, RpcError>>,
    ) -> Option<Result<Reply, RpcError>> {
        let turn = back.turn;
        // The reply this thread reads is kept, not sent to `rx`: a send would wake this very
        // task, and its runtime would look for events once more (a system call) and poll it
        // again for nothing. Its sender is kept too, and dropped after `rx` for the same
        // reason.
        let mut kept = None;
        let reply = std::future::poll_fn(|cx| {
            match rx.try_recv() {
                Ok(reply) => return Poll::Ready(Some(reply)),
                Err(oneshot::error::TryRecvError::Closed) => return Poll::Ready(None),
                Err(oneshot::error::TryRecvError::Empty) => {}
            }
            let mut catch = Catch {
                id: Some(id),
                caught: None,
            };
            let _ = read_side(&self.shared, Reader::Caller(turn, cx, &mut catch));
            if let Some((reply, tx)) = catch.caught {
                kept = Some(tx);
                return Poll::Ready(Some(reply));
            }
            // Should the connection close, or the request be due, `rx` says so; and the
            // reader task sends the reply there should the I/O thread take the socket back.
            Pin::new(&mut rx).poll(cx).map(Result::ok)
        })
        .await;
        drop(rx);
        drop(kept);
        reply
    }

    /// Sends a request whose reply is streamed: items, then the final reply, then the end.
    /// The whole stream is bounded by `timeout`; dropping the stream cancels the request.
    pub async fn request_stream(
        &self,
        request: Request,
        trace: TraceContext,
        timeout: Duration,
    ) -> Result<ReplyStream, RpcError> {
        let deadline = far(Instant::now(), timeout);
        let (tx, rx) = mpsc::channel(self.shared.config.stream_buffer.max(1));
        let (id, _) = self.register(Pending::Stream(tx))?;
        let mut guard = CancelGuard {
            shared: self.shared.clone(),
            id,
            trace: TraceContext::default(),
            armed: true,
        };
        self.enqueue(
            Self::envelope(id, request, trace, timeout),
            &mut guard,
            deadline,
        )
        .await?;
        Ok(ReplyStream {
            rx,
            deadline,
            timeout,
            guard,
            done: false,
        })
    }
}

/// `now + timeout`, or a century from now for a timeout past what an instant can hold.
fn far(now: Instant, timeout: Duration) -> Instant {
    now.checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
}

/// Removes a pending request and tells the peer to stop, unless disarmed by a reply.
struct CancelGuard {
    shared: Arc<Shared>,
    id: RequestId,
    trace: TraceContext,
    armed: bool,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Not pending: answered, or failed by the deadline task (which told the peer).
        if self.shared.take_pending(self.id).is_some() {
            self.shared
                .send_cancel(self.id, std::mem::take(&mut self.trace));
        }
    }
}

/// The frame telling the peer to stop serving request `id`.
fn cancel_frame(id: RequestId, trace: TraceContext) -> Envelope {
    Envelope {
        id: 0,
        reply_to: Some(id),
        deadline: None,
        trace,
        body: Body::Cancel,
    }
}

/// The replies of a streamed request, in order; the last `Ok` item is the final reply.
pub struct ReplyStream {
    rx: mpsc::Receiver<Result<Reply, RpcError>>,
    deadline: Instant,
    timeout: Duration,
    guard: CancelGuard,
    done: bool,
}

impl ReplyStream {
    /// The next item, `None` after the final reply or an error.
    pub async fn next(&mut self) -> Option<Result<Reply, RpcError>> {
        if self.done {
            return None;
        }
        match tokio::time::timeout_at(self.deadline.into(), self.rx.recv()).await {
            Ok(Some(item)) => {
                if item.is_err() {
                    self.done = true;
                    self.guard.armed = false;
                }
                Some(item)
            }
            Ok(None) => {
                // The reader dropped the sender after the final reply.
                self.done = true;
                self.guard.armed = false;
                None
            }
            Err(_) => {
                self.done = true;
                Some(Err(RpcError::DeadlineExceeded(self.timeout)))
            }
        }
    }
}

/// Drains the queue whenever a sender found the socket would block, and shuts the socket
/// (after a last bounded flush) when the connection closes.
async fn write_loop(shared: Arc<Shared>) {
    let closed = shared.on_close();
    tokio::pin!(closed);
    loop {
        tokio::select! {
            biased;
            _ = &mut closed => break,
            _ = shared.out.writer_wake.notified() => {}
        }
        let drained = tokio::select! {
            biased;
            _ = &mut closed => break,
            r = std::future::poll_fn(|cx| shared.out.poll_drain(cx)) => r,
        };
        if let Err(e) = drained {
            shared.close(&format!("write failed: {e}"));
            return;
        }
    }
    if let Some((mut io, rest)) = shared.out.take_io() {
        use tokio::io::AsyncWriteExt;
        let last = async {
            io.write_all(&rest).await?;
            io.shutdown().await
        };
        let _ = tokio::time::timeout(LAST_FLUSH, last).await;
    }
}

/// How long a closing connection tries to write what is left and say goodbye.
const LAST_FLUSH: Duration = Duration::from_secs(2);

/// Read buffer to keep free before each read (many small frames per read).
const READ_CHUNK: usize = 64 * 1024;

/// The length of the whole frame at the head of `buf`, if it is all there.
fn whole_frame(buf: &[u8], max: usize) -> Result<Option<usize>, std::io::Error> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if len > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "frame size too big",
        ));
    }
    Ok((buf.len() >= 4 + len).then_some(len))
}

/// The read side of a connection: the socket's read half and the bytes read from it not
/// yet decoded. The reader task on the I/O thread reads it whenever the socket is readable;
/// a caller waiting alone for its reply may take it to read that reply on its own thread
/// ([`Connection::request`]). Whoever reads decodes every whole frame and dispatches it.
struct ReadState {
    reader: ReadHalf,
    buf: BytesMut,
    /// The reader task's waker. A read that would block registers this one with the
    /// socket, whoever made it, so the I/O thread always wakes the reader task.
    task: std::task::Waker,
    /// A stream item its consumer had no room for, which the reader task waits to hand over.
    stalled: Option<Stalled>,
    service: Option<Arc<dyn Service>>,
    in_flight: Arc<InFlight>,
}

/// A stream item (or final reply) waiting for room in its consumer's buffer.
struct Stalled {
    tx: mpsc::Sender<Result<Reply, RpcError>>,
    item: Result<Reply, RpcError>,
}

/// How a pass over the read side ended.
enum Pass {
    /// The socket would block: everything read was dispatched.
    Drained,
    /// A stream consumer had no room: the reader task must wait for it.
    Stalled(Box<Stalled>),
    /// The connection closed.
    Closed,
}

/// Who reads: the reader task, or a caller watching the socket in its turn.
enum Reader<'a, 'b> {
    Task(&'a mut Context<'b>),
    Caller(u64, &'a mut Context<'b>, &'a mut Catch),
}

/// The reply a caller reading in its turn keeps for itself, with its sender.
struct Catch {
    id: Option<RequestId>,
    caught: Option<(Result<Reply, RpcError>, ReplyTx)>,
}

impl Catch {
    /// The reader task's: it keeps nothing.
    const NONE: Catch = Catch {
        id: None,
        caught: None,
    };
}

/// One pass over the read side by whoever watches the socket's read readiness now: the
/// reader task, or a caller in its turn; the other returns `Pending` (the reader task is
/// woken when the socket comes back to it). A caller leaves a stalled stream item to the
/// reader task, and the socket with it.
fn read_side(shared: &Arc<Shared>, who: Reader<'_, '_>) -> Poll<Pass> {
    let Ok(mut guard) = shared.read.lock() else {
        return Poll::Ready(Pass::Closed);
    };
    let Some(st) = guard.as_mut() else {
        return Poll::Ready(Pass::Closed);
    };
    let watcher = match shared.sock.as_ref().map(Sock::holder) {
        Some(Held::Turn(turn)) => Some(turn),
        _ => None,
    };
    let mut none = Catch::NONE;
    let (cx, catch) = match who {
        Reader::Task(cx) => {
            if !st.task.will_wake(cx.waker()) {
                st.task = cx.waker().clone();
            }
            if let Some(stalled) = st.stalled.take() {
                return Poll::Ready(Pass::Stalled(Box::new(stalled)));
            }
            if watcher.is_some() {
                return Poll::Pending;
            }
            (cx, &mut none)
        }
        Reader::Caller(turn, cx, catch) => {
            if watcher != Some(turn) || st.stalled.is_some() {
                return Poll::Pending;
            }
            (cx, catch)
        }
    };
    match read_pass(shared, st, cx, catch) {
        Pass::Drained => Poll::Pending,
        Pass::Stalled(stalled) if watcher.is_some() => {
            // The reader task waits for the consumer, and reads on after it: the socket
            // goes back to the I/O thread (this caller's reply comes by the reader task).
            st.stalled = Some(*stalled);
            if let Some(sock) = shared.sock.as_ref() {
                sock.watch_on_io(watcher, &st.task);
            }
            st.task.wake_by_ref();
            Poll::Pending
        }
        Pass::Closed => {
            *guard = None;
            Poll::Ready(Pass::Closed)
        }
        stalled => Poll::Ready(stalled),
    }
}

/// Ends a caller's turn when its wait ends.
struct GiveBack<'a> {
    shared: &'a Arc<Shared>,
    turn: u64,
}

impl Drop for GiveBack<'_> {
    fn drop(&mut self) {
        self.shared.end_turn(self.turn);
    }
}

impl Shared {
    /// Ends a caller's turn: its thread keeps the socket's read readiness until its next
    /// turn or the next heartbeat tick, with the reader task's waker on it.
    fn end_turn(&self, turn: u64) {
        self.with_sock(|sock, task| match task {
            Some(task) => sock.end_turn(turn, task),
            None => sock.watch_on_io(Some(turn), std::task::Waker::noop()),
        });
    }

    /// Gives the socket's read readiness back to the I/O thread, from the caller in `turn`
    /// (`None`: from whichever caller has it) and wakes the reader task should the socket be
    /// readable already.
    fn watch_on_io(&self, turn: Option<u64>) {
        self.with_sock(|sock, task| {
            sock.watch_on_io(turn, task.unwrap_or(std::task::Waker::noop()));
        });
    }

    /// Runs `f` on the socket, with the reader task's waker (`None` once the read side
    /// closed), under the read side's lock.
    fn with_sock(&self, f: impl FnOnce(&Sock, Option<&std::task::Waker>)) {
        let (Some(sock), Ok(read)) = (self.sock.as_ref(), self.read.lock()) else {
            return;
        };
        f(sock, read.as_ref().map(|st| &st.task));
    }
}

/// Decodes and dispatches every whole frame read, writes the replies they made in one go,
/// and reads again, until the socket would block (registering `cx`), a stream consumer
/// has no room, or the connection closes.
fn read_pass(
    shared: &Arc<Shared>,
    st: &mut ReadState,
    cx: &mut Context<'_>,
    catch: &mut Catch,
) -> Pass {
    let max = shared.config.max_frame_bytes;
    loop {
        let mut frames = 0usize;
        let failure = loop {
            let len = match whole_frame(&st.buf, max) {
                Ok(Some(len)) => len,
                Ok(None) => break None,
                Err(e) => break Some(e),
            };
            frames += 1;
            let decoded = codec::decode::<Envelope>(&st.buf[4..4 + len]);
            st.buf.advance(4 + len);
            let env = match decoded {
                Ok(e) => e,
                Err(e) => {
                    let reason = format!("frame does not decode: {e}");
                    tracing::warn!(peer = %shared.peer.address, role = %shared.peer.role, %reason, "closing connection");
                    shared.close(&reason);
                    return Pass::Closed;
                }
            };
            if frames == 1 {
                shared.touch();
            }
            if let Some(stalled) = dispatch(shared, env, st.service.as_ref(), &st.in_flight, catch)
            {
                // Replies this read made go now, not after the consumer.
                if shared.written(shared.out.flush()).is_err() {
                    return Pass::Closed;
                }
                return Pass::Stalled(Box::new(stalled));
            }
        };
        if shared.written(shared.out.flush()).is_err() {
            return Pass::Closed;
        }
        let read = match failure {
            Some(e) => Err(e),
            None => {
                // Room for the rest of a frame that has begun, or for many small ones.
                let want = match st.buf.get(..4) {
                    Some(p) => 4 + u32::from_be_bytes([p[0], p[1], p[2], p[3]]) as usize,
                    None => 0,
                };
                st.buf
                    .reserve(want.saturating_sub(st.buf.len()).max(READ_CHUNK));
                let read = st.reader.read_buf(&mut st.buf);
                tokio::pin!(read);
                match read.poll(cx) {
                    Poll::Pending => return Pass::Drained,
                    Poll::Ready(r) => r,
                }
            }
        };
        match read {
            Ok(0) if st.buf.is_empty() => {
                shared.close("peer closed the connection");
                return Pass::Closed;
            }
            Ok(0) => {
                let reason = "read failed: bytes remaining on stream".to_string();
                tracing::warn!(peer = %shared.peer.address, role = %shared.peer.role, %reason, "closing connection");
                shared.close(&reason);
                return Pass::Closed;
            }
            Ok(_) => {}
            Err(e) => {
                let reason = if e.kind() == std::io::ErrorKind::InvalidData {
                    format!(
                        "bad frame: {e} (limit {} bytes)",
                        shared.config.max_frame_bytes
                    )
                } else {
                    format!("read failed: {e}")
                };
                if e.kind() == std::io::ErrorKind::ConnectionReset {
                    tracing::debug!(peer = %shared.peer.address, role = %shared.peer.role, %reason, "connection reset");
                } else {
                    tracing::warn!(peer = %shared.peer.address, role = %shared.peer.role, %reason, "closing connection");
                }
                shared.close(&reason);
                return Pass::Closed;
            }
        }
    }
}

/// The reader task: reads whenever the socket is readable, and waits for stream consumers
/// that have no room (the one thing a caller's read leaves to it).
async fn read_loop(shared: Arc<Shared>) {
    // The waker `close` wakes, registered again only should it change (a registration at
    // every wake would cost more than the read).
    let mut known: Option<std::task::Waker> = None;
    loop {
        let pass = std::future::poll_fn(|cx| {
            if !known.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                shared.reader_wake.register(cx.waker());
                known = Some(cx.waker().clone());
            }
            if shared.is_closed() {
                return Poll::Ready(Pass::Closed);
            }
            read_side(&shared, Reader::Task(cx))
        })
        .await;
        match pass {
            Pass::Stalled(stalled) => {
                let Stalled { tx, item } = *stalled;
                park(&shared, tx.send(item)).await
            }
            Pass::Drained | Pass::Closed => break,
        }
    }
    // The read half goes with the connection.
    if let Ok(mut st) = shared.read.lock() {
        st.take();
    }
}

/// Hands a stream item to its consumer if it has room; else it is stalled.
fn offer(
    tx: mpsc::Sender<Result<Reply, RpcError>>,
    item: Result<Reply, RpcError>,
) -> Option<Stalled> {
    match tx.try_send(item) {
        Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => None,
        Err(mpsc::error::TrySendError::Full(item)) => Some(Stalled { tx, item }),
    }
}

/// Acts on one frame from the peer; a stream item its consumer has no room for is returned.
fn dispatch(
    shared: &Arc<Shared>,
    env: Envelope,
    service: Option<&Arc<dyn Service>>,
    in_flight: &Arc<InFlight>,
    catch: &mut Catch,
) -> Option<Stalled> {
    match env.body {
        Body::Heartbeat => {}
        Body::GoingAway { reason } => {
            tracing::info!(peer = %shared.peer.address, %reason, "peer is draining");
            shared.peer_going_away.store(true, Ordering::SeqCst);
        }
        Body::Reply(result) => {
            let id = env.reply_to?;
            match shared.take_pending(id) {
                Some(Pending::Unary(w)) if catch.id == Some(id) => {
                    catch.caught = Some((result.map_err(RpcError::Remote), w.tx));
                }
                Some(Pending::Unary(w)) => {
                    let _ = w.tx.send(result.map_err(RpcError::Remote));
                }
                Some(Pending::Stream(tx)) => return offer(tx, result.map_err(RpcError::Remote)),
                None => {} // cancelled or timed out: the late reply is dropped
            }
        }
        Body::StreamItem(item) => {
            let id = env.reply_to?;
            let tx = match shared.pending.lock() {
                Ok(p) => match p.get(&id) {
                    Some(Pending::Stream(tx)) => Some(tx.clone()),
                    _ => None,
                },
                Err(_) => None,
            };
            if let Some(tx) = tx {
                return offer(tx, Ok(item));
            }
        }
        Body::Cancel => {
            if let Some(id) = env.reply_to {
                let handle = shared.serving.lock().ok().and_then(|mut s| s.remove(&id));
                if let Some(h) = handle {
                    h.abort();
                }
            }
        }
        Body::Request(request) => serve(
            shared,
            env.id,
            env.deadline,
            env.trace,
            request,
            service,
            in_flight,
        ),
    }
    None
}

/// Waits for a local stream consumer; the peer is not silent meanwhile, the reader is.
async fn park<T>(
    shared: &Arc<Shared>,
    send: impl std::future::Future<Output = Result<(), mpsc::error::SendError<T>>>,
) {
    // Replies this read made go now, not after the consumer.
    let _ = shared.written(shared.out.flush());
    shared.reader_parked.store(true, Ordering::SeqCst);
    let _ = send.await;
    shared.reader_parked.store(false, Ordering::SeqCst);
    shared.touch();
}

fn serve(
    shared: &Arc<Shared>,
    id: RequestId,
    deadline: Option<u32>,
    trace: TraceContext,
    request: Request,
    service: Option<&Arc<dyn Service>>,
    in_flight: &Arc<InFlight>,
) {
    // A reply carries no trace: its requester knows the request's (and reads none).
    let reply = move |body: Result<Reply, RemoteError>| Envelope {
        id: 0,
        reply_to: Some(id),
        deadline: None,
        trace: TraceContext::default(),
        body: Body::Reply(body),
    };
    // Written with the other replies of this read (see `read_loop`).
    let refuse = |err: RemoteError| shared.send_or_drop(&reply(Err(err)), false);
    let Some(service) = service.cloned() else {
        return refuse(RemoteError::Unsupported(format!(
            "this peer serves no requests ({})",
            request.kind()
        )));
    };
    if in_flight.is_draining() {
        return refuse(RemoteError::ShuttingDown);
    }
    let serving_now = shared.serving.lock().map(|s| s.len()).unwrap_or(usize::MAX);
    if serving_now >= shared.config.max_in_flight {
        return refuse(RemoteError::Overloaded(format!(
            "{serving_now} requests in flight on this connection"
        )));
    }
    let deadline = deadline.map(|ms| Instant::now() + Duration::from_millis(ms as u64));
    let span = tracing::debug_span!("serve", kind = request.kind(), run_id = trace.run_id.as_deref().unwrap_or(""), trace_id = %trace.trace_hex());
    // A request of a traced run gets its span here, a child of the sender's; what the
    // handler sends and starts is its child in turn.
    let otel = serve_span(&trace, &request, &shared.peer);
    let scope = otel.is_recording().then(|| otel.child_of(&trace));
    let call = Call {
        trace: scope.clone().unwrap_or(trace),
        deadline,
        peer: shared.peer.clone(),
        id,
        shared: shared.clone(),
    };
    let guard = in_flight.enter();
    let mut made = None;
    let mut later = None;
    if service.answers_now(&request) {
        // Answered here, in the serving runtime's context (anything it spawns or times
        // goes there), with no hop; the reply leaves with the others of this read.
        let _home = shared.home.enter();
        let _span = span.enter();
        let work = service.call(request, call);
        let mut work: std::pin::Pin<Box<dyn Future<Output = _> + Send>> = match &scope {
            Some(trace) => Box::pin(crate::telemetry::within(trace.clone(), work)),
            None => work,
        };
        let polled = work
            .as_mut()
            .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()));
        match polled {
            std::task::Poll::Ready(result) => {
                let env = reply(result);
                match shared.written(shared.out.try_push(&env, true, false)) {
                    Err(PushError::Full) => {
                        // Wait for room on the serving runtime, not here.
                        let task_shared = shared.clone();
                        shared.home.spawn(async move {
                            let _guard = guard;
                            let _ = task_shared.send_reply(env).await;
                        });
                    }
                    r => {
                        let _ = shared.reply_sent(&env, r);
                    }
                }
                return;
            }
            // Not ready after all: it finishes on the serving runtime.
            std::task::Poll::Pending => made = Some(work),
        }
    } else {
        later = Some((request, call));
    }
    // A relay runs on the I/O thread (this one); everything else on the serving runtime.
    let runtime = match &later {
        Some((request, _)) if service.relays(request) => crate::io::handle(),
        _ => shared.home.clone(),
    };
    let task_shared = shared.clone();
    // The task waits for its abort handle to be registered, so its own removal below can
    // never run before the insertion (which would leave a stale entry).
    let (registered_tx, registered_rx) = oneshot::channel::<()>();
    // The handler runs on the connection's home runtime, and only a relay on the I/O thread.
    let fut = async move {
        let _guard = guard;
        let _otel = otel;
        let work = match (made, later) {
            (Some(work), _) => work,
            (None, Some((request, call))) => match scope {
                Some(trace) => {
                    Box::pin(crate::telemetry::within(trace, service.call(request, call)))
                }
                None => service.call(request, call),
            },
            (None, None) => return,
        };
        let _ = registered_rx.await;
        let result = match deadline {
            // Past the deadline the requester has given up: send nothing.
            Some(d) => tokio::time::timeout_at(d.into(), work).await.ok(),
            None => Some(work.await),
        };
        if let Ok(mut s) = task_shared.serving.lock() {
            s.remove(&id);
        }
        if let Some(result) = result {
            let _ = task_shared.send_reply(reply(result)).await;
        }
    };
    let handle = runtime.spawn(tracing::Instrument::instrument(fut, span));
    if let Ok(mut s) = shared.serving.lock() {
        s.insert(id, handle.abort_handle());
    }
    let _ = registered_tx.send(());
}

/// The span of a request served for a traced run (its sender's span as the parent);
/// none for a request outside one, nor when telemetry is off.
fn serve_span(
    trace: &TraceContext,
    request: &Request,
    peer: &PeerInfo,
) -> crate::telemetry::OtelSpan {
    if trace.parent_span_id == 0 {
        return crate::telemetry::OtelSpan::default();
    }
    let (service, method) = (request.kind(), crate::calls::request_kind(request));
    crate::telemetry::OtelSpan::start(
        format!("{service} {method}"),
        opentelemetry::trace::SpanKind::Server,
        trace,
        || {
            let mut attributes = vec![
                opentelemetry::KeyValue::new("rpc.system", "antler"),
                opentelemetry::KeyValue::new("rpc.service", service),
                opentelemetry::KeyValue::new("rpc.method", method),
                opentelemetry::KeyValue::new("antler.peer.role", peer.role.as_str()),
            ];
            if let Some(run_id) = &trace.run_id {
                attributes.push(opentelemetry::KeyValue::new(
                    "antler.run_id",
                    run_id.clone(),
                ));
            }
            attributes
        },
    )
}

/// Fails unary requests when due (see [`crate::deadline`]).
async fn deadline_loop(shared: Arc<Shared>) {
    let closed = shared.on_close();
    tokio::pin!(closed);
    loop {
        let due = tokio::select! {
            biased;
            _ = &mut closed => return,
            due = shared.deadlines.wait() => due,
        };
        if due {
            shared.expire();
        }
    }
}

async fn heartbeat_loop(shared: Arc<Shared>) {
    // The shorter interval of the two sides to send at, the longer one's misses to wait
    // (a peer that said none, or zero, is held to this side's).
    let own = shared.config.heartbeat_interval;
    let theirs = Some(shared.peer.heartbeat)
        .filter(|d| !d.is_zero())
        .unwrap_or(own);
    let interval = own.min(theirs);
    let dead_after = own.max(theirs) * shared.config.heartbeat_misses.max(1);
    let closed = shared.on_close();
    tokio::pin!(closed);
    let heartbeat = heartbeat_frame();
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    shared.touch();
    // The caller seen watching the socket at the last tick.
    let mut watching = None;
    loop {
        let scheduled = tokio::select! {
            _ = &mut closed => return,
            at = tick.tick() => at,
        };
        // A caller that has watched the socket for a whole interval may not be reading it
        // (its thread is busy): the I/O thread takes the socket back, so the peer's frames
        // are read whatever that thread does.
        if let Some(sock) = shared.sock.as_ref() {
            match sock.holder() {
                Held::Io => watching = None,
                // Between a caller's turns the socket goes back to the I/O thread at the
                // next tick (its reader task is woken through the caller's runtime until
                // then, which a busy thread would delay).
                Held::Between => {
                    shared.watch_on_io(None);
                    watching = None;
                }
                Held::Turn(turn) if watching == Some(turn) => {
                    shared.watch_on_io(Some(turn));
                    watching = None;
                }
                Held::Turn(turn) => watching = Some(turn),
            }
        }
        let lag = scheduled.elapsed().as_micros().min(u64::MAX as u128) as u64;
        shared.heartbeat_lag_us.fetch_max(lag, Ordering::Relaxed);
        if lag > interval.as_micros() as u64 {
            tracing::debug!(peer = %shared.peer.address, lag_ms = lag / 1000, "heartbeat tick ran late");
        }
        let now = shared.since_start_ms();
        let silent = now.saturating_sub(shared.last_seen_ms.load(Ordering::Relaxed));
        if shared.reader_parked.load(Ordering::SeqCst) {
            // The reader waits for a consumer in this process: not the peer's silence.
        } else if silent > dead_after.as_millis() as u64 {
            let reason = format!(
                "no heartbeat from {} for {silent} ms ({} missed)",
                shared.peer.role, shared.config.heartbeat_misses
            );
            tracing::warn!(peer = %shared.peer.address, %reason, "declaring peer dead");
            shared.close(&reason);
            return;
        }
        // Ahead of every queued frame not yet begun.
        if let Err(PushError::Io(e)) = shared.out.push_first(&heartbeat) {
            shared.close(&format!("write failed: {e}"));
            return;
        }
    }
}

/// The encoded frame of a heartbeat (the same bytes every time).
fn heartbeat_frame() -> Vec<u8> {
    let env = Envelope {
        id: 0,
        reply_to: None,
        deadline: None,
        trace: TraceContext::default(),
        body: Body::Heartbeat,
    };
    let payload = codec::encode(&env).unwrap_or_default();
    crate::frame::frame_bytes(&payload)
}
