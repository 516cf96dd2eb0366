//! Callers waiting on one connection, over a Unix socket and over TCP with mutual TLS: a
//! caller dropped while others' replies arrive loses no one's frame and leaves the
//! connection usable; a peer that goes away ends every waiting call; a streamed reply keeps
//! its order while calls come and go beside it; a caller reading the socket for itself that
//! meets a stream item with no room hands it, and the socket, to the reader task. (The
//! tests hold for any reader: the I/O thread's reader task, or a caller waiting alone,
//! which reads the socket itself, see `protocol/src/sock.rs`.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    sync::{atomic::Ordering, Arc},
    time::{Duration, Instant},
};

use crate::common_peer::*;
use antler_protocol::{
    link::dial,
    server::Server,
    tls::{role_dns_name, ClusterTls},
    Address, Connection, ConnectionConfig, Identity, InFlight, Role, RpcError, TraceContext,
};

fn t() -> TraceContext {
    TraceContext::for_run("run-1")
}

/// A cluster CA and certificates for the lead and for mcp-host, in memory.
fn cluster_tls() -> (Arc<ClusterTls>, Arc<ClusterTls>) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::default();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "test CA");
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let for_role = |role: Role| {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![role_dns_name(role)])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        Arc::new(
            ClusterTls::from_pem(
                ca_pem.as_bytes(),
                cert.pem().as_bytes(),
                key.serialize_pem().as_bytes(),
            )
            .unwrap(),
        )
    };
    (for_role(Role::Lead), for_role(Role::McpHost))
}

/// The test service behind a TLS listener on a free loopback port, and a client of it.
async fn tls_peer() -> (Server, Arc<Counters>, Connection) {
    let (lead, host) = cluster_tls();
    let counters = Arc::new(Counters::default());
    let server = Server::bind(
        &Address::Tcp("127.0.0.1:0".into()),
        Identity::new(Role::McpHost, "peer", Some(TOKEN.into())).with_tls(Some(host)),
        ConnectionConfig::default(),
        Arc::new(TestService {
            counters: counters.clone(),
        }),
        Arc::new(InFlight::default()),
    )
    .await
    .unwrap();
    let c = dial(
        server.address(),
        &Identity::new(Role::Lead, "lead", Some(TOKEN.into())).with_tls(Some(lead)),
        ConnectionConfig::default(),
        None,
    )
    .await
    .unwrap();
    (server, counters, c)
}

