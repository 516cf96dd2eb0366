//! The file operations on one thread's `user-data` directory that a lead or a worker asks
//! for ([`ThreadFileOp`]): the same code serves them on the local disk (local mode) and on
//! the sandbox-host replica that owns the thread (cluster mode). Every path is resolved by
//! the kernel beneath a handle on the directory ([`crate::beneath`]), so a link planted or
//! swapped in by sandboxed code never leads outside, and an escape is reported with the
//! path as it was given, never where it led. Everything here blocks: callers on an async
//! thread run it on a blocking pool.

use std::collections::BTreeMap;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::beneath::{is_escape, Dir, Kind, Open, Step};
use crate::messages::{
    FileContent, FileRead, ListedFile, ThreadFileError, ThreadFileOp, ThreadFileReply,
    MAX_NAME_PROBES,
};

/// The virtual root of a thread's user data, as the model sees it.
pub const VIRTUAL_USER_DATA: &str = "/mnt/user-data";
/// The virtual outputs directory.
pub const VIRTUAL_OUTPUTS: &str = "/mnt/user-data/outputs";
/// The output budget's directory under `outputs`, excluded from settlement.
pub const TOOL_RESULTS_DIR: &str = ".tool-results";
/// The directories every thread has under `user-data`.
pub const USER_DATA_DIRS: [&str; 3] = ["workspace", "uploads", "outputs"];

/// `path` (`/mnt/user-data` or beneath it) relative to `user-data`; `..` is left to the
/// kernel, which refuses it when it climbs out.
pub fn relative(path: &str) -> Result<PathBuf, ThreadFileError> {
    let rest = path
        .strip_prefix(VIRTUAL_USER_DATA)
        .filter(|rest| rest.is_empty() || rest.starts_with('/'))
        .ok_or_else(|| ThreadFileError::NotVirtual {
            path: path.to_owned(),
        })?;
    Ok(PathBuf::from(rest.trim_start_matches('/')))
}

/// The error of `e` for `path` (as given).
fn error(path: &str, e: &io::Error) -> ThreadFileError {
    let path = path.to_owned();
    if is_escape(e) {
        ThreadFileError::Escape { path }
    } else if e.kind() == io::ErrorKind::NotFound {
        ThreadFileError::NotFound { path }
    } else {
        ThreadFileError::Io {
            path,
            message: io::Error::from(e.kind()).to_string(),
        }
    }
}

/// Runs `op` on the thread whose `user-data` directory is `user_data` (a directory the
/// caller trusts: its own data root's thread directory).
pub fn serve(user_data: &Path, op: ThreadFileOp) -> Result<ThreadFileReply, ThreadFileError> {
    match op {
        ThreadFileOp::EnsureDirs => {
            for dir in USER_DATA_DIRS {
                std::fs::create_dir_all(user_data.join(dir))
                    .map_err(|e| error(&format!("{VIRTUAL_USER_DATA}/{dir}"), &e))?;
            }
            Ok(ThreadFileReply::Done)
        }
        ThreadFileOp::Resolve { path } => {
            let rel = relative(&path)?;
            let root = Dir::open(user_data).map_err(|e| error(&path, &e))?;
            let real = root.resolve(&rel).map_err(|e| error(&path, &e))?;
            Ok(ThreadFileReply::Resolved(
                real.to_string_lossy().into_owned(),
            ))
        }
        ThreadFileOp::Read {
            path,
            offset,
            len,
            max_size,
        } => read(user_data, &path, offset, len, max_size).map(ThreadFileReply::Read),
        ThreadFileOp::WriteSpill { name, content } => {
            let outputs = Dir::open(user_data)
                .and_then(|d| d.open_dir(Path::new("outputs")))
                .map_err(|e| error(VIRTUAL_OUTPUTS, &e))?;
            write_spill(&outputs, &name, &content)?;
            Ok(ThreadFileReply::Done)
        }
        ThreadFileOp::WriteOutput { name, content } => {
            let outputs = Dir::open(user_data)
                .and_then(|d| d.open_dir(Path::new("outputs")))
                .map_err(|e| error(VIRTUAL_OUTPUTS, &e))?;
            write_output(&outputs, &name, &content).map(ThreadFileReply::Written)
        }
        ThreadFileOp::SnapshotOutputs => snapshot_outputs(&user_data.join("outputs"))
            .map(ThreadFileReply::Snapshot)
            .map_err(|e| error(VIRTUAL_OUTPUTS, &e)),
        ThreadFileOp::ListFiles { path } => {
            let rel = relative(&path)?;
            let dir = Dir::open(user_data)
                .and_then(|d| d.open_dir(&rel))
                .map_err(|e| error(&path, &e))?;
            list_files(&dir)
                .map(ThreadFileReply::Files)
                .map_err(|e| error(&path, &e))
        }
        ThreadFileOp::Uploads(op) => crate::uploads_dir::serve(user_data, op),
        ThreadFileOp::RemoveThread => remove_thread(user_data).map(|()| ThreadFileReply::Done),
    }
}

