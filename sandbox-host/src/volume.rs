//! The sandboxes' volume: how full the filesystem under the base directory is (every
//! thread's files and every sandbox's writes land there), for the pool's status, and the
//! warning an operator gets when it fills up (a write in a sandbox then fails with "No
//! space left on device") and the note when it has room again.

use std::path::Path;

use antler_protocol::messages::VolumeStatus;

/// Below this much free space the volume counts as full: 1% of it, at least 16 MiB.
pub fn full_below(total_bytes: u64) -> u64 {
    (total_bytes / 100).max(16 << 20)
}

/// The filesystem under `dir` now; `None` when it cannot be read.
pub fn status(dir: &Path) -> Option<VolumeStatus> {
    let (free_bytes, total_bytes) = antler_protocol::sys::volume_bytes(dir).ok()?;
    Some(VolumeStatus {
        free_bytes,
        total_bytes,
        full: free_bytes < full_below(total_bytes),
    })
}

/// Remembers whether the volume was full, to log each change once.
#[derive(Debug, Default)]
pub struct Watch {
    full: bool,
}

impl Watch {
    /// Looks at the volume under `dir`: a warning when it has just filled up, a note when
    /// it has room again.
    pub fn check(&mut self, dir: &Path) {
        let Some(v) = status(dir) else { return };
        if v.full && !self.full {
            tracing::warn!(
                base_dir = %dir.display(),
                free_bytes = v.free_bytes,
                total_bytes = v.total_bytes,
                "sandbox volume is full: writes in sandboxes fail with \"No space left on device\""
            );
        } else if !v.full && self.full {
            tracing::info!(
                base_dir = %dir.display(),
                free_bytes = v.free_bytes,
                "sandbox volume has room again"
            );
        }
        self.full = v.full;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_volume_of_a_directory_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let v = status(dir.path()).unwrap();
        assert!(v.total_bytes > 0 && v.free_bytes <= v.total_bytes, "{v:?}");
        assert!(status(Path::new("/nonexistent/antler")).is_none());
        assert_eq!(full_below(100 << 30), 1 << 30);
        assert_eq!(full_below(100 << 20), 16 << 20);
    }
}
