//! Facts about the machine every process reads the same way: the wall clock in Unix
//! milliseconds, how full a filesystem is, and a process's resident memory.

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
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_is_read() {
        assert!(unix_ms() > 1_700_000_000_000);
        let dir = tempfile::tempdir().unwrap();
        let (free, total) = volume_bytes(dir.path()).unwrap();
        assert!(total > 0 && free <= total);
        assert!(volume_bytes(Path::new("/nonexistent/antler")).is_err());
        assert!(rss_kib(std::process::id()) > 0);
        assert_eq!(rss_kib(u32::MAX), 0);
    }
}
