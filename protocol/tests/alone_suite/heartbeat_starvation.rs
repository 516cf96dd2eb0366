//! Heartbeats run on the process's I/O thread: a runtime whose only thread is blocked by
//! work (a busy lead) neither stops sending heartbeats nor declares its healthy peer dead,
//! and the measured heartbeat lag stays small however long the work blocks.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::common_peer::*;
use antler_protocol::{ConnectionConfig, TraceContext};

#[tokio::test(flavor = "current_thread")]
async fn a_blocked_runtime_keeps_its_links_alive() {
    let _alone = crate::ALONE.lock().await;
    let config = ConnectionConfig {
        heartbeat_interval: Duration::from_millis(50),
        heartbeat_misses: 3,
        ..ConnectionConfig::default()
    };
    // Both ends are served by this one-thread runtime, as every actor of the lead is.
    let peer = start_peer(config.clone()).await;
    let c = client(&peer, config).await;
    let ok = c
        .request(
            ping(b"before"),
            TraceContext::default(),
            Duration::from_secs(10),
        )
        .await;
    assert_eq!(ok.unwrap(), pong(b"before"));
    // Work that holds the thread for 60 heartbeat windows, in bursts, like a run loop
    // under load.
    for _ in 0..2 {
        std::thread::sleep(Duration::from_millis(1500));
        tokio::task::yield_now().await;
    }
    assert!(
        !c.is_closed(),
        "the link was declared dead: {:?}",
        c.close_reason()
    );
    let lag = c.heartbeat_lag();
    assert!(
        lag < Duration::from_secs(1),
        "heartbeats waited {lag:?} behind the blocked runtime"
    );
    let ok = c
        .request(
            ping(b"after"),
            TraceContext::default(),
            Duration::from_secs(10),
        )
        .await;
    assert_eq!(ok.unwrap(), pong(b"after"));
}

/// A caller waiting alone reads its reply on its own thread (the socket's read readiness
/// is watched by its runtime): should that thread then block, the I/O thread takes the
/// socket back within two heartbeat intervals, so the peer's heartbeats and the replies
/// other runtimes wait for are still read.
#[tokio::test(flavor = "current_thread")]
async fn a_blocked_caller_does_not_keep_the_socket_from_the_io_thread() {
    let _alone = crate::ALONE.lock().await;
    let config = ConnectionConfig {
        heartbeat_interval: Duration::from_millis(50),
        heartbeat_misses: 3,
        ..ConnectionConfig::default()
    };
    // The peer serves on a runtime of its own, which this test does not block.
    let serving = tokio::runtime::Runtime::new().unwrap();
    let peer = serving.spawn(start_peer(config.clone())).await.unwrap();
    let c = client(&peer, config).await;
    // Alone in flight, from this runtime: its caller watches the socket.
    let waiting = spawn_watching_caller(
        &c,
        "sleep:1500",
        TraceContext::default(),
        Duration::from_secs(10),
        "a caller alone in flight should watch the socket itself",
    )
    .await;
    // Another runtime pings while this one's thread is blocked.
    let other = {
        let c = c.clone();
        on_own_runtime(move || async move {
            let mut slowest = Duration::ZERO;
            for i in 0..10 {
                let payload = format!("other {i}");
                let t = std::time::Instant::now();
                let reply = c
                    .request(
                        ping(payload.as_bytes()),
                        TraceContext::default(),
                        Duration::from_secs(5),
                    )
                    .await;
                assert_eq!(reply.unwrap(), pong(payload.as_bytes()));
                slowest = slowest.max(t.elapsed());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            slowest
        })
    };
    std::thread::sleep(Duration::from_millis(1000));
    let slowest = other.join().unwrap();
    assert!(
        !c.is_closed(),
        "the link was declared dead while a blocked caller watched it: {:?}",
        c.close_reason()
    );
    assert!(
        slowest < Duration::from_millis(500),
        "another runtime's ping waited {slowest:?} behind the blocked caller"
    );
    let reply = waiting.await.unwrap();
    assert_eq!(reply.unwrap(), pong(b"sleep:1500"));
    assert!(
        !c.watched_by_caller(),
        "the socket stays with the caller after its reply"
    );
    drop(peer);
    serving.shutdown_background();
}
