//! Running one shell command: its own session, stdout and stderr captured up to a bound
//! (the rest is drained and dropped), and at the deadline SIGKILL to the whole session.
//! The call ends when the shell exits: what it left running keeps the session, is named
//! in the outcome and handed to [`Jobs`]. Blocking; used by the local provider (on the
//! blocking pool) and by the supervisor inside bubblewrap (one thread per command).

use std::{
    io::Read,
    os::unix::process::{CommandExt, ExitStatusExt},
    path::PathBuf,
    process::{Command, Stdio},
    sync::{
        atomic::{AtomicBool, Ordering},
        mpsc, Arc, Mutex,
    },
    time::{Duration, Instant},
};

use serde::{Deserialize, Serialize};

use crate::jobs::{self, BackgroundProcess, Jobs};

/// How long output is still read after the shell exits while something it left running
/// holds the pipes open.
pub const OUTPUT_GRACE: Duration = Duration::from_millis(500);

/// At most this much of each of stdout and stderr is kept (DeerFlow: 10 MiB).
pub const MAX_CAPTURE_BYTES: usize = 10 * 1024 * 1024;

/// One command to run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecRequest {
    pub command: String,
    pub cwd: Option<PathBuf>,
    /// Variables added to the environment.
    pub env: Vec<(String, String)>,
    /// Start from an empty environment (then `env` only).
    pub clear_env: bool,
    pub timeout_ms: u64,
    pub max_capture: usize,
}

/// How it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecOutcome {
    pub stdout: String,
    pub stderr: String,
    /// The exit status; `-N` when killed by signal N (as Python reports it).
    pub code: i32,
    /// Whether the deadline passed and the group was killed.
    pub timed_out: bool,
    /// Processes the command left running (they keep its session).
    #[serde(default)]
    pub background: Vec<BackgroundProcess>,
}

fn small_thread() -> std::thread::Builder {
    std::thread::Builder::new().stack_size(128 * 1024)
}

/// One captured stream: what was read so far, and whether it reached its end.
struct Capture {
    kept: Arc<Mutex<Vec<u8>>>,
    /// Set once the output was taken: later bytes are read and dropped.
    detached: Arc<AtomicBool>,
    eof: mpsc::Receiver<()>,
}

impl Capture {
    /// Waits for the end of the stream until `until`, then takes what was read.
    fn take(&self, until: Instant) -> (Vec<u8>, bool) {
        let eof = self
            .eof
            .recv_timeout(until.saturating_duration_since(Instant::now()))
            .is_ok();
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        self.detached.store(true, Ordering::SeqCst);
        (std::mem::take(&mut *kept), eof)
    }
}

fn bounded_reader(mut r: impl Read + Send + 'static, max: usize) -> std::io::Result<Capture> {
    let (tx, rx) = mpsc::channel();
    let kept: Arc<Mutex<Vec<u8>>> = Arc::default();
    let detached = Arc::new(AtomicBool::new(false));
    let (k, d) = (kept.clone(), detached.clone());
    small_thread().spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let mut kept = k.lock().unwrap_or_else(|p| p.into_inner());
                    if d.load(Ordering::SeqCst) {
                        continue;
                    }
                    let room = max.saturating_sub(kept.len());
                    kept.extend_from_slice(&buf[..n.min(room)]);
                }
            }
        }
        let _ = tx.send(());
    })?;
    Ok(Capture {
        kept,
        detached,
        eof: rx,
    })
}

/// Runs `/bin/bash -c command` in a new session; `Err` only when it cannot start.
pub fn run(req: &ExecRequest, jobs: &Jobs) -> std::io::Result<ExecOutcome> {
    run_watched(req, jobs, &Started::default())
}

/// The session of a command once it started, so that whoever cancels the call can kill it
/// ([`Started::kill`]) while [`run_watched`] waits for it.
#[derive(Debug, Default)]
pub struct Started {
    sid: Mutex<Option<i32>>,
    done: AtomicBool,
}

