//! Files beneath a directory handle. A thread's directories are host directories that
//! sandboxed code controls, so a host process never resolves a path in them itself: it
//! holds a [`Dir`] on the root and lets the kernel resolve each relative path with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`, which refuses (`EXDEV`, `ELOOP`) any
//! `..`, absolute link or magic link that would leave the root, even one swapped in while
//! the call runs. Walks open each directory from its parent's handle with `O_NOFOLLOW`, so
//! they never descend through a link.

use std::{
    ffi::{CStr, CString, OsStr, OsString},
    fs::File,
    io,
    os::{
        fd::{AsRawFd, FromRawFd, OwnedFd},
        unix::ffi::{OsStrExt, OsStringExt},
    },
    path::{Component, Path, PathBuf},
};

/// A walk goes no deeper than this (each level holds a descriptor).
pub const MAX_WALK_DEPTH: usize = 128;

/// A handle on a directory that relative paths are resolved beneath.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
}

/// What a directory entry is, without following a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    Other,
}

/// One directory entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: OsString,
    pub kind: Kind,
}

/// What a walk's visitor says next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Go on (into this entry when it is a directory).
    Continue,
    /// Do not descend into this directory.
    Skip,
    /// End the walk.
    Stop,
}

/// Whether an error means the path tried to leave the root (or to use a magic link).
pub fn is_escape(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EXDEV) | Some(libc::ELOOP))
}

fn c_path(p: &Path) -> io::Result<CString> {
    let p = if p.as_os_str().is_empty() {
        Path::new(".")
    } else {
        p
    };
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

fn c_name(name: &OsStr) -> io::Result<CString> {
    if name.is_empty() || name.as_bytes().contains(&b'/') || name == ".." || name == "." {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    CString::new(name.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Splits a relative path into its parent and final name; rejects `..`, `/` and empty.
fn split(rel: &Path) -> io::Result<(PathBuf, OsString)> {
    let mut parts: Vec<&OsStr> = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(p) => parts.push(p),
            Component::CurDir => {}
            _ => return Err(io::Error::from(io::ErrorKind::InvalidInput)),
        }
    }
    let name = parts
        .pop()
        .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    Ok((parts.iter().collect(), name.to_os_string()))
}

fn openat2_raw(dir: libc::c_int, rel: &CStr, flags: libc::c_int, mode: u32) -> io::Result<OwnedFd> {
    let creating = flags & (libc::O_CREAT | libc::O_TMPFILE) != 0;
    // SAFETY: an all-zero open_how is valid (libc marks it non-exhaustive).
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.mode = if creating { u64::from(mode) } else { 0 };
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;
    // openat2 answers EAGAIN when a rename raced the lookup: retry a bounded number of
    // times, then report it.
    for _ in 0..64 {
        // SAFETY: `rel` is a valid C string and `how` a valid open_how of the size given;
        // the kernel only reads them.
        let r = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir,
                rel.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if r >= 0 {
            // SAFETY: the kernel returned a new descriptor that nothing else owns.
            return Ok(unsafe { OwnedFd::from_raw_fd(r as libc::c_int) });
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) => continue,
            _ => return Err(e),
        }
    }
    Err(io::Error::from_raw_os_error(libc::EAGAIN))
}

fn fstat(fd: libc::c_int) -> io::Result<libc::stat> {
    // SAFETY: an all-zero stat is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid out-pointer.
    cvt(unsafe { libc::fstat(fd, &mut st) })?;
    Ok(st)
}

fn kind_of(mode: libc::mode_t) -> Kind {
    match mode & libc::S_IFMT {
        libc::S_IFREG => Kind::File,
        libc::S_IFDIR => Kind::Dir,
        libc::S_IFLNK => Kind::Symlink,
        _ => Kind::Other,
    }
}

/// The error of a path that is not a regular file.
fn not_regular(st: &libc::stat) -> io::Error {
    if kind_of(st.st_mode) == Kind::Dir {
        io::Error::from(io::ErrorKind::IsADirectory)
    } else {
        io::Error::new(io::ErrorKind::InvalidInput, "not a regular file")
    }
}

/// Opening a file beneath a [`Dir`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Open {
    pub write: bool,
    pub read: bool,
    pub create: bool,
    pub append: bool,
    pub truncate: bool,
    /// Create the file, failing with `AlreadyExists` when the name is taken (`O_EXCL`).
    pub create_new: bool,
    /// The mode of a created file (the umask still applies).
    pub mode: u32,
}

