//! Skills in a run (spec 4.3 with DeerFlow's skill loader, slash parser and
//! `skill_context` capture): where installed skills live, how a run activates one (a
//! user message `/skill-name`, or a successful `read_file` of a skill's `SKILL.md`), and
//! the tool policy of the active skills. Installed skills are read from disk at every
//! model turn, so an edit or a disabled skill applies at once; activations live in the
//! thread state, so they survive checkpoints and resumes. A user's own custom skills
//! (`{root}/users/{user}/custom/`, written by `skill_manage`) are scanned only for that
//! user's runs; the shared `{root}/custom/` of earlier versions is DeerFlow's read-only
//! "legacy" category.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use antler_protocol::config::{load_extensions_config, AppConfig};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::catalog::routing::SUMMARY_MESSAGE_NAME;
use crate::middleware::skill_policy::{Skill, SkillError, SkillPolicy};
use crate::thread::state::{ActiveSkill, Message, SkillSource, StateUpdate, ToolCall, ToolStatus};

/// Where skills appear in the sandbox (DeerFlow's `DEFAULT_SKILLS_CONTAINER_PATH`).
pub const DEFAULT_SKILLS_CONTAINER_PATH: &str = "/mnt/skills";
/// The file that makes a directory a skill.
pub const SKILL_FILE: &str = "SKILL.md";
/// The shared categories scanned under the skills root, in order (a later one wins a
/// name): each as (category, its directory under the root). The user's own custom
/// skills come after them, so a user's skill shadows a shared one of the same name.
const SHARED_CATEGORIES: [(&str, &str); 2] = [("public", "public"), ("legacy", "custom")];
/// The category of a user's own skills (editable through `skill_manage`).
pub const CUSTOM_CATEGORY: &str = "custom";
/// Where users' own skills are under the skills root: `users/{user}/custom/{name}`.
pub const USERS_DIR: &str = "users";
/// The tool whose successful read of a `SKILL.md` activates the skill.
const READ_TOOL: &str = "read_file";
/// The argument names a read call's path may come under, in order.
const PATH_ARGS: [&str; 3] = ["path", "file_path", "filepath"];
/// How deep the scan follows directories (symlinks are followed, so loops must end).
const MAX_SCAN_DEPTH: usize = 16;

/// A slash command naming no installed skill (the run's reply; the model is not asked).
pub const SLASH_NOT_INSTALLED: &str = "Skill `/{name}` is not installed.";
/// A slash command naming a disabled skill.
pub const SLASH_DISABLED: &str =
    "Skill `/{name}` is installed but disabled. Enable it before using slash activation.";
/// A slash command whose `SKILL.md` cannot be read inside the skills root.
pub const SLASH_NOT_LOADED: &str =
    "Skill `/{name}` could not be loaded safely. Please check the skill installation.";
/// The task text of a slash command with nothing after the skill's name.
pub const SLASH_NO_TASK_TEXT: &str = "No additional task text was provided after the slash skill command. Ask the user what they want to do with this skill if the next step is unclear.";

/// Where a run's skills are: the host directory holding `public/` and `custom/`, the
/// path it has in the sandbox, and the extensions file that enables or disables them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkillStore {
    /// `None`: no skills are installed.
    pub root: Option<PathBuf>,
    pub container_root: String,
    /// `extensions_config.json` (`skills.{name}.enabled`), read at every scan.
    pub extensions: Option<PathBuf>,
    /// The user whose own custom skills are scanned too (`None`: shared skills only).
    pub user: Option<String>,
}

impl Default for SkillStore {
    fn default() -> Self {
        SkillStore {
            root: None,
            container_root: DEFAULT_SKILLS_CONTAINER_PATH.to_owned(),
            extensions: None,
            user: None,
        }
    }
}

