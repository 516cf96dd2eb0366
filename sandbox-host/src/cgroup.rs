//! The sandboxes' cgroups: every sandbox in a cgroup of its own (a memory limit for all
//! its processes together, a process limit, a CPU weight), under a cgroup of its user's
//! with an aggregate cap, under one subtree of this host's (`antler-{hash of base_dir}`,
//! beneath the cgroup sandbox-host runs in). Two backends, detected at start: cgroup v2
//! (`memory.max`, `pids.max`, `cpu.weight`, controllers enabled in `subtree_control`) and
//! cgroup v1 (`memory.limit_in_bytes` and `memory.memsw.limit_in_bytes`, `pids.max`,
//! `cpu.shares`, one hierarchy per controller). A process joins before it is exec'd
//! ([`SandboxCgroup::join_files`]), so nothing it forks escapes. Without either (not root,
//! no delegation) sandboxes run with per-process rlimits only, and the host says so.

use std::{
    io,
    os::fd::OwnedFd,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use sha2::Digest;

use crate::settings::Limits;

/// Why no cgroup bounds the sandboxes.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CgroupError {
    #[error("no cgroup v2 with the memory and pids controllers, and no cgroup v1 memory and pids hierarchies, are mounted")]
    NotMounted,
    #[error("cannot create {path}: {message} (sandbox-host needs root, or a delegated cgroup)")]
    Create { path: String, message: String },
    #[error("cannot enable the {controllers} controllers in {path}: {message} (delegate them to sandbox-host's cgroup)")]
    Enable {
        path: String,
        controllers: String,
        message: String,
    },
}

/// Which cgroup version bounds the sandboxes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// One unified hierarchy: the host's subtree there.
    V2 { root: PathBuf },
    /// One hierarchy per controller: the host's subtree in each (memory, pids, and cpu
    /// when mounted).
    V1 {
        memory: PathBuf,
        pids: PathBuf,
        cpu: Option<PathBuf>,
    },
}

/// The cgroups of this host's sandboxes.
#[derive(Debug, Clone)]
pub struct Cgroups {
    backend: Backend,
    limits: Limits,
}

/// One line of `/proc/self/mountinfo` that mounts a cgroup hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CgroupMount {
    /// The hierarchy's directory that is mounted (`/` unless in a cgroup namespace).
    root: String,
    mount_point: PathBuf,
    v2: bool,
    /// The v1 controllers of the hierarchy.
    controllers: Vec<String>,
}

fn parse_mountinfo(text: &str) -> Vec<CgroupMount> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let left: Vec<&str> = left.split(' ').collect();
            let mut right = right.split(' ');
            let fstype = right.next()?;
            let _source = right.next()?;
            let options = right.next().unwrap_or("");
            let (root, mount_point) = (left.get(3)?, left.get(4)?);
            let v2 = match fstype {
                "cgroup2" => true,
                "cgroup" => false,
                _ => return None,
            };
            Some(CgroupMount {
                root: root.to_string(),
                mount_point: PathBuf::from(mount_point.replace("\\040", " ")),
                v2,
                controllers: options.split(',').map(str::to_string).collect(),
            })
        })
        .collect()
}

/// `/proc/self/cgroup`: (controllers, path) pairs; v2's line has no controllers.
fn parse_proc_cgroup(text: &str) -> Vec<(Vec<String>, String)> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let _id = parts.next()?;
            let controllers = parts.next()?;
            let path = parts.next()?;
            let controllers = controllers
                .split(',')
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect();
            Some((controllers, path.to_string()))
        })
        .collect()
}

/// The directory of this process's cgroup in `mount` (its path made relative to the
/// mounted root).
fn own_dir(mount: &CgroupMount, path: &str) -> PathBuf {
    let rel = path
        .strip_prefix(mount.root.trim_end_matches('/'))
        .unwrap_or(path);
    mount.mount_point.join(rel.trim_start_matches('/'))
}

/// The name of this host's subtree: the same for every start over one base directory,
/// so a restart finds (and clears) what a killed host left.
fn subtree_name(base_dir: &Path) -> String {
    let digest = sha2::Sha256::digest(base_dir.as_os_str().as_encoded_bytes());
    format!("antler-{}", &hex::encode(digest)[..12])
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    std::fs::write(path, value)
}