/// Removes the thread directory `user_data` is in (`{base}/users/{user}/threads/{tid}`),
/// links inside it removed as links, never followed.
pub fn remove_thread(user_data: &Path) -> Result<(), ThreadFileError> {
    let Some(thread) = user_data.parent() else {
        return Ok(());
    };
    match std::fs::remove_dir_all(thread) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(error(VIRTUAL_USER_DATA, &e)),
    }
}

fn read(
    user_data: &Path,
    path: &str,
    offset: u64,
    len: u64,
    max_size: u64,
) -> Result<FileRead, ThreadFileError> {
    let rel = relative(path)?;
    let root = Dir::open(user_data).map_err(|e| error(path, &e))?;
    let real = root.resolve(&rel).map_err(|e| error(path, &e))?;
    let meta = root.metadata(&real).map_err(|e| error(path, &e))?;
    let mut answer = FileRead {
        resolved: real.to_string_lossy().into_owned(),
        is_file: meta.is_file(),
        size: meta.len(),
        content: FileContent::NotAFile,
    };
    if !answer.is_file {
        return Ok(answer);
    }
    if meta.len() > max_size {
        answer.content = FileContent::TooLarge;
        return Ok(answer);
    }
    let bytes = root.open_read(&real).and_then(|mut file| {
        file.seek(SeekFrom::Start(offset))?;
        let mut bytes = Vec::new();
        file.take(len).read_to_end(&mut bytes)?;
        Ok(bytes)
    });
    answer.content = match bytes {
        Ok(bytes) => FileContent::Bytes(bytes),
        Err(e) if is_escape(&e) => return Err(error(path, &e)),
        Err(_) => FileContent::Unreadable,
    };
    Ok(answer)
}

/// Writes `{TOOL_RESULTS_DIR}/{name}` under `outputs` through a temporary name, then a
/// rename. Every step resolves beneath `outputs`: a `.tool-results` (or a temporary name)
/// made a link out of the thread fails the write, and nothing is written outside.
pub fn write_spill(outputs: &Dir, name: &str, content: &[u8]) -> Result<(), ThreadFileError> {
    let name = plain_name(name)?;
    let virtual_path = format!("{VIRTUAL_OUTPUTS}/{TOOL_RESULTS_DIR}/{name}");
    let fail = |e: io::Error| error(&virtual_path, &e);
    let dir = outputs
        .create_dir_all(Path::new(TOOL_RESULTS_DIR), 0o777)
        .map_err(fail)?;
    let temporary = format!(".{name}.tmp");
    let mut file = dir
        .open_file(
            Path::new(&temporary),
            Open {
                write: true,
                create: true,
                truncate: true,
                mode: 0o644,
                ..Open::default()
            },
        )
        .map_err(fail)?;
    file.write_all(content).map_err(fail)?;
    drop(file);
    dir.rename(Path::new(&temporary), Path::new(name))
        .map_err(fail)
}

/// `name` when it is one plain file name.
fn plain_name(name: &str) -> Result<&str, ThreadFileError> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        return Err(ThreadFileError::BadName {
            name: name.to_owned(),
        });
    }
    Ok(name)
}

/// `name`, then `{stem}-1{ext}`, `{stem}-2{ext}`, ...: the names [`write_output`] tries.
fn candidate(name: &str, index: u32) -> String {
    if index == 0 {
        return name.to_owned();
    }
    match name.rfind('.').filter(|&dot| dot > 0) {
        Some(dot) => format!("{}-{index}{}", &name[..dot], &name[dot..]),
        None => format!("{name}-{index}"),
    }
}

