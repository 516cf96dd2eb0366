//! A throwaway PostgreSQL cluster (Debian's `initdb` and `postgres`, as the `postgres` user
//! when this command runs as root, since PostgreSQL refuses root) in a directory of its own,
//! `/tmp/antler-chaos-pg-<pid>`, listening on a free port of 127.0.0.1. It never outlives
//! this command: [`Throwaway::stop`] (also on drop) shuts it down and removes its
//! directory, and the postmaster carries `PR_SET_PDEATHSIG`, so a command killed outright
//! takes it along (its directory is removed by the next command that starts one).

use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;

/// The clusters' directories: `/tmp/antler-chaos-pg-<pid of the command>`.
const DIR_PREFIX: &str = "antler-chaos-pg-";

/// A running throwaway cluster; stopped and removed when dropped.
pub struct Throwaway {
    pub port: u16,
    pub dir: PathBuf,
    postmaster: Option<Child>,
}

impl Throwaway {
    /// `initdb`, then the postmaster; returns once it accepts connections. Call it from a
    /// thread that lives as long as the command (the parent-death signal follows the thread
    /// that forked).
    pub fn start() -> anyhow::Result<Throwaway> {
        let bin = bin_dir()?;
        let user = server_user()?;
        let dir = make_dir()?;
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))?;
        }
        let data = dir.join("data");
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "-A", "trust", "--no-sync"])
            .args(["-E", "UTF8", "--locale=C"])
            .current_dir(&dir)
            .stdin(Stdio::null());
        as_server_user(&mut initdb, user);
        let out = initdb.output().context("cannot run initdb")?;
        if !out.status.success() {
            let _ = std::fs::remove_dir_all(&dir);
            anyhow::bail!("initdb failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let log = std::fs::File::create(dir.join("postgres.log"))?;
        let mut postgres = Command::new(bin.join("postgres"));
        postgres
            .arg("-D")
            .arg(&data)
            .arg("-k")
            .arg(&dir)
            .args(["-p", &port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            // A commit is not flushed before it is acknowledged (as the SQLite store's WAL
            // with synchronous=NORMAL): what a lead wrote survives a lead's death, which is
            // what the schedule kills, not the database's.
            .args(["-c", "synchronous_commit=off"])
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        as_server_user(&mut postgres, user);
        // SAFETY: prctl is async-signal-safe; the closure only calls it. It runs after the
        // change of user, which would otherwise clear the parent-death signal.
        unsafe {
            postgres.pre_exec(|| {
                // SIGQUIT: the postmaster's immediate shutdown (its children go with it).
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGQUIT) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = postgres.spawn().context("cannot start postgres")?;
        let mut server = Throwaway {
            port,
            dir,
            postmaster: Some(child),
        };
        server.wait_ready(&data)?;
        Ok(server)
    }

    /// Ready when postmaster.pid's status line says so (what `pg_ctl -w` waits for).
    fn wait_ready(&mut self, data: &Path) -> anyhow::Result<()> {
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            let status = std::fs::read_to_string(data.join("postmaster.pid")).unwrap_or_default();
            if status.lines().nth(7).map(str::trim) == Some("ready") {
                return Ok(());
            }
            let log = || std::fs::read_to_string(self.dir.join("postgres.log")).unwrap_or_default();
            let exited = self
                .postmaster
                .as_mut()
                .is_none_or(|c| !matches!(c.try_wait(), Ok(None)));
            if exited || Instant::now() > until {
                let log = log();
                self.stop();
                anyhow::bail!("postgres did not start: {log}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Fast shutdown of the postmaster, awaited (SIGKILL after 30 s), then its directory
    /// removed (its log copied to `keep_log` first, when given).
    pub fn stop_keeping_log(&mut self, keep_log: Option<&Path>) {
        if let Some(mut child) = self.postmaster.take() {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe {
                libc::kill(child.id() as libc::pid_t, libc::SIGINT);
            }
            let until = Instant::now() + Duration::from_secs(30);
            while matches!(child.try_wait(), Ok(None)) {
                if Instant::now() > until {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        if let Some(to) = keep_log {
            let _ = std::fs::copy(self.dir.join("postgres.log"), to);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    pub fn stop(&mut self) {
        self.stop_keeping_log(None);
    }
}

impl Drop for Throwaway {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Debian's PostgreSQL binaries: `ANTLER_CHAOS_PG_BIN`, else the newest
/// `/usr/lib/postgresql/N/bin`.
fn bin_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("ANTLER_CHAOS_PG_BIN") {
        return Ok(dir.into());
    }
    std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|v| Path::new(&format!("/usr/lib/postgresql/{v}/bin/postgres")).exists())
        .max()
        .map(|v| format!("/usr/lib/postgresql/{v}/bin").into())
        .context(
            "--mode multi-lead needs PostgreSQL: `apt-get install postgresql-15` (scripts/chaos.sh does this), \
             ANTLER_CHAOS_PG_BIN naming the directory of initdb and postgres, or --pg-dsn",
        )
}

/// The `postgres` user's ids when this command runs as root, else `None`: the cluster
/// runs as this command's own user.
fn server_user() -> anyhow::Result<Option<(u32, u32)>> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    let name = CString::new("postgres")?;
    // SAFETY: getpwnam with a valid C string; the entry is read at once, before any other
    // passwd call (this command makes none meanwhile).
    let entry = unsafe { libc::getpwnam(name.as_ptr()) };
    if entry.is_null() {
        anyhow::bail!(
            "running as root needs the `postgres` user (Debian's postgresql package makes it)"
        );
    }
    // SAFETY: non-null, checked above.
    Ok(Some(unsafe { ((*entry).pw_uid, (*entry).pw_gid) }))
}

fn as_server_user(command: &mut Command, user: Option<(u32, u32)>) {
    if let Some((uid, gid)) = user {
        command.uid(uid).gid(gid);
    }
}

/// The cluster's directory, after removing those of commands that have exited without
/// removing theirs.
fn make_dir() -> anyhow::Result<PathBuf> {
    let tmp = Path::new("/tmp");
    for entry in std::fs::read_dir(tmp).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let pid = name
            .to_str()
            .and_then(|n| n.strip_prefix(DIR_PREFIX))
            .and_then(|n| n.parse::<u32>().ok());
        if let Some(pid) = pid {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    let dir = tmp.join(format!("{DIR_PREFIX}{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir)?;
    Ok(dir)
}
