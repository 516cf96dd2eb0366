//! The supervisor that lives inside a bwrap sandbox: it sets no-new-privileges and the
//! resource limits once, then reads JSON-line requests on stdin and runs each command on
//! its own thread (`exec::run`), writing JSON-line replies to stdout. It exits when stdin
//! closes (its host went away); `--die-with-parent` covers a host killed outright.

use std::{
    io::{BufRead, Write},
    sync::{Arc, Mutex},
};

use crate::{
    exec,
    provider::bwrap::{SupervisorReply, SupervisorRequest},
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

/// Runs the supervisor until stdin closes. `args`: max processes, max file size, max memory.
pub fn main(args: &[String]) -> i32 {
    let num = |i: usize| args.get(i).and_then(|a| a.parse::<u64>().ok()).unwrap_or(0);
    // SAFETY: prctl with PR_SET_NO_NEW_PRIVS takes integer arguments only.
    unsafe {
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    }
    set_limit(libc::RLIMIT_NPROC, num(0));
    set_limit(libc::RLIMIT_FSIZE, num(1));
    set_limit(libc::RLIMIT_AS, num(2));
    let out = Arc::new(Mutex::new(std::io::stdout()));
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
        let out2 = out.clone();
        let spawned = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || {
                let result = exec::run(&req.exec).map_err(|e| format!("OSError: {e}"));
                reply(&out2, SupervisorReply { id: req.id, result });
            });
        if let Err(e) = spawned {
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
