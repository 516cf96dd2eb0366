//! The bwrap provider: one long-lived supervisor per sandbox inside bubblewrap (read-only
//! minimal root, the thread's workspace/uploads/outputs read-write at /mnt/user-data,
//! skills read-only with only the sandbox's own user's `users/{user}` in them, a private /tmp of `sandbox.tmp_size`, every namespace unshared,
//! network only when configured, a new session). bubblewrap itself starts with an empty
//! environment, and the sandbox gets only the declared one. The supervisor is pid 1 of the
//! sandbox's pid namespace (`--as-pid-1`): what it runs cannot signal it, and when it dies
//! the kernel kills the whole namespace. It exits when its stdin ends (sandbox-host is
//! gone) and dies with bubblewrap (a parent-death signal), and the host's handle SIGKILLs
//! it through a pidfd, before bubblewrap, when dropped. bubblewrap is never killed first
//! while it sets the sandbox up (no `--die-with-parent`): its child would wait forever for
//! it, a namespace init with parent 1 that nothing kills. When sandbox-host runs as root,
//! bubblewrap runs as `nobody` so resource limits bind. bubblewrap joins the sandbox's
//! cgroup (`crate::cgroup`) before it starts, loads the seccomp filter
//! (`super::seccomp`) before the supervisor runs, and, where it has `--disable-userns`,
//! leaves the sandbox a user namespace in which no further one can be made. Commands go to
//! the supervisor as JSON lines; a call costs a fork and exec, not a bwrap start.

use std::{
    collections::HashMap,
    ffi::OsString,
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::Stdio,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use serde::{Deserialize, Serialize};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    sync::{mpsc, oneshot},
    task::AbortHandle,
};

use crate::{
    cgroup::SandboxCgroup,
    exec::{ExecOutcome, ExecRequest},
    paths::{
        PathMap, ACP_WORKSPACE_VIRTUAL_PATH, SKILLS_USERS_DIR, USER_DATA_DIRS, VIRTUAL_PATH_PREFIX,
    },
    settings::SandboxSettings,
};

/// Where the supervisor binary is mounted inside the sandbox.
pub const SUPERVISOR_PATH: &str = "/.antler/sandbox-host";
/// The hidden subcommand that runs the supervisor.
pub const SUPERVISE_ARG: &str = "__supervise";
/// The uid and gid bubblewrap runs as when sandbox-host is root.
pub const NOBODY: u32 = 65534;
/// The message of a call whose supervisor died.
pub const SUPERVISOR_EXITED: &str = "the sandbox supervisor exited";

/// One request to the supervisor.
#[derive(Debug, Serialize, Deserialize)]
pub struct SupervisorRequest {
    pub id: u64,
    pub op: SupervisorOp,
}

/// What the supervisor is asked to do.
#[derive(Debug, Serialize, Deserialize)]
pub enum SupervisorOp {
    /// Run one command.
    Exec(ExecRequest),
    /// Kill everything the commands left running (the sandbox was released); the reply's
    /// `background` names what was killed.
    KillBackground,
    /// Answer at once (the host's liveness check).
    Ping,
    /// Kill the command of the `Exec` request with this id, if it still runs (its call
    /// was cancelled). Not answered.
    Cancel(u64),
}

/// One reply from the supervisor.
#[derive(Debug, Serialize, Deserialize)]
pub struct SupervisorReply {
    pub id: u64,
    pub result: Result<ExecOutcome, String>,
}