/// An installed skill: its front matter, and where it is on the host and in the sandbox.
#[derive(Clone, Debug)]
pub struct InstalledSkill {
    pub skill: Skill,
    /// `public`, `legacy` (the shared `custom/` directory) or `custom` (the user's own).
    pub category: &'static str,
    pub dir: PathBuf,
    /// `{container_root}/{category}/{relative dir}/SKILL.md`.
    pub container_file: String,
    pub enabled: bool,
}

/// `/skill-name rest` at the start of a user message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlashReference<'a> {
    pub name: &'a str,
    /// The text after the name, leading whitespace removed.
    pub remaining: &'a str,
}

/// What a slash command does to the turn it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlashActivation {
    /// The skill is active; `reminder` goes to the model before the user's message.
    Activated {
        skill: ActiveSkill,
        reminder: String,
    },
    /// The run answers with this text instead of asking the model.
    Failed(String),
}

/// DeerFlow's `^\s*/([a-z0-9]+(?:-[a-z0-9]+)*)(?=\s|$|[^\x00-\x7F])`: lowercase words
/// joined by single hyphens, ended by whitespace, the end, or a non-ASCII character.
pub fn parse_slash(text: &str) -> Option<SlashReference<'_>> {
    let rest = text.trim_start().strip_prefix('/')?;
    let end = rest
        .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'))
        .unwrap_or(rest.len());
    let name = &rest[..end];
    let well_formed =
        !name.is_empty() && !name.starts_with('-') && !name.ends_with('-') && !name.contains("--");
    let ended = rest[end..]
        .chars()
        .next()
        .is_none_or(|c| c.is_whitespace() || !c.is_ascii());
    (well_formed && ended).then(|| SlashReference {
        name,
        remaining: rest[end..].trim_start(),
    })
}

