//! A link finds its peer again quickly: after losing its connection it redials at least
//! every few hundred milliseconds (a restarted host is served again as soon as it
//! listens, not after a grown backoff), and a dial into a peer that never answers (a cut
//! link, a hung process) gives up after the dial deadline instead of the handshake's, so
//! the next dial finds the peer once it is back.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use crate::common_peer::*;
use antler_protocol::{
    link::{HostLink, Snapshot, DIAL_ATTEMPT, FAST_REDIAL_CAP},
    ConnectionConfig, Identity, Role,
};

fn lead() -> Identity {
    Identity::new(Role::Lead, "lead", Some(TOKEN.into()))
}

async fn wait_connected(link: &actix::Addr<HostLink>, within: Duration) -> bool {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if link.send(Snapshot).await.unwrap().connected {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[actix_rt::test]
async fn a_lost_peer_is_redialed_every_few_hundred_milliseconds() {
    let peer = start_peer(ConnectionConfig::default()).await;
    let link =
        HostLink::new(peer.address.clone(), lead(), ConnectionConfig::default()).supervised();
    assert!(wait_connected(&link, Duration::from_secs(10)).await);
    // The peer goes away; in its place a listener that counts the dials and refuses them
    // (it closes each at once, as a host still starting would).
    let path = socket_in(&peer.dir);
    drop(peer.server);
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let mut dials = Vec::new();
    let watch = Instant::now() + Duration::from_secs(4);
    while let Ok(Ok((stream, _))) = tokio::time::timeout_at(watch.into(), listener.accept()).await {
        dials.push(Instant::now());
        drop(stream);
    }
    let gaps: Vec<Duration> = dials.windows(2).map(|w| w[1] - w[0]).collect();
    let longest = gaps.iter().max().copied().unwrap_or_default();
    // Before: the backoff grew to 1-2 s within these 4 s (6 or 7 dials in all).
    assert!(
        dials.len() >= 8,
        "only {} dials in 4 s after the loss (gaps {gaps:?})",
        dials.len()
    );
    assert!(
        longest < FAST_REDIAL_CAP + Duration::from_millis(700),
        "a gap of {longest:?} between dials while the loss is recent (gaps {gaps:?})"
    );
    drop(listener);
    let _ = std::fs::remove_file(&path);
    // The host is back: the link is connected again.
    let _back = serve_at(
        &antler_protocol::Address::Unix(path.clone()),
        ConnectionConfig::default(),
        Default::default(),
    )
    .await;
    assert!(wait_connected(&link, Duration::from_secs(10)).await);
    link.send(antler_protocol::link::StopLink).await.unwrap();
}

#[actix_rt::test]
async fn a_dial_into_a_silent_peer_gives_up_at_the_dial_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let path = socket_in(&dir);
    // A peer that accepts and never answers the hello: a dial into a cut link or a hung
    // host.
    let silent = tokio::net::UnixListener::bind(&path).unwrap();
    let link = HostLink::new(
        antler_protocol::Address::Unix(path.clone()),
        lead(),
        ConnectionConfig::default(),
    )
    .supervised();
    let (held, _) = tokio::time::timeout(Duration::from_secs(10), silent.accept())
        .await
        .expect("the link dials")
        .unwrap();
    let dialed = Instant::now();
    // Past the dial deadline, but before the 5 s handshake deadline: the dial has given
    // up and says why.
    let mut reason = None;
    while dialed.elapsed() < Duration::from_millis(4500) {
        let snap = link.send(Snapshot).await.unwrap();
        if let Some(e) = snap.last_error.filter(|e| e.contains("dial deadline")) {
            reason = Some(e);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let reason = reason.unwrap_or_else(|| {
        panic!("the dial was still waiting {DIAL_ATTEMPT:?} after it began, past its deadline")
    });
    assert!(reason.contains(&format!("{DIAL_ATTEMPT:?}")), "{reason}");
    // The silent peer is replaced by a real one (the silent connection stays open, as a
    // cut link's would): the next dial connects.
    drop(silent);
    let _ = std::fs::remove_file(&path);
    let _peer = serve_at(
        &antler_protocol::Address::Unix(path.clone()),
        ConnectionConfig::default(),
        Default::default(),
    )
    .await;
    assert!(wait_connected(&link, Duration::from_secs(10)).await);
    drop(held);
    link.send(antler_protocol::link::StopLink).await.unwrap();
}