/// The bubblewrap binary, as an absolute path when it is found on `PATH` (bubblewrap runs
/// with an empty environment, so the host's `PATH` is looked up here).
fn bwrap_binary() -> PathBuf {
    let named = std::env::var_os("ANTLER_BWRAP")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("bwrap"));
    if named.components().count() > 1 {
        return named;
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(&named))
        .find(|c| c.is_file())
        .unwrap_or(named)
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Makes the command drop to `nobody` before exec when sandbox-host is root.
fn drop_privileges(cmd: &mut std::process::Command) {
    if !is_root() {
        return;
    }
    // SAFETY: the closure runs between fork and exec and only calls async-signal-safe
    // functions (setgroups, setgid, setuid).
    unsafe {
        cmd.pre_exec(|| {
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(NOBODY) != 0
                || libc::setuid(NOBODY) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The arguments that give the sandbox its minimal read-only root.
fn root_args() -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::new();
    let mut push = |xs: &[&str]| a.extend(xs.iter().map(OsString::from));
    push(&["--ro-bind", "/usr", "/usr"]);
    for top in ["bin", "sbin", "lib", "lib32", "lib64", "libx32"] {
        let host = Path::new("/").join(top);
        match std::fs::read_link(&host) {
            Ok(target) => push(&[
                "--symlink",
                &target.to_string_lossy(),
                &host.to_string_lossy(),
            ]),
            Err(_) if host.is_dir() => push(&[
                "--ro-bind",
                &host.to_string_lossy(),
                &host.to_string_lossy(),
            ]),
            Err(_) => {}
        }
    }
    a
}

/// Whether this bubblewrap has `--disable-userns` and it works here: checked once (its
/// `--help`, then a sandbox started with it).
pub fn userns_lockdown() -> bool {
    static LOCKDOWN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *LOCKDOWN.get_or_init(|| {
        let help = std::process::Command::new(bwrap_binary())
            .arg("--help")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).contains("--disable-userns"))
            .unwrap_or(false);
        help && run_probe(LOCKDOWN_ARGS, &[]).is_ok()
    })
}

/// The arguments of the user-namespace lockdown: a user namespace of the sandbox's own in
/// which no further one can be made.
const LOCKDOWN_ARGS: &[&str] = &["--unshare-user", "--disable-userns"];

/// Lets the child inherit `fds` (cleared close-on-exec between fork and exec).
fn inherit_fds(cmd: &mut std::process::Command, fds: Vec<libc::c_int>) {
    // SAFETY: fcntl in the child between fork and exec (async-signal-safe).
    unsafe {
        cmd.pre_exec(move || {
            for fd in &fds {
                if libc::fcntl(*fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// The arguments that hand the seccomp programs in `files` to bubblewrap.
fn seccomp_flags(files: &[OwnedFd]) -> Vec<OsString> {
    files
        .iter()
        .flat_map(|f| {
            [
                OsString::from("--add-seccomp-fd"),
                OsString::from(f.as_raw_fd().to_string()),
            ]
        })
        .collect()
}

/// Starts `true` in a sandbox shaped as the real ones (the seccomp programs of `seccomp`
/// loaded, `extra` added): `Err` with bubblewrap's complaint.
fn run_probe(extra: &[&str], seccomp: &[OwnedFd]) -> Result<(), String> {
    let mut cmd = std::process::Command::new(bwrap_binary());
    cmd.env_clear()
        .args([
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--as-pid-1",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
        ])
        .args(extra)
        .args(seccomp_flags(seccomp))
        .args(root_args())
        .args(["--", "/usr/bin/true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    inherit_fds(&mut cmd, seccomp.iter().map(|f| f.as_raw_fd()).collect());
    drop_privileges(&mut cmd);
    let out = cmd.output().map_err(|e| format!("cannot run bwrap: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// The cgroup of the sandbox of `map` (its user's, named for its thread directory), made
/// now; `None` without cgroups, or (logged) when it cannot be made.
fn sandbox_cgroup(settings: &SandboxSettings, map: &PathMap) -> Option<SandboxCgroup> {
    let cgroups = settings.cgroups.as_ref()?;
    let slot = map.thread.root.file_name()?.to_string_lossy().into_owned();
    match cgroups.sandbox(&map.user_id, &slot) {
        Ok(cg) => Some(cg),
        Err(e) => {
            tracing::error!(user = %map.user_id, error = %e, "cannot make the sandbox's cgroup; only its rlimits bound it");
            None
        }
    }
}

/// Makes the child join the cgroup whose `cgroup.procs` files are `files` (writing `0`
/// moves the writer), before it drops its privileges and before bubblewrap forks, so
/// nothing in the sandbox starts outside it.
fn join_cgroup(cmd: &mut std::process::Command, files: Vec<libc::c_int>) {
    if files.is_empty() {
        return;
    }
    // SAFETY: write in the child between fork and exec (async-signal-safe), on
    // descriptors the parent keeps open until the spawn returns.
    unsafe {
        cmd.pre_exec(move || {
            for fd in &files {
                if libc::write(*fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// Whether bubblewrap can create its namespaces here, with the seccomp filter loaded:
/// `Ok(what the sandboxes get)` or why not.
pub fn probe() -> Result<String, String> {
    let version = std::process::Command::new(bwrap_binary())
        .arg("--version")
        .output()
        .map_err(|e| format!("cannot run bwrap: {e}"))?;
    let version = String::from_utf8_lossy(&version.stdout)
        .trim()
        .trim_start_matches("bubblewrap ")
        .to_string();
    let seccomp = super::seccomp::program_files().map_err(|e| e.to_string())?;
    run_probe(&[], &seccomp)?;
    let lockdown = if userns_lockdown() {
        "user namespaces locked (--disable-userns)"
    } else {
        "this bubblewrap has no working --disable-userns: the seccomp filter alone denies new user namespaces"
    };
    Ok(format!(
        "{version}: namespaces available; seccomp filter on; {lockdown}"
    ))
}

/// The skills mounts of the sandbox of `map`'s user: the skills root read-only, an empty
/// read-only tmpfs over its `users/`, and only this user's `users/{user}` bound back in,
/// so no other user's skills are there to read (the directory is created when missing,
/// so skills this user makes later appear). When `users/` cannot be made, the root's
/// other entries are bound one by one over a tmpfs instead, so a `users/` made later
/// stays out of sight.
pub fn skills_args(map: &PathMap) -> Vec<OsString> {
    let root = &map.skills_dir;
    if !root.is_dir() {
        return Vec::new();
    }
    let s = |x: &str| OsString::from(x);
    let p = |x: &Path| x.as_os_str().to_os_string();
    let users = root.join(SKILLS_USERS_DIR);
    // No user (a pre-warmed sandbox not bound yet): no user's skills.
    let mine = (!map.user_id.is_empty()).then(|| users.join(&map.user_id));
    if let Some(mine) = &mine {
        if let Err(e) = create_readable_dirs(mine) {
            tracing::debug!(dir = %mine.display(), error = %e, "cannot create the user's skills directory");
        }
    }
    let container = map.skills_container.trim_end_matches('/');
    let container_users = format!("{container}/{SKILLS_USERS_DIR}");
    let mut a: Vec<OsString> = Vec::new();
    if users.is_dir() && !users.is_symlink() {
        a.extend([s("--ro-bind"), p(root), s(container)]);
        a.extend([s("--tmpfs"), s(&container_users)]);
        if let Some(mine) = mine.filter(|m| m.is_dir()) {
            a.extend([
                s("--ro-bind"),
                p(&mine),
                s(&format!("{container_users}/{}", map.user_id)),
            ]);
        }
        a.extend([s("--remount-ro"), s(&container_users)]);
        return a;
    }
    let mut entries: Vec<OsString> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n != SKILLS_USERS_DIR)
        .collect();
    entries.sort();
    a.extend([s("--tmpfs"), s(container)]);
    for name in entries {
        let mut target = OsString::from(format!("{container}/"));
        target.push(&name);
        a.extend([s("--ro-bind-try"), p(&root.join(&name)), target]);
    }
    a.extend([s("--remount-ro"), s(container)]);
    a
}

/// `create_dir_all` with every directory it makes readable and enterable by all (0755):
/// bubblewrap may run as `nobody`.
fn create_readable_dirs(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
}

/// The whole bubblewrap command line of one sandbox.
pub fn bwrap_args(settings: &SandboxSettings, map: &PathMap, supervisor: &Path) -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::new();
    let s = |x: &str| OsString::from(x);
    let p = |x: &Path| x.as_os_str().to_os_string();
    a.extend(["--unshare-all", "--new-session", "--as-pid-1", "--clearenv"].map(s));
    if userns_lockdown() {
        a.extend(LOCKDOWN_ARGS.iter().map(|x| s(x)));
    }
    if settings.network {
        a.push(s("--share-net"));
    }
    let mut env: Vec<(String, String)> = vec![
        (
            "PATH".into(),
            "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin".into(),
        ),
        ("HOME".into(), format!("{VIRTUAL_PATH_PREFIX}/workspace")),
        ("LANG".into(), "C.UTF-8".into()),
        ("TMPDIR".into(), "/tmp".into()),
    ];
    for (k, v) in &settings.environment {
        env.retain(|(x, _)| x != k);
        env.push((k.clone(), v.clone()));
    }
    for (k, v) in env {
        a.extend([s("--setenv"), s(&k), s(&v)]);
    }
    a.extend(root_args());
    let mut etc = vec![
        "/etc/ld.so.cache",
        "/etc/ld.so.conf",
        "/etc/ld.so.conf.d",
        "/etc/alternatives",
        "/etc/ssl",
        "/etc/ca-certificates",
        "/etc/localtime",
    ];
    if settings.network {
        etc.extend([
            "/etc/resolv.conf",
            "/etc/hosts",
            "/etc/nsswitch.conf",
            "/etc/gai.conf",
        ]);
    }
    for e in etc {
        a.extend([s("--ro-bind-try"), s(e), s(e)]);
    }
    a.extend(["--proc", "/proc", "--dev", "/dev"].map(s));
    a.extend([
        s("--size"),
        s(&settings.tmp_size.to_string()),
        s("--tmpfs"),
        s("/tmp"),
    ]);
    let dirs = [
        &map.thread.workspace,
        &map.thread.uploads,
        &map.thread.outputs,
    ];
    for (name, host) in USER_DATA_DIRS.iter().zip(dirs) {
        a.extend([
            s("--bind"),
            p(host),
            s(&format!("{VIRTUAL_PATH_PREFIX}/{name}")),
        ]);
    }
    if map.thread.acp_workspace.is_dir() {
        a.extend([
            s("--ro-bind"),
            p(&map.thread.acp_workspace),
            s(ACP_WORKSPACE_VIRTUAL_PATH),
        ]);
    }
    a.extend(skills_args(map));
    for m in &map.mounts {
        if !m.host_path.exists() {
            tracing::error!(host_path = %m.host_path.display(), "sandbox mount does not exist; skipped");
            continue;
        }
        let flag = if m.read_only { "--ro-bind" } else { "--bind" };
        a.extend([s(flag), p(&m.host_path), s(&m.container_path)]);
    }
    a.extend([s("--ro-bind"), p(supervisor), s(SUPERVISOR_PATH)]);
    a.extend([s("--remount-ro"), s("/")]);
    a.extend([s("--chdir"), s(&format!("{VIRTUAL_PATH_PREFIX}/workspace"))]);
    let l = settings.limits;
    a.extend([
        s("--"),
        s(SUPERVISOR_PATH),
        s(SUPERVISE_ARG),
        s(&l.max_processes.to_string()),
        s(&l.max_file_size.to_string()),
        s(&l.max_memory.to_string()),
        s(&settings.background_lifetime.as_millis().to_string()),
    ]);
    a
}

/// The `"child-pid"` of bubblewrap's `--info-fd` report, once it is complete.
fn parse_child_pid(text: &str) -> Option<i32> {
    let at = text.find("\"child-pid\"")?;
    let value = text[at + "\"child-pid\"".len()..].trim_start_matches([':', ' ', '\t', '\n']);
    let digits: String = value.chars().take_while(char::is_ascii_digit).collect();
    // Digits up to the end of what was written may continue.
    if digits.is_empty() || digits.len() == value.len() {
        return None;
    }
    digits.parse().ok()
}

/// Waits (up to ten seconds) for bubblewrap's `--info-fd` report in `info`, a memory file
/// (a pipe would kill bubblewrap with SIGPIPE mid-setup if sandbox-host died, leaving its
/// child waiting forever), and puts a pidfd of the sandbox's pid 1 in `slot`.
fn read_info(info: std::fs::File, bwrap_pid: u32, slot: &Mutex<Option<OwnedFd>>) {
    use std::os::unix::fs::FileExt;
    let until = std::time::Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 4096];
    while std::time::Instant::now() < until {
        let n = info.read_at(&mut buf, 0).unwrap_or(0);
        if let Some(pid) = parse_child_pid(&String::from_utf8_lossy(&buf[..n])) {
            if let Some(fd) = init_pidfd(pid, bwrap_pid) {
                if let Ok(mut s) = slot.lock() {
                    *s = Some(fd);
                }
            }
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A pidfd of `pid` when it is bubblewrap's child (not a reused pid).
fn init_pidfd(pid: i32, bwrap_pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags; it returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) };
    // The pidfd holds the process now: its parent says whether it is the right one.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let ppid = status
        .lines()
        .find_map(|l| l.strip_prefix("PPid:"))
        .and_then(|v| v.trim().parse::<u32>().ok())?;
    (ppid == bwrap_pid).then_some(fd)
}

/// SIGKILL through a pidfd (the whole namespace dies with its pid 1).
fn kill_pidfd(fd: &OwnedFd) {
    // SAFETY: pidfd_send_signal on a pidfd we own, with no siginfo.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            libc::SIGKILL,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        );
    }
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<ExecOutcome, String>>>>>;

/// The host's handle on one supervisor. Dropping it kills the bubblewrap process.
pub struct Supervisor {
    pid: u32,
    lines: mpsc::UnboundedSender<String>,
    pending: Pending,
    next_id: AtomicU64,
    alive: Arc<AtomicBool>,
    /// Set when the host kills it, so an exit nobody asked for is logged as one.
    killed: Arc<AtomicBool>,
    /// Set by its first answer (the start-up probe's or a call's): its mounts are in place.
    ready: Arc<AtomicBool>,
    /// A pidfd of the sandbox's pid 1, once bubblewrap reported it.
    init: Arc<Mutex<Option<OwnedFd>>>,
    /// A pidfd of bubblewrap.
    outer: Option<Arc<OwnedFd>>,
    tasks: Vec<AbortHandle>,
    /// The cgroup bubblewrap and everything in the sandbox run in (`None`: no cgroups).
    cgroup: Option<SandboxCgroup>,
}

/// The id of the start-up probe (requests count from 1).
const PROBE_ID: u64 = 0;

/// Liveness pings have ids of their own, with this bit set (requests never reach it).
const PING_IDS: u64 = 1 << 63;
/// How often a ready supervisor is pinged.
const PING_EVERY: Duration = Duration::from_secs(1);
/// A ping not answered within this says the supervisor is paused or hung.
const PING_DEADLINE: Duration = Duration::from_secs(1);

/// Pings the supervisor `pid` every [`PING_EVERY`] once it is ready: one that stops
/// answering (paused, hung) is logged once, and again when it answers. Nothing is killed:
/// its calls keep their own deadlines. Ends when the supervisor does.
async fn watch_liveness(
    pid: u32,
    lines: mpsc::UnboundedSender<String>,
    pending: Pending,
    alive: Arc<AtomicBool>,
    ready: Arc<AtomicBool>,
) {
    let mut silent_since: Option<std::time::Instant> = None;
    for n in 0u64.. {
        tokio::time::sleep(PING_EVERY).await;
        if !alive.load(Ordering::SeqCst) {
            return;
        }
        if !ready.load(Ordering::SeqCst) {
            continue;
        }
        let id = PING_IDS | n;
        let (tx, rx) = oneshot::channel();
        if let Ok(mut p) = pending.lock() {
            p.insert(id, tx);
        }
        let Ok(line) = serde_json::to_string(&SupervisorRequest {
            id,
            op: SupervisorOp::Ping,
        }) else {
            return;
        };
        if lines.send(line + "\n").is_err() {
            return;
        }
        let asked = std::time::Instant::now();
        match tokio::time::timeout(PING_DEADLINE, rx).await {
            Ok(Ok(Ok(_))) => {
                if let Some(since) = silent_since.take() {
                    tracing::info!(
                        pid,
                        silent_ms = since.elapsed().as_millis() as u64,
                        "sandbox supervisor answers pings again"
                    );
                }
            }
            // Gone: its exit is reported where it is reaped.
            Ok(_) => return,
            Err(_) => {
                if let Ok(mut p) = pending.lock() {
                    p.remove(&id);
                }
                if silent_since.is_none() {
                    silent_since = Some(asked);
                    tracing::warn!(pid, deadline_ms = PING_DEADLINE.as_millis() as u64, "sandbox supervisor did not answer a ping within the deadline (paused or hung); its sandbox's calls wait");
                }
            }
        }
    }
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("pid", &self.pid)
            .field("alive", &self.is_alive())
            .finish()
    }
}

fn fail_all(pending: &Pending, why: &str) {
    let drained: Vec<_> = match pending.lock() {
        Ok(mut p) => p.drain().map(|(_, tx)| tx).collect(),
        Err(_) => Vec::new(),
    };
    for tx in drained {
        let _ = tx.send(Err(why.to_string()));
    }
}

/// Whether every directory above `path` lets others through (the sandbox's user must
/// reach the supervisor binary bubblewrap binds in).
fn reachable_by_others(path: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.ancestors()
        .skip(1)
        .all(|d| std::fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o001 != 0))
}

/// The binary bubblewrap runs as the supervisor: this executable, or, when it sits under
/// a directory others cannot enter (a checkout in a 0700 directory), a copy of it in a
/// directory of this user's under the temporary directory, mode 0755, checked to be
/// this user's and writable by nobody else, named by the executable's content so runs
/// share it. Made once per process.
fn supervisor_binary() -> std::io::Result<std::path::PathBuf> {
    static BINARY: std::sync::OnceLock<Result<std::path::PathBuf, String>> =
        std::sync::OnceLock::new();
    BINARY
        .get_or_init(|| copy_if_unreachable().map_err(|e| e.to_string()))
        .clone()
        .map_err(std::io::Error::other)
}

fn copy_if_unreachable() -> std::io::Result<std::path::PathBuf> {
    use sha2::Digest;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let exe = std::env::current_exe()?;
    if reachable_by_others(&exe) {
        return Ok(exe);
    }
    let bytes = std::fs::read(&exe)?;
    let name = format!(
        "sandbox-host-{}",
        &hex::encode(sha2::Sha256::digest(&bytes))[..16]
    );
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let dir = std::env::temp_dir().join(format!("antler-supervisor-{uid}"));
    match std::fs::create_dir(&dir) {
        Ok(()) => std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(&dir)?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return Err(std::io::Error::other(format!(
            "{} is not a directory of this user's that only it may write; the sandbox supervisor cannot be placed where the sandbox's user reaches it",
            dir.display()
        )));
    }
    let target = dir.join(name);
    if !target.is_file() {
        let tmp = dir.join(format!(".{}.tmp", std::process::id()));
        std::fs::write(&tmp, &bytes)?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))?;
        std::fs::rename(&tmp, &target)?;
    }
    Ok(target)
}

impl Supervisor {
    /// Starts bubblewrap with the supervisor inside. Must run inside a tokio runtime.
    pub fn spawn(settings: &SandboxSettings, map: &PathMap) -> std::io::Result<Supervisor> {
        let exe = supervisor_binary()?;
        // SAFETY: memfd_create takes a C string and flags; it returns a descriptor or -1.
        let memfd = unsafe { libc::memfd_create(c"bwrap-info".as_ptr(), libc::MFD_CLOEXEC) };
        if memfd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a new descriptor that nothing else owns.
        let info_file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(memfd) });
        let info_fd = info_file.as_raw_fd();
        // Dropped (closed here) once bubblewrap has its own copies.
        let seccomp_files = super::seccomp::program_files().map_err(std::io::Error::other)?;
        let mut std_cmd = std::process::Command::new(bwrap_binary());
        std_cmd
            .env_clear()
            .arg("--info-fd")
            .arg(info_fd.to_string())
            .args(seccomp_flags(&seccomp_files))
            .args(bwrap_args(settings, map, &exe));
        // Bubblewrap inherits the info file and the seccomp programs.
        let mut inherited = vec![info_fd];
        inherited.extend(seccomp_files.iter().map(|f| f.as_raw_fd()));
        inherit_fds(&mut std_cmd, inherited);
        let cgroup = sandbox_cgroup(settings, map);
        let join_files = match &cgroup {
            Some(cg) => cg.join_files()?,
            None => Vec::new(),
        };
        join_cgroup(
            &mut std_cmd,
            join_files.iter().map(|f| f.as_raw_fd()).collect(),
        );
        drop_privileges(&mut std_cmd);
        let mut cmd = tokio::process::Command::from(std_cmd);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Killed by `kill` (the sandbox's pid 1 first), not on drop.
            .kill_on_drop(false);
        let mut child = cmd.spawn()?;
        drop(seccomp_files);
        drop(join_files);
        let pid = child.id().unwrap_or(0);
        // SAFETY: pidfd_open of our own child, not yet reaped.
        let outer = match unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) } {
            // SAFETY: a new descriptor that nothing else owns.
            fd if fd >= 0 => Some(Arc::new(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })),
            _ => None,
        };
        let init: Arc<Mutex<Option<OwnedFd>>> = Arc::default();
        {
            let init = init.clone();
            let _ = std::thread::Builder::new()
                .name("bwrap-info".into())
                .stack_size(64 * 1024)
                .spawn(move || read_info(info_file, pid, &init));
        }
        let (Some(mut stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(std::io::Error::other("the supervisor's pipes are missing"));
        };
        let alive = Arc::new(AtomicBool::new(true));
        let pending: Pending = Arc::default();
        let (tx, mut rx) = mpsc::unbounded_channel::<String>();
        let writer = tokio::spawn(async move {
            while let Some(line) = rx.recv().await {
                if stdin.write_all(line.as_bytes()).await.is_err() || stdin.flush().await.is_err() {
                    break;
                }
            }
        });
        // Set by the first answer: the supervisor only runs once bubblewrap finished its
        // mounts, so the directories behind them may be renamed (a pre-warmed sandbox being
        // bound), and its pings may start. Any answer counts, not only the start-up
        // probe's: a call can be answered first (the supervisor runs each in a thread of
        // its own), and a supervisor paused right after must still be pinged.
        let ready = Arc::new(AtomicBool::new(false));
        let reader = {
            let pending = pending.clone();
            let alive = alive.clone();
            let ready = ready.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stdout).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let Ok(reply) = serde_json::from_str::<SupervisorReply>(&line) else {
                        tracing::warn!(%line, "unreadable line from a sandbox supervisor");
                        continue;
                    };
                    ready.store(true, Ordering::SeqCst);
                    let tx = pending.lock().ok().and_then(|mut p| p.remove(&reply.id));
                    if let Some(tx) = tx {
                        let _ = tx.send(reply.result);
                    }
                }
                alive.store(false, Ordering::SeqCst);
                fail_all(&pending, SUPERVISOR_EXITED);
            })
        };
        let errors = tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::warn!(pid, %line, "sandbox supervisor");
            }
        });
        let killed = Arc::new(AtomicBool::new(false));
        let waiter = {
            let alive = alive.clone();
            let killed = killed.clone();
            tokio::spawn(async move {
                let status = child.wait().await;
                alive.store(false, Ordering::SeqCst);
                if killed.load(Ordering::SeqCst) {
                    tracing::debug!(pid, ?status, "sandbox supervisor exited");
                } else {
                    // Killed from outside or crashed: its calls fail, and the sandbox's
                    // next call starts a new one.
                    tracing::warn!(pid, ?status, "sandbox supervisor exited unexpectedly");
                }
            })
        };
        // Probe with `true`, so that a sandbox nobody calls yet (pre-warmed) learns it is
        // ready: its answer is only awaited as the first answer (above).
        let probe = SupervisorRequest {
            id: PROBE_ID,
            op: SupervisorOp::Exec(ExecRequest {
                command: "true".into(),
                cwd: None,
                env: Vec::new(),
                clear_env: true,
                timeout_ms: 30_000,
                max_capture: 1024,
            }),
        };
        if let Ok(line) = serde_json::to_string(&probe) {
            let _ = tx.send(line + "\n");
        }
        let liveness = tokio::spawn(watch_liveness(
            pid,
            tx.clone(),
            pending.clone(),
            alive.clone(),
            ready.clone(),
        ));
        Ok(Supervisor {
            pid,
            cgroup,
            lines: tx,
            pending,
            next_id: AtomicU64::new(1),
            alive,
            killed,
            ready,
            init,
            outer,
            tasks: vec![
                writer.abort_handle(),
                reader.abort_handle(),
                errors.abort_handle(),
                waiter.abort_handle(),
                liveness.abort_handle(),
            ],
        })
    }

    /// The cgroup the sandbox runs in, when cgroups bound it.
    pub fn cgroup(&self) -> Option<&SandboxCgroup> {
        self.cgroup.as_ref()
    }

    /// The bubblewrap process's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// The flag set at its first answer (the start-up probe's or a call's).
    pub fn ready_flag(&self) -> Arc<AtomicBool> {
        self.ready.clone()
    }

    /// Alive, and it answered once (its mounts are in place).
    pub fn is_ready(&self) -> bool {
        self.is_alive() && self.ready.load(Ordering::SeqCst)
    }

    /// Runs one command inside; `Err` when the supervisor is gone.
    /// Dropping the future (its caller cancelled the call) has the supervisor kill the
    /// command's whole session.
    pub async fn exec(&self, exec: ExecRequest) -> Result<ExecOutcome, String> {
        let grace = Duration::from_millis(exec.timeout_ms).saturating_add(Duration::from_secs(10));
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut cancel = CancelOnDrop {
            id,
            lines: Some(self.lines.clone()),
        };
        let outcome = self.request_as(id, SupervisorOp::Exec(exec), grace).await;
        cancel.lines = None;
        outcome
    }

    /// Kills what the commands left running.
    pub async fn kill_background(&self) {
        if let Err(e) = self
            .request(SupervisorOp::KillBackground, Duration::from_secs(10))
            .await
        {
            tracing::warn!(pid = self.pid, error = %e, "cannot kill a released sandbox's background processes");
        }
    }

    /// SIGKILLs the sandbox's pid 1 (and so its whole namespace), then bubblewrap. Killing
    /// bubblewrap first would strand its child mid-setup, a namespace init that nothing
    /// kills: until bubblewrap has reported the child, a thread waits for the report (at
    /// most two seconds) before it kills both.
    pub fn kill(&self) {
        self.killed.store(true, Ordering::SeqCst);
        let kill_init = |init: &Mutex<Option<OwnedFd>>| -> bool {
            match init.lock() {
                Ok(slot) => slot.as_ref().map(kill_pidfd).is_some(),
                Err(_) => false,
            }
        };
        let kill_outer = |outer: &Option<Arc<OwnedFd>>| {
            if let Some(fd) = outer {
                kill_pidfd(fd);
            }
        };
        if kill_init(&self.init) || !self.is_alive() {
            kill_outer(&self.outer);
            return;
        }
        let (init, outer) = (self.init.clone(), self.outer.clone());
        let spawned = std::thread::Builder::new()
            .name("sandbox-kill".into())
            .stack_size(64 * 1024)
            .spawn(move || {
                let until = std::time::Instant::now() + Duration::from_secs(2);
                while !kill_init(&init) && std::time::Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(10));
                }
                kill_outer(&outer);
            });
        if spawned.is_err() {
            kill_outer(&self.outer);
        }
    }

    async fn request(&self, op: SupervisorOp, grace: Duration) -> Result<ExecOutcome, String> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.request_as(id, op, grace).await
    }

    async fn request_as(
        &self,
        id: u64,
        op: SupervisorOp,
        grace: Duration,
    ) -> Result<ExecOutcome, String> {
        let line =
            serde_json::to_string(&SupervisorRequest { id, op }).map_err(|e| e.to_string())? + "\n";
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .map_err(|_| SUPERVISOR_EXITED.to_string())?
            .insert(id, tx);
        if !self.is_alive() || self.lines.send(line).is_err() {
            self.pending.lock().ok().and_then(|mut p| p.remove(&id));
            return Err(SUPERVISOR_EXITED.to_string());
        }
        match tokio::time::timeout(grace, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(SUPERVISOR_EXITED.to_string()),
            Err(_) => {
                self.pending.lock().ok().and_then(|mut p| p.remove(&id));
                Err("the sandbox supervisor did not answer in time".to_string())
            }
        }
    }
}

