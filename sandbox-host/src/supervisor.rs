//! The supervisor that lives inside a bwrap sandbox, as pid 1 of its pid namespace: it
//! makes itself unreachable from what it runs (not dumpable, so its `/proc` entries, fds
//! and memory are closed to the sandbox's user, and as the namespace's init it receives no
//! signal from inside), dies with its host (a parent-death signal and the end of stdin),
//! sets no-new-privileges and the resource limits once, reaps orphans, and kills what
//! commands leave running after `sandbox.background_lifetime` or on release. It reads
//! JSON-line requests on stdin and runs each command on its own thread (`exec::run`),
//! writing JSON-line replies to stdout.

use std::{
    collections::HashMap,
    io::{BufRead, Write},
    sync::{Arc, Mutex},
    time::Duration,
};

use crate::{
    exec::{self, ExecOutcome},
    jobs::{self, Jobs},
    provider::bwrap::{SupervisorOp, SupervisorReply, SupervisorRequest},
};

fn set_limit(resource: libc::__rlimit_resource_t, value: u64) {
    if value == 0 {
        return;
    }
    let lim = libc::rlimit {
        rlim_cur: value as libc::rlim_t,
        rlim_max: value as libc::rlim_t,
    };
    // SAFETY: setrlimit reads the struct we pass; no other preconditions.
    if unsafe { libc::setrlimit(resource, &lim) } != 0 {
        eprintln!(
            "supervisor: setrlimit({resource}) failed: {}",
            std::io::Error::last_os_error()
        );
    }
}

fn prctl(option: libc::c_int, arg: libc::c_ulong, what: &str) {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(option, arg, 0, 0, 0) } != 0 {
        eprintln!(
            "supervisor: {what} failed: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// As the namespace's pid 1 the supervisor gets no signal it has no handler for, but
/// SIGKILL and SIGSTOP: a SIGTERM from the host's side (an operator, an orchestrator
/// stopping the node) would be lost. It exits on one (143, as a SIGTERM'd process does),
/// taking the namespace with it; the host logs the exit and the sandbox's next call
/// starts a new supervisor. A SIGTERM sent from inside the sandbox (a sender the
/// namespace can see, so `si_pid` is not 0) is still ignored: a command cannot end its
/// own supervisor.
fn exit_on_outside_sigterm() {
    extern "C" fn on_term(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
        // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler; si_pid and
        // _exit are async-signal-safe.
        unsafe {
            if !info.is_null() && (*info).si_pid() == 0 {
                libc::_exit(143);
            }
        }
    }
    // SAFETY: a zeroed sigaction is valid; the handler only calls async-signal-safe
    // functions.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_term as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut()) != 0 {
            eprintln!(
                "supervisor: cannot handle SIGTERM: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

/// Runs the supervisor until stdin closes. `args`: max processes, max file size, max
/// memory, background lifetime in milliseconds.
pub fn main(args: &[String]) -> i32 {
    let num = |i: usize| args.get(i).and_then(|a| a.parse::<u64>().ok()).unwrap_or(0);
    // Nothing bubblewrap passed on beyond stdio (its info report among them) reaches the
    // commands.
    // SAFETY: close_range takes integers only and closes descriptors nothing here uses.
    unsafe {
        libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
    }
    prctl(
        libc::PR_SET_PDEATHSIG,
        libc::SIGKILL as libc::c_ulong,
        "PR_SET_PDEATHSIG",
    );
    prctl(libc::PR_SET_DUMPABLE, 0, "PR_SET_DUMPABLE");
    prctl(libc::PR_SET_NO_NEW_PRIVS, 1, "PR_SET_NO_NEW_PRIVS");
    set_limit(libc::RLIMIT_NPROC, num(0));
    set_limit(libc::RLIMIT_FSIZE, num(1));
    set_limit(libc::RLIMIT_AS, num(2));
    let lifetime = match num(3) {
        0 => Duration::from_secs(600),
        ms => Duration::from_millis(ms),
    };
    // SAFETY: getpid has no preconditions.
    let init = unsafe { libc::getpid() } == 1;
    if init {
        exit_on_outside_sigterm();
    }
    let jobs = Arc::new(Jobs::new(lifetime, init));
    if init {
        let spawned = std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(|| jobs::reap_orphans());
        if let Err(e) = spawned {
            eprintln!("supervisor: cannot start the orphan reaper: {e}");
        }
    }
    {
        let jobs = jobs.clone();
        let tick = (lifetime / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
        let spawned = std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || loop {
                std::thread::sleep(tick);
                jobs.expire();
            });
        if let Err(e) = spawned {
            eprintln!("supervisor: cannot start the background reaper: {e}");
        }
    }
    let out = Arc::new(Mutex::new(std::io::stdout()));
    // The commands running now, by request id (a `Cancel` kills one).
    let running: Arc<Mutex<HashMap<u64, Arc<exec::Started>>>> = Arc::default();
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let req: SupervisorRequest = match serde_json::from_str(&line) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("supervisor: unreadable request: {e}");
                continue;
            }
        };
        let id = req.id;
        let exec = match req.op {
            SupervisorOp::Exec(exec) => exec,
            SupervisorOp::Ping => {
                let result = Ok(ExecOutcome {
                    stdout: String::new(),
                    stderr: String::new(),
                    code: 0,
                    timed_out: false,
                    background: Vec::new(),
                });
                reply(&out, SupervisorReply { id, result });
                continue;
            }
            SupervisorOp::Cancel(exec_id) => {
                let started = running.lock().ok().and_then(|r| r.get(&exec_id).cloned());
                if let Some(started) = started {
                    started.kill();
                }
                continue;
            }
            SupervisorOp::KillBackground => {
                let background = jobs.kill_all();
                let result = Ok(ExecOutcome {
                    stdout: String::new(),
                    stderr: String::new(),
                    code: 0,
                    timed_out: false,
                    background,
                });
                reply(&out, SupervisorReply { id, result });
                continue;
            }
        };
        let out2 = out.clone();
        let jobs2 = jobs.clone();
        let started = Arc::new(exec::Started::default());
        if let Ok(mut running) = running.lock() {
            running.insert(id, started.clone());
        }
        let running2 = running.clone();
        let spawned = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || {
                let result =
                    exec::run_watched(&exec, &jobs2, &started).map_err(|e| format!("OSError: {e}"));
                if let Ok(mut running) = running2.lock() {
                    running.remove(&id);
                }
                reply(&out2, SupervisorReply { id, result });
            });
        if let Err(e) = spawned {
            if let Ok(mut running) = running.lock() {
                running.remove(&id);
            }
            let result = Err(format!("OSError: cannot start the command: {e}"));
            reply(&out, SupervisorReply { id, result });
        }
    }
    0
}

fn reply(out: &Mutex<std::io::Stdout>, r: SupervisorReply) {
    let Ok(mut line) = serde_json::to_string(&r) else {
        return;
    };
    line.push('\n');
    if let Ok(mut o) = out.lock() {
        let _ = o.write_all(line.as_bytes());
        let _ = o.flush();
    }
}