impl Started {
    /// Kills the command's whole session if it started and has not ended (the caller
    /// went away: the call was cancelled).
    pub fn kill(&self) {
        if self.done.load(Ordering::SeqCst) {
            return;
        }
        if let Some(sid) = *self
            .sid
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            jobs::kill_session(sid);
        }
    }
}

/// [`run`], recording the command's session in `started` while it runs.
pub fn run_watched(
    req: &ExecRequest,
    jobs: &Jobs,
    started: &Started,
) -> std::io::Result<ExecOutcome> {
    let outcome = run_inner(req, jobs, started);
    started.done.store(true, Ordering::SeqCst);
    outcome
}

fn run_inner(req: &ExecRequest, jobs: &Jobs, started: &Started) -> std::io::Result<ExecOutcome> {
    let mut cmd = Command::new("/bin/bash");
    cmd.arg("-c")
        .arg(&req.command)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setsid is async-signal-safe and touches no memory.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    if req.clear_env {
        cmd.env_clear();
    } else {
        // The variables that configure this process (its traces, its logs) are not the
        // command's; the command's own `env` can still set them.
        for (name, _) in std::env::vars_os() {
            if name
                .to_str()
                .is_some_and(antler_protocol::host::is_own_variable)
            {
                cmd.env_remove(name);
            }
        }
    }
    cmd.envs(req.env.iter().map(|(k, v)| (k, v)));
    if let Some(cwd) = &req.cwd {
        cmd.current_dir(cwd);
    }
    // Spawned and recorded under the lock, so the supervisor's orphan reaper never takes
    // this child's status.
    let mut child = {
        let mut owned = jobs::owned().lock();
        let child = cmd.spawn()?;
        *owned.entry(child.id() as i32).or_default() += 1;
        child
    };
    let sid = child.id() as i32;
    *started
        .sid
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(sid);
    let deadline = Instant::now() + Duration::from_millis(req.timeout_ms);
    let out = child
        .stdout
        .take()
        .map(|s| bounded_reader(s, req.max_capture))
        .transpose();
    let err = child
        .stderr
        .take()
        .map(|s| bounded_reader(s, req.max_capture))
        .transpose();
    let (out, err) = match (out, err) {
        (Ok(o), Ok(e)) => (o, e),
        (Err(e), _) | (_, Err(e)) => {
            jobs::kill_session(sid);
            let _ = child.wait();
            jobs::owned().release(sid);
            return Err(e);
        }
    };
    let (status_tx, status_rx) = mpsc::channel();
    let waiter = small_thread().spawn(move || {
        let status = child.wait();
        jobs::owned().release(sid);
        let _ = status_tx.send(status);
    });
    if let Err(e) = waiter {
        jobs::kill_session(sid);
        return Err(e);
    }
    let left = || deadline.saturating_duration_since(Instant::now());
    let mut timed_out = false;
    let status = match status_rx.recv_timeout(left()) {
        Ok(s) => Some(s?),
        Err(_) => {
            timed_out = true;
            jobs::kill_session(sid);
            status_rx
                .recv_timeout(Duration::from_secs(5))
                .ok()
                .and_then(Result::ok)
        }
    };
    // The shell is gone. A process it left running may hold the pipes open: its output is
    // read a moment longer, then the call ends.
    let until = if timed_out {
        Instant::now() + Duration::from_secs(1)
    } else {
        deadline.min(Instant::now() + OUTPUT_GRACE)
    };
    let (stdout, _) = out.as_ref().map(|c| c.take(until)).unwrap_or_default();
    let (stderr, _) = err.as_ref().map(|c| c.take(until)).unwrap_or_default();
    let background = if timed_out {
        Vec::new()
    } else {
        let mut left = jobs::session_members(sid);
        if !left.is_empty() {
            jobs.adopt(sid);
            // A subshell forked for `cmd &` may not have exec'd `cmd` yet: look again a
            // moment later for the names `ps` would show.
            std::thread::sleep(Duration::from_millis(100));
            left = jobs::session_members(sid);
        }
        left
    };
    let code = match status {
        Some(s) => s.code().unwrap_or_else(|| -s.signal().unwrap_or(9)),
        None => -9,
    };
    Ok(ExecOutcome {
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        code,
        timed_out,
        background,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jobs() -> Jobs {
        Jobs::new(Duration::from_secs(60), false)
    }

    fn req(command: &str, timeout_ms: u64) -> ExecRequest {
        ExecRequest {
            command: command.into(),
            cwd: None,
            env: vec![],
            clear_env: false,
            timeout_ms,
            max_capture: MAX_CAPTURE_BYTES,
        }
    }

    #[test]
    fn the_hosts_own_variables_stay_with_it_unless_the_command_sets_them() {
        // Names no other test reads; set before this test's command starts.
        std::env::set_var("OTEL_EXEC_TEST_LEAK", "host-only");
        std::env::set_var("OTEL_EXEC_TEST_SET", "host-value");
        std::env::set_var("EXEC_TEST_KEPT", "kept");
        let mut r = req(
            "echo \"leak=${OTEL_EXEC_TEST_LEAK-unset} set=${OTEL_EXEC_TEST_SET-unset} kept=${EXEC_TEST_KEPT-unset}\"",
            5_000,
        );
        r.env = vec![("OTEL_EXEC_TEST_SET".into(), "configured".into())];
        let o = run(&r, &jobs()).expect("run");
        assert_eq!(o.stdout, "leak=unset set=configured kept=kept\n");
    }

    #[test]
    fn captures_both_streams_and_the_status() {
        let o = run(&req("echo out; echo err >&2; exit 3", 5_000), &jobs()).expect("run");
        assert_eq!(
            (o.stdout.as_str(), o.stderr.as_str(), o.code, o.timed_out),
            ("out\n", "err\n", 3, false)
        );
    }

    #[test]
    fn a_timeout_kills_the_whole_group() {
        let dir = tempfile::tempdir().expect("tempdir");
        let marker = dir.path().join("pid");
        let cmd = format!("sleep 30 & echo $! > {}; wait", marker.display());
        let started = Instant::now();
        let o = run(&req(&cmd, 300), &jobs()).expect("run");
        assert!(o.timed_out);
        assert!(started.elapsed() < Duration::from_secs(5));
        let pid: i32 = std::fs::read_to_string(&marker)
            .expect("pid")
            .trim()
            .parse()
            .expect("int");
        std::thread::sleep(Duration::from_millis(100));
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(')')
            .map(|(_, r)| r.trim_start().chars().next());
        assert!(
            stat.is_empty() || state == Some(Some('Z')),
            "background sleep survived: {stat}"
        );
    }

    #[test]
    fn capture_is_bounded() {
        let mut r = req("head -c 3000000 /dev/zero | tr '\\0' a", 10_000);
        r.max_capture = 1000;
        let o = run(&r, &jobs()).expect("run");
        assert_eq!(o.stdout.len(), 1000);
    }

    #[test]
    fn a_background_process_ends_the_call_at_the_shell_exit_and_is_named() {
        let jobs = jobs();
        let started = Instant::now();
        let o = run(&req("echo started; sleep 1000 &", 60_000), &jobs).expect("run");
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!((o.stdout.as_str(), o.timed_out), ("started\n", false));
        assert_eq!(o.background.len(), 1, "{:?}", o.background);
        assert_eq!(o.background[0].command, "sleep 1000");
        let pid = o.background[0].pid;
        assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
        let killed = jobs.kill_all();
        assert_eq!(killed, o.background);
        std::thread::sleep(Duration::from_millis(200));
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(stat.is_empty() || stat.contains(") Z"), "{stat}");
    }

    #[test]
    fn a_background_process_dies_after_its_lifetime() {
        let jobs = Jobs::new(Duration::from_millis(100), false);
        let o = run(&req("sleep 1000 &", 60_000), &jobs).expect("run");
        let pid = o.background[0].pid;
        std::thread::sleep(Duration::from_millis(200));
        jobs.expire();
        std::thread::sleep(Duration::from_millis(200));
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(stat.is_empty() || stat.contains(") Z"), "{stat}");
    }
}
