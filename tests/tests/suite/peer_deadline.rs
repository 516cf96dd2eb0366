//! A request to a peer that stops answering (a host frozen with SIGSTOP) fails with
//! `DeadlineExceeded` at its deadline, not later and never hanging; after SIGCONT the same
//! connection answers again. A peer that stays silent past 3 heartbeats is declared dead;
//! one whose own heartbeat interval is longer than the host's is not.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use antler_protocol::{
    link::dial,
    messages::{ControlReply, ControlRequest, Reply, Request},
    ConnectionConfig, RpcError, TraceContext,
};
use antler_tests::{freeze, signal, Host};

fn ping() -> Request {
    Request::Control(ControlRequest::Ping {
        payload: b"p".to_vec(),
    })
}

#[tokio::test]
async fn a_frozen_peer_fails_requests_at_their_deadline() {
    let host = Host::start("antler-sandbox-host");
    let conn = dial(
        &host.address(),
        &host.identity(),
        ConnectionConfig::default(),
        None,
    )
    .await
    .expect("connect");
    assert!(conn
        .request(ping(), TraceContext::new_root(), Duration::from_secs(5))
        .await
        .is_ok());

    freeze(host.child.id());
    let deadline = Duration::from_millis(400);
    let started = Instant::now();
    let r = conn
        .request(ping(), TraceContext::new_root(), deadline)
        .await;
    let took = started.elapsed();
    signal(host.child.id(), libc::SIGCONT);
    assert_eq!(r, Err(RpcError::DeadlineExceeded(deadline)));
    assert!(took >= deadline, "failed early: {took:?}");
    assert!(
        took < deadline + Duration::from_secs(2),
        "failed late: {took:?}"
    );

    let r = conn
        .request(ping(), TraceContext::new_root(), Duration::from_secs(5))
        .await;
    assert_eq!(
        r,
        Ok(Reply::Control(ControlReply::Pong {
            payload: b"p".to_vec()
        }))
    );
}

#[tokio::test]
async fn a_peer_frozen_past_three_heartbeats_is_declared_dead() {
    let host = Host::start("antler-mcp-host");
    let cfg = ConnectionConfig {
        heartbeat_interval: Duration::from_millis(100),
        ..ConnectionConfig::default()
    };
    let conn = dial(&host.address(), &host.identity(), cfg, None)
        .await
        .expect("connect");
    freeze(host.child.id());
    let reason = tokio::time::timeout(Duration::from_secs(10), conn.closed()).await;
    signal(host.child.id(), libc::SIGCONT);
    let reason = reason.expect("declared dead within 10 s");
    assert!(reason.contains("no heartbeat"), "{reason}");
    let r = conn
        .request(ping(), TraceContext::new_root(), Duration::from_secs(1))
        .await;
    assert!(matches!(r, Err(RpcError::PeerUnavailable(_))), "{r:?}");
}

#[tokio::test]
async fn a_client_with_a_slower_heartbeat_than_the_host_is_not_dropped_for_its_quiet() {
    // The host beats every second and declares a peer dead after 3 s of silence; this
    // client's own interval is 5 s. The handshake tells each side the other's, so the
    // client beats at the shorter one and stays connected through 4 s of quiet.
    let host = Host::start("antler-sandbox-host");
    let cfg = ConnectionConfig {
        heartbeat_interval: Duration::from_secs(5),
        ..ConnectionConfig::default()
    };
    let conn = dial(&host.address(), &host.identity(), cfg, None)
        .await
        .expect("connect");
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(!conn.is_closed(), "{:?}", conn.close_reason());
    let r = conn
        .request(ping(), TraceContext::new_root(), Duration::from_secs(5))
        .await;
    assert!(r.is_ok(), "{r:?}");
}
