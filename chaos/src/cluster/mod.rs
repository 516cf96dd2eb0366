//! The cluster under test and how to reach it: its directory (the runtime directory, the
//! sandbox-host replicas' bases, the logs), its layout (local, or multi-host's nodes),
//! and stopping it. The lead's process is [`lead_process`]'s (this command is its
//! orchestrator); the gateway the schedule talks to is [`gateway`]'s.

mod gateway;
mod lead_process;

use std::path::PathBuf;
use std::process::Child;
use std::sync::Mutex;

use serde_json::Value;

use crate::{disk, events, faults, multihost};

/// The cluster under test and how to reach it.
pub struct ChaosCluster {
    pub(crate) dir: PathBuf,
    /// The multi-host layout, in multi-host mode.
    pub multi: Option<multihost::MultiHost>,
    /// The `antler` binary (`antler up` starts the lead).
    exe: PathBuf,
    pub(crate) gateway: String,
    pub(crate) token: String,
    pub workers: u32,
    lead: Mutex<Option<Child>>,
    starts: Mutex<u32>,
    pub(crate) http: reqwest::Client,
    /// What the runs reported, as it arrived.
    pub(crate) events: events::Events,
    /// Faults restarting the lead now (the watchdog leaves it be).
    restarting: std::sync::atomic::AtomicU32,
    /// The schedule is over: nothing restarts the lead any more.
    stopping: std::sync::atomic::AtomicBool,
}

impl ChaosCluster {
    /// The cluster in `dir` (its config and extensions files written there), its lead
    /// started by `exe` (the `antler` binary) with its gateway at `gateway`; not started.
    pub fn new(
        dir: PathBuf,
        multi: Option<multihost::MultiHost>,
        exe: PathBuf,
        gateway: String,
        workers: u32,
    ) -> ChaosCluster {
        ChaosCluster {
            dir,
            multi,
            exe,
            gateway,
            token: uuid::Uuid::new_v4().simple().to_string(),
            workers,
            lead: Mutex::new(None),
            starts: Mutex::new(0),
            http: reqwest::Client::new(),
            events: events::Events::default(),
            restarting: Default::default(),
            stopping: Default::default(),
        }
    }

    pub fn runtime(&self) -> PathBuf {
        self.dir.join("run")
    }

    /// The sandbox-host replicas' base directories (the threads' files).
    pub fn bases(&self) -> Vec<PathBuf> {
        match &self.multi {
            Some(m) => m.bases(),
            None => vec![self.dir.join("base")],
        }
    }

    /// Replicas of `role` (`sandbox-host`, `subagent`, ...).
    pub fn replicas(&self, role: &str) -> u32 {
        match (&self.multi, role) {
            (Some(m), _) => m.replicas(role),
            (None, "subagent") => self.workers,
            (None, _) => 1,
        }
    }

    /// The pid of host `role` (replica `index`): from the cluster view in local mode, from
    /// this command's own children in multi-host mode.
    pub fn host_pid(&self, view: &Value, role: &str, index: u32) -> Option<u32> {
        match &self.multi {
            Some(m) => m.node(role, index).and_then(|i| m.pid(i)),
            None => faults::pid_of(view, role, (role == "subagent").then_some(u64::from(index))),
        }
    }

    /// A host's log: in the runtime directory, or in multi-host mode beside its node.
    pub fn host_log(&self, role: &str, index: u32) -> PathBuf {
        if let Some(m) = &self.multi {
            if let Some(i) = m.node(role, index) {
                return m.log(i);
            }
        }
        let name = if role == "subagent" {
            format!("subagent-{index}.log")
        } else {
            format!("{role}.log")
        };
        self.runtime().join("logs").join(name)
    }

    /// SIGTERM to the lead (it stops its hosts and workers), SIGKILL after 30 s; in
    /// multi-host mode then the hosts, their proxies and the namespaces.
    pub(crate) fn stop(&self) {
        self.stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
        // A disk fault cut short by an error is undone.
        if disk::available() {
            let _ = disk::database_read_only(&self.runtime(), false);
            for base in self.bases() {
                disk::unfill(&base);
            }
        }
        self.stop_lead();
        if let Some(m) = &self.multi {
            m.stop();
        }
    }
}
