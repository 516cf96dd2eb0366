//! A request the service answers at once (`Service::answers_now`) is answered on the I/O
//! thread: while the runtime that serves requests is blocked by work, a ping still gets
//! its pong at once, and a request served on that runtime waits for it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use antler_protocol::{
    link::dial,
    messages::{ControlReply, ControlRequest, Reply, Request},
    server::Server,
    Address, Call, ConnectionConfig, Identity, InFlight, RemoteError, Role, Service, TraceContext,
};
use futures::future::BoxFuture;

/// Answers `now` pings at once; `block` holds the serving thread for a while.
struct Busy;

fn ping(payload: &[u8]) -> Request {
    Request::Control(ControlRequest::Ping {
        payload: payload.to_vec(),
    })
}

fn pong(payload: &[u8]) -> Reply {
    Reply::Control(ControlReply::Pong {
        payload: payload.to_vec(),
    })
}

impl Service for Busy {
    fn call(&self, request: Request, _: Call) -> BoxFuture<'static, Result<Reply, RemoteError>> {
        let Request::Control(ControlRequest::Ping { payload }) = request else {
            return Box::pin(async { Err(RemoteError::Unsupported("test".into())) });
        };
        if payload == b"block" {
            // Work that holds the serving runtime's only thread.
            std::thread::sleep(Duration::from_millis(1500));
        }
        Box::pin(async move { Ok(Reply::Control(ControlReply::Pong { payload })) })
    }

    fn answers_now(&self, request: &Request) -> bool {
        matches!(request, Request::Control(ControlRequest::Ping { payload }) if payload == b"now")
    }
}

#[tokio::test]
async fn a_ping_answered_now_does_not_wait_for_a_blocked_serving_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let address = Address::Unix(dir.path().join("busy.sock"));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let bind = address.clone();
    // The serving side: a one-thread runtime of its own, like a host's.
    let peer = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let server = Server::bind(
                &bind,
                Identity::new(Role::McpHost, "busy", None),
                ConnectionConfig::default(),
                Arc::new(Busy),
                Arc::new(InFlight::default()),
            )
            .await
            .unwrap();
            ready_tx.send(()).unwrap();
            let _ = stop_rx.await;
            drop(server);
        });
    });
    ready_rx.recv().unwrap();
    let c = dial(
        &address,
        &Identity::new(Role::Lead, "lead", None),
        ConnectionConfig::default(),
        None,
    )
    .await
    .unwrap();
    let t = || TraceContext::default();
    let blocker = {
        let c = c.clone();
        tokio::spawn(async move {
            c.request(ping(b"block"), t(), Duration::from_secs(10))
                .await
        })
    };
    // Let the blocking request reach the serving runtime.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let asked = Instant::now();
    let now = c
        .request(ping(b"now"), t(), Duration::from_secs(5))
        .await
        .unwrap();
    let answered_now = asked.elapsed();
    assert_eq!(now, pong(b"now"));
    assert!(
        answered_now < Duration::from_millis(800),
        "the ping answered at once waited {answered_now:?} for the blocked runtime"
    );
    let served = c
        .request(ping(b"later"), t(), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(served, pong(b"later"));
    assert!(
        asked.elapsed() >= Duration::from_millis(1000),
        "a request served on the blocked runtime came back after only {:?}",
        asked.elapsed()
    );
    assert_eq!(blocker.await.unwrap().unwrap(), pong(b"block"));
    c.close("done");
    stop_tx.send(()).unwrap();
    peer.join().unwrap();
}
