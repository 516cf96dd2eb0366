//! The disk faults of a chaos schedule: the runs database made read-only for a while, and
//! a sandbox-host's volume filled up for a while. Both need root: the database's file is
//! made immutable (`chattr +i`, which holds even for root and for a file the lead already
//! has open; a read-only remount cannot be made while the lead has the file open for
//! writing), and each sandbox-host's base directory is a small tmpfs of its own, mounted in
//! a mount namespace private to this command (and the cluster it starts), so filling it
//! fills nothing else. The namespace goes with this command: a kept directory keeps the
//! logs and the database, not the threads' files.

use std::ffi::CString;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::Context as _;

/// The size of each sandbox volume.
const VOLUME_BYTES: u64 = 256 << 20;
/// The file that fills a volume.
pub const FILLER: &str = ".chaos-filler";

/// Whether this process may inject disk faults (root).
pub fn available() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Moves this process into a mount namespace of its own, where mounts stay private. Must
/// run before any thread starts.
pub fn private_mounts() -> anyhow::Result<()> {
    // SAFETY: unshare and mount on no pointers but valid C strings; single-threaded here.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            anyhow::bail!(
                "cannot make a mount namespace: {}",
                std::io::Error::last_os_error()
            );
        }
        let root = CString::new("/")?;
        if libc::mount(
            std::ptr::null(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            anyhow::bail!(
                "cannot make the mounts private: {}",
                std::io::Error::last_os_error()
            );
        }
    }
    Ok(())
}

/// Mounts a small tmpfs at `dir` (created if absent): the volume of one sandbox-host.
pub fn mount_volume(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let target = CString::new(dir.as_os_str().as_encoded_bytes())?;
    let fstype = CString::new("tmpfs")?;
    let options = CString::new(format!("size={VOLUME_BYTES},mode=0755"))?;
    // SAFETY: valid C strings; the data argument is tmpfs's option string.
    let rc = unsafe {
        libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            options.as_ptr().cast(),
        )
    };
    if rc != 0 {
        anyhow::bail!(
            "cannot mount a tmpfs at {}: {}",
            dir.display(),
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// Fills the volume under `dir` to its last bytes with one file; returns its size.
pub fn fill(dir: &Path) -> anyhow::Result<u64> {
    let free = free_bytes(dir)?;
    if free < 4096 {
        anyhow::bail!(
            "{} has no room left already (another fault filled it)",
            dir.display()
        );
    }
    let path = dir.join(FILLER);
    let file = std::fs::File::create(&path)?;
    let mut size = free;
    while size > 0 {
        // SAFETY: a valid open descriptor.
        let rc = unsafe {
            libc::fallocate(
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
                0,
                size as libc::off_t,
            )
        };
        if rc == 0 {
            return Ok(size);
        }
        size -= size.div_ceil(64).max(4096).min(size);
    }
    anyhow::bail!("cannot fill {}", dir.display())
}

/// Frees what [`fill`] took.
pub fn unfill(dir: &Path) {
    let _ = std::fs::remove_file(dir.join(FILLER));
}

fn free_bytes(dir: &Path) -> anyhow::Result<u64> {
    let (free, _) = antler_protocol::sys::volume_bytes(dir)
        .map_err(|e| anyhow::anyhow!("statvfs {}: {e}", dir.display()))?;
    Ok(free)
}

/// Makes the runs database read-only (`on`) or writable again: the database file and its
/// write-ahead log or journal. Not the shared-memory index (`-shm`): it is mapped, and a
/// write through the mapping of an immutable file is a SIGBUS, not an error SQLite could
/// answer; a read-only volume keeps its page cache writable.
pub fn database_read_only(runtime: &Path, on: bool) -> anyhow::Result<()> {
    let db = runtime.join(crate::lead::CHECKPOINT_FILE);
    let mut files = vec![db.clone()];
    for suffix in ["-journal", "-wal"] {
        let mut p = db.clone().into_os_string();
        p.push(suffix);
        let p = std::path::PathBuf::from(p);
        if p.exists() {
            files.push(p);
        }
    }
    let out = Command::new("chattr")
        .arg(if on { "+i" } else { "-i" })
        .args(&files)
        .stdin(Stdio::null())
        .output()
        .context("cannot run chattr (e2fsprogs)")?;
    if !out.status.success() {
        anyhow::bail!(
            "chattr {} on the runs database: {}",
            if on { "+i" } else { "-i" },
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}
