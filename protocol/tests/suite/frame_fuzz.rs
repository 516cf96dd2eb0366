//! Bad input never panics a process: random and mutated payloads through the decoder
//! (property tests), and random byte streams sent after a good handshake to a live server,
//! which closes that connection and keeps serving its other peers.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::common_peer::*;
use antler_protocol::{
    codec, frame, handshake, transport, ConnectionConfig, Envelope, Identity, Role, TraceContext,
};
use proptest::{prelude::*, strategy::ValueTree};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn sample_envelopes() -> Vec<Vec<u8>> {
    let bodies = vec![
        antler_protocol::Body::Request(ping(b"hello")),
        antler_protocol::Body::Reply(Ok(pong(b"world"))),
        antler_protocol::Body::Reply(Err(antler_protocol::RemoteError::Failed("no".into()))),
        antler_protocol::Body::StreamItem(pong(b"i")),
        antler_protocol::Body::Cancel,
        antler_protocol::Body::Heartbeat,
    ];
    bodies
        .into_iter()
        .enumerate()
        .map(|(i, body)| {
            codec::encode(&Envelope {
                id: i as u64 + 1,
                reply_to: Some(7),
                deadline: Some(1000),
                trace: TraceContext::for_run("run-x"),
                body,
            })
            .unwrap()
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_payloads_never_panic_the_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = codec::decode::<Envelope>(&bytes);
    }

    #[test]
    fn mutated_envelopes_decode_or_fail_cleanly(
        which in 0usize..6,
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let mut bytes = sample_envelopes()[which].clone();
        for (idx, val) in flips {
            let i = idx.index(bytes.len());
            bytes[i] = val;
        }
        if truncate {
            let n = cut.index(bytes.len());
            bytes.truncate(n);
        }
        if let Ok(env) = codec::decode::<Envelope>(&bytes) {
            // Whatever decodes is a well-formed message: it re-encodes and decodes to itself.
            let again: Envelope = codec::decode(&codec::encode(&env).unwrap()).unwrap();
            prop_assert_eq!(again, env);
        }
    }
}

#[test]
fn valid_envelopes_round_trip() {
    for bytes in sample_envelopes() {
        let env: Envelope = codec::decode(&bytes).unwrap();
        assert_eq!(codec::encode(&env).unwrap(), bytes);
    }
}

/// Opens a raw connection that completed a good handshake.
async fn handshaken(peer: &Peer) -> (handshake::FrameReader, handshake::FrameWriter) {
    let (r, w) = transport::connect(&peer.address).await.unwrap();
    let (mut fr, mut fw) = handshake::framed(r, w, 1 << 20);
    handshake::connect(
        &mut fr,
        &mut fw,
        &Identity::new(Role::Lead, "raw", Some(TOKEN.into())),
        "raw",
    )
    .await
    .unwrap();
    (fr, fw)
}

#[test]
fn random_streams_after_the_handshake_close_only_that_connection() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let peer = start_peer(ConnectionConfig {
            max_frame_bytes: 64 * 1024,
            ..ConnectionConfig::default()
        })
        .await;
        let good = client(&peer, ConnectionConfig::default()).await;
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
            cases: 48,
            ..ProptestConfig::default()
        });
        let strategy = proptest::collection::vec(any::<u8>(), 1..300);
        for _ in 0..48 {
            let tree = strategy.new_tree(&mut runner).unwrap();
            let garbage = tree.current();
            let (fr, mut fw) = handshaken(&peer).await;
            // Random bytes framed as a payload, so they reach the decoder.
            let raw = fw.get_mut();
            raw.write_all(&frame::frame_bytes(&garbage)).await.unwrap();
            raw.flush().await.unwrap();
            drop(fr);
            let r = good
                .request(
                    ping(b"still here"),
                    TraceContext::default(),
                    Duration::from_secs(5),
                )
                .await;
            assert_eq!(r.unwrap(), pong(b"still here"));
        }
    });
}

async fn expect_closed(mut stream: tokio::net::UnixStream) {
    let mut buf = [0u8; 4096];
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return true,
                Ok(_) => continue,
            }
        }
    })
    .await;
    assert_eq!(closed, Ok(true), "the server must close the connection");
}

#[tokio::test]
async fn garbage_oversize_and_wrong_version_are_disconnected() {
    let peer = start_peer(ConnectionConfig::default()).await;
    let good = client(&peer, ConnectionConfig::default()).await;
    let path = socket_in(&peer.dir);

    // Garbage instead of a hello.
    let mut s = tokio::net::UnixStream::connect(&path).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    expect_closed(s).await;

    // A frame announcing 4 GiB.
    let mut s = tokio::net::UnixStream::connect(&path).await.unwrap();
    s.write_all(&[0xff, 0xff, 0xff, 0xf0, 1, 2, 3])
        .await
        .unwrap();
    expect_closed(s).await;

    // A hello with versions this server does not speak: refused with a reason.
    let (r, w) = transport::connect(&peer.address).await.unwrap();
    let (mut fr, mut fw) = handshake::framed(r, w, 1 << 20);
    let mut future_me = Identity::new(Role::Lead, "future", Some(TOKEN.into()));
    future_me.versions = (90, 99);
    let err = handshake::connect(&mut fr, &mut fw, &future_me, "x")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, handshake::HandshakeError::Refused(r) if r.contains("version mismatch")),
        "{err:?}"
    );

    // A wrong token: refused.
    let (r, w) = transport::connect(&peer.address).await.unwrap();
    let (mut fr, mut fw) = handshake::framed(r, w, 1 << 20);
    let err = handshake::connect(
        &mut fr,
        &mut fw,
        &Identity::new(Role::Lead, "x", Some("nope".into())),
        "x",
    )
    .await
    .unwrap_err();
    assert_eq!(
        err,
        handshake::HandshakeError::Refused("cluster token mismatch".into())
    );

    // An oversize frame after a good handshake closes that connection.
    let (mut fr, mut fw) = handshaken(&peer).await;
    let raw = fw.get_mut();
    raw.write_all(&(64u32 << 20).to_be_bytes()).await.unwrap();
    raw.flush().await.unwrap();
    use futures::StreamExt;
    let next = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match fr.next().await {
                Some(Ok(_)) => continue, // heartbeats
                other => return other.is_none() || matches!(other, Some(Err(_))),
            }
        }
    })
    .await;
    assert_eq!(next, Ok(true));

    // The well-behaved peer was never affected.
    let r = good
        .request(
            ping(b"fine"),
            TraceContext::default(),
            Duration::from_secs(5),
        )
        .await;
    assert_eq!(r.unwrap(), pong(b"fine"));
}
