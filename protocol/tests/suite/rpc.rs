//! Request/reply over a real Unix socket: correlation under concurrency, streamed replies,
//! deadlines, cancellation reaching the server, remote errors, frame limits, and peers
//! that vanish mid-request.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    sync::atomic::Ordering,
    time::{Duration, Instant},
};

use crate::common_peer::*;
use antler_protocol::{
    handshake::{FrameReader, FrameWriter},
    ConnectionConfig, RemoteError, RpcError, TraceContext,
};

fn t() -> TraceContext {
    TraceContext::for_run("run-1")
}

#[tokio::test]
async fn concurrent_requests_get_their_own_replies() {
    let peer = start_peer(ConnectionConfig::default()).await;
    let c = client(&peer, ConnectionConfig::default()).await;
    let futs = (0..500).map(|i| {
        let c = c.clone();
        async move {
            let body = format!("n{i}");
            let r = c
                .request(ping(body.as_bytes()), t(), Duration::from_secs(10))
                .await;
            (body, r)
        }
    });
    for (body, r) in futures::future::join_all(futs).await {
        assert_eq!(r.unwrap(), pong(body.as_bytes()));
    }
}

#[tokio::test]
async fn streamed_replies_arrive_in_order_then_the_final_reply() {
    let peer = start_peer(ConnectionConfig::default()).await;
    let c = client(&peer, ConnectionConfig::default()).await;
    let mut s = c
        .request_stream(ping(b"stream:200"), t(), Duration::from_secs(10))
        .await
        .unwrap();
    let mut items = Vec::new();
    while let Some(item) = s.next().await {
        items.push(item.unwrap());
    }
    assert_eq!(items.len(), 201);
    assert_eq!(items[0], pong(b"item 0"));
    assert_eq!(items[199], pong(b"item 199"));
    assert_eq!(items[200], pong(b"done"));
}

#[tokio::test]
async fn a_slow_reply_fails_with_deadline_exceeded_and_the_server_stops_the_work() {
    let peer = start_peer(ConnectionConfig::default()).await;
    let c = client(&peer, ConnectionConfig::default()).await;
    let started = Instant::now();
    let r = c
        .request(ping(b"sleep:5000"), t(), Duration::from_millis(200))
        .await;
    assert_eq!(
        r,
        Err(RpcError::DeadlineExceeded(Duration::from_millis(200)))
    );
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "waited {:?}",
        started.elapsed()
    );
    // The server learns of the deadline and of the cancel: the handler is dropped unfinished.
    let until = Instant::now() + Duration::from_secs(3);
    while peer.counters.dropped_unfinished.load(Ordering::SeqCst) == 0 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(peer.counters.dropped_unfinished.load(Ordering::SeqCst), 1);
    assert_eq!(peer.counters.finished.load(Ordering::SeqCst), 0);
    // The connection is still good.
    assert_eq!(
        c.request(ping(b"x"), t(), Duration::from_secs(5))
            .await
            .unwrap(),
        pong(b"x")
    );
}

#[tokio::test]
async fn a_short_deadline_sent_after_a_long_one_fires_on_time() {
    let peer = start_peer(ConnectionConfig::default()).await;
    let c = client(&peer, ConnectionConfig::default()).await;
    let long = c.request(ping(b"sleep:1500"), t(), Duration::from_secs(20));
    let short = async {
        // Sent once the long request waits.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let started = Instant::now();
        let r = c
            .request(ping(b"sleep:5000"), t(), Duration::from_millis(200))
            .await;
        (r, started.elapsed())
    };
    let (long, (short, waited)) = tokio::join!(long, short);
    assert_eq!(
        short,
        Err(RpcError::DeadlineExceeded(Duration::from_millis(200)))
    );
    assert!(waited >= Duration::from_millis(200), "waited {waited:?}");
    // Not held until the long request's reply (1.5 s) or its deadline (20 s).
    assert!(waited < Duration::from_millis(1400), "waited {waited:?}");
    assert_eq!(long.unwrap(), pong(b"sleep:1500"));
}

