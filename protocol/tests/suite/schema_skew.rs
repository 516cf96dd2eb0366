//! Two different builds of Antler are refused at the handshake, with a reason both sides
//! see, instead of shaking hands and then failing every frame ("frame does not decode")
//! while the link redials: a host left on the old image by a rolling upgrade, or a lead
//! built from another commit. The other build is stood in for by an identity whose schema
//! fingerprint differs from this build's (a second build cannot be made inside a test).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use crate::common_peer::*;
use antler_protocol::{
    codec, frame,
    handshake::{self, HandshakeError, HelloReply, SCHEMA_FINGERPRINT},
    link::{dial, HostLink, Snapshot},
    Address, ConnectionConfig, Identity, Role,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// An identity as another build of Antler would present it.
fn other_build(role: Role, node: &str) -> Identity {
    Identity {
        schema: SCHEMA_FINGERPRINT ^ 0x5a5a,
        ..Identity::new(role, node, Some(TOKEN.into()))
    }
}

#[tokio::test]
async fn both_sides_of_a_handshake_between_two_builds_say_the_schemas_differ() {
    let (near, far) = tokio::io::duplex(64 * 1024);
    let (nr, nw) = tokio::io::split(near);
    let (fr, fw) = tokio::io::split(far);
    let (mut dr, mut dw) = handshake::framed(Box::new(nr), Box::new(nw), 1 << 20);
    let (mut lr, mut lw) = handshake::framed(Box::new(fr), Box::new(fw), 1 << 20);
    let dialer = Identity::new(Role::Lead, "lead", Some(TOKEN.into()));
    let listener = other_build(Role::McpHost, "old-mcp-host");
    let (dialed, accepted) = tokio::join!(
        handshake::connect(&mut dr, &mut dw, &dialer, "peer"),
        handshake::accept(&mut lr, &mut lw, &listener, "lead"),
    );
    let ours = format!("{SCHEMA_FINGERPRINT:016x}");
    let theirs = format!("{:016x}", listener.schema);
    match accepted {
        Err(HandshakeError::Rejected(reason)) => {
            assert!(reason.contains("message schema mismatch"), "{reason}");
            assert!(
                reason.contains(&format!("peer was built with schema {ours}")),
                "{reason}"
            );
            assert!(reason.contains("same Antler build"), "{reason}");
        }
        other => panic!("the listener accepted another build: {other:?}"),
    }
    match dialed {
        Err(HandshakeError::Refused(reason)) => {
            assert!(reason.contains("message schema mismatch"), "{reason}");
            assert!(
                reason.contains(&format!("this process with {theirs}")),
                "{reason}"
            );
        }
        other => panic!("the dialer was not told why: {other:?}"),
    }
}

#[tokio::test]
async fn a_dial_into_another_build_fails_with_the_mismatch_not_a_connection() {
    let dir = tempfile::tempdir().unwrap();
    let address = Address::Unix(socket_in(&dir));
    let old_host = other_build(Role::McpHost, "old-mcp-host");
    let _server = serve_as(&address, old_host, Default::default(), Default::default()).await;
    let me = Identity::new(Role::Lead, "lead", Some(TOKEN.into()));
    let Err(err) = dial(&address, &me, ConnectionConfig::default(), None).await else {
        panic!("a dial into another build connected");
    };
    assert!(err.is_refusal(), "not a refusal: {err}");
    assert!(err.to_string().contains("message schema mismatch"), "{err}");

    // The same server's build (the same schema) is let in.
    let same = other_build(Role::Lead, "same-build-lead");
    let c = dial(&address, &same, ConnectionConfig::default(), None)
        .await
        .expect("the same build connects");
    assert_eq!(c.peer().node_id, "old-mcp-host");
}

#[actix_rt::test]
async fn a_link_to_another_build_stays_down_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let address = Address::Unix(socket_in(&dir));
    let counters = Arc::new(Counters::default());
    let old_host = other_build(Role::McpHost, "old-mcp-host");
    let _server = serve_as(&address, old_host, Default::default(), counters.clone()).await;
    let link = HostLink::new(
        address,
        Identity::new(Role::Lead, "lead", Some(TOKEN.into())),
        ConnectionConfig::default(),
    )
    .supervised();
    let until = Instant::now() + Duration::from_secs(10);
    let snapshot = loop {
        let s = link.send(Snapshot).await.unwrap();
        if s.last_error.is_some() || Instant::now() > until {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(!snapshot.connected, "a link to another build connected");
    let error = snapshot.last_error.unwrap_or_default();
    assert!(error.contains("message schema mismatch"), "{error}");
    assert_eq!(
        counters.started.load(std::sync::atomic::Ordering::SeqCst),
        0
    );
}

#[tokio::test]
async fn an_older_hello_layout_is_refused_as_another_build() {
    let peer = start_peer(ConnectionConfig::default()).await;
    let Address::Unix(path) = &peer.address else {
        unreachable!()
    };
    // An Antler hello of another layout: the magic, then fields this build does not read.
    let mut stream = tokio::net::UnixStream::connect(path).await.unwrap();
    let mut hello = b"ANTL".to_vec();
    hello.extend_from_slice(&[1, 1, 0xff, 0xff, 0xff]);
    stream.write_all(&frame::frame_bytes(&hello)).await.unwrap();
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).await.unwrap();
    let mut reply = vec![0u8; u32::from_be_bytes(len) as usize];
    stream.read_exact(&mut reply).await.unwrap();
    match codec::decode::<HelloReply>(&reply).unwrap() {
        HelloReply::Refuse { reason } => {
            assert!(reason.contains("another Antler build"), "{reason}");
        }
        other => panic!("an undecodable hello was accepted: {other:?}"),
    }
}

#[test]
fn the_fingerprint_covers_the_json_value_and_the_task_types() {
    // Messages carry `Json` and the task's wire forms: a change to either must change the
    // fingerprint, so both are among the files `build.rs` hashes.
    let build = include_str!("../../build.rs");
    assert!(
        build.contains("\"src/json.rs\""),
        "build.rs leaves json.rs out"
    );
    assert!(build.contains("const WIRE_DIR: &str = \"src/messages\";"));
    let task = concat!(env!("CARGO_MANIFEST_DIR"), "/src/messages/task.rs");
    assert!(
        std::fs::read_to_string(task).is_ok_and(|t| t.contains("pub struct TaskSpec")),
        "the task's wire forms left src/messages"
    );
}
