//! A connection closed the moment it opens lets go of everything: its tasks end and its
//! socket is closed, even when the close comes before the I/O thread first ran them (a
//! task that waited for a close it had missed would hold the connection, its socket with
//! it, for the life of the process). Counted as the process's open descriptors, so this
//! file holds this one test.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use crate::common_peer::*;
use antler_protocol::ConnectionConfig;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[tokio::test]
async fn connections_closed_as_soon_as_dialed_leave_no_socket_open() {
    let _alone = crate::ALONE.lock().await;
    let peer = start_peer(ConnectionConfig::default()).await;
    // The I/O thread and its poller, made by the first connection.
    let first = client(&peer, ConnectionConfig::default()).await;
    first.close("warm-up done");
    drop(first);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = open_fds();
    for i in 0..200 {
        let c = client(&peer, ConnectionConfig::default()).await;
        c.close(&format!("closed at once ({i})"));
        drop(c);
    }
    // Both ends of each are this process's: wait for the server's side to see the close.
    let until = Instant::now() + Duration::from_secs(10);
    let mut now = open_fds();
    while now > before && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
        now = open_fds();
    }
    assert!(
        now <= before,
        "{} descriptors still open after 200 connections closed at once",
        now - before
    );
}