impl SkillStore {
    /// The same rule as sandbox-host's settings, so the lead reads what the sandbox
    /// mounts: `skills.path` or `{base_dir}/skills`, shown at `skills.container_path`
    /// or `/mnt/skills`.
    pub fn from_config(app: &AppConfig, base_dir: &Path, extensions: Option<PathBuf>) -> Self {
        let section = app.other.get("skills").and_then(Value::as_object);
        let text = |key: &str| section.and_then(|s| s.get(key)).and_then(Value::as_str);
        SkillStore {
            root: Some(
                text("path")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| base_dir.join("skills")),
            ),
            container_root: text("container_path")
                .map(|p| p.trim_end_matches('/'))
                .filter(|p| !p.is_empty())
                .unwrap_or(DEFAULT_SKILLS_CONTAINER_PATH)
                .to_owned(),
            extensions,
            user: None,
        }
    }

    /// The same store, scanning `user`'s own custom skills too.
    pub fn for_user(mut self, user: &str) -> Self {
        self.user = Some(user.to_owned());
        self
    }

    /// `{root}/users/{user}/custom` and its path in the sandbox, when the store has a
    /// root and a user whose id is a safe directory name (`[A-Za-z0-9_-]`, as DeerFlow's).
    pub fn user_custom_dir(&self) -> Option<(PathBuf, String)> {
        let (root, user) = (self.root.as_ref()?, self.user.as_deref()?);
        let safe = !user.is_empty()
            && user
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        safe.then(|| {
            (
                root.join(USERS_DIR).join(user).join(CUSTOM_CATEGORY),
                format!(
                    "{}/{USERS_DIR}/{user}/{CUSTOM_CATEGORY}",
                    self.container_root
                ),
            )
        })
    }

    /// DeerFlow's `load_skills`: every directory under `{root}/public`, `{root}/custom`
    /// and the user's own `{root}/users/{user}/custom` (hidden ones skipped, sorted,
    /// symlinks followed) with a `SKILL.md` that loads, one per name (a later one wins),
    /// sorted by name.
    pub fn scan(&self) -> Vec<InstalledSkill> {
        let Some(root) = &self.root else {
            return Vec::new();
        };
        let extensions = self
            .extensions
            .as_deref()
            .filter(|p| p.exists())
            .and_then(|p| match load_extensions_config(p) {
                Ok(loaded) => Some(loaded.value),
                Err(e) => {
                    tracing::warn!("skills count as enabled: {e}");
                    None
                }
            });
        let mut by_name: HashMap<String, InstalledSkill> = HashMap::new();
        let mut sources: Vec<(&'static str, PathBuf, String)> = SHARED_CATEGORIES
            .iter()
            .map(|(category, dir)| {
                (
                    *category,
                    root.join(dir),
                    format!("{}/{dir}", self.container_root),
                )
            })
            .collect();
        sources.extend(
            self.user_custom_dir()
                .map(|(dir, shown)| (CUSTOM_CATEGORY, dir, shown)),
        );
        for (category, category_dir, base) in sources {
            let mut dirs = Vec::new();
            collect_skill_dirs(&category_dir, 0, &mut dirs);
            for dir in dirs {
                let skill = match Skill::load(&dir) {
                    Ok(skill) => skill,
                    Err(e) => {
                        tracing::warn!("skill not installed: {e}");
                        continue;
                    }
                };
                let relative = dir
                    .strip_prefix(&category_dir)
                    .map(|r| r.to_string_lossy().replace('\\', "/"))
                    .unwrap_or_default();
                let container_dir = if relative.is_empty() {
                    base.clone()
                } else {
                    format!("{base}/{relative}")
                };
                let enabled = extensions
                    .as_ref()
                    .is_none_or(|e| e.is_skill_enabled(&skill.name));
                by_name.insert(
                    skill.name.clone(),
                    InstalledSkill {
                        container_file: format!("{container_dir}/{SKILL_FILE}"),
                        skill,
                        category,
                        dir,
                        enabled,
                    },
                );
            }
        }
        let mut skills: Vec<InstalledSkill> = by_name.into_values().collect();
        skills.sort_by(|a, b| a.skill.name.cmp(&b.skill.name));
        skills
    }

    /// The policy of the active skills (spec 4.3). A slash-activated skill dominates:
    /// only it counts, so reading another skill cannot widen it; otherwise the skills
    /// read count; none is the passive policy. Each path is resolved against the skills
    /// installed now: an unresolved or disabled one is skipped, and when none is left
    /// the policy fails closed to the framework tools.
    pub fn policy(&self, active: &[ActiveSkill]) -> SkillPolicy {
        let paths: Vec<&str> = match active.iter().rev().find(|s| s.source == SkillSource::Slash) {
            Some(slash) => vec![slash.path.as_str()],
            None => active.iter().map(|s| s.path.as_str()).collect(),
        };
        if paths.is_empty() {
            return SkillPolicy::default();
        }
        let installed = self.scan();
        let by_path: HashMap<String, &InstalledSkill> = installed
            .iter()
            .map(|s| (normpath(&s.container_file), s))
            .collect();
        let mut seen = HashSet::new();
        let mut resolved = Vec::new();
        for path in paths {
            match by_path.get(&normpath(path)) {
                None => resolved.push(Err(SkillError::Unresolved {
                    path: path.to_owned(),
                })),
                Some(s) if !s.enabled => resolved.push(Err(SkillError::Disabled {
                    name: s.skill.name.clone(),
                })),
                Some(s) if seen.insert(s.skill.name.clone()) => resolved.push(Ok(s.skill.clone())),
                Some(_) => {}
            }
        }
        SkillPolicy::resolve(resolved)
    }

    /// DeerFlow's `SkillActivationMiddleware`: when the latest user message starts with
    /// `/skill-name` and no model reply has answered it yet, the skill it names is
    /// activated (or the run is told why not).
    pub fn slash_activation(&self, messages: &[Message]) -> Option<SlashActivation> {
        let target = messages.iter().rposition(is_real_user_message)?;
        if messages[target + 1..]
            .iter()
            .any(|m| matches!(m, Message::Ai { .. }))
        {
            return None;
        }
        let Message::Human { content, .. } = &messages[target] else {
            return None;
        };
        let reference = parse_slash(content)?;
        let failed = |text: &str| {
            Some(SlashActivation::Failed(text.replacen(
                "{name}",
                reference.name,
                1,
            )))
        };
        let installed = self.scan();
        let Some(found) = installed.iter().find(|s| s.skill.name == reference.name) else {
            return failed(SLASH_NOT_INSTALLED);
        };
        if !found.enabled {
            return failed(SLASH_DISABLED);
        }
        let Some(text) = self.read_inside_root(&found.dir.join(SKILL_FILE)) else {
            return failed(SLASH_NOT_LOADED);
        };
        Some(SlashActivation::Activated {
            reminder: activation_reminder(found, &text, reference.remaining),
            skill: ActiveSkill {
                name: found.skill.name.clone(),
                path: found.container_file.clone(),
                source: SkillSource::Slash,
            },
        })
    }

    /// A `SKILL.md` whose real path stays inside the skills root.
    fn read_inside_root(&self, file: &Path) -> Option<String> {
        let root = self.root.as_ref()?.canonicalize().ok()?;
        let file = file.canonicalize().ok()?;
        if !file.starts_with(&root) || !file.is_file() {
            tracing::warn!("{} is outside the skills root", file.display());
            return None;
        }
        std::fs::read_to_string(file).ok()
    }

    /// DeerFlow's `skill_context` capture: a `read_file` call whose path (normalised) is
    /// a `SKILL.md` under the skills root, answered with a result that is not an error,
    /// activates the skill (named after its directory).
    pub fn read_activation(&self, call: &ToolCall, result: &StateUpdate) -> Option<ActiveSkill> {
        if call.name != READ_TOOL {
            return None;
        }
        let raw = PATH_ARGS
            .iter()
            .find_map(|key| call.args.get(key).and_then(Value::as_str))
            .filter(|p| !p.is_empty())?;
        let root = normpath(match self.container_root.trim_end_matches('/') {
            "" => "/",
            root => root,
        });
        let path = normpath(raw);
        let under = path == root || path.starts_with(&format!("{}/", root.trim_end_matches('/')));
        let (dir, file) = path.rsplit_once('/')?;
        if !under || file != SKILL_FILE {
            return None;
        }
        let succeeded = result.messages.iter().any(|m| {
            matches!(m, Message::Tool { tool_call_id, status: ToolStatus::Success, content, .. }
                if *tool_call_id == call.id && !content.trim_start().starts_with("Error:"))
        });
        if !succeeded {
            return None;
        }
        Some(ActiveSkill {
            name: dir.rsplit('/').next().unwrap_or_default().to_owned(),
            path: path.clone(),
            source: SkillSource::Read,
        })
    }
}

