//! The leads of a multi-lead schedule, with this command as their orchestrator (as
//! Kubernetes is for a Deployment): N slots, each an `antler up` with its own runtime
//! directory, its gateway on a free loopback port of its own, and a [`Forwarder`] of its
//! own between it and PostgreSQL. A lead killed (or one that exits on its own) is started
//! again in its slot, a new incarnation named `lead-K.N` (slot K, start N), which is the
//! `application_name` of its connections: what the database's audit records as the writer.
//! All leads share the runs store and leases (`ANTLER_STORE_DSN`), the gateway token and
//! the sandbox base directory, so a run taken over finds its thread's files.

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::lead::STORE_DSN_ENV;
use crate::postgres::{Database, Forwarder};
use crate::procfs::send;

/// One lead's place in the Deployment.
pub struct Slot {
    pub index: usize,
    /// Its gateway's address, `127.0.0.1:PORT`.
    pub gateway: String,
    /// Between its lead and PostgreSQL.
    pub forwarder: Forwarder,
    process: Mutex<Option<Child>>,
    /// Starts so far (its current incarnation's number).
    starts: Mutex<u32>,
    /// A fault holds this slot (it restarts or resumes the lead itself, and no other fault
    /// aims at it meanwhile).
    pub faulted: AtomicBool,
}

/// The leads under test.
pub struct Leads {
    pub dir: PathBuf,
    exe: PathBuf,
    pub token: String,
    pub slots: Vec<Slot>,
    pub(crate) http: reqwest::Client,
    pub workers: u32,
    database: Arc<Database>,
    stopping: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Leads {
    /// `count` slots in `dir` (nothing started), each with its forwarder to `database`.
    pub fn new(
        dir: PathBuf,
        exe: PathBuf,
        database: Arc<Database>,
        count: usize,
        workers: u32,
    ) -> anyhow::Result<Leads> {
        let mut slots = Vec::new();
        for index in 0..count {
            let port = std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port();
            slots.push(Slot {
                index,
                gateway: format!("127.0.0.1:{port}"),
                forwarder: Forwarder::start(database.upstream)
                    .context("cannot start a forwarder to PostgreSQL")?,
                process: Mutex::new(None),
                starts: Mutex::new(0),
                faulted: AtomicBool::new(false),
            });
        }
        Ok(Leads {
            dir,
            exe,
            token: uuid::Uuid::new_v4().simple().to_string(),
            slots,
            http: reqwest::Client::new(),
            workers,
            database,
            stopping: AtomicBool::new(false),
        })
    }

    /// Incarnation `n` of slot `k`'s name: `lead-K.N`.
    pub fn incarnation_name(k: usize, n: u32) -> String {
        format!("lead-{k}.{n}")
    }

    /// The current incarnation of slot `k`.
    pub fn incarnation(&self, k: usize) -> String {
        Leads::incarnation_name(k, *lock(&self.slots[k].starts))
    }

    /// Slot `k`'s runtime directory.
    fn runtime(&self, k: usize) -> PathBuf {
        self.dir.join(format!("lead-{k}"))
    }

    /// The log of incarnation `n` of slot `k`.
    pub fn log(&self, k: usize, n: u32) -> PathBuf {
        self.dir.join(format!("lead-{k}.{n}.log"))
    }

    /// The current incarnation's log of slot `k`.
    pub fn current_log(&self, k: usize) -> PathBuf {
        self.log(k, *lock(&self.slots[k].starts))
    }

    /// Starts slot `k`'s lead (again): in place of the process `replacing` when given,
    /// unless it has been replaced already.
    pub fn start(&self, k: usize, replacing: Option<u32>) -> anyhow::Result<()> {
        let slot = &self.slots[k];
        let mut process = lock(&slot.process);
        if let (Some(old), Some(current)) = (replacing, process.as_ref()) {
            if current.id() != old {
                return Ok(());
            }
        }
        let n = {
            let mut starts = lock(&slot.starts);
            *starts += 1;
            *starts
        };
        let name = Leads::incarnation_name(k, n);
        let log = std::fs::File::create(self.log(k, n))?;
        let child = std::process::Command::new(&self.exe)
            .arg("--runtime-dir")
            .arg(self.runtime(k))
            .args(["up", "--config"])
            .arg(self.dir.join("config.yaml"))
            .env("ANTLER_GATEWAY_ADDR", &slot.gateway)
            .env("ANTLER_GATEWAY_TOKEN", &self.token)
            .env(
                antler_protocol::config::ANTLER_EXTENSIONS_ENV,
                self.dir.join("extensions_config.json"),
            )
            .env("ANTLER_SANDBOX_BASE_DIR", self.dir.join("base"))
            .env(STORE_DSN_ENV, self.database.via(slot.forwarder.port, &name))
            .env_remove("ANTLER_HA_DSN")
            .env_remove("ANTLER_HA_ADVERTISE_URL")
            .env("RUST_LOG", "info")
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("cannot start `antler up`")?;
        *process = Some(child);
        Ok(())
    }

    /// Slot `k`'s lead's pid, while it runs.
    pub fn pid(&self, k: usize) -> Option<u32> {
        let mut process = lock(&self.slots[k].process);
        let child = process.as_mut()?;
        matches!(child.try_wait(), Ok(None)).then(|| child.id())
    }

    /// Waits (up to 60 s) for slot `k`'s lead `pid` to exit, then starts its successor.
    pub async fn restart(&self, k: usize, pid: u32) {
        let until = Instant::now() + Duration::from_secs(60);
        while self.pid(k) == Some(pid) && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if let Err(e) = self.start(k, Some(pid)) {
            eprintln!("antler chaos: {e:#}");
        }
    }

    /// As an orchestrator restarts a container that exits: a lead that exited on its own
    /// (not one a fault holds) is started again after a second. Runs until the schedule
    /// stops.
    pub async fn watch(leads: Arc<Leads>) {
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if leads.stopping.load(Ordering::SeqCst) {
                return;
            }
            for slot in &leads.slots {
                if slot.faulted.load(Ordering::SeqCst) {
                    continue;
                }
                let exited = {
                    let mut process = lock(&slot.process);
                    process
                        .as_mut()
                        .and_then(|c| matches!(c.try_wait(), Ok(Some(_))).then(|| c.id()))
                };
                if let Some(pid) = exited {
                    eprintln!(
                        "antler chaos: lead {} exited on its own; starting it again",
                        slot.index
                    );
                    if let Err(e) = leads.start(slot.index, Some(pid)) {
                        eprintln!("antler chaos: {e:#}");
                    }
                }
            }
        }
    }

    /// Every lead stopped: woken, its forwarder healed, SIGTERM (it stops its hosts and
    /// workers), SIGKILL after 30 s; all at once, then each awaited.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        for slot in &self.slots {
            slot.forwarder.heal();
            if let Some(child) = lock(&slot.process).as_ref() {
                send(child.id(), libc::SIGCONT);
                send(child.id(), libc::SIGTERM);
            }
        }
        let until = Instant::now() + Duration::from_secs(30);
        for slot in &self.slots {
            let mut process = lock(&slot.process);
            if let Some(child) = process.as_mut() {
                while matches!(child.try_wait(), Ok(None)) && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(50));
                }
                if matches!(child.try_wait(), Ok(None)) {
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
        }
    }
}
