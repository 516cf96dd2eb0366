//! Virtual paths and the host directories behind them (spec 6.2, 6.4): a thread's
//! directories, validation of the paths a tool is given (`validate_tool_path`), location
//! beneath a handle on the family's root (`locate`: what file tools use, so no link leads
//! out), the reverse masking of host paths in output, and rewriting virtual paths in a host
//! command.
//! Prefixes are replaced longest first and only at path-segment boundaries. Under the
//! skills root only the sandbox's own user's `users/{user}` is reachable: another user's
//! is refused in one text whatever is there, and walks skip it.

use std::{
    io,
    os::unix::fs::{DirBuilderExt, PermissionsExt},
    path::{Path, PathBuf},
};

use antler_protocol::beneath::Dir;

use crate::settings::{Mount, SandboxSettings};

/// The root of a thread's user data as the model sees it.
pub const VIRTUAL_PATH_PREFIX: &str = "/mnt/user-data";
/// The ACP agents' workspace as the model sees it (read-only).
pub const ACP_WORKSPACE_VIRTUAL_PATH: &str = "/mnt/acp-workspace";
/// A `..` segment anywhere.
pub const TRAVERSAL_DENIED: &str = "Access denied: path traversal detected";
/// The three user-data directories every thread has.
pub const USER_DATA_DIRS: [&str; 3] = ["workspace", "uploads", "outputs"];
/// Where users' own skills are under the skills root: `users/{user}/custom/{name}` (the
/// lead's `SkillStore`); a sandbox sees only its own user's directory there.
pub const SKILLS_USERS_DIR: &str = "users";
/// The category directory of a user's own skills under `users/{user}`.
pub const SKILLS_USER_CUSTOM_DIR: &str = "custom";

/// A path under another user's skills (`{skills}/users/{other}`): the same refusal
/// whether or not anything is there.
pub fn other_user_skills_denied(path: &str) -> String {
    format!("Access to another user's skills is not allowed: {path}")
}

/// The host directories of one thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadPaths {
    /// The user the thread belongs to (its skills are the ones the sandbox sees).
    pub user_id: String,
    /// `{base}/users/{uid}/threads/{tid}`.
    pub root: PathBuf,
    pub user_data: PathBuf,
    pub workspace: PathBuf,
    pub uploads: PathBuf,
    pub outputs: PathBuf,
    pub acp_workspace: PathBuf,
}

impl ThreadPaths {
    pub fn new(base: &Path, user_id: &str, thread_id: &str) -> Self {
        let root = base
            .join("users")
            .join(user_id)
            .join("threads")
            .join(thread_id);
        let user_data = root.join("user-data");
        Self {
            user_id: user_id.to_string(),
            workspace: user_data.join("workspace"),
            uploads: user_data.join("uploads"),
            outputs: user_data.join("outputs"),
            acp_workspace: root.join("acp-workspace"),
            user_data,
            root,
        }
    }

    /// `{base}/users/{uid}`: every thread of the user (and, with a disk quota, the
    /// mount point of the user's own filesystem).
    pub fn user_dir(&self) -> PathBuf {
        self.root
            .parent()
            .and_then(Path::parent)
            .map(Path::to_path_buf)
            // `root` is always `{base}/users/{uid}/threads/{tid}` (see `new`).
            .unwrap_or_else(|| self.root.clone())
    }

    /// Creates the user's directory and `threads/` in it, both private to the sandbox's
    /// user; `users/` above them lets that user through without listing who else is there.
    pub fn create_parents(&self) -> io::Result<()> {
        let user_dir = self.user_dir();
        let threads = user_dir.join("threads");
        // `users/` and what is missing above it (the pre-warm root) let the sandbox's user
        // through.
        if let Some(users) = user_dir.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(USERS_DIR_MODE)
                .create(users)?;
            std::fs::set_permissions(users, std::fs::Permissions::from_mode(USERS_DIR_MODE))?;
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(PRIVATE_DIR_MODE)
            .create(&threads)?;
        make_private(&user_dir)?;
        make_private(&threads)
    }