/// Puts the activation reminder right before the latest user message (for this model
/// call only: it is not part of the state).
pub fn insert_reminder(messages: &mut Vec<Message>, reminder: String) {
    let at = messages
        .iter()
        .rposition(is_real_user_message)
        .unwrap_or(messages.len());
    messages.insert(
        at,
        Message::Human {
            content: reminder,
            name: None,
            hide_from_ui: true,
            additional_kwargs: None,
        },
    );
}

/// `describe_skill`'s reply when nothing matches.
pub const NO_SKILLS_MATCHED: &str = "No skills matched: {query}";

impl SkillStore {
    /// `describe_skill(name)` (spec A.3): one block per enabled skill named (names
    /// separated by commas; a name that is no skill's matches the skills whose names
    /// contain it, case-insensitively), within `allowed` when the agent narrows its skills.
    pub fn describe(&self, query: &str, allowed: Option<&HashSet<String>>) -> String {
        let skills: Vec<InstalledSkill> = self
            .scan()
            .into_iter()
            .filter(|s| s.enabled && allowed.is_none_or(|a| a.contains(&s.skill.name)))
            .collect();
        let mut found: Vec<&InstalledSkill> = Vec::new();
        for wanted in query.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            let exact: Vec<&InstalledSkill> =
                skills.iter().filter(|s| s.skill.name == wanted).collect();
            let matched = if exact.is_empty() {
                let lower = wanted.to_lowercase();
                skills
                    .iter()
                    .filter(|s| s.skill.name.to_lowercase().contains(&lower))
                    .collect()
            } else {
                exact
            };
            for s in matched {
                if !found.iter().any(|f| f.skill.name == s.skill.name) {
                    found.push(s);
                }
            }
        }
        if found.is_empty() {
            return NO_SKILLS_MATCHED.replacen("{query}", query, 1);
        }
        found
            .iter()
            .map(|s| {
                let label = if s.category == CUSTOM_CATEGORY {
                    "[custom, editable]"
                } else {
                    "[built-in]"
                };
                let tools = match &s.skill.allowed_tools {
                    Some(tools) if !tools.is_empty() => tools.join(", "),
                    _ => "(all)".to_owned(),
                };
                format!(
                    "## Skill: {}\n- Description: {} {label}\n- Allowed tools: {tools}\n- Location: {}",
                    s.skill.name, s.skill.description, s.container_file
                )
            })
            .collect::<Vec<_>>()
            .join("\n\n")
    }
}