/// Writes `content` as a new file directly under `outputs` and returns its virtual path:
/// `name` when it is free, else the first free `{stem}-{n}{ext}` (`n` up to
/// [`MAX_NAME_PROBES`]). Each name is claimed with `O_EXCL` beneath `outputs`, so two
/// writers never get one name, an existing file (or a link planted there) is never
/// written through, and a write that fails removes the file it created.
pub fn write_output(outputs: &Dir, name: &str, content: &[u8]) -> Result<String, ThreadFileError> {
    let name = plain_name(name)?;
    for index in 0..=MAX_NAME_PROBES {
        let probe = candidate(name, index);
        let virtual_path = format!("{VIRTUAL_OUTPUTS}/{probe}");
        let opened = outputs.open_file(
            Path::new(&probe),
            Open {
                write: true,
                create_new: true,
                mode: 0o644,
                ..Open::default()
            },
        );
        let mut file = match opened {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(error(&virtual_path, &e)),
        };
        if let Err(e) = file.write_all(content).and_then(|()| file.flush()) {
            drop(file);
            let _ = outputs.remove_file(Path::new(&probe));
            return Err(error(&virtual_path, &e));
        }
        return Ok(virtual_path);
    }
    Err(ThreadFileError::Io {
        path: format!("{VIRTUAL_OUTPUTS}/{name}"),
        message: format!("no free name after {MAX_NAME_PROBES} tries"),
    })
}

/// The regular, non-link files under `outputs` by virtual path: (size, modification ns).
/// A missing directory is empty; the walk never enters a directory through a link and
/// skips `.tool-results`.
pub fn snapshot_outputs(outputs: &Path) -> io::Result<BTreeMap<String, (u64, u128)>> {
    let mut files = BTreeMap::new();
    let dir = match Dir::open(outputs) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(files),
        Err(e) => return Err(e),
    };
    dir.walk(None, &mut |rel, entry, parent| {
        if rel == Path::new(TOOL_RESULTS_DIR) {
            return Step::Skip;
        }
        if entry.kind == Kind::File {
            // lstat: a file swapped for a link since the listing is not followed.
            if let Ok(st) = parent.lstat(&entry.name) {
                if st.st_mode & libc::S_IFMT == libc::S_IFREG {
                    files.insert(
                        format!("{VIRTUAL_OUTPUTS}/{}", rel.to_string_lossy()),
                        (st.st_size.max(0) as u64, modified_ns(&st)),
                    );
                }
            }
        }
        Step::Continue
    })?;
    Ok(files)
}

fn modified_ns(st: &libc::stat) -> u128 {
    (st.st_mtime.max(0) as u128) * 1_000_000_000 + st.st_mtime_nsec.max(0) as u128
}

