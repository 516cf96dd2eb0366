//! A request the service says it relays ([`Service::relays`]) runs on the connection's I/O
//! thread from start to end, awaiting another connection there: no hop to the serving
//! runtime and back. Every other request is served on the serving runtime.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{sync::Arc, time::Duration};

use crate::common_peer::*;
use antler_protocol::{
    calls::ControlCalls,
    link::dial,
    messages::{ControlReply, ControlRequest, Reply, Request},
    server::Server,
    Address, Call, Connection, ConnectionConfig, Identity, InFlight, RemoteError, Role, Service,
    TraceContext,
};
use futures::future::BoxFuture;

/// Relays pings whose payload is "relay" to the test peer behind it; answers the others
/// itself. Either way the reply names the thread the call ran on.
struct Proxy {
    upstream: Connection,
}

fn thread_name() -> Vec<u8> {
    std::thread::current()
        .name()
        .unwrap_or("unnamed")
        .as_bytes()
        .to_vec()
}

impl Service for Proxy {
    fn call(&self, request: Request, _: Call) -> BoxFuture<'static, Result<Reply, RemoteError>> {
        let upstream = self.upstream.clone();
        let relayed = self.relays(&request);
        Box::pin(async move {
            let before = thread_name();
            if relayed {
                upstream
                    .request(
                        ping(b"upstream"),
                        TraceContext::new_root(),
                        Duration::from_secs(5),
                    )
                    .await
                    .map_err(|e| RemoteError::Failed(e.to_string()))?;
            }
            // The thread the call started on, and the one it ended on.
            let mut payload = before;
            payload.push(b'|');
            payload.extend(thread_name());
            Ok(Reply::Control(ControlReply::Pong { payload }))
        })
    }

    fn relays(&self, request: &Request) -> bool {
        matches!(request, Request::Control(ControlRequest::Ping { payload }) if payload == b"relay")
    }
}

async fn threads(client: &Connection, payload: &[u8]) -> String {
    let payload = client
        .ping(payload.to_vec(), Duration::from_secs(5))
        .await
        .unwrap();
    String::from_utf8(payload).unwrap()
}

#[test]
fn a_relayed_request_runs_on_the_io_thread_and_others_on_the_serving_runtime() {
    let serving = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("serving")
        .enable_all()
        .build()
        .unwrap();
    serving.block_on(async {
        let upstream_peer = start_peer(ConnectionConfig::default()).await;
        let upstream = client(&upstream_peer, ConnectionConfig::default()).await;
        let dir = tempfile::tempdir().unwrap();
        let address = Address::Unix(dir.path().join("proxy.sock"));
        let _proxy = Server::bind(
            &address,
            Identity::new(Role::Lead, "proxy", Some(TOKEN.into())),
            ConnectionConfig::default(),
            Arc::new(Proxy { upstream }),
            Arc::new(InFlight::default()),
        )
        .await
        .unwrap();
        let me = Identity::new(Role::Cli, "cli", Some(TOKEN.into()));
        let c = dial(&address, &me, ConnectionConfig::default(), None)
            .await
            .unwrap();
        assert_eq!(threads(&c, b"relay").await, "antler-io|antler-io");
        assert_eq!(threads(&c, b"served").await, "serving|serving");
        // The relay did reach the peer behind the proxy.
        assert!(
            upstream_peer
                .counters
                .finished
                .load(std::sync::atomic::Ordering::SeqCst)
                >= 1
        );
    });
}
