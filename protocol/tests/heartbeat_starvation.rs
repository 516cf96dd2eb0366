//! Heartbeats run on the process's I/O thread: a runtime whose only thread is blocked by
//! work (a busy lead) neither stops sending heartbeats nor declares its healthy peer dead,
//! and the measured heartbeat lag stays small however long the work blocks.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common_peer;

use std::time::Duration;

use antler_protocol::{ConnectionConfig, TraceContext};
use common_peer::*;

#[tokio::test(flavor = "current_thread")]
async fn a_blocked_runtime_keeps_its_links_alive() {
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
