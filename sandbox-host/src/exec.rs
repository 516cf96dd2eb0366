//! Running one shell command to completion: its own process group, stdout and stderr
//! captured up to a bound (the rest is drained and dropped), and at the deadline SIGKILL
//! to the whole group. Blocking; used by the local provider (on the blocking pool) and by
//! the supervisor inside bubblewrap (one thread per command).

use std::{
    io::Read,
    os::unix::process::{CommandExt, ExitStatusExt},
    path::PathBuf,
    process::{Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use serde::{Deserialize, Serialize};

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
}

fn small_thread() -> std::thread::Builder {
    std::thread::Builder::new().stack_size(128 * 1024)
}

fn bounded_reader(
    mut r: impl Read + Send + 'static,
    max: usize,
) -> std::io::Result<mpsc::Receiver<Vec<u8>>> {
    let (tx, rx) = mpsc::channel();
    small_thread().spawn(move || {
        let mut kept = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let room = max.saturating_sub(kept.len());
                    kept.extend_from_slice(&buf[..n.min(room)]);
                }
            }
        }
        let _ = tx.send(kept);
    })?;
    Ok(rx)
}

fn kill_group(pgid: u32) {
    // SAFETY: kill has no memory-safety preconditions; a negative pid names the group.
    unsafe {
        libc::kill(-(pgid as libc::pid_t), libc::SIGKILL);
    }
}

/// Runs `/bin/bash -c command` in a new process group; `Err` only when it cannot start.
pub fn run(req: &ExecRequest) -> std::io::Result<ExecOutcome> {
    let mut cmd = Command::new("/bin/bash");
    cmd.arg("-c")
        .arg(&req.command)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if req.clear_env {
        cmd.env_clear();
    }
    cmd.envs(req.env.iter().map(|(k, v)| (k, v)));
    if let Some(cwd) = &req.cwd {
        cmd.current_dir(cwd);
    }
    let mut child = cmd.spawn()?;
    let pgid = child.id();
    let deadline = Instant::now() + Duration::from_millis(req.timeout_ms);
    let out_rx = child
        .stdout
        .take()
        .map(|s| bounded_reader(s, req.max_capture))
        .transpose();
    let err_rx = child
        .stderr
        .take()
        .map(|s| bounded_reader(s, req.max_capture))
        .transpose();
    let (out_rx, err_rx) = match (out_rx, err_rx) {
        (Ok(o), Ok(e)) => (o, e),
        (Err(e), _) | (_, Err(e)) => {
            kill_group(pgid);
            let _ = child.wait();
            return Err(e);
        }
    };
    let (status_tx, status_rx) = mpsc::channel();
    let waiter = small_thread().spawn(move || {
        let _ = status_tx.send(child.wait());
    });
    if let Err(e) = waiter {
        kill_group(pgid);
        return Err(e);
    }
    let left = || deadline.saturating_duration_since(Instant::now());
    let mut timed_out = false;
    let status = match status_rx.recv_timeout(left()) {
        Ok(s) => Some(s?),
        Err(_) => {
            timed_out = true;
            kill_group(pgid);
            status_rx
                .recv_timeout(Duration::from_secs(5))
                .ok()
                .and_then(Result::ok)
        }
    };
    // A background process may hold the pipes open after the command exits: the deadline
    // still bounds the wait, and then the group is killed.
    let mut collect = |rx: Option<mpsc::Receiver<Vec<u8>>>| -> Vec<u8> {
        let Some(rx) = rx else { return Vec::new() };
        match rx.recv_timeout(left()) {
            Ok(v) => v,
            Err(_) => {
                timed_out = true;
                kill_group(pgid);
                rx.recv_timeout(Duration::from_secs(1)).unwrap_or_default()
            }
        }
    };
    let stdout = collect(out_rx);
    let stderr = collect(err_rx);
    let code = match status {
        Some(s) => s.code().unwrap_or_else(|| -s.signal().unwrap_or(9)),
        None => -9,
    };
    Ok(ExecOutcome {
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        code,
        timed_out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn captures_both_streams_and_the_status() {
        let o = run(&req("echo out; echo err >&2; exit 3", 5_000)).expect("run");
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
        let o = run(&req(&cmd, 300)).expect("run");
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
        let o = run(&r).expect("run");
        assert_eq!(o.stdout.len(), 1000);
    }
}
