//! A TCP forwarder on 127.0.0.1 that a test owns between a lead and PostgreSQL, to cut the
//! network between them: [`Forwarder::cut`] drops every connection it carries and refuses
//! new ones (accepted and closed at once) until [`Forwarder::heal`], and names the local
//! ports of the upstream connections it dropped, so a test can wait until the server has
//! ended their sessions (`pg_stat_activity.client_port`). It runs on a thread of
//! its own (a current-thread tokio runtime), so a test blocking its own threads never stalls
//! it; dropping it stops the thread and closes everything.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};

/// A forwarder from a free port of 127.0.0.1 to `127.0.0.1:upstream`.
pub struct Forwarder {
    /// Where clients dial.
    pub port: u16,
    /// `true` while the network is cut; each connection's task watches it.
    cut: Arc<watch::Sender<bool>>,
    /// The local ports of the upstream connections open now.
    open: Arc<Mutex<HashSet<u16>>>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Forwarder {
    pub fn start(upstream: u16) -> Forwarder {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the forwarder");
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let (cut, _) = watch::channel(false);
        let cut = Arc::new(cut);
        let (stop, stopped) = oneshot::channel();
        let state = Arc::clone(&cut);
        let open = Arc::new(Mutex::new(HashSet::new()));
        let tracked = Arc::clone(&open);
        let thread = std::thread::Builder::new()
            .name("pg-forwarder".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(async move {
                    let listener = TcpListener::from_std(listener).unwrap();
                    tokio::select! {
                        _ = stopped => {}
                        _ = serve(listener, upstream, state, tracked) => {}
                    }
                });
                // Dropping the runtime drops every connection's task, and so its sockets.
            })
            .unwrap();
        Forwarder {
            port,
            cut,
            open,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Drops every connection and refuses new ones; returns once every connection is
    /// closed, with the local ports its upstream sides had.
    pub fn cut(&self) -> Vec<u16> {
        let dropped: Vec<u16> = self.open.lock().unwrap().iter().copied().collect();
        self.cut.send_replace(true);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.open.lock().unwrap().is_empty() {
            assert!(
                Instant::now() < deadline,
                "the forwarder's connections never closed"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        dropped
    }

    /// Forwards new connections again.
    pub fn heal(&self) {
        self.cut.send_replace(false);
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn serve(
    listener: TcpListener,
    upstream: u16,
    cut: Arc<watch::Sender<bool>>,
    open: Arc<Mutex<HashSet<u16>>>,
) {
    let upstream = SocketAddr::from(([127, 0, 0, 1], upstream));
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let mut watching = cut.subscribe();
        if *watching.borrow_and_update() {
            // Refused: closed at once.
            continue;
        }
        let open = Arc::clone(&open);
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(upstream).await else {
                return;
            };
            let Ok(local) = server.local_addr() else {
                return;
            };
            open.lock().unwrap().insert(local.port());
            let (mut client, mut server) = (client, server);
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                _ = watching.wait_for(|cut| *cut) => {}
            }
            drop((client, server));
            open.lock().unwrap().remove(&local.port());
        });
    }
}
