//! Notices of a run's changes across leads (PostgreSQL's `LISTEN`/`NOTIFY`): a write of a
//! run's events or of its status also notifies [`CHANNEL`] with the run's id (sent when the
//! write commits), and [`RunNotices`] listens on a connection of its own, one per lead,
//! started with its gateway (or by the first stream that follows a run another lead drives,
//! whichever is first). Such a stream waits for its run's notice ([`Subscription::news`])
//! instead of reading the store every [`TAIL_EVERY`]; while the listening connection is
//! down (connecting, or lost and connecting again) it reads at that interval, and with it
//! up it still reads every [`poll_while_listening`] should a notice be lost.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;

use crate::ha::Postgres;

/// The channel's name, for the constants below.
macro_rules! channel {
    () => {
        "antler_run_events"
    };
}
/// The channel a run's writes notify, its id the payload.
pub const CHANNEL: &str = channel!();
/// The statement that notifies it of run `?1`.
pub(super) const NOTIFY: &str = concat!("SELECT pg_notify('", channel!(), "', ?1)");

/// `insert` (of run `?1`'s rows) as one statement that also notifies the run when it
/// writes a row: its answer is one row, the number of rows written, then a text column to
/// ignore. One round trip where the insert and [`NOTIFY`] took two.
pub(super) fn notifying(insert: &str) -> String {
    format!(
        "WITH written AS ({insert} RETURNING 1)
         SELECT count(*), (SELECT pg_notify('{CHANNEL}', ?1)::text
                           WHERE EXISTS (SELECT 1 FROM written))
         FROM written"
    )
}

/// How often a stream of a run another lead drives reads the store while no notices come
/// (SQLite, or the listening connection down).
pub const TAIL_EVERY: Duration = Duration::from_millis(200);
/// How often it reads the store while notices come, unless
/// [`POLL_WHILE_LISTENING_ENV`] says otherwise: a notice lost is late by at most this.
const POLL_WHILE_LISTENING: Duration = Duration::from_secs(2);
/// Milliseconds: [`POLL_WHILE_LISTENING`] for this lead.
pub const POLL_WHILE_LISTENING_ENV: &str = "ANTLER_EVENTS_POLL_WHILE_LISTENING_MS";
/// Notices a slow stream may fall behind by before it reads the store anyway.
const BACKLOG: usize = 1024;
/// The longest wait before connecting again.
const RECONNECT_AT_MOST: Duration = Duration::from_secs(5);

/// How often a stream reads the store while notices come.
pub fn poll_while_listening() -> Duration {
    std::env::var(POLL_WHILE_LISTENING_ENV)
        .ok()
        .and_then(|ms| ms.trim().parse::<u64>().ok())
        .map_or(POLL_WHILE_LISTENING, Duration::from_millis)
}

/// The lead's listener of [`CHANNEL`].
pub struct RunNotices {
    notices: broadcast::Sender<String>,
    /// Whether the listening connection is up.
    live: Arc<AtomicBool>,
}

impl RunNotices {
    /// Listens to the database `dsn` names, on a thread of its own (connecting again
    /// whenever the connection is lost), for as long as the lead runs.
    pub(super) fn start(dsn: &str) -> RunNotices {
        let (notices, _) = broadcast::channel(BACKLOG);
        let live = Arc::new(AtomicBool::new(false));
        let (sender, up, dsn) = (notices.clone(), Arc::clone(&live), dsn.to_owned());
        let spawned = std::thread::Builder::new()
            .name("runs-notices".to_owned())
            .spawn(move || {
                match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime.block_on(listen(&dsn, &sender, &up)),
                    Err(e) => tracing::warn!("cannot listen for run notices: {e}"),
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("cannot listen for run notices: {e}");
        }
        RunNotices { notices, live }
    }

    /// Notices from now on.
    pub fn subscribe(&self) -> Subscription {
        Subscription {
            notices: self.notices.subscribe(),
            live: Arc::clone(&self.live),
        }
    }
}

/// Connects, listens and hands each notice on, again after every loss of the connection.
async fn listen(dsn: &str, sender: &broadcast::Sender<String>, live: &AtomicBool) {
    let mut pause = Duration::from_millis(100);
    loop {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        match Postgres::connect_listening(dsn, tx).await {
            Ok(pg) => {
                let listening = pg
                    .within(
                        "listen",
                        pg.client().batch_execute(&format!("LISTEN {CHANNEL}")),
                    )
                    .await;
                match listening {
                    Ok(()) => {
                        live.store(true, Ordering::Release);
                        pause = Duration::from_millis(100);
                        while let Some(run_id) = rx.recv().await {
                            let _ = sender.send(run_id);
                        }
                        live.store(false, Ordering::Release);
                        tracing::warn!(
                            "run notices: the connection to PostgreSQL ended; connecting again"
                        );
                    }
                    Err(e) => tracing::warn!("run notices: cannot listen: {e}"),
                }
            }
            Err(e) => tracing::warn!("run notices: {e}"),
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(RECONNECT_AT_MOST);
    }
}

/// One stream's view of the notices.
pub struct Subscription {
    notices: broadcast::Receiver<String>,
    live: Arc<AtomicBool>,
}

impl Subscription {
    /// Returns when run `run_id` may have news to read: its notice came (or some were
    /// missed), or `poll` passed; [`TAIL_EVERY`] while the listening connection is down.
    pub async fn news(&mut self, run_id: &str, poll: Duration) {
        if !self.live.load(Ordering::Acquire) {
            tokio::time::sleep(TAIL_EVERY).await;
        } else {
            let waited = tokio::time::sleep(poll);
            tokio::pin!(waited);
            loop {
                tokio::select! {
                    () = &mut waited => break,
                    notice = self.notices.recv() => match notice {
                        Ok(id) if id == run_id => break,
                        Ok(_) => {}
                        // Behind, or the listener gone: read the store.
                        Err(_) => break,
                    },
                }
            }
        }
        // What came meanwhile is read with the store's next read.
        while !matches!(
            self.notices.try_recv(),
            Err(broadcast::error::TryRecvError::Empty | broadcast::error::TryRecvError::Closed)
        ) {}
    }
}
