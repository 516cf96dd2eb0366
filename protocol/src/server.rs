//! A listener that accepts peers: handshake, then a [`Connection`] served by one
//! [`Service`]. Drain stops accepting, tells connected peers, and waits for requests in
//! flight up to a grace period. A peer that fails its handshake is logged and dropped;
//! the listener keeps serving the others. On TCP the identity's TLS is required of every
//! peer; a listener without TLS binds loopback only.

use std::{sync::Arc, time::Duration};

use tokio::sync::{watch, Mutex};

use crate::{
    connection::{Connection, ConnectionConfig, InFlight, Service},
    handshake::{self, Identity},
    transport::{Address, Listener, Stream},
};

/// A bound, serving listener.
pub struct Server {
    address: Address,
    in_flight: Arc<InFlight>,
    connections: Arc<Mutex<Vec<Connection>>>,
    stop_accepting: watch::Sender<bool>,
    accept_task: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Binds `address` and starts accepting peers that present `identity`'s token.
    pub async fn bind(
        address: &Address,
        identity: Identity,
        config: ConnectionConfig,
        service: Arc<dyn Service>,
        in_flight: Arc<InFlight>,
    ) -> std::io::Result<Server> {
        // The listener and its connections live on the I/O thread; requests are served on
        // the caller's runtime.
        let home = tokio::runtime::Handle::current();
        if let (Address::Tcp(a), None) = (address, &identity.tls) {
            crate::tls::check_plaintext(a).await?;
        }
        let owned = address.clone();
        let listener = crate::io::run(async move { Listener::bind(&owned).await })
            .await
            .unwrap_or_else(|| Err(std::io::Error::other("the I/O thread is gone")))?;
        let bound = listener.local_address();
        let connections: Arc<Mutex<Vec<Connection>>> = Arc::default();
        let (stop_tx, stop_rx) = watch::channel(false);
        let accept_task = crate::io::handle().spawn(accept_loop(
            home,
            listener,
            identity,
            config,
            service,
            in_flight.clone(),
            connections.clone(),
            stop_rx,
        ));
        Ok(Server {
            address: bound,
            in_flight,
            connections,
            stop_accepting: stop_tx,
            accept_task,
        })
    }

    /// The bound address (with the real port for `tcp:HOST:0`).
    pub fn address(&self) -> &Address {
        &self.address
    }

    /// Requests in flight over all connections.
    pub fn in_flight(&self) -> usize {
        self.in_flight.current()
    }

    /// Stops accepting, tells every peer this side is going away, lets requests in flight
    /// finish within `grace`, then closes every connection. Returns the requests that
    /// were still running when the grace period ended.
    pub async fn drain(&self, grace: Duration) -> usize {
        let _ = self.stop_accepting.send(true);
        self.in_flight.start_draining();
        let conns = self.connections.lock().await.clone();
        for c in &conns {
            c.send_going_away("draining");
        }
        let left = match tokio::time::timeout(grace, self.in_flight.wait_idle()).await {
            Ok(()) => 0,
            Err(_) => self.in_flight.current(),
        };
        // Give the writers a moment to flush the last replies before closing.
        tokio::time::sleep(Duration::from_millis(20)).await;
        for c in &conns {
            c.close("peer shut down");
        }
        self.accept_task.abort();
        left
    }
}