/// The regular files (no links, no names that are not UTF-8) directly in `dir`.
pub fn list_files(dir: &Dir) -> io::Result<Vec<ListedFile>> {
    let mut files = Vec::new();
    for entry in dir.entries()? {
        // Entries are typed without following links: a symlink is never a regular file.
        if entry.kind != Kind::File {
            continue;
        }
        let Ok(name) = entry.name.clone().into_string() else {
            continue;
        };
        // lstat: a file swapped for a link since the listing is not followed.
        let Ok(st) = dir.lstat(&entry.name) else {
            continue;
        };
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            continue;
        }
        files.push(ListedFile {
            name,
            size: st.st_size.max(0) as u64,
            modified_ns: modified_ns(&st),
        });
    }
    Ok(files)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn thread() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let user_data = dir.path().join("user-data");
        serve(&user_data, ThreadFileOp::EnsureDirs).unwrap();
        (dir, user_data)
    }

    fn read_op(path: &str) -> ThreadFileOp {
        ThreadFileOp::Read {
            path: path.into(),
            offset: 0,
            len: 1 << 20,
            max_size: 1 << 20,
        }
    }

    #[test]
    fn a_file_is_read_written_listed_and_snapshotted() {
        let (_dir, user_data) = thread();
        std::fs::write(user_data.join("outputs/a.md"), "hello").unwrap();
        let read = serve(&user_data, read_op("/mnt/user-data/outputs/a.md")).unwrap();
        assert_eq!(
            read,
            ThreadFileReply::Read(FileRead {
                resolved: "outputs/a.md".into(),
                is_file: true,
                size: 5,
                content: FileContent::Bytes(b"hello".to_vec()),
            })
        );
        let tail = ThreadFileOp::Read {
            path: "/mnt/user-data/outputs/a.md".into(),
            offset: 3,
            len: 10,
            max_size: 5,
        };
        assert!(matches!(
            serve(&user_data, tail).unwrap(),
            ThreadFileReply::Read(FileRead { content: FileContent::Bytes(b), .. }) if b == b"lo"
        ));
        serve(
            &user_data,
            ThreadFileOp::WriteSpill {
                name: "bash-1.log".into(),
                content: b"spilled".to_vec(),
            },
        )
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(user_data.join("outputs/.tool-results/bash-1.log")).unwrap(),
            "spilled"
        );
        let ThreadFileReply::Snapshot(files) =
            serve(&user_data, ThreadFileOp::SnapshotOutputs).unwrap()
        else {
            panic!("not a snapshot")
        };
        assert_eq!(
            files.keys().collect::<Vec<_>>(),
            ["/mnt/user-data/outputs/a.md"]
        );
        let ThreadFileReply::Files(listed) = serve(
            &user_data,
            ThreadFileOp::ListFiles {
                path: "/mnt/user-data/outputs".into(),
            },
        )
        .unwrap() else {
            panic!("not a listing")
        };
        assert_eq!(listed.len(), 1);
        assert_eq!((listed[0].name.as_str(), listed[0].size), ("a.md", 5));
    }

    #[test]
    fn an_escape_is_refused_without_naming_its_target() {
        let (dir, user_data) = thread();
        let secret = dir.path().join("secret-target.txt");
        std::fs::write(&secret, "TOPSECRET").unwrap();
        std::os::unix::fs::symlink(&secret, user_data.join("outputs/link.txt")).unwrap();
        for path in [
            "/mnt/user-data/outputs/link.txt",
            "/mnt/user-data/../secret-target.txt",
        ] {
            let e = serve(&user_data, read_op(path)).unwrap_err();
            assert_eq!(
                e,
                ThreadFileError::Escape {
                    path: path.to_owned()
                }
            );
            let text = e.to_string();
            assert!(!text.contains(&*secret.to_string_lossy()), "{text}");
            assert!(!text.contains("TOPSECRET"), "{text}");
        }
        assert_eq!(
            serve(&user_data, read_op("/etc/passwd")).unwrap_err(),
            ThreadFileError::NotVirtual {
                path: "/etc/passwd".into()
            }
        );
        assert!(matches!(
            serve(
                &user_data,
                ThreadFileOp::WriteSpill {
                    name: "../x".into(),
                    content: vec![]
                }
            ),
            Err(ThreadFileError::BadName { .. })
        ));
    }

    fn write_output(
        user_data: &Path,
        name: &str,
        content: &[u8],
    ) -> Result<ThreadFileReply, ThreadFileError> {
        serve(
            user_data,
            ThreadFileOp::WriteOutput {
                name: name.into(),
                content: content.to_vec(),
            },
        )
    }

    #[test]
    fn an_output_never_overwrites_a_file_or_goes_through_a_link() {
        let (dir, user_data) = thread();
        let outputs = user_data.join("outputs");
        std::fs::write(outputs.join("shot.png"), "earlier").unwrap();
        assert_eq!(
            write_output(&user_data, "shot.png", b"second").unwrap(),
            ThreadFileReply::Written("/mnt/user-data/outputs/shot-1.png".into())
        );
        assert_eq!(
            write_output(&user_data, "shot.png", b"third").unwrap(),
            ThreadFileReply::Written("/mnt/user-data/outputs/shot-2.png".into())
        );
        assert_eq!(std::fs::read(outputs.join("shot.png")).unwrap(), b"earlier");
        assert_eq!(
            std::fs::read(outputs.join("shot-1.png")).unwrap(),
            b"second"
        );
        assert_eq!(std::fs::read(outputs.join("shot-2.png")).unwrap(), b"third");
        // A link planted under the name is a taken name, never written through.
        let target = dir.path().join("outside.txt");
        std::os::unix::fs::symlink(&target, outputs.join("notes")).unwrap();
        assert_eq!(
            write_output(&user_data, "notes", b"x").unwrap(),
            ThreadFileReply::Written("/mnt/user-data/outputs/notes-1".into())
        );
        assert!(!target.exists());
        for bad in ["", "..", "a/b.png"] {
            assert!(matches!(
                write_output(&user_data, bad, b"x"),
                Err(ThreadFileError::BadName { .. })
            ));
        }
    }
}