    /// Creates the directories, each owned by the user the sandbox runs as
    /// ([`sandbox_owner`]) with no access for anyone else (0700): another local user can
    /// neither read nor replace a thread's files. Existing directories and their files
    /// are kept; directories an older version made 0777 are narrowed.
    pub fn create(&self) -> io::Result<()> {
        self.create_parents()?;
        for dir in [
            &self.workspace,
            &self.uploads,
            &self.outputs,
            &self.acp_workspace,
        ] {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(PRIVATE_DIR_MODE)
                .create(dir)?;
        }
        for dir in [
            &self.root,
            &self.user_data,
            &self.workspace,
            &self.uploads,
            &self.outputs,
            &self.acp_workspace,
        ] {
            make_private(dir)?;
        }
        Ok(())
    }
}

/// The mode of a user's and a thread's directories: the sandbox's user only.
pub const PRIVATE_DIR_MODE: u32 = 0o700;
/// The mode of `{base}/users`: the sandbox's user passes through to its own directory,
/// nobody lists the users.
pub const USERS_DIR_MODE: u32 = 0o711;

/// The (uid, gid) a sandbox's processes run as, when it is not this process's own:
/// bubblewrap runs as `nobody` when sandbox-host is root.
pub fn sandbox_owner() -> Option<(u32, u32)> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    root.then_some((
        crate::provider::bwrap::NOBODY,
        crate::provider::bwrap::NOBODY,
    ))
}

