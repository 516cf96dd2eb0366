//! Facts about the machine every process reads the same way: the wall clock in Unix
//! milliseconds, how full a filesystem is, a process's resident memory and whether it still
//! runs, and the host variables a spawned tool process inherits; and the heap trimmer
//! every long-lived process runs.

use std::path::Path;

/// Now, in Unix milliseconds (0 if the clock is before 1970).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The space of the filesystem under a directory: (free to unprivileged writers, total),
/// in bytes.
pub fn volume_bytes(dir: &Path) -> std::io::Result<(u64, u64)> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: statvfs is plain old data; all zeroes is a valid value.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `s` a valid out-pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let block = s.f_frsize as u64;
    Ok((s.f_bavail as u64 * block, s.f_blocks as u64 * block))
}

/// A process's resident memory in KiB (`VmRSS`); 0 when it is gone.
pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, &["VmRSS:"])
}

/// The part of a process's resident memory that it allocated (`RssAnon` + `RssShmem`:
/// heap, stacks, shared mappings), in KiB: what a leak grows. The rest of `VmRSS` is its
/// files' pages (the binary's code as it runs, libraries), which the kernel can drop and
/// read again. 0 when it is gone.
pub fn anon_rss_kib(pid: u32) -> u64 {
    status_kib(pid, &["RssAnon:", "RssShmem:"])
}

fn status_kib(pid: u32, fields: &[&str]) -> u64 {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return 0;
    };
    status
        .lines()
        .filter_map(|l| {
            let (name, value) = l.split_once(char::is_whitespace)?;
            fields
                .contains(&name)
                .then(|| {
                    value
                        .trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .ok()
                })
                .flatten()
        })
        .sum()
}

/// How often [`start_heap_trimmer`] hands free heap memory back.
pub const HEAP_TRIM_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// Arenas glibc's allocator may make (its default is eight per core).
pub const HEAP_ARENAS: i32 = 2;

/// Keeps a long-lived process's resident memory near what it holds (once per process):
/// glibc's allocator keeps what a burst of work freed in per-thread arenas, one more for
/// each thread that allocates while the others are busy (every blocking-pool thread a
/// database read runs on), so resident memory stays at its high-water mark however little
/// is held. The arenas are capped at [`HEAP_ARENAS`], and a thread of its own hands the
/// free pages of every arena back every [`HEAP_TRIM_EVERY`] (`malloc_trim`), so no
/// actor's thread waits on the arenas' locks. Elsewhere than glibc, nothing.
pub fn start_heap_trimmer() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static STARTED: std::sync::Once = std::sync::Once::new();
        STARTED.call_once(|| {
            // SAFETY: mallopt only sets an allocator parameter; new arenas obey it.
            unsafe {
                libc::mallopt(libc::M_ARENA_MAX, HEAP_ARENAS);
            }
            let spawned = std::thread::Builder::new()
                .name("antler-heap-trim".into())
                .spawn(|| loop {
                    std::thread::sleep(HEAP_TRIM_EVERY);
                    trim_heap();
                });
            if let Err(e) = spawned {
                tracing::warn!("cannot start the heap trimmer: {e}");
            }
        });
    }
}

/// Hands the free pages of every heap arena back to the system now (glibc's
/// `malloc_trim`); `false` where the allocator has no such call.
pub fn trim_heap() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim only walks the allocator's own free lists.
        unsafe {
            libc::malloc_trim(0);
        }
        true
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Whether process `pid` still runs: a zombie waiting for its parent has exited.
pub fn process_runs(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| !matches!(state, 'Z' | 'X')),
        Err(_) => false,
    }
}

/// The host variables a spawned MCP server or ACP agent inherits: the MCP SDKs'
/// `DEFAULT_INHERITED_ENV_VARS` on POSIX (Python's `get_default_environment`, TypeScript's
/// `getDefaultEnvironment`), as DeerFlow passes them. Everything else (model keys, the
/// cluster token) stays with the host.
pub const INHERITED_ENV_VARS: &[&str] = &["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"];

/// The values of [`INHERITED_ENV_VARS`] in `lookup` that are set; like the SDKs, a value
/// starting with `()` (an exported shell function) is skipped.
pub fn default_environment(lookup: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    INHERITED_ENV_VARS
        .iter()
        .filter_map(|k| lookup(k).map(|v| (k.to_string(), v)))
        .filter(|(_, v)| !v.starts_with("()"))
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_is_read() {
        assert!(unix_ms() > 1_700_000_000_000);
        let me = std::process::id();
        let (rss, anon) = (rss_kib(me), anon_rss_kib(me));
        assert!(anon > 0 && anon <= rss, "{anon} of {rss}");
        assert_eq!(rss_kib(u32::MAX), 0);
        let dir = tempfile::tempdir().unwrap();
        let (free, total) = volume_bytes(dir.path()).unwrap();
        assert!(total > 0 && free <= total);
        assert!(volume_bytes(Path::new("/nonexistent/antler")).is_err());
        assert!(rss_kib(std::process::id()) > 0);
        assert_eq!(rss_kib(u32::MAX), 0);
        assert!(process_runs(std::process::id()));
        assert!(!process_runs(u32::MAX));
    }
}