/// Asks the supervisor to kill command `id` when its call's future is dropped before the
/// reply (`lines` taken once it came).
struct CancelOnDrop {
    id: u64,
    lines: Option<mpsc::UnboundedSender<String>>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(lines) = self.lines.take() else {
            return;
        };
        let request = SupervisorRequest {
            id: self.id,
            op: SupervisorOp::Cancel(self.id),
        };
        if let Ok(line) = serde_json::to_string(&request) {
            let _ = lines.send(line + "\n");
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        // The sandbox's pid 1 first (the kernel then kills its namespace), then bubblewrap.
        self.kill();
        for t in &self.tasks {
            t.abort();
        }
        fail_all(&self.pending, SUPERVISOR_EXITED);
    }
}

/// Kills what a previous sandbox-host over `base_dir` left behind when it was killed while a
/// sandbox was being set up (bubblewrap's child, orphaned with parent 1 before it ran the
/// supervisor). Called once at start, before any sandbox of this host exists.
pub fn kill_strays(base_dir: &Path) {
    let marker = base_dir.as_os_str().as_encoded_bytes();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        let orphan = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .and_then(|(_, r)| r.split_whitespace().nth(1).map(|p| p == "1"))
            })
            .unwrap_or(false);
        if !orphan {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let ours = cmdline.split(|b| *b == 0).any(|a| a.starts_with(marker))
            && cmdline
                .split(|b| *b == 0)
                .any(|a| a == SUPERVISE_ARG.as_bytes());
        if ours {
            tracing::warn!(
                pid,
                "killing a sandbox process a previous sandbox-host left behind"
            );
            // SAFETY: kill has no memory-safety preconditions.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths::ThreadPaths;

    fn args_of(skills: &Path, user: &str) -> Vec<String> {
        let settings = SandboxSettings {
            skills_dir: skills.to_path_buf(),
            ..SandboxSettings::default()
        };
        let map = PathMap::new(ThreadPaths::new(Path::new("/B"), user, "t"), &settings);
        skills_args(&map)
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn only_the_users_own_skills_are_bound_over_an_empty_users_tmpfs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("skills");
        std::fs::create_dir_all(root.join("public/a")).expect("public");
        std::fs::create_dir_all(root.join("users/bob")).expect("bob");
        let r = root.display().to_string();
        assert_eq!(
            args_of(&root, "alice"),
            [
                "--ro-bind".to_string(),
                r.clone(),
                "/mnt/skills".into(),
                "--tmpfs".into(),
                "/mnt/skills/users".into(),
                "--ro-bind".into(),
                format!("{r}/users/alice"),
                "/mnt/skills/users/alice".into(),
                "--remount-ro".into(),
                "/mnt/skills/users".into(),
            ]
        );
        assert!(root.join("users/alice").is_dir(), "made for the mount");
        // Not bound to a user yet (pre-warmed): no user's skills.
        assert_eq!(
            args_of(&root, "")[3..],
            [
                "--tmpfs",
                "/mnt/skills/users",
                "--remount-ro",
                "/mnt/skills/users"
            ]
        );
        assert!(args_of(&dir.path().join("none"), "alice").is_empty());
    }

    #[test]
    fn without_a_users_directory_the_other_entries_are_bound_one_by_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("skills");
        std::fs::create_dir_all(root.join("public")).expect("public");
        std::fs::create_dir_all(root.join("custom")).expect("custom");
        // `users` cannot be made a directory: it is a file.
        std::fs::write(root.join("users"), "").expect("users file");
        let r = root.display().to_string();
        assert_eq!(
            args_of(&root, "alice"),
            [
                "--tmpfs".to_string(),
                "/mnt/skills".into(),
                "--ro-bind-try".into(),
                format!("{r}/custom"),
                "/mnt/skills/custom".into(),
                "--ro-bind-try".into(),
                format!("{r}/public"),
                "/mnt/skills/public".into(),
                "--remount-ro".into(),
                "/mnt/skills".into(),
            ]
        );
    }
}