/// Gives `dir` to the sandbox's user, mode [`PRIVATE_DIR_MODE`]. A link is refused (never
/// followed): these directories are made here, never by a sandbox.
fn make_private(dir: &Path) -> io::Result<()> {
    let meta = std::fs::symlink_metadata(dir)?;
    if !meta.is_dir() {
        return Err(io::Error::other(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    if let Some((uid, gid)) = sandbox_owner() {
        std::os::unix::fs::lchown(dir, Some(uid), Some(gid))?;
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(PRIVATE_DIR_MODE))
}

/// A validated virtual path: a handle on its family's root and the path beneath it.
#[derive(Debug)]
pub struct Located {
    pub root: Dir,
    /// Relative to `root` (no `..`: validation refused it).
    pub rel: PathBuf,
    /// The virtual path of `root` (`/mnt/user-data`, the skills path, a mount).
    pub virtual_root: String,
    /// The host path of `root` (a lock key, never opened again).
    pub host_root: PathBuf,
    /// The skills root: only this user's `users/{user}` beneath it is visible (walks skip
    /// the other users' directories). `None` for the other families.
    pub skills_user: Option<String>,
}

impl Located {
    /// The virtual path of `rel` beneath the root.
    pub fn virtual_path(&self, rel: &Path) -> String {
        let r = rel.to_string_lossy();
        if r.is_empty() {
            self.virtual_root.clone()
        } else {
            format!("{}/{}", self.virtual_root.trim_end_matches('/'), r)
        }
    }

    /// Whether `rel` (beneath the root) lies in another user's skills directory.
    pub fn hides(&self, rel: &Path) -> bool {
        let Some(me) = &self.skills_user else {
            return false;
        };
        let mut parts = rel.components().map(|c| c.as_os_str());
        parts.next() == Some(std::ffi::OsStr::new(SKILLS_USERS_DIR))
            && parts.next().is_some_and(|u| u != std::ffi::OsStr::new(me))
    }
}

/// Which family a virtual path belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    UserData,
    Skills,
    Acp,
    Mount(usize),
}

/// The virtual → host mapping of one sandbox.
#[derive(Debug, Clone)]
pub struct PathMap {
    pub thread: ThreadPaths,
    /// The user whose own skills (`{skills}/users/{user}`) this sandbox sees.
    pub user_id: String,
    pub skills_dir: PathBuf,
    pub skills_container: String,
    pub mounts: Vec<Mount>,
}

/// Whether `text[at..]` starts a new segment (or ends the path) after a prefix.
fn is_boundary(rest: &str) -> bool {
    match rest.chars().next() {
        None => true,
        Some(c) => {
            c == '/' || c == '\\' || !(c.is_alphanumeric() || c == '_' || c == '.' || c == '-')
        }
    }
}

/// Whether `path` is `root` or lies under it (string-wise, at a segment boundary).
fn under(path: &str, root: &str) -> bool {
    path == root || (path.starts_with(root) && path[root.len()..].starts_with('/'))
}

/// Rejects any `..` segment (after turning `\` into `/`).
pub fn reject_traversal(path: &str) -> Result<(), String> {
    if path.replace('\\', "/").split('/').any(|s| s == "..") {
        return Err(TRAVERSAL_DENIED.to_string());
    }
    Ok(())
}

/// Replaces every occurrence of `from` at a segment boundary with `to`.
fn replace_at_boundaries(text: &str, from: &str, to: &str) -> String {
    if from.is_empty() || !text.contains(from) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(from) {
        let after = &rest[i + from.len()..];
        let before_ok = rest[..i]
            .chars()
            .next_back()
            .or_else(|| out.chars().next_back())
            .map(|c| !(c.is_alphanumeric() || c == '_' || c == '.' || c == '-' || c == '/'))
            .unwrap_or(true);
        out.push_str(&rest[..i]);
        if before_ok && is_boundary(after) {
            out.push_str(to);
        } else {
            out.push_str(from);
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// `Path::canonicalize` of the longest existing ancestor, with the rest appended: the
/// path with every symlink that exists followed (Python's non-strict `Path.resolve`).
pub fn resolve_lenient(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
    loop {
        if let Ok(c) = existing.canonicalize() {
            let mut out = c;
            for part in rest.iter().rev() {
                out.push(part);
            }
            return out;
        }
        match (
            existing.file_name().map(|n| n.to_os_string()),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

impl PathMap {
    pub fn new(thread: ThreadPaths, settings: &SandboxSettings) -> Self {
        Self {
            user_id: thread.user_id.clone(),
            thread,
            skills_dir: settings.skills_dir.clone(),
            skills_container: settings.skills_container_path.clone(),
            mounts: settings.mounts.clone(),
        }
    }

    fn family(&self, path: &str) -> Option<Family> {
        if under(path, &self.skills_container) {
            return Some(Family::Skills);
        }
        if under(path, ACP_WORKSPACE_VIRTUAL_PATH) {
            return Some(Family::Acp);
        }
        if path.starts_with(&format!("{VIRTUAL_PATH_PREFIX}/")) {
            return Some(Family::UserData);
        }
        // The longest matching mount wins.
        self.mounts
            .iter()
            .enumerate()
            .filter(|(_, m)| under(path, &m.container_path))
            .max_by_key(|(_, m)| m.container_path.len())
            .map(|(i, _)| Family::Mount(i))
    }

    /// The segments of a skills path after the skills container path (`None`: not one).
    fn skills_segments<'a>(&self, path: &'a str) -> Option<Vec<&'a str>> {
        under(path, &self.skills_container).then(|| {
            path[self.skills_container.len()..]
                .split(['/', '\\'])
                .filter(|s| !s.is_empty())
                .collect()
        })
    }

    /// Whether `path` names (or may name, through a shell pattern) something under another
    /// user's skills directory: `{skills}/users/{x}` with `x` not this sandbox's user.
    pub fn is_other_users_skills(&self, path: &str) -> bool {
        let Some(parts) = self.skills_segments(path) else {
            return false;
        };
        let pattern = |s: &str| s.contains(['*', '?', '[', '{']);
        match parts.as_slice() {
            [first, user, ..] => {
                (*first == SKILLS_USERS_DIR || pattern(first)) && *user != self.user_id
            }
            _ => false,
        }
    }

    /// DeerFlow's `_extract_skill_name_from_skills_path`, with Antler's per-user layout:
    /// `{category}/{name}/...` for `public`, `custom` and `legacy`, `users/{user}/custom/{name}/...`,
    /// else the first segment (a direct `{name}/...`); a category root names none.
    pub fn skill_name_of<'a>(&self, path: &'a str) -> Option<&'a str> {
        let parts = self.skills_segments(path)?;
        match parts.as_slice() {
            [] => None,
            [c] if ["public", "custom", "legacy", SKILLS_USERS_DIR].contains(c) => None,
            [c, name, ..] if ["public", "custom", "legacy"].contains(c) => Some(name),
            [c, rest @ ..] if *c == SKILLS_USERS_DIR => match rest {
                [_, custom, name, ..] if *custom == SKILLS_USER_CUSTOM_DIR => Some(name),
                _ => None,
            },
            [name, ..] => Some(name),
        }
    }

    /// DeerFlow's `validate_local_tool_path`: the error is the `PermissionError` text.
    /// Another user's skills are refused first, in the same words whatever is there.
    pub fn validate_tool_path(&self, path: &str, read_only: bool) -> Result<(), String> {
        reject_traversal(path)?;
        if self.is_other_users_skills(path) {
            return Err(other_user_skills_denied(path));
        }
        match self.family(path) {
            Some(Family::Skills) if !read_only => Err(format!("Write access to skills path is not allowed: {path}")),
            Some(Family::Acp) if !read_only => Err(format!("Write access to ACP workspace is not allowed: {path}")),
            Some(Family::Mount(i)) if self.mounts[i].read_only && !read_only => {
                Err(format!("Write access to read-only mount is not allowed: {path}"))
            }
            Some(_) => Ok(()),
            None => Err(format!(
                "Only paths under {VIRTUAL_PATH_PREFIX}/, {}/, {ACP_WORKSPACE_VIRTUAL_PATH}/, or configured mount paths are allowed",
                self.skills_container
            )),
        }
    }

    /// The (virtual prefix, host directory) pairs, longest virtual prefix first.
    fn mappings(&self) -> Vec<(String, PathBuf)> {
        let mut m: Vec<(String, PathBuf)> = vec![
            (
                format!("{VIRTUAL_PATH_PREFIX}/workspace"),
                self.thread.workspace.clone(),
            ),
            (
                format!("{VIRTUAL_PATH_PREFIX}/uploads"),
                self.thread.uploads.clone(),
            ),
            (
                format!("{VIRTUAL_PATH_PREFIX}/outputs"),
                self.thread.outputs.clone(),
            ),
            (
                VIRTUAL_PATH_PREFIX.to_string(),
                self.thread.user_data.clone(),
            ),
            (
                ACP_WORKSPACE_VIRTUAL_PATH.to_string(),
                self.thread.acp_workspace.clone(),
            ),
            (self.skills_container.clone(), self.skills_dir.clone()),
        ];
        for mount in &self.mounts {
            m.push((mount.container_path.clone(), mount.host_path.clone()));
        }
        m.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        m
    }

    /// The host path of a virtual path (no checks), longest prefix first.
    pub fn to_host(&self, path: &str) -> Option<PathBuf> {
        for (virt, host) in self.mappings() {
            if under(path, &virt) {
                let rel = path[virt.len()..].trim_start_matches('/');
                return Some(if rel.is_empty() { host } else { host.join(rel) });
            }
        }
        None
    }

    /// The roots a resolved path of this family must stay inside.
    fn roots(&self, family: Family) -> Vec<PathBuf> {
        match family {
            Family::UserData => vec![
                self.thread.workspace.clone(),
                self.thread.uploads.clone(),
                self.thread.outputs.clone(),
            ],
            Family::Skills => vec![self.skills_dir.clone()],
            Family::Acp => vec![self.thread.acp_workspace.clone()],
            Family::Mount(i) => vec![self.mounts[i].host_path.clone()],
        }
    }

    /// Validates `path` and returns a handle on the root of its family with the path
    /// relative to it: every file operation then resolves beneath that handle, so no link
    /// (planted or swapped in while the call runs) leads out of the family's roots.
    pub fn locate(&self, path: &str, read_only: bool) -> Result<Located, String> {
        self.validate_tool_path(path, read_only)?;
        let family = self
            .family(path)
            .ok_or_else(|| TRAVERSAL_DENIED.to_string())?;
        let (virtual_root, host_root) = match family {
            Family::UserData => (
                VIRTUAL_PATH_PREFIX.to_string(),
                self.thread.user_data.clone(),
            ),
            Family::Skills => (self.skills_container.clone(), self.skills_dir.clone()),
            Family::Acp => (
                ACP_WORKSPACE_VIRTUAL_PATH.to_string(),
                self.thread.acp_workspace.clone(),
            ),
            Family::Mount(i) => (
                self.mounts[i].container_path.clone(),
                self.mounts[i].host_path.clone(),
            ),
        };
        let rel = PathBuf::from(path[virtual_root.len()..].trim_start_matches('/'));
        if family == Family::UserData {
            let first = rel
                .components()
                .next()
                .map(|c| c.as_os_str().to_os_string());
            if !first.is_some_and(|f| USER_DATA_DIRS.iter().any(|d| f == *d)) {
                return Err(TRAVERSAL_DENIED.to_string());
            }
        }
        let root = Dir::open(&host_root).map_err(|_| TRAVERSAL_DENIED.to_string())?;
        let located = Located {
            root,
            rel,
            virtual_root,
            host_root,
            skills_user: (family == Family::Skills).then(|| self.user_id.clone()),
        };
        // A link inside the skills root must not lead into another user's directory.
        if let Ok(real) = located.root.resolve(&located.rel) {
            if located.hides(&real) {
                return Err(other_user_skills_denied(path));
            }
        }
        Ok(located)
    }

    /// Validates `path` and returns its host path, with symlinks followed; the result must
    /// stay inside the roots of its family, else "Access denied: path traversal detected".
    pub fn resolve(&self, path: &str, read_only: bool) -> Result<PathBuf, String> {
        self.validate_tool_path(path, read_only)?;
        let family = self
            .family(path)
            .ok_or_else(|| TRAVERSAL_DENIED.to_string())?;
        let host = self
            .to_host(path)
            .ok_or_else(|| TRAVERSAL_DENIED.to_string())?;
        let resolved = resolve_lenient(&host);
        let inside = self.roots(family).iter().any(|root| {
            let root = resolve_lenient(root);
            resolved.starts_with(&root)
        });
        if !inside {
            return Err(TRAVERSAL_DENIED.to_string());
        }
        if family == Family::Skills {
            let users = resolve_lenient(&self.skills_dir).join(SKILLS_USERS_DIR);
            let mine = users.join(&self.user_id);
            if resolved.starts_with(&users) && resolved != users && !resolved.starts_with(&mine) {
                return Err(other_user_skills_denied(path));
            }
        }
        Ok(resolved)
    }

    /// Host prefixes (as written and canonical) with their virtual paths, longest host first.
    fn host_to_virtual(&self) -> Vec<(String, String)> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for (virt, host) in self.mappings() {
            let written = host.to_string_lossy().trim_end_matches('/').to_string();
            let canonical = resolve_lenient(&host)
                .to_string_lossy()
                .trim_end_matches('/')
                .to_string();
            for h in [written, canonical] {
                if !h.is_empty() && !pairs.iter().any(|(x, _)| *x == h) {
                    pairs.push((h, virt.clone()));
                }
            }
        }
        pairs.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        pairs
    }

    /// Rewrites host paths in `text` back to virtual paths (both separator styles).
    pub fn mask(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (host, virt) in self.host_to_virtual() {
            out = replace_at_boundaries(&out, &host, &virt);
            let windows = host.replace('/', "\\");
            if windows != host {
                out = replace_at_boundaries(&out, &windows, &virt);
            }
        }
        out
    }

    /// Rewrites virtual paths in a host command to the thread's host paths.
    pub fn virtual_to_host_in_command(&self, command: &str) -> String {
        let mut out = command.to_string();
        for (virt, host) in self.mappings() {
            out = replace_at_boundaries(&out, &virt, &host.to_string_lossy());
        }
        out
    }

    /// The virtual path of a host path inside one of the mappings (for listings).
    pub fn to_virtual(&self, host: &Path) -> String {
        self.mask(&host.to_string_lossy())
    }

    /// Whether `path` is under a virtual root the local bash validator accepts.
    /// Never one under another user's skills.
    pub fn is_allowed_command_path(&self, path: &str) -> bool {
        if self.is_other_users_skills(path) {
            return false;
        }
        under(path, VIRTUAL_PATH_PREFIX)
            || under(path, &self.skills_container)
            || under(path, ACP_WORKSPACE_VIRTUAL_PATH)
            || self.mounts.iter().any(|m| under(path, &m.container_path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(base: &Path) -> PathMap {
        let settings = SandboxSettings {
            base_dir: base.to_path_buf(),
            skills_dir: base.join("skills"),
            mounts: vec![Mount {
                host_path: base.join("data"),
                container_path: "/mnt/data".into(),
                read_only: true,
            }],
            ..SandboxSettings::default()
        };
        PathMap::new(ThreadPaths::new(base, "u1", "t1"), &settings)
    }

    #[test]
    fn validation_follows_deerflow_order_and_texts() {
        let m = map(Path::new("/B"));
        assert_eq!(
            m.validate_tool_path("/mnt/user-data/../etc", true),
            Err(TRAVERSAL_DENIED.into())
        );
        assert_eq!(
            m.validate_tool_path("/mnt/skills/x", false),
            Err("Write access to skills path is not allowed: /mnt/skills/x".into())
        );
        assert!(m.validate_tool_path("/mnt/skills/x", true).is_ok());
        assert_eq!(
            m.validate_tool_path("/mnt/acp-workspace/a", false),
            Err("Write access to ACP workspace is not allowed: /mnt/acp-workspace/a".into())
        );
        assert_eq!(
            m.validate_tool_path("/mnt/data/a", false),
            Err("Write access to read-only mount is not allowed: /mnt/data/a".into())
        );
        let only = "Only paths under /mnt/user-data/, /mnt/skills/, /mnt/acp-workspace/, or configured mount paths are allowed";
        assert_eq!(
            m.validate_tool_path("/mnt/user-data", true),
            Err(only.into())
        );
        assert_eq!(m.validate_tool_path("/etc/passwd", true), Err(only.into()));
        assert_eq!(
            m.validate_tool_path("/mnt/user-dataX/a", true),
            Err(only.into())
        );
        assert!(m
            .validate_tool_path("/mnt/user-data/workspace/a", false)
            .is_ok());
    }

    #[test]
    fn another_users_skills_are_refused_in_the_same_words_whatever_is_there() {
        let m = map(Path::new("/B"));
        let other = "/mnt/skills/users/u2/custom/x/SKILL.md";
        assert_eq!(
            m.validate_tool_path(other, true),
            Err(other_user_skills_denied(other))
        );
        assert_eq!(
            other_user_skills_denied(other),
            "Access to another user's skills is not allowed: /mnt/skills/users/u2/custom/x/SKILL.md"
        );
        assert!(m.validate_tool_path("/mnt/skills/users/u2", true).is_err());
        assert!(m.validate_tool_path("/mnt/skills/users", true).is_ok());
        assert!(m
            .validate_tool_path("/mnt/skills/users/u1/custom/x/SKILL.md", true)
            .is_ok());
        assert!(m
            .validate_tool_path("/mnt/skills/users/u1x/a", true)
            .is_err());
        assert!(m.validate_tool_path("/mnt/skills/public/x", true).is_ok());
        // Shell patterns that could reach another user's directory (host bash).
        assert!(!m.is_allowed_command_path("/mnt/skills/users/*/custom"));
        assert!(!m.is_allowed_command_path("/mnt/skills/*/u2/custom"));
        assert!(m.is_allowed_command_path("/mnt/skills/users/u1/custom/x"));
        assert!(m.is_allowed_command_path("/mnt/skills/public/x/SKILL.md"));
    }

    #[test]
    fn the_skill_of_a_path_is_deerflows_with_the_per_user_layout() {
        let m = map(Path::new("/B"));
        for (path, name) in [
            ("/mnt/skills/public/pdf/SKILL.md", Some("pdf")),
            ("/mnt/skills/public/pdf", Some("pdf")),
            ("/mnt/skills/public/", None),
            ("/mnt/skills/custom/old", Some("old")),
            ("/mnt/skills/users/u1/custom/mine/SKILL.md", Some("mine")),
            ("/mnt/skills/users/u1/custom", None),
            ("/mnt/skills/users/u1", None),
            ("/mnt/skills/users", None),
            ("/mnt/skills/direct/SKILL.md", Some("direct")),
            ("/mnt/skills", None),
            ("/mnt/user-data/workspace/pdf", None),
        ] {
            assert_eq!(m.skill_name_of(path), name, "{path}");
        }
    }

    #[test]
    fn mapping_is_longest_prefix_at_segment_boundaries() {
        let m = map(Path::new("/B"));
        assert_eq!(
            m.to_host("/mnt/user-data/outputs/r.md"),
            Some(PathBuf::from(
                "/B/users/u1/threads/t1/user-data/outputs/r.md"
            ))
        );
        assert_eq!(m.to_host("/mnt/user-data-backup/x"), None);
        assert_eq!(
            m.virtual_to_host_in_command("cat /mnt/user-data/workspace/a /mnt/user-data-backup/b"),
            "cat /B/users/u1/threads/t1/user-data/workspace/a /mnt/user-data-backup/b"
        );
    }

    #[test]
    fn masking_rewrites_host_paths_only_at_boundaries() {
        let m = map(Path::new("/B"));
        let host = "/B/users/u1/threads/t1/user-data/workspace";
        assert_eq!(
            m.mask(&format!("{host}/a.txt: no")),
            "/mnt/user-data/workspace/a.txt: no"
        );
        assert_eq!(
            m.mask("/B/users/u1/threads/t1/user-data2/a"),
            "/B/users/u1/threads/t1/user-data2/a"
        );
        assert_eq!(
            m.mask("\\B\\users\\u1\\threads\\t1\\user-data\\outputs\\x"),
            "/mnt/user-data/outputs\\x"
        );
    }
}