/// A user's own turn (not a summary, not a hidden reminder).
pub(crate) fn is_real_user_message(message: &Message) -> bool {
    matches!(message, Message::Human { name, hide_from_ui: false, .. }
        if name.as_deref() != Some(SUMMARY_MESSAGE_NAME))
}

/// DeerFlow's `<slash_skill_activation>` reminder, with the skill's content escaped.
fn activation_reminder(found: &InstalledSkill, content: &str, remaining: &str) -> String {
    let request = if remaining.is_empty() {
        SLASH_NO_TASK_TEXT
    } else {
        remaining
    };
    let name = escape(&found.skill.name, true);
    let hash = hex::encode(Sha256::digest(content.as_bytes()));
    format!(
        "<slash_skill_activation>\nThe user explicitly activated the `{name}` skill for this turn.\nTreat the task text as:\n<user_request>\n{request}\n</user_request>\n\nFollow this skill before choosing a general workflow. Load supporting resources from the same skill directory only when needed.\n\n<skill name=\"{name}\" category=\"{category}\" path=\"{path}\" sha256=\"{hash}\" editable=\"{editable}\">\n<skill_content encoding=\"xml-escaped\">\n{content}\n</skill_content>\n</skill>\n</slash_skill_activation>",
        request = escape(request, false),
        category = escape(found.category, true),
        path = escape(&found.container_file, true),
        editable = found.category == CUSTOM_CATEGORY,
        content = escape(content, false),
    )
}

/// Python's `html.escape` (`quote` also escapes both quote characters).
fn escape(text: &str, quote: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' if quote => out.push_str("&quot;"),
            '\'' if quote => out.push_str("&#x27;"),
            c => out.push(c),
        }
    }
    out
}

/// Directories at or under `dir` holding a `SKILL.md`, in sorted walk order.
fn collect_skill_dirs(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    if depth > MAX_SCAN_DEPTH || !dir.is_dir() {
        return;
    }
    if dir.join(SKILL_FILE).is_file() {
        out.push(dir.to_path_buf());
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut children: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    children.sort();
    for child in children {
        collect_skill_dirs(&child, depth + 1, out);
    }
}

/// Python's `posixpath.normpath`.
fn normpath(path: &str) -> String {
    if path.is_empty() {
        return ".".to_owned();
    }
    let leading = if path.starts_with("//") && !path.starts_with("///") {
        "//"
    } else if path.starts_with('/') {
        "/"
    } else {
        ""
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." if parts.last().is_some_and(|p| *p != "..") => {
                parts.pop();
            }
            ".." if !leading.is_empty() => {}
            part => parts.push(part),
        }
    }
    let joined = format!("{leading}{}", parts.join("/"));
    if joined.is_empty() {
        ".".to_owned()
    } else {
        joined
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
#[path = "skills_tests.rs"]
mod tests;
