//! A real host process given garbage, an oversize frame, a wrong protocol version or a
//! wrong token on its socket disconnects that peer, logs why, and keeps serving the others.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use antler_protocol::{
    frame, handshake,
    link::dial,
    messages::{ControlReply, ControlRequest, Reply, Request},
    transport, ConnectionConfig, Identity, Role, TraceContext,
};
use antler_tests::Host;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn ping(p: &[u8]) -> Request {
    Request::Control(ControlRequest::Ping {
        payload: p.to_vec(),
    })
}

async fn closed_by_peer(mut s: tokio::net::UnixStream) -> bool {
    let mut buf = [0u8; 1024];
    tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return true,
                Ok(_) => continue,
            }
        }
    })
    .await
    .unwrap_or(false)
}

#[tokio::test]
async fn bad_peers_are_disconnected_and_the_host_keeps_serving() {
    for binary in ["antler-mcp-host", "antler-sandbox-host", "antler-subagent"] {
        let mut host = Host::start(binary);
        let good = dial(
            &host.address(),
            &host.identity(),
            ConnectionConfig::default(),
            None,
        )
        .await
        .expect("good peer connects");
        let check = |label: &'static str| {
            let good = good.clone();
            async move {
                let r = good
                    .request(
                        ping(label.as_bytes()),
                        TraceContext::new_root(),
                        Duration::from_secs(5),
                    )
                    .await;
                assert_eq!(
                    r,
                    Ok(Reply::Control(ControlReply::Pong {
                        payload: label.as_bytes().to_vec()
                    })),
                    "{binary} after {label}"
                );
            }
        };

        let mut s = tokio::net::UnixStream::connect(&host.socket)
            .await
            .expect("connect");
        s.write_all(b"\x00\x00\x00\x05hello, this is not antler")
            .await
            .expect("write");
        assert!(closed_by_peer(s).await, "{binary}: garbage");
        check("garbage").await;

        let mut s = tokio::net::UnixStream::connect(&host.socket)
            .await
            .expect("connect");
        s.write_all(&[0x7f, 0xff, 0xff, 0xff]).await.expect("write");
        assert!(closed_by_peer(s).await, "{binary}: oversize hello");
        check("oversize").await;

        // After a good handshake, a frame over the 16 MiB limit closes the connection.
        let (r, w) = transport::connect(&host.address()).await.expect("connect");
        let (mut fr, mut fw) = handshake::framed(r, w, 1 << 20);
        handshake::connect(&mut fr, &mut fw, &host.identity(), "raw")
            .await
            .expect("handshake");
        let raw = fw.get_mut();
        // The host may close as soon as it reads the length, so a write can
        // meet a broken pipe: that is the behaviour under test, not a failure.
        let _ = raw.write_all(&(17u32 << 20).to_be_bytes()).await;
        let _ = raw.write_all(&[0u8; 4096]).await;
        use futures::StreamExt;
        let closed = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                match fr.next().await {
                    Some(Ok(_)) => continue,
                    _ => return true,
                }
            }
        })
        .await;
        assert_eq!(closed, Ok(true), "{binary}: oversize frame");
        check("oversize frame").await;

        // A frame of random bytes after a good handshake.
        let (r, w) = transport::connect(&host.address()).await.expect("connect");
        let (mut fr, mut fw) = handshake::framed(r, w, 1 << 20);
        handshake::connect(&mut fr, &mut fw, &host.identity(), "raw")
            .await
            .expect("handshake");
        fw.get_mut()
            .write_all(&frame::frame_bytes(&[0xde, 0xad, 0xbe, 0xef, 0xff, 0xff]))
            .await
            .expect("write");
        let closed = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                match fr.next().await {
                    Some(Ok(_)) => continue,
                    _ => return true,
                }
            }
        })
        .await;
        assert_eq!(closed, Ok(true), "{binary}: undecodable frame");
        check("undecodable").await;

        let mut future = host.identity();
        future.versions = (7, 9);
        let e = dial(&host.address(), &future, ConnectionConfig::default(), None)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("protocol version mismatch"), "{e}");
        check("version").await;

        let wrong = Identity::new(Role::Lead, "intruder", Some("wrong".into()));
        let e = dial(&host.address(), &wrong, ConnectionConfig::default(), None)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("cluster token mismatch"), "{e}");
        check("token").await;

        // The process is still the same one: it never crashed.
        assert!(
            host.child.try_wait().expect("wait").is_none(),
            "{binary} exited"
        );
        // And it logged why it refused each peer.
        let _ = host.child.kill();
        let mut log = String::new();
        if let Some(mut e) = host.child.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut log);
        }
        assert!(
            log.contains("cluster token mismatch"),
            "{binary} log: {log}"
        );
        assert!(
            log.contains("does not decode") || log.contains("bad frame"),
            "{binary} log: {log}"
        );
    }
}