/// The first caller waits (its reply is slow) while the replies of the callers after it
/// arrive; it is dropped before its own reply comes. Every other caller gets its
/// own reply, the dropped call is cancelled at the peer, and the connection still serves.
async fn a_dropped_reader_loses_nothing(c: Connection, counters: Arc<Counters>) {
    let first = {
        let c = c.clone();
        tokio::spawn(async move {
            c.request(ping(b"sleep:800"), t(), Duration::from_secs(30))
                .await
        })
    };
    // The first caller is now waiting.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let others: Vec<_> = (0..40)
        .map(|i| {
            let c = c.clone();
            tokio::spawn(async move {
                let body = if i % 2 == 0 {
                    format!("sleep:{}", 20 + i * 5)
                } else {
                    format!("n{i}")
                };
                let r = c
                    .request(ping(body.as_bytes()), t(), Duration::from_secs(10))
                    .await;
                (body, r)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(120)).await;
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    for other in others {
        let (body, r) = other.await.unwrap();
        assert_eq!(r.unwrap(), pong(body.as_bytes()));
    }
    // A new caller reads its reply at once, and the cancel reached the peer.
    let started = Instant::now();
    assert_eq!(
        c.request(ping(b"after"), t(), Duration::from_secs(5))
            .await
            .unwrap(),
        pong(b"after")
    );
    assert!(started.elapsed() < Duration::from_secs(1));
    let until = Instant::now() + Duration::from_secs(3);
    while counters.dropped_unfinished.load(Ordering::SeqCst) == 0 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(counters.dropped_unfinished.load(Ordering::SeqCst), 1);
    // The late reply of the dropped call went nowhere: replies still match their calls.
    tokio::time::sleep(Duration::from_millis(800)).await;
    for i in 0..20 {
        let body = format!("again {i}");
        assert_eq!(
            c.request(ping(body.as_bytes()), t(), Duration::from_secs(5))
                .await
                .unwrap(),
            pong(body.as_bytes())
        );
    }
}

#[tokio::test]
async fn a_caller_dropped_while_reading_for_others_loses_no_frame_over_unix() {
    let peer = start_peer(ConnectionConfig::default()).await;
    let c = client(&peer, ConnectionConfig::default()).await;
    a_dropped_reader_loses_nothing(c, peer.counters.clone()).await;
}

#[tokio::test]
async fn a_caller_dropped_while_reading_for_others_loses_no_frame_over_tls() {
    let (_server, counters, c) = tls_peer().await;
    a_dropped_reader_loses_nothing(c, counters).await;
}

#[tokio::test]
async fn callers_waiting_on_the_socket_fail_at_once_when_a_tls_peer_goes_away() {
    let (server, _counters, c) = tls_peer().await;
    let waiting: Vec<_> = (0..3)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move {
                c.request(ping(b"sleep:20000"), t(), Duration::from_secs(30))
                    .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    server.drain(Duration::from_millis(0)).await;
    for w in waiting {
        let r = w.await.unwrap();
        assert!(matches!(r, Err(RpcError::PeerUnavailable(_))), "{r:?}");
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    let r = c.request(ping(b"x"), t(), Duration::from_secs(1)).await;
    assert!(matches!(r, Err(RpcError::PeerUnavailable(_))), "{r:?}");
}

#[tokio::test]
async fn streamed_replies_keep_their_order_while_callers_read_replies() {
    let (_server, _counters, c) = tls_peer().await;
    let mut stream = c
        .request_stream(ping(b"stream:300"), t(), Duration::from_secs(20))
        .await
        .unwrap();
    // Calls come and go while the stream's items arrive and its consumer lags.
    let calls = {
        let c = c.clone();
        tokio::spawn(async move {
            for i in 0..100 {
                let body = format!("c{i}");
                let r = c
                    .request(ping(body.as_bytes()), t(), Duration::from_secs(10))
                    .await;
                assert_eq!(r.unwrap(), pong(body.as_bytes()));
            }
        })
    };
    let mut items = Vec::new();
    while let Some(item) = stream.next().await {
        items.push(item.unwrap());
        if items.len() % 50 == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    calls.await.unwrap();
    assert_eq!(items.len(), 301);
    for (i, item) in items.iter().take(300).enumerate() {
        assert_eq!(item, &pong(format!("item {i}").as_bytes()));
    }
    assert_eq!(items[300], pong(b"done"));
}

/// A caller alone in flight reads the socket itself; a stream started beside it whose
/// consumer has no room stalls the read: the caller hands the item and the socket to the
/// reader task, which delivers the item once there is room and reads the caller's reply.
#[tokio::test(flavor = "current_thread")]
async fn a_lone_caller_leaves_a_stalled_stream_and_the_socket_to_the_reader_task() {
    let config = ConnectionConfig {
        stream_buffer: 2,
        ..ConnectionConfig::default()
    };
    let peer = start_peer(config.clone()).await;
    let c = client(&peer, config).await;
    let lone = spawn_watching_caller(
        &c,
        "sleep:300",
        t(),
        Duration::from_secs(10),
        "the lone caller should watch the socket",
    )
    .await;
    // A stream whose consumer waits: its third item has no room.
    let mut stream = c
        .request_stream(ping(b"stream:20"), t(), Duration::from_secs(10))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        !c.watched_by_caller(),
        "a caller whose read stalled on a stream should give the socket back"
    );
    let consumed = Instant::now();
    let mut items = 0;
    while let Some(item) = stream.next().await {
        item.unwrap();
        items += 1;
    }
    assert_eq!(items, 21);
    let reply = lone.await.unwrap();
    assert_eq!(reply.unwrap(), pong(b"sleep:300"));
    assert!(
        consumed.elapsed() < Duration::from_millis(500),
        "the lone caller's reply waited {:?} after the stream was drained",
        consumed.elapsed()
    );
    assert!(!c.is_closed());
}

/// Between its turns a caller's thread keeps the socket's read readiness (its next turn
/// costs no system call): should that thread's runtime end meanwhile, the connection
/// still reads, for streams (which the reader task reads) and lone callers alike.
#[tokio::test(flavor = "current_thread")]
async fn a_caller_runtime_that_ends_between_turns_leaves_the_connection_working() {
    let config = ConnectionConfig {
        heartbeat_interval: Duration::from_secs(5),
        ..ConnectionConfig::default()
    };
    // The peer serves on a runtime of its own: this one waits for the thread below.
    let serving = tokio::runtime::Runtime::new().unwrap();
    let peer = serving.spawn(start_peer(config.clone())).await.unwrap();
    let c = client(&peer, config).await;
    {
        let c = c.clone();
        on_own_runtime(move || async move {
            for i in 0..3 {
                let body = format!("from a short-lived runtime {i}");
                let r = c
                    .request(ping(body.as_bytes()), t(), Duration::from_secs(5))
                    .await;
                assert_eq!(r.unwrap(), pong(body.as_bytes()));
            }
        })
        .join()
        .unwrap();
    }
    // Read by the reader task, through the ended runtime's registration first.
    let started = Instant::now();
    let mut stream = c
        .request_stream(ping(b"stream:5"), t(), Duration::from_secs(10))
        .await
        .unwrap();
    let mut items = 0;
    while let Some(item) = stream.next().await {
        item.unwrap();
        items += 1;
    }
    assert_eq!(items, 6);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the stream waited {:?} (the heartbeat tick is 5 s away)",
        started.elapsed()
    );
    let r = c.request(ping(b"lone"), t(), Duration::from_secs(5)).await;
    assert_eq!(r.unwrap(), pong(b"lone"));
    assert!(!c.is_closed(), "{:?}", c.close_reason());
    drop(peer);
    serving.shutdown_background();
}