impl Drop for Server {
    /// The listener and its connections run on the I/O thread, which outlives any one
    /// runtime: a dropped server stops accepting and closes its connections.
    fn drop(&mut self) {
        self.accept_task.abort();
        if let Ok(list) = self.connections.try_lock() {
            for c in list.iter() {
                c.close("peer shut down");
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn accept_loop(
    home: tokio::runtime::Handle,
    listener: Listener,
    identity: Identity,
    config: ConnectionConfig,
    service: Arc<dyn Service>,
    in_flight: Arc<InFlight>,
    connections: Arc<Mutex<Vec<Connection>>>,
    mut stop: watch::Receiver<bool>,
) {
    let identity = Arc::new(Identity {
        heartbeat: config.heartbeat_interval,
        ..identity
    });
    // A peer refused again and again (another build, a stale token) is warned of once a
    // minute, not at each of its redials.
    let refusals = Arc::new(crate::quiet::Quieter::default());
    loop {
        let accepted = tokio::select! {
            _ = stop.changed() => break,
            a = listener.accept_stream() => a,
        };
        let (stream, peer_addr) = match accepted {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let identity = identity.clone();
        let config = config.clone();
        let service = service.clone();
        let in_flight = in_flight.clone();
        let connections = connections.clone();
        let home = home.clone();
        let refusals = refusals.clone();
        tokio::spawn(async move {
            let refuse = |reason: String, what: &str| match refusals.admit(&reason) {
                Some(quieted) => {
                    tracing::warn!(peer = %peer_addr, %reason, quieted, "refused a connection: {what}")
                }
                None => tracing::debug!(peer = %peer_addr, %reason, "refused a connection: {what}"),
            };
            let tls = match (&stream, &identity.tls) {
                (Stream::Tcp(tcp), Some(tls)) => {
                    if let Err(reason) = crate::tls::probe(tcp).await {
                        if reason == crate::tls::PROBE {
                            tracing::debug!(peer = %peer_addr, %reason, "connection closed");
                        } else {
                            refuse(reason, "TLS");
                        }
                        return;
                    }
                    Some(tls.clone())
                }
                _ => None,
            };
            let sock = match stream.into_sock() {
                Ok(sock) => sock,
                Err(e) => {
                    tracing::warn!(peer = %peer_addr, error = %e, "cannot watch an accepted socket");
                    return;
                }
            };
            let (r, w, certified) = match tls {
                Some(tls) => match tls.accept_io(sock.clone()).await {
                    Ok((r, w, role)) => (r, w, Some(role)),
                    Err(reason) => return refuse(reason, "TLS"),
                },
                None => {
                    let (r, w) = sock.halves();
                    (r, w, None)
                }
            };
            let (mut fr, mut fw) = handshake::framed(r, w, config.max_frame_bytes);
            match handshake::accept_certified(&mut fr, &mut fw, &identity, &peer_addr, certified)
                .await
            {
                Ok(peer) => {
                    tracing::debug!(peer = %peer_addr, role = %peer.role, node = %peer.node_id, "peer connected");
                    let conn = Connection::start(
                        fr,
                        fw,
                        peer,
                        config,
                        Some(service),
                        in_flight,
                        home,
                        Some(sock),
                    );
                    let mut list = connections.lock().await;
                    list.retain(|c| !c.is_closed());
                    list.push(conn);
                }
                Err(e) => {
                    let reason = e.to_string();
                    match refusals.admit(&reason) {
                        Some(quieted) => {
                            tracing::warn!(peer = %peer_addr, %reason, quieted, "refused a connection")
                        }
                        None => tracing::debug!(peer = %peer_addr, %reason, "refused a connection"),
                    }
                }
            }
        });
    }
    listener.unlink();
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::{
        envelope::RemoteError,
        link::{dial, DialError},
        messages::{Reply, Request},
        Call, Role,
    };
    use futures::future::BoxFuture;

    struct Nothing;

    impl Service for Nothing {
        fn call(&self, _: Request, _: Call) -> BoxFuture<'static, Result<Reply, RemoteError>> {
            Box::pin(async { Err(RemoteError::Unsupported("test".into())) })
        }
    }

    async fn bind(address: &str) -> std::io::Result<Server> {
        Server::bind(
            &address.parse().unwrap(),
            Identity::new(Role::McpHost, "test", None),
            ConnectionConfig::default(),
            Arc::new(Nothing),
            Arc::new(InFlight::default()),
        )
        .await
    }

    #[tokio::test]
    async fn plaintext_tcp_listens_and_dials_on_loopback_only() {
        // Refused before anything is bound.
        let e = bind("tcp:0.0.0.0:0").await.err().unwrap();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
        assert!(e
            .to_string()
            .contains("plaintext TCP is allowed only on loopback, and tcp:0.0.0.0:0"));
        let server = bind("tcp:127.0.0.1:0").await.unwrap();
        let me = Identity::new(Role::Lead, "test", None);
        let conn = dial(server.address(), &me, ConnectionConfig::default(), None)
            .await
            .unwrap();
        assert_eq!(conn.peer().role, Role::McpHost);
        conn.close("done");
        // Dialing plaintext off loopback is refused before any packet is sent.
        let off: Address = "tcp:0.0.0.0:9".parse().unwrap();
        let e = dial(&off, &me, ConnectionConfig::default(), None)
            .await
            .err()
            .unwrap();
        assert!(matches!(e, DialError::Insecure { .. }), "{e}");
        assert!(e.to_string().contains("only on loopback"), "{e}");
    }
}