impl Dir {
    /// A handle on `path`, a directory the host trusts (its own data root, say).
    pub fn open(path: &Path) -> io::Result<Dir> {
        let c = c_path(path)?;
        // SAFETY: `c` is a valid C string.
        let fd = cvt(unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        })?;
        // SAFETY: a new descriptor that nothing else owns.
        Ok(Dir {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    fn raw(&self) -> libc::c_int {
        self.fd.as_raw_fd()
    }

    /// The directory `rel` beneath this one (links inside followed, none out).
    pub fn open_dir(&self, rel: &Path) -> io::Result<Dir> {
        let fd = openat2_raw(
            self.raw(),
            &c_path(rel)?,
            libc::O_RDONLY | libc::O_DIRECTORY,
            0,
        )?;
        Ok(Dir { fd })
    }

    /// The directory `rel` beneath this one, created (with its parents, each `mode`) when
    /// missing.
    pub fn create_dir_all(&self, rel: &Path, mode: u32) -> io::Result<Dir> {
        let mut sofar = PathBuf::new();
        let mut current = self.open_dir(Path::new("."))?;
        for c in rel.components() {
            let name = match c {
                Component::Normal(n) => n,
                Component::CurDir => continue,
                _ => return Err(io::Error::from(io::ErrorKind::InvalidInput)),
            };
            sofar.push(name);
            match self.open_dir(&sofar) {
                Ok(d) => current = d,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    let cname = c_name(name)?;
                    // SAFETY: `cname` is a valid C string; mkdirat never follows the
                    // final component.
                    let made =
                        match cvt(unsafe { libc::mkdirat(current.raw(), cname.as_ptr(), mode) }) {
                            Ok(_) => true,
                            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => false,
                            Err(e) => return Err(e),
                        };
                    let d = self.open_dir(&sofar)?;
                    if made {
                        // The umask narrowed the mode; fchmod on the handle follows nothing.
                        // SAFETY: fchmod on an open descriptor.
                        let _ = unsafe { libc::fchmod(d.raw(), mode) };
                    }
                    current = d;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(current)
    }

    /// Opens `rel` beneath this directory as `how` says.
    pub fn open_file(&self, rel: &Path, how: Open) -> io::Result<File> {
        let mut flags = match (how.read, how.write || how.append) {
            (true, true) => libc::O_RDWR,
            (false, true) => libc::O_WRONLY,
            _ => libc::O_RDONLY,
        };
        if how.create {
            flags |= libc::O_CREAT;
        }
        if how.create_new {
            flags |= libc::O_CREAT | libc::O_EXCL;
        }
        if how.append {
            flags |= libc::O_APPEND;
        }
        if how.truncate {
            flags |= libc::O_TRUNC;
        }
        // A FIFO must not block the open; a regular file ignores O_NONBLOCK.
        flags |= libc::O_NONBLOCK | libc::O_NOCTTY;
        let fd = openat2_raw(self.raw(), &c_path(rel)?, flags, how.mode)?;
        let st = fstat(fd.as_raw_fd())?;
        if kind_of(st.st_mode) != Kind::File {
            return Err(not_regular(&st));
        }
        // SAFETY: fcntl on a descriptor we own; clearing O_NONBLOCK for ordinary I/O.
        unsafe {
            let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
            if fl >= 0 {
                libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl & !libc::O_NONBLOCK);
            }
        }
        Ok(File::from(fd))
    }

    /// A regular file beneath this directory, for reading.
    pub fn open_read(&self, rel: &Path) -> io::Result<File> {
        self.open_file(
            rel,
            Open {
                read: true,
                ..Open::default()
            },
        )
    }

    /// What `rel` is (links inside followed, none out).
    pub fn metadata(&self, rel: &Path) -> io::Result<std::fs::Metadata> {
        let fd = openat2_raw(self.raw(), &c_path(rel)?, libc::O_PATH, 0)?;
        File::from(fd).metadata()
    }

    /// Renames `from` to `to`, both beneath this directory; neither final name is followed.
    pub fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let (fp, fname) = split(from)?;
        let (tp, tname) = split(to)?;
        let fdir = self.open_dir(&fp)?;
        let tdir = self.open_dir(&tp)?;
        let (fname, tname) = (c_name(&fname)?, c_name(&tname)?);
        // SAFETY: valid descriptors and C strings.
        cvt(unsafe { libc::renameat(fdir.raw(), fname.as_ptr(), tdir.raw(), tname.as_ptr()) })?;
        Ok(())
    }

    /// Removes the file (or link) `rel`; the final name is not followed.
    pub fn remove_file(&self, rel: &Path) -> io::Result<()> {
        let (p, name) = split(rel)?;
        let dir = self.open_dir(&p)?;
        let name = c_name(&name)?;
        // SAFETY: a valid descriptor and C string.
        cvt(unsafe { libc::unlinkat(dir.raw(), name.as_ptr(), 0) })?;
        Ok(())
    }

    /// The directory's entries, sorted by name (`.` and `..` left out).
    pub fn entries(&self) -> io::Result<Vec<Entry>> {
        let dot = c_path(Path::new("."))?;
        // A fresh descriptor: fdopendir takes it over, with its own offset.
        // SAFETY: a valid descriptor and C string.
        let fd = cvt(unsafe {
            libc::openat(
                self.raw(),
                dot.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        })?;
        // SAFETY: `fd` is ours; on success the DIR owns it and closedir closes it.
        let dirp = unsafe { libc::fdopendir(fd) };
        if dirp.is_null() {
            let e = io::Error::last_os_error();
            // SAFETY: fdopendir failed, so the descriptor is still ours to close.
            unsafe { libc::close(fd) };
            return Err(e);
        }
        let mut out = Vec::new();
        loop {
            // SAFETY: dirp is a valid DIR until closedir below.
            let ent = unsafe { libc::readdir64(dirp) };
            if ent.is_null() {
                break;
            }
            // SAFETY: readdir returned a valid dirent whose d_name is NUL-terminated.
            let (name, d_type) = unsafe {
                (
                    CStr::from_ptr((*ent).d_name.as_ptr()).to_bytes().to_vec(),
                    (*ent).d_type,
                )
            };
            if name == b"." || name == b".." {
                continue;
            }
            let name = OsString::from_vec(name);
            let kind = match d_type {
                libc::DT_REG => Kind::File,
                libc::DT_DIR => Kind::Dir,
                libc::DT_LNK => Kind::Symlink,
                libc::DT_UNKNOWN => self
                    .lstat(&name)
                    .map(|s| kind_of(s.st_mode))
                    .unwrap_or(Kind::Other),
                _ => Kind::Other,
            };
            out.push(Entry { name, kind });
        }
        // SAFETY: closes the DIR and its descriptor once.
        unsafe { libc::closedir(dirp) };
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// `fstatat(name, AT_SYMLINK_NOFOLLOW)` of one entry of this directory.
    pub fn lstat(&self, name: &OsStr) -> io::Result<libc::stat> {
        let c = c_name(name)?;
        // SAFETY: an all-zero stat is a valid value to be overwritten.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid descriptor, C string and out-pointer.
        cvt(unsafe { libc::fstatat(self.raw(), c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) })?;
        Ok(st)
    }

    /// The entry `name` of this directory as a directory, never through a link.
    pub fn child_dir(&self, name: &OsStr) -> io::Result<Dir> {
        let c = c_name(name)?;
        // SAFETY: valid descriptor and C string.
        let fd = cvt(unsafe {
            libc::openat(
                self.raw(),
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        })?;
        // SAFETY: a new descriptor that nothing else owns.
        Ok(Dir {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// The entry `name` of this directory as a regular file for reading, never through a
    /// link.
    pub fn child_file(&self, name: &OsStr) -> io::Result<File> {
        let c = c_name(name)?;
        // SAFETY: valid descriptor and C string.
        let fd = cvt(unsafe {
            libc::openat(
                self.raw(),
                c.as_ptr(),
                libc::O_RDONLY
                    | libc::O_NOFOLLOW
                    | libc::O_NONBLOCK
                    | libc::O_NOCTTY
                    | libc::O_CLOEXEC,
            )
        })?;
        // SAFETY: a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let st = fstat(fd.as_raw_fd())?;
        if kind_of(st.st_mode) != Kind::File {
            return Err(not_regular(&st));
        }
        Ok(File::from(fd))
    }

    /// The host path this handle names now (for resolving a path beneath it).
    fn real_path(fd: libc::c_int) -> io::Result<PathBuf> {
        std::fs::read_link(format!("/proc/self/fd/{fd}"))
    }

    /// Where `rel` resolves to beneath this directory, relative to it (links inside
    /// followed, none out): `Path.resolve()` confined to the root.
    pub fn resolve(&self, rel: &Path) -> io::Result<PathBuf> {
        let target = openat2_raw(self.raw(), &c_path(rel)?, libc::O_PATH, 0)?;
        let root = Self::real_path(self.raw())?;
        let real = Self::real_path(target.as_raw_fd())?;
        real.strip_prefix(&root)
            .map(Path::to_path_buf)
            .map_err(|_| io::Error::from_raw_os_error(libc::EXDEV))
    }

    /// A depth-first walk in name order. The visitor gets each entry's path relative to
    /// this directory, the entry, and the handle of the directory holding it; directories
    /// are entered (never through a link) unless it answers [`Step::Skip`].
    /// `max_depth`: 1 lists this directory only.
    pub fn walk(
        &self,
        max_depth: Option<usize>,
        visit: &mut dyn FnMut(&Path, &Entry, &Dir) -> Step,
    ) -> io::Result<()> {
        let limit = max_depth.unwrap_or(MAX_WALK_DEPTH).min(MAX_WALK_DEPTH);
        self.walk_inner(Path::new(""), 1, limit, visit).map(|_| ())
    }

    fn walk_inner(
        &self,
        prefix: &Path,
        depth: usize,
        limit: usize,
        visit: &mut dyn FnMut(&Path, &Entry, &Dir) -> Step,
    ) -> io::Result<bool> {
        for entry in self.entries()? {
            let rel = prefix.join(&entry.name);
            match visit(&rel, &entry, self) {
                Step::Stop => return Ok(false),
                Step::Skip => continue,
                Step::Continue => {}
            }
            if entry.kind == Kind::Dir && depth < limit {
                // A directory swapped for a link since the listing is not entered.
                let Ok(child) = self.child_dir(&entry.name) else {
                    continue;
                };
                if !child.walk_inner(&rel, depth + 1, limit, visit)? {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// The bytes held by regular files under this directory (apparent sizes, links not
    /// followed).
    pub fn usage(&self) -> io::Result<u64> {
        let mut total: u64 = 0;
        self.walk(None, &mut |_, entry, parent| {
            if entry.kind == Kind::File {
                if let Ok(st) = parent.lstat(&entry.name) {
                    total = total.saturating_add(st.st_size.max(0) as u64);
                }
            }
            Step::Continue
        })?;
        Ok(total)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::fs::symlink;

    fn setup() -> (tempfile::TempDir, tempfile::TempDir) {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "outside-secret").unwrap();
        std::fs::create_dir(root.path().join("sub")).unwrap();
        std::fs::write(root.path().join("sub/in.txt"), "inside").unwrap();
        (root, outside)
    }

    #[test]
    fn links_out_are_refused_and_links_inside_followed() {
        let (root, outside) = setup();
        symlink(outside.path().join("secret"), root.path().join("abs")).unwrap();
        symlink(
            "../../../../../../../../etc/hostname",
            root.path().join("rel"),
        )
        .unwrap();
        symlink("sub/in.txt", root.path().join("inner")).unwrap();
        symlink(outside.path(), root.path().join("dirlink")).unwrap();
        let dir = Dir::open(root.path()).unwrap();
        for bad in [
            "abs",
            "rel",
            "dirlink/secret",
            "../x",
            "/etc/hostname",
            "sub/../../x",
        ] {
            let e = dir.open_read(Path::new(bad)).unwrap_err();
            assert!(is_escape(&e), "{bad}: {e}");
        }
        let mut s = String::new();
        dir.open_read(Path::new("inner"))
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        assert_eq!(s, "inside");
        assert_eq!(
            dir.resolve(Path::new("inner")).unwrap(),
            Path::new("sub/in.txt")
        );
        let e = dir
            .create_dir_all(Path::new("dirlink/new"), 0o777)
            .unwrap_err();
        assert!(is_escape(&e), "{e}");
        assert!(!outside.path().join("new").exists());
    }

    #[test]
    fn writes_create_parents_and_rename_beneath() {
        let (root, _outside) = setup();
        let dir = Dir::open(root.path()).unwrap();
        dir.create_dir_all(Path::new("a/b"), 0o777).unwrap();
        let mut f = dir
            .open_file(
                Path::new("a/b/.t"),
                Open {
                    write: true,
                    create: true,
                    truncate: true,
                    mode: 0o666,
                    ..Open::default()
                },
            )
            .unwrap();
        f.write_all(b"data").unwrap();
        dir.rename(Path::new("a/b/.t"), Path::new("a/b/t")).unwrap();
        assert_eq!(
            std::fs::read_to_string(root.path().join("a/b/t")).unwrap(),
            "data"
        );
        assert_eq!(dir.usage().unwrap(), 10);
        let e = dir.open_read(Path::new("a")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::IsADirectory);
    }

    #[test]
    fn a_walk_lists_links_without_entering_them() {
        let (root, outside) = setup();
        symlink(outside.path(), root.path().join("out")).unwrap();
        let dir = Dir::open(root.path()).unwrap();
        let mut seen = Vec::new();
        dir.walk(None, &mut |rel, e, _| {
            seen.push((rel.display().to_string(), e.kind));
            Step::Continue
        })
        .unwrap();
        assert_eq!(
            seen,
            vec![
                ("out".to_string(), Kind::Symlink),
                ("sub".to_string(), Kind::Dir),
                ("sub/in.txt".to_string(), Kind::File),
            ]
        );
    }

    #[test]
    fn a_fifo_does_not_block_a_read() {
        let (root, _outside) = setup();
        let p = CString::new(root.path().join("fifo").as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(p.as_ptr(), 0o666) }, 0);
        let dir = Dir::open(root.path()).unwrap();
        let e = dir.open_read(Path::new("fifo")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
