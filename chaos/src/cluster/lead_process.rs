//! The lead's process, with this command as its orchestrator (as Kubernetes is): `antler
//! up` started in the cluster's directory, started again in place of one a fault stopped
//! (once, when two faults hit one lead) or of one that exited on its own (the watchdog),
//! its logs (one per start), and its SIGTERM at the end.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::ChaosCluster;
use crate::faults;

impl ChaosCluster {
    pub(crate) fn lead_log(&self, n: u32) -> PathBuf {
        self.dir.join(format!("lead-{n}.log"))
    }

    /// The last lines of the current lead's log that say what it did at start.
    pub fn lead_log_tail(&self) -> String {
        let n = *self.starts.lock().unwrap_or_else(|e| e.into_inner());
        let text = std::fs::read_to_string(self.lead_log(n)).unwrap_or_default();
        text.lines()
            .rev()
            .find(|l| l.contains("resum") || l.contains("adopted") || l.contains("cluster started"))
            .map(|l| l.chars().take(200).collect())
            .unwrap_or_else(|| "started".into())
    }

    /// The newest line of any lead's log, written at `since` or later, containing every
    /// one of `needles`.
    pub fn lead_log_matching(&self, needles: &[&str], since: &str) -> Option<String> {
        let n = *self.starts.lock().unwrap_or_else(|e| e.into_inner());
        (1..=n)
            .rev()
            .find_map(|i| faults::logged_since(&self.lead_log(i), needles, since))
    }

    /// Starts `antler up` (again): in place of the lead `replacing` when given, unless
    /// another fault or the watchdog has replaced it already (two faults that hit one
    /// lead at once start one successor, not two).
    pub(crate) fn start_lead(&self, replacing: Option<u32>) -> anyhow::Result<()> {
        let mut lead = self.lead.lock().unwrap_or_else(|e| e.into_inner());
        if let (Some(old), Some(current)) = (replacing, lead.as_ref()) {
            if current.id() != old {
                return Ok(());
            }
        }
        let n = {
            let mut starts = self.starts.lock().unwrap_or_else(|e| e.into_inner());
            *starts += 1;
            *starts
        };
        let log = std::fs::File::create(self.lead_log(n))?;
        let mut command = std::process::Command::new(&self.exe);
        if let Some(m) = &self.multi {
            command.env("ANTLER_CLUSTER_TOKEN", m.token()?);
        }
        command
            .arg("--runtime-dir")
            .arg(self.runtime())
            .args(["up", "--config"])
            .arg(self.dir.join("config.yaml"));
        if self.multi.is_none() {
            // Actors are stopped on purpose only here (refused off loopback).
            command.arg("--chaos");
        }
        let child = command
            .env("ANTLER_GATEWAY_ADDR", &self.gateway)
            .env("ANTLER_GATEWAY_TOKEN", &self.token)
            .env(
                antler_protocol::config::ANTLER_EXTENSIONS_ENV,
                self.dir.join("extensions_config.json"),
            )
            .env("ANTLER_SANDBOX_BASE_DIR", self.dir.join("base"))
            .env("RUST_LOG", "info")
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("cannot start `antler up`")?;
        *lead = Some(child);
        Ok(())
    }

    /// The lead's pid, while it runs.
    pub fn lead_pid(&self) -> Option<u32> {
        let mut lead = self.lead.lock().unwrap_or_else(|e| e.into_inner());
        let child = lead.as_mut()?;
        match child.try_wait() {
            Ok(None) => Some(child.id()),
            _ => None,
        }
    }

    /// As an orchestrator restarts a container that exits: a lead that exited on its own
    /// (it could not start, or it crashed) is started again after a second. Runs until the
    /// schedule stops.
    pub(crate) async fn watch_lead(cluster: Arc<ChaosCluster>) {
        use std::sync::atomic::Ordering;
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if cluster.stopping.load(Ordering::SeqCst) {
                return;
            }
            if cluster.restarting.load(Ordering::SeqCst) > 0 {
                continue;
            }
            let exited = {
                let mut lead = cluster.lead.lock().unwrap_or_else(|e| e.into_inner());
                lead.as_mut()
                    .and_then(|c| matches!(c.try_wait(), Ok(Some(_))).then(|| c.id()))
            };
            if exited.is_some() && cluster.restarting.load(Ordering::SeqCst) == 0 {
                eprintln!("antler chaos: the lead exited on its own; starting it again");
                if let Err(e) = cluster.start_lead(exited) {
                    eprintln!("antler chaos: {e:#}");
                }
            }
        }
    }

    /// A fault is about to stop the lead and start it again itself.
    pub fn lead_restart_begins(&self) {
        self.restarting
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// Waits for the lead `pid` to exit (it was signalled, after
    /// [`ChaosCluster::lead_restart_begins`]), then starts a new one.
    pub async fn restart_lead(&self, pid: u32) {
        self.restart_lead_now(pid).await;
        self.restarting
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }

    async fn restart_lead_now(&self, pid: u32) {
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            let gone = {
                let mut lead = self.lead.lock().unwrap_or_else(|e| e.into_inner());
                match lead.as_mut() {
                    Some(c) if c.id() == pid => !matches!(c.try_wait(), Ok(None)),
                    _ => true,
                }
            };
            if gone || Instant::now() >= until {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if let Err(e) = self.start_lead(Some(pid)) {
            eprintln!("antler chaos: {e:#}");
        }
    }

    pub(super) fn stop_lead(&self) {
        let mut lead = self.lead.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(child) = lead.as_mut() {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe {
                libc::kill(child.id() as libc::pid_t, libc::SIGCONT);
            }
            // SAFETY: kill has no memory-safety preconditions.
            unsafe {
                libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
            }
            let until = Instant::now() + Duration::from_secs(30);
            while Instant::now() < until {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
