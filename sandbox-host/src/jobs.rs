//! Processes a command leaves running. Each command is its own session (`setsid`), so what
//! outlives its shell is the rest of that session: [`Jobs`] keeps those sessions and kills
//! each when the sandbox is released or when `sandbox.background_lifetime` has passed. The
//! supervisor (pid 1 of the sandbox's namespace) also kills everything else on release.
//! [`Owned`] records the children a command thread waits for, so the supervisor's orphan
//! reaper never takes their exit status.

use std::{
    collections::HashMap,
    sync::{Mutex, MutexGuard},
    time::{Duration, Instant},
};

use serde::{Deserialize, Serialize};

/// A process a command left running, as `ps` inside the sandbox names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackgroundProcess {
    pub pid: i32,
    pub command: String,
}

/// The sessions of processes left running.
#[derive(Debug)]
pub struct Jobs {
    sessions: Mutex<Vec<(i32, Instant)>>,
    lifetime: Duration,
    /// The caller is pid 1 of the sandbox's own pid namespace: a release kills every
    /// other process in it.
    namespace_init: bool,
}

/// A (pid, session id, command) of every live process.
fn processes() -> Vec<(i32, i32, String)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp session ...
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.first() == Some(&"Z") {
            continue;
        }
        let Some(sid) = fields.get(3).and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let comm = head.split_once('(').map(|(_, c)| c).unwrap_or_default();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let mut command = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect::<Vec<_>>()
            .join(" ");
        if command.is_empty() {
            command = comm.to_string();
        }
        if command.chars().count() > 200 {
            command = command.chars().take(197).collect::<String>() + "...";
        }
        out.push((pid, sid, command));
    }
    out.sort();
    out
}

/// The live processes of session `sid`.
pub fn session_members(sid: i32) -> Vec<BackgroundProcess> {
    processes()
        .into_iter()
        .filter(|(_, s, _)| *s == sid)
        .map(|(pid, _, command)| BackgroundProcess { pid, command })
        .collect()
}

/// SIGKILL to every process of session `sid` (its group first, then any other member).
pub fn kill_session(sid: i32) {
    if sid <= 1 {
        return;
    }
    // SAFETY: kill has no memory-safety preconditions; a negative pid names the group.
    unsafe {
        libc::kill(-sid, libc::SIGKILL);
    }
    for p in session_members(sid) {
        // SAFETY: as above.
        unsafe {
            libc::kill(p.pid, libc::SIGKILL);
        }
    }
}

impl Jobs {
    pub fn new(lifetime: Duration, namespace_init: bool) -> Jobs {
        Jobs {
            sessions: Mutex::new(Vec::new()),
            lifetime,
            namespace_init,
        }
    }

    /// How long a process left running may live.
    pub fn lifetime(&self) -> Duration {
        self.lifetime
    }

    fn sessions(&self) -> MutexGuard<'_, Vec<(i32, Instant)>> {
        // A poisoned list only means a holder panicked; the list itself is still valid.
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps the session `sid` (its shell exited, members are left).
    pub fn adopt(&self, sid: i32) {
        let until = Instant::now() + self.lifetime;
        let mut s = self.sessions();
        s.retain(|(x, _)| *x != sid);
        s.push((sid, until));
    }

    /// Kills the sessions past their lifetime.
    pub fn expire(&self) {
        let now = Instant::now();
        let due: Vec<i32> = {
            let mut s = self.sessions();
            let due = s
                .iter()
                .filter(|(_, u)| *u <= now)
                .map(|(x, _)| *x)
                .collect();
            s.retain(|(_, u)| *u > now);
            due
        };
        for sid in due {
            kill_session(sid);
        }
    }

    /// Kills every kept session (and, as the namespace's init, every other process).
    pub fn kill_all(&self) -> Vec<BackgroundProcess> {
        let sessions: Vec<i32> = self.sessions().drain(..).map(|(x, _)| x).collect();
        let mut killed = Vec::new();
        for sid in sessions {
            killed.extend(session_members(sid));
            kill_session(sid);
        }
        if self.namespace_init {
            // SAFETY: kill(-1) from pid 1 signals every other process of its namespace.
            unsafe {
                libc::kill(-1, libc::SIGKILL);
            }
        }
        killed
    }
}

/// The children a command thread is waiting for (pid → waiters, a pid may be reused).
#[derive(Debug, Default)]
pub struct Owned {
    pids: Mutex<HashMap<i32, u32>>,
}

impl Owned {
    /// The lock held while a child is spawned and recorded, and while the reaper checks.
    pub fn lock(&self) -> MutexGuard<'_, HashMap<i32, u32>> {
        self.pids.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forgets a child once it was waited for.
    pub fn release(&self, pid: i32) {
        let mut m = self.lock();
        if let Some(n) = m.get_mut(&pid) {
            *n -= 1;
            if *n == 0 {
                m.remove(&pid);
            }
        }
    }
}

/// The process-wide record of owned children.
pub fn owned() -> &'static Owned {
    static OWNED: std::sync::OnceLock<Owned> = std::sync::OnceLock::new();
    OWNED.get_or_init(Owned::default)
}

/// As pid 1 of the namespace: reaps every orphan that no command thread waits for.
/// Never returns.
pub fn reap_orphans() -> ! {
    loop {
        // SAFETY: an all-zero siginfo is a valid value to be overwritten.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid writes `info`; WNOWAIT leaves the child waitable.
        let r = unsafe { libc::waitid(libc::P_ALL, 0, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if r != 0 {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        // SAFETY: waitid filled a child's siginfo.
        let pid = unsafe { info.si_pid() };
        if pid <= 0 {
            continue;
        }
        let owned = owned().lock();
        if owned.contains_key(&pid) {
            drop(owned);
            // Its command thread reaps it soon.
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        let mut status = 0;
        // SAFETY: reaps exactly this zombie, which no thread waits for.
        unsafe {
            libc::waitpid(pid, &mut status, libc::WNOHANG);
        }
    }
}
