//! The disk quota as a filesystem limit: each user's directory (`{base}/users/{user}`,
//! every thread of the user) is a sized ext4 filesystem of its own, a sparse image
//! `{base}/volumes/{user}.ext4` loop-mounted over it (`nosuid`, `nodev`), so a write past
//! the quota fails inside the sandbox with "No space left on device" and other users'
//! room is untouched. Images persist: they are mounted again at start (threads come back
//! after a restart) and unmounted at shutdown. Needs root, `mkfs.ext4` and loop devices;
//! where these are missing the quota is only reported, and the host says why.

use std::{
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    process::Command,
    sync::Mutex,
};

use crate::paths::{sandbox_owner, PRIVATE_DIR_MODE};

/// Why the quota cannot be enforced here.
#[derive(Debug, Clone, thiserror::Error)]
pub enum VolumeError {
    #[error("sandbox-host is not root (loop mounts need root)")]
    NotRoot,
    #[error("{0} is missing")]
    Missing(String),
    #[error("cannot make {path}: {message}")]
    Io { path: String, message: String },
    #[error("{command} failed: {message}")]
    Command { command: String, message: String },
}

fn io_error(path: &Path, e: impl std::fmt::Display) -> VolumeError {
    VolumeError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

fn run(cmd: &mut Command) -> Result<(), VolumeError> {
    let shown = format!("{cmd:?}");
    let out = cmd.output().map_err(|e| VolumeError::Command {
        command: shown.clone(),
        message: e.to_string(),
    })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(VolumeError::Command {
            command: shown,
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

fn find_program(name: &str) -> Option<PathBuf> {
    ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// Whether `dir` is a mount point (on another device than its parent).
fn is_mount_point(dir: &Path) -> bool {
    let (Ok(d), Some(Ok(p))) = (
        std::fs::symlink_metadata(dir),
        dir.parent().map(std::fs::metadata),
    ) else {
        return false;
    };
    d.is_dir() && d.dev() != p.dev()
}

/// The per-user filesystems of one host.
#[derive(Debug)]
pub struct UserVolumes {
    /// `{base}/users`.
    users: PathBuf,
    /// `{base}/volumes`: the images.
    images: PathBuf,
    /// Each image's size, bytes.
    size: u64,
    mkfs: PathBuf,
    mount: PathBuf,
    umount: PathBuf,
    /// The users whose filesystem this process mounted (unmounted at shutdown).
    mounted: Mutex<Vec<String>>,
}

impl UserVolumes {
    /// Checks that filesystems can be made and mounted here, then mounts every image a
    /// previous run made.
    pub fn start(base_dir: &Path, size: u64) -> Result<UserVolumes, VolumeError> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err(VolumeError::NotRoot);
        }
        let program = |n: &str| find_program(n).ok_or_else(|| VolumeError::Missing(n.into()));
        if !Path::new("/dev/loop-control").exists() {
            return Err(VolumeError::Missing("/dev/loop-control".into()));
        }
        let volumes = UserVolumes {
            users: base_dir.join("users"),
            images: base_dir.join("volumes"),
            size,
            mkfs: program("mkfs.ext4")?,
            mount: program("mount")?,
            umount: program("umount")?,
            mounted: Mutex::default(),
        };
        std::fs::create_dir_all(&volumes.images).map_err(|e| io_error(&volumes.images, e))?;
        std::fs::set_permissions(
            &volumes.images,
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .map_err(|e| io_error(&volumes.images, e))?;
        let mut users: Vec<String> = std::fs::read_dir(&volumes.images)
            .map_err(|e| io_error(&volumes.images, e))?
            .flatten()
            .filter_map(|e| {
                e.file_name()
                    .to_str()?
                    .strip_suffix(".ext4")
                    .map(str::to_string)
            })
            .collect();
        users.sort();
        for user in users {
            if let Err(e) = volumes.ensure(&user) {
                tracing::error!(%user, error = %e, "cannot mount the user's filesystem");
            }
        }
        Ok(volumes)
    }

    /// What the status says.
    pub fn note(&self) -> String {
        format!(
            "disk quota enforced: a {} MiB ext4 filesystem per user",
            self.size >> 20
        )
    }

    /// Mounts the user's filesystem over `{base}/users/{user}` unless it is mounted,
    /// making it first when there is none; files already in the directory are moved in.
    /// Blocking (mkfs, mount): called where a sandbox is made.
    pub fn ensure(&self, user: &str) -> Result<(), VolumeError> {
        let dir = self.users.join(user);
        if is_mount_point(&dir) {
            // Mounted by a previous run that was killed: unmounted at this one's shutdown.
            if let Ok(mut m) = self.mounted.lock() {
                if !m.iter().any(|u| u == user) {
                    m.push(user.to_string());
                }
            }
            return Ok(());
        }
        let image = self.images.join(format!("{user}.ext4"));
        if !image.exists() {
            self.make_image(&image)?;
        }
        std::fs::create_dir_all(&self.users).map_err(|e| io_error(&self.users, e))?;
        let has_files = std::fs::read_dir(&dir).is_ok_and(|mut d| d.next().is_some());
        if has_files {
            return self.mount_moving_files_in(&image, &dir, user);
        }
        std::fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
        self.mount_at(&image, &dir, user)
    }

    fn make_image(&self, image: &Path) -> Result<(), VolumeError> {
        let tmp = image.with_extension("ext4.new");
        let file = std::fs::File::create(&tmp).map_err(|e| io_error(&tmp, e))?;
        file.set_len(self.size).map_err(|e| io_error(&tmp, e))?;
        drop(file);
        let mut mkfs = Command::new(&self.mkfs);
        mkfs.args(["-q", "-F", "-m", "0"]);
        if let Some((uid, gid)) = sandbox_owner() {
            mkfs.args(["-E", &format!("root_owner={uid}:{gid}")]);
        }
        mkfs.arg(&tmp);
        run(&mut mkfs).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })?;
        std::fs::rename(&tmp, image).map_err(|e| io_error(image, e))
    }

    fn mount_at(&self, image: &Path, dir: &Path, user: &str) -> Result<(), VolumeError> {
        run(Command::new(&self.mount)
            .args(["-t", "ext4", "-o", "loop,nosuid,nodev"])
            .arg(image)
            .arg(dir))?;
        // The filesystem's root is the user's directory: the sandbox's user's alone.
        if let Some((uid, gid)) = sandbox_owner() {
            std::os::unix::fs::lchown(dir, Some(uid), Some(gid)).map_err(|e| io_error(dir, e))?;
        }
        std::fs::set_permissions(
            dir,
            std::os::unix::fs::PermissionsExt::from_mode(PRIVATE_DIR_MODE),
        )
        .map_err(|e| io_error(dir, e))?;
        // mkfs's lost+found is not the user's.
        let _ = std::fs::remove_dir(dir.join("lost+found"));
        if let Ok(mut m) = self.mounted.lock() {
            m.push(user.to_string());
        }
        tracing::info!(%user, dir = %dir.display(), "mounted the user's filesystem");
        Ok(())
    }

    /// A directory made before the quota was enforced: its files move into the new
    /// filesystem (refused, and left where they were, when they do not fit).
    fn mount_moving_files_in(
        &self,
        image: &Path,
        dir: &Path,
        user: &str,
    ) -> Result<(), VolumeError> {
        let old = dir.with_file_name(format!(".{user}.before-quota"));
        std::fs::rename(dir, &old).map_err(|e| io_error(dir, e))?;
        let restore = |why: VolumeError| {
            let _ = std::fs::remove_dir(dir);
            let _ = std::fs::rename(&old, dir);
            why
        };
        std::fs::create_dir(dir).map_err(|e| restore(io_error(dir, e)))?;
        self.mount_at(image, dir, user).map_err(restore)?;
        let mut copy = Command::new("cp");
        copy.arg("-a").arg(old.join(".")).arg(dir);
        if let Err(e) = run(&mut copy) {
            self.unmount(user);
            return Err(restore(e));
        }
        let _ = std::fs::remove_dir_all(&old);
        Ok(())
    }

    fn unmount(&self, user: &str) {
        let dir = self.users.join(user);
        // Lazily when something still holds it: it goes once that lets go.
        let unmounted = run(Command::new(&self.umount).arg(&dir))
            .or_else(|_| run(Command::new(&self.umount).arg("-l").arg(&dir)));
        if let Err(e) = unmounted {
            tracing::warn!(%user, error = %e, "cannot unmount the user's filesystem");
        }
        if let Ok(mut m) = self.mounted.lock() {
            m.retain(|u| u != user);
        }
    }

    /// Unmounts every filesystem this process mounted (at shutdown, once every sandbox is
    /// killed); the loop devices go with them.
    pub fn unmount_all(&self) {
        let users = self.mounted.lock().map(|m| m.clone()).unwrap_or_default();
        for user in users {
            self.unmount(&user);
        }
    }
}
