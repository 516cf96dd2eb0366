//! A TCP forwarder on 127.0.0.1 between a lead and PostgreSQL, to cut the network between
//! them: [`Forwarder::cut`] drops every connection it carries and refuses new ones
//! (accepted and closed at once) until [`Forwarder::heal`], and names the local ports of
//! the upstream connections it dropped, so a caller can wait until the server has ended
//! their sessions (`pg_stat_activity.client_port`). It runs on a thread of its own (a
//! current-thread tokio runtime), so a caller blocking its own threads never stalls it;
//! dropping it stops the thread and closes everything. The multi-lead chaos mode puts one
//! before each lead, and the HA tests (`tests/tests/pg_support`) use it too.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};

/// How long [`Forwarder::cut`] waits for the connections it dropped to close.
const CLOSE_WAIT: Duration = Duration::from_secs(10);

/// A forwarder from a free port of 127.0.0.1 to an upstream address.
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
    /// A forwarder to `upstream`, listening on a free port of 127.0.0.1.
    pub fn start(upstream: SocketAddr) -> std::io::Result<Forwarder> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (cut, _) = watch::channel(false);
        let cut = Arc::new(cut);
        let (stop, stopped) = oneshot::channel();
        let state = Arc::clone(&cut);
        let open = Arc::new(Mutex::new(HashSet::new()));
        let tracked = Arc::clone(&open);
        let thread = std::thread::Builder::new()
            .name("pg-forwarder".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = TcpListener::from_std(listener) else {
                        return;
                    };
                    tokio::select! {
                        _ = stopped => {}
                        _ = serve(listener, upstream, state, tracked) => {}
                    }
                });
                // Dropping the runtime drops every connection's task, and so its sockets.
            })?;
        Ok(Forwarder {
            port,
            cut,
            open,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Drops every connection and refuses new ones; returns once every connection is
    /// closed (or after 10 s), with the local ports its upstream sides had.
    pub fn cut(&self) -> Vec<u16> {
        let dropped: Vec<u16> = lock(&self.open).iter().copied().collect();
        self.cut.send_replace(true);
        let deadline = Instant::now() + CLOSE_WAIT;
        while !lock(&self.open).is_empty() && Instant::now() < deadline {
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

async fn serve(
    listener: TcpListener,
    upstream: SocketAddr,
    cut: Arc<watch::Sender<bool>>,
    open: Arc<Mutex<HashSet<u16>>>,
) {
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
            lock(&open).insert(local.port());
            let (mut client, mut server) = (client, server);
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                _ = watching.wait_for(|cut| *cut) => {}
            }
            drop((client, server));
            lock(&open).remove(&local.port());
        });
    }
}