#[tokio::test]
async fn a_request_due_while_its_caller_is_busy_is_cancelled_at_the_peer_though_dropped_unread() {
    // A peer that keeps no deadline of its own (an older or foreign server): only a
    // cancel stops its work. It reports the id of the request it got, then each cancel.
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let (_dir, path, peer) = raw_peer("deaf", |fr, fw| report_requests(fr, fw, seen_tx));
    let c = dial_lead(
        path,
        ConnectionConfig {
            heartbeat_interval: Duration::from_secs(30),
            ..ConnectionConfig::default()
        },
    )
    .await;
    // The caller sends, then its thread is busy past the deadline, then it gives up on
    // the request without reading the error the deadline task left for it.
    let caller = on_own_runtime({
        let c = c.clone();
        move || async move {
            let request = c.request(ping(b"work"), t(), Duration::from_millis(100));
            tokio::pin!(request);
            let early = tokio::time::timeout(Duration::from_millis(20), &mut request).await;
            assert!(early.is_err(), "the deaf peer answered: {early:?}");
            std::thread::sleep(Duration::from_millis(400));
        }
    });
    let within = Duration::from_secs(5);
    let (kind, id) = tokio::time::timeout(within, seen.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(kind, "request");
    caller.join().unwrap();
    let cancel = tokio::time::timeout(within, seen.recv()).await;
    assert_eq!(
        cancel.ok().flatten(),
        Some(("cancel", id)),
        "the peer was never told to stop the overdue request"
    );
    // Told once, not again when the caller dropped it.
    assert!(
        tokio::time::timeout(Duration::from_millis(200), seen.recv())
            .await
            .is_err()
    );
    peer.abort();
}

#[tokio::test]
async fn a_request_queued_past_its_deadline_is_not_served_without_a_cancel_behind_it() {
    // A peer that reads nothing until released (its socket and the sender's queue fill
    // up), then reports every request and cancel it gets, in order.
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let (_dir, path, peer) = raw_peer("slow", |fr, fw| async move {
        let _ = released.await;
        report_requests(fr, fw, seen_tx).await;
    });
    let c = dial_lead(
        path,
        ConnectionConfig {
            heartbeat_interval: Duration::from_secs(30),
            outbound_queue: 1,
            ..ConnectionConfig::default()
        },
    )
    .await;
    // Large requests the peer does not read fill the socket, then the queue.
    let big = vec![b'x'; 600 << 10];
    let fillers: Vec<_> = (0..3)
        .map(|_| {
            let (c, big) = (c.clone(), big.clone());
            tokio::spawn(async move {
                let _ = c.request(ping(&big), t(), Duration::from_secs(30)).await;
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The last request waits for room in the queue; its thread is busy past its deadline,
    // and room comes while it is busy.
    let caller = on_own_runtime({
        let c = c.clone();
        move || async move {
            let request = c.request(ping(b"late"), t(), Duration::from_millis(100));
            tokio::pin!(request);
            let early = tokio::time::timeout(Duration::from_millis(20), &mut request).await;
            assert!(
                early.is_err(),
                "the request did not wait for room: {early:?}"
            );
            std::thread::sleep(Duration::from_millis(400));
            request.await
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    release.send(()).unwrap();
    let outcome = tokio::task::spawn_blocking(move || caller.join().unwrap())
        .await
        .unwrap();
    assert!(
        outcome.is_err(),
        "an overdue request got a reply: {outcome:?}"
    );
    let mut order = Vec::new();
    while let Ok(Some(event)) = tokio::time::timeout(Duration::from_millis(500), seen.recv()).await
    {
        order.push(event);
    }
    let fillers_seen = order.iter().filter(|(k, _)| *k == "request").count();
    assert!(
        fillers_seen >= 3,
        "the fillers did not all arrive: {order:?}"
    );
    // The late request has the highest id. If it reached the peer, a cancel came after it.
    let late = order
        .iter()
        .filter(|(k, _)| *k == "request")
        .map(|(_, id)| *id)
        .max()
        .unwrap();
    if fillers_seen > 3 {
        let at = order.iter().position(|e| *e == ("request", late)).unwrap();
        assert!(
            order[at..].contains(&("cancel", late)),
            "the peer got an overdue request with no cancel behind it: {order:?}"
        );
    }
    for f in fillers {
        f.abort();
    }
    peer.abort();
}

#[tokio::test]
async fn a_request_with_no_practical_deadline_is_answered() {
    let peer = start_peer(ConnectionConfig::default()).await;
    let c = client(&peer, ConnectionConfig::default()).await;
    assert_eq!(
        c.request(ping(b"x"), t(), Duration::MAX).await.unwrap(),
        pong(b"x")
    );
    let mut s = c
        .request_stream(ping(b"stream:2"), t(), Duration::MAX)
        .await
        .unwrap();
    let mut n = 0;
    while let Some(item) = s.next().await {
        item.unwrap();
        n += 1;
    }
    assert_eq!(n, 3);
}

#[tokio::test]
async fn dropping_a_request_cancels_it_at_the_peer() {
    let peer = start_peer(ConnectionConfig::default()).await;
    let c = client(&peer, ConnectionConfig::default()).await;
    let fut = c.request(ping(b"sleep:10000"), t(), Duration::from_secs(30));
    let _ = tokio::time::timeout(Duration::from_millis(100), fut).await;
    let until = Instant::now() + Duration::from_secs(3);
    while peer.counters.dropped_unfinished.load(Ordering::SeqCst) == 0 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(peer.counters.dropped_unfinished.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn remote_errors_are_typed() {
    let peer = start_peer(ConnectionConfig::default()).await;
    let c = client(&peer, ConnectionConfig::default()).await;
    let r = c.request(ping(b"fail"), t(), Duration::from_secs(5)).await;
    assert_eq!(
        r,
        Err(RpcError::Remote(RemoteError::Failed(
            "asked to fail".into()
        )))
    );
}

#[tokio::test]
async fn an_oversize_request_is_refused_before_sending_and_the_connection_survives() {
    let small = ConnectionConfig {
        max_frame_bytes: 64 * 1024,
        ..ConnectionConfig::default()
    };
    let peer = start_peer(small.clone()).await;
    let c = client(&peer, small).await;
    let r = c
        .request(ping(&vec![1u8; 100_000]), t(), Duration::from_secs(5))
        .await;
    assert!(
        matches!(r, Err(RpcError::TooLarge { max: 65536, .. })),
        "{r:?}"
    );
    // A reply over the limit is turned into an error reply by the server.
    let r = c
        .request(ping(b"big:100000"), t(), Duration::from_secs(5))
        .await;
    assert!(
        matches!(&r, Err(RpcError::Remote(RemoteError::Failed(m))) if m.contains("frame limit")),
        "{r:?}"
    );
    assert_eq!(
        c.request(ping(b"ok"), t(), Duration::from_secs(5))
            .await
            .unwrap(),
        pong(b"ok")
    );
}

#[tokio::test]
async fn requests_in_flight_fail_at_once_when_the_peer_goes_away() {
    let peer = start_peer(ConnectionConfig::default()).await;
    let c = client(&peer, ConnectionConfig::default()).await;
    let c2 = c.clone();
    let pending = tokio::spawn(async move {
        c2.request(ping(b"sleep:20000"), t(), Duration::from_secs(30))
            .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    // Drain with no grace: the server closes every connection.
    peer.server.drain(Duration::from_millis(0)).await;
    let r = pending.await.unwrap();
    assert!(matches!(r, Err(RpcError::PeerUnavailable(_))), "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    let r = c.request(ping(b"x"), t(), Duration::from_secs(1)).await;
    assert!(matches!(r, Err(RpcError::PeerUnavailable(_))), "{r:?}");
}

#[tokio::test]
async fn drain_lets_requests_in_flight_finish_and_refuses_new_ones() {
    let peer = start_peer(ConnectionConfig::default()).await;
    let c = client(&peer, ConnectionConfig::default()).await;
    let c2 = c.clone();
    let slow = tokio::spawn(async move {
        c2.request(ping(b"sleep:300"), t(), Duration::from_secs(10))
            .await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let server = &peer.server;
    let drain = server.drain(Duration::from_secs(5));
    let late = async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        c.request(ping(b"late"), t(), Duration::from_secs(5)).await
    };
    let (left, late) = tokio::join!(drain, late);
    assert_eq!(left, 0);
    assert_eq!(slow.await.unwrap().unwrap(), pong(b"sleep:300"));
    assert_eq!(late, Err(RpcError::Remote(RemoteError::ShuttingDown)));
}

#[tokio::test]
async fn a_full_outgoing_queue_slows_the_sender_then_reports_overloaded() {
    // A peer that completes the handshake and then never reads: the socket buffer and the
    // bounded queue fill up; senders wait, then get Overloaded at their deadline.
    let (_dir, path, holder) = raw_peer("stuck", |fr, fw| async move {
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop((fr, fw));
    });
    let c = dial_lead(
        path,
        ConnectionConfig {
            outbound_queue: 8,
            heartbeat_interval: Duration::from_secs(30),
            ..ConnectionConfig::default()
        },
    )
    .await;
    let payload = vec![0u8; 256 * 1024];
    let mut overloaded = 0;
    let mut deadline = 0;
    let futs: Vec<_> = (0..64)
        .map(|_| c.request(ping(&payload), t(), Duration::from_millis(500)))
        .collect();
    for r in futures::future::join_all(futs).await {
        match r {
            Err(RpcError::Overloaded(_)) => overloaded += 1,
            Err(RpcError::DeadlineExceeded(_)) => deadline += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(overloaded > 0, "some senders must be refused for load");
    assert_eq!(overloaded + deadline, 64);
    holder.abort();
}

#[tokio::test]
async fn a_silent_peer_is_declared_dead_after_missed_heartbeats() {
    let (_dir, path, holder) = raw_peer("silent", |fr, fw| async move {
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop((fr, fw));
    });
    let c = dial_lead(
        path,
        ConnectionConfig {
            heartbeat_interval: Duration::from_millis(50),
            heartbeat_misses: 3,
            ..ConnectionConfig::default()
        },
    )
    .await;
    let pending = c.request(ping(b"x"), t(), Duration::from_secs(30));
    let r = tokio::time::timeout(Duration::from_secs(10), pending)
        .await
        .unwrap();
    match r {
        Err(RpcError::PeerUnavailable(reason)) => {
            assert!(reason.contains("no heartbeat"), "{reason}")
        }
        other => panic!("unexpected {other:?}"),
    }
    holder.abort();
}

/// A peer that answers nothing and reports each request it reads (`"request"`, its id)
/// and each cancel (`"cancel"`, the id it cancels), in order, until the connection ends.
async fn report_requests(
    mut fr: FrameReader,
    fw: FrameWriter,
    seen: tokio::sync::mpsc::UnboundedSender<(&'static str, antler_protocol::envelope::RequestId)>,
) {
    use futures::StreamExt;
    while let Some(Ok(frame)) = fr.next().await {
        let env: antler_protocol::Envelope = antler_protocol::codec::decode(&frame).unwrap();
        match env.body {
            antler_protocol::Body::Request(_) => seen.send(("request", env.id)).unwrap(),
            antler_protocol::Body::Cancel => seen.send(("cancel", env.reply_to.unwrap())).unwrap(),
            _ => {}
        }
    }
    drop(fw);
}

/// A bare peer (no Antler server) at a socket in a new directory: it accepts one
/// connection, shakes hands as sandbox-host `name`, then does `then` with the framed halves.
fn raw_peer<F, Fut>(
    name: &'static str,
    then: F,
) -> (
    tempfile::TempDir,
    std::path::PathBuf,
    tokio::task::JoinHandle<()>,
)
where
    F: FnOnce(FrameReader, FrameWriter) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{name}.sock"));
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let me = antler_protocol::Identity::new(antler_protocol::Role::SandboxHost, name, None);
    let task = tokio::spawn(async move {
        let (s, _) = listener.accept().await.unwrap();
        let (r, w) = s.into_split();
        let (mut fr, mut fw) =
            antler_protocol::handshake::framed(Box::new(r), Box::new(w), 1 << 20);
        antler_protocol::handshake::accept(&mut fr, &mut fw, &me, name)
            .await
            .unwrap();
        then(fr, fw).await;
    });
    (dir, path, task)
}

/// A connection dialed as the lead (no token) to the socket at `path`.
async fn dial_lead(path: std::path::PathBuf, cfg: ConnectionConfig) -> antler_protocol::Connection {
    antler_protocol::link::dial(
        &antler_protocol::Address::Unix(path),
        &antler_protocol::Identity::new(antler_protocol::Role::Lead, "lead", None),
        cfg,
        None,
    )
    .await
    .unwrap()
}