fn create(dir: &Path) -> Result<(), CgroupError> {
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(CgroupError::Create {
            path: dir.display().to_string(),
            message: e.to_string(),
        }),
    }
}

/// Removes `dir` and every cgroup beneath it, deepest first (a cgroup is removed with
/// `rmdir` once it has no process); gives up after `patience`.
fn remove_tree(dir: &Path, patience: Duration) {
    let until = Instant::now() + patience;
    loop {
        remove_children(dir);
        match std::fs::remove_dir(dir) {
            Ok(()) => return,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return,
            Err(e) if Instant::now() >= until => {
                tracing::warn!(cgroup = %dir.display(), error = %e, "cannot remove a sandbox cgroup");
                return;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn remove_children(dir: &Path) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            remove_children(&entry.path());
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

/// The CPU weight of cgroup v2 (1–10000, 100 the default) as v1 `cpu.shares` (1024 the
/// default).
fn shares_of(weight: u64) -> u64 {
    (weight.clamp(1, 10_000) * 1024 / 100).max(2)
}

impl Cgroups {
    /// Finds a usable backend and makes this host's subtree in it (clearing what a killed
    /// host over the same base directory left there).
    pub fn detect(base_dir: &Path, limits: Limits) -> Result<Cgroups, CgroupError> {
        let mounts =
            parse_mountinfo(&std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default());
        let own =
            parse_proc_cgroup(&std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default());
        let name = subtree_name(base_dir);
        let v2 = mounts.iter().find(|m| m.v2).and_then(|m| {
            let path = own.iter().find(|(c, _)| c.is_empty())?.1.clone();
            let dir = own_dir(m, &path);
            let available = std::fs::read_to_string(dir.join("cgroup.controllers")).ok()?;
            let has = |c: &str| available.split_whitespace().any(|x| x == c);
            (has("memory") && has("pids")).then_some(dir)
        });
        let backend = if let Some(own_dir) = v2 {
            Self::make_v2(&own_dir, &name)?
        } else {
            let hierarchy = |controller: &str| {
                let m = mounts
                    .iter()
                    .find(|m| !m.v2 && m.controllers.iter().any(|c| c == controller))?;
                let path = own
                    .iter()
                    .find(|(c, _)| c.iter().any(|x| x == controller))?
                    .1
                    .clone();
                Some(own_dir(m, &path).join(&name))
            };
            let (Some(memory), Some(pids)) = (hierarchy("memory"), hierarchy("pids")) else {
                return Err(CgroupError::NotMounted);
            };
            let cpu = hierarchy("cpu");
            for dir in [Some(&memory), Some(&pids), cpu.as_ref()]
                .into_iter()
                .flatten()
            {
                remove_children(dir);
                create(dir)?;
            }
            Backend::V1 { memory, pids, cpu }
        };
        Ok(Cgroups { backend, limits })
    }

    /// Enables the controllers for the children of `dir`; when `dir` holds this process
    /// (cgroup v2 allows no process in a cgroup whose controllers are delegated), this
    /// process moves to a leaf `antler-host` of it first.
    fn make_v2(own: &Path, name: &str) -> Result<Backend, CgroupError> {
        let controllers = "+memory +pids +cpu";
        let enable = |dir: &Path| -> io::Result<()> {
            let file = dir.join("cgroup.subtree_control");
            write(&file, controllers).or_else(|_| write(&file, "+memory +pids"))
        };
        if let Err(e) = enable(own) {
            if e.raw_os_error() != Some(libc::EBUSY) {
                return Err(CgroupError::Enable {
                    path: own.display().to_string(),
                    controllers: controllers.into(),
                    message: e.to_string(),
                });
            }
            let leaf = own.join("antler-host");
            create(&leaf)?;
            write(&leaf.join("cgroup.procs"), &std::process::id().to_string())
                .and_then(|()| enable(own))
                .map_err(|e| CgroupError::Enable {
                    path: own.display().to_string(),
                    controllers: controllers.into(),
                    message: format!("{e} (other processes share sandbox-host's cgroup)"),
                })?;
        }
        let root = own.join(name);
        remove_children(&root);
        create(&root)?;
        enable(&root).map_err(|e| CgroupError::Enable {
            path: root.display().to_string(),
            controllers: controllers.into(),
            message: e.to_string(),
        })?;
        Ok(Backend::V2 { root })
    }

    /// What bounds the sandboxes, for the status and the start-up log.
    pub fn note(&self) -> String {
        let l = &self.limits;
        let version = match &self.backend {
            Backend::V2 { .. } => "cgroup v2",
            Backend::V1 { cpu: Some(_), .. } => "cgroup v1 (memory, pids, cpu)",
            Backend::V1 { cpu: None, .. } => "cgroup v1 (memory, pids)",
        };
        format!(
            "{version}: {} MiB and {} processes per sandbox (cpu weight {}), {} MiB and {} processes per user",
            l.max_memory >> 20,
            l.max_processes,
            l.cpu_weight,
            l.user_memory >> 20,
            l.user_max_processes
        )
    }

    /// The backend in use.
    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// The directories of `rel` in each hierarchy (one for v2).
    fn dirs(&self, rel: &Path) -> Vec<PathBuf> {
        match &self.backend {
            Backend::V2 { root } => vec![root.join(rel)],
            Backend::V1 { memory, pids, cpu } => [Some(memory), Some(pids), cpu.as_ref()]
                .into_iter()
                .flatten()
                .map(|d| d.join(rel))
                .collect(),
        }
    }

    /// Creates the cgroup at `rel` with a memory cap, a process cap and a CPU weight
    /// (0: unlimited).
    fn make(&self, rel: &Path, memory: u64, processes: u64, weight: u64) -> io::Result<()> {
        let max = |n: u64| {
            if n == 0 {
                "max".to_string()
            } else {
                n.to_string()
            }
        };
        match &self.backend {
            Backend::V2 { root } => {
                let dir = root.join(rel);
                create(&dir).map_err(io::Error::other)?;
                write(&dir.join("memory.max"), &max(memory))?;
                // Swap would let a sandbox hold more than its memory.
                let _ = write(&dir.join("memory.swap.max"), "0");
                write(&dir.join("pids.max"), &max(processes))?;
                let _ = write(
                    &dir.join("cpu.weight"),
                    &weight.clamp(1, 10_000).to_string(),
                );
                // Children of a user's cgroup get the controllers too.
                let _ = write(&dir.join("cgroup.subtree_control"), "+memory +pids +cpu")
                    .or_else(|_| write(&dir.join("cgroup.subtree_control"), "+memory +pids"));
            }
            Backend::V1 {
                memory: m,
                pids,
                cpu,
            } => {
                let dir = m.join(rel);
                create(&dir).map_err(io::Error::other)?;
                let limit = if memory == 0 {
                    "-1".to_string()
                } else {
                    memory.to_string()
                };
                // Memory plus swap, where swap is accounted: the same cap. The kernel keeps
                // memory's cap at or under memsw's: lowered first, raised second.
                let memory_file = dir.join("memory.limit_in_bytes");
                let memsw = dir.join("memory.memsw.limit_in_bytes");
                let memsw = memsw.exists().then_some(memsw);
                if write(&memory_file, &limit).is_ok() {
                    if let Some(memsw) = &memsw {
                        write(memsw, &limit)?;
                    }
                } else {
                    if let Some(memsw) = &memsw {
                        write(memsw, &limit)?;
                    }
                    write(&memory_file, &limit)?;
                }
                let dir = pids.join(rel);
                create(&dir).map_err(io::Error::other)?;
                write(&dir.join("pids.max"), &max(processes))?;
                if let Some(cpu) = cpu {
                    let dir = cpu.join(rel);
                    create(&dir).map_err(io::Error::other)?;
                    write(&dir.join("cpu.shares"), &shares_of(weight).to_string())?;
                }
            }
        }
        Ok(())
    }

    /// The cgroup of one sandbox's supervisor: `user-{user}/thread-{thread}-{n}` (a
    /// pre-warmed one, bound to no user yet: `prewarm/thread-{slot}-{n}`), made with the
    /// user's aggregate caps above it. `n` counts the cgroups this host made: a thread's
    /// sandbox started again (its thread deleted and made anew, its supervisor replaced)
    /// never joins the cgroup of the one before, which is being removed once its
    /// processes are gone ([`SandboxCgroup::remove_later`]) and could go under it.
    pub fn sandbox(&self, user_id: &str, slot: &str) -> io::Result<SandboxCgroup> {
        static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let l = &self.limits;
        let parent = if user_id.is_empty() {
            PathBuf::from("prewarm")
        } else {
            PathBuf::from(format!("user-{user_id}"))
        };
        self.make(&parent, l.user_memory, l.user_max_processes, 100)?;
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let rel = parent.join(format!("thread-{slot}-{n}"));
        self.make(&rel, l.max_memory, l.max_processes, l.cpu_weight)?;
        let dirs = self.dirs(&rel);
        let events = match &self.backend {
            Backend::V2 { root } => root.join(&rel).join("memory.events"),
            Backend::V1 { memory, .. } => memory.join(&rel).join("memory.oom_control"),
        };
        Ok(SandboxCgroup {
            dirs,
            events,
            memory_limit: l.max_memory,
        })
    }

    /// Removes this host's subtree (at shutdown, once every sandbox is killed).
    pub fn remove_all(&self) {
        for dir in self.dirs(Path::new("")) {
            remove_tree(&dir, Duration::from_secs(5));
        }
    }
}

/// One sandbox's cgroup.
#[derive(Debug, Clone)]
pub struct SandboxCgroup {
    /// Its directory in each hierarchy.
    dirs: Vec<PathBuf>,
    /// `memory.events` (v2) or `memory.oom_control` (v1): where OOM kills are counted.
    events: PathBuf,
    /// Its memory cap, bytes (0: none).
    pub memory_limit: u64,
}

impl SandboxCgroup {
    /// Its `cgroup.procs` files, opened for writing: a child writes `0` to each between
    /// fork and exec to join (see `provider::bwrap`).
    pub fn join_files(&self) -> io::Result<Vec<OwnedFd>> {
        self.dirs
            .iter()
            .map(|d| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(d.join("cgroup.procs"))
                    .map(OwnedFd::from)
            })
            .collect()
    }

    /// How many of its processes the kernel has killed for memory so far.
    pub fn oom_kills(&self) -> u64 {
        std::fs::read_to_string(&self.events)
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("oom_kill "))
                    .and_then(|n| n.trim().parse().ok())
            })
            .unwrap_or(0)
    }

    /// Removes it once its processes are gone (on a thread of its own: they may take a
    /// moment to die).
    pub fn remove_later(&self) {
        let dirs = self.dirs.clone();
        let spawned = std::thread::Builder::new()
            .name("cgroup-remove".into())
            .stack_size(64 * 1024)
            .spawn(move || {
                for d in dirs {
                    remove_tree(&d, Duration::from_secs(5));
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot remove a sandbox's cgroup");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hierarchies_and_own_paths_are_read_from_proc() {
        let info = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        let mounts = parse_mountinfo(info);
        assert_eq!(mounts.len(), 2);
        assert!(!mounts[0].v2 && mounts[0].controllers.contains(&"memory".to_string()));
        assert!(mounts[1].v2);
        let own = parse_proc_cgroup("4:memory:/process_api/x\n1:cpu:/\n0::/\n");
        assert_eq!(
            own[0],
            (vec!["memory".to_string()], "/process_api/x".to_string())
        );
        assert_eq!(own[2], (Vec::<String>::new(), "/".to_string()));
        assert_eq!(
            own_dir(&mounts[0], "/process_api/x"),
            PathBuf::from("/sys/fs/cgroup/memory/process_api/x")
        );
        // In a cgroup namespace the mounted root is a prefix of the path.
        let nested = CgroupMount {
            root: "/kubepods/pod1".into(),
            mount_point: "/sys/fs/cgroup".into(),
            v2: true,
            controllers: vec![],
        };
        assert_eq!(
            own_dir(&nested, "/kubepods/pod1/c"),
            PathBuf::from("/sys/fs/cgroup/c")
        );
        assert_eq!(shares_of(100), 1024);
        assert_eq!(shares_of(1), 10);
        assert_eq!(subtree_name(Path::new("/b")), subtree_name(Path::new("/b")));
    }
}
