//! `skill_manage` (spec 3.8 and G): the agent creates, edits, patches and deletes the
//! user's own custom skills (`{skills root}/users/{user}/custom/{name}/`) and their
//! supporting files. Public and shared skills are read-only. Every action on one
//! (user, skill) holds that skill's async lock for its whole length, scans included, so
//! two edits of one skill run one after the other while other skills go on in parallel;
//! the filesystem work runs on blocking threads, never on the run's own. A write passes
//! front matter validation, the static scan of the whole candidate skill (`scan`) and
//! the LLM scan (`moderation`), then is written and recorded in the skill's history.

pub mod moderation;
pub mod scan;
pub mod validation;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, Weak};

use antler_protocol::config::AppConfig;
use serde_json::{json, Value};

use self::moderation::{Decision, ScanInput, Verdict};
use self::scan::{CandidateFile, Finding};
use super::skills::{SkillStore, CUSTOM_CATEGORY, SKILL_FILE};
use crate::catalog::builtins::SKILL_MANAGE;
use crate::middleware::tool_error::{FailureClass, ToolFailure, TOOL_FAILED};
use crate::model::ChatModel;
use crate::thread::state::{Message, StateUpdate, ToolCall, ToolStatus};

pub const CREATED: &str = "Created custom skill '{n}'.";
pub const UPDATED: &str = "Updated custom skill '{n}'.";
pub const PATCHED: &str =
    "Patched custom skill '{n}' ({k} replacement(s) applied, {m} match(es) found).";
pub const DELETED: &str = "Deleted custom skill '{n}'.";
pub const WROTE: &str = "Wrote '{path}' for custom skill '{n}'.";
pub const REMOVED: &str = "Removed '{path}' from custom skill '{n}'.";

pub const ALREADY_EXISTS: &str = "Custom skill '{n}' already exists.";
pub const NOT_FOUND: &str = "Custom skill '{n}' not found.";
pub const BUILT_IN: &str = "'{n}' is a built-in skill. Use the skill_manage tool to create your own version — it will shadow the built-in one.";
pub const LEGACY: &str = "'{n}' is a legacy shared skill (not editable). To customise it, create your own version with the same name — it will shadow the shared one.";
pub const READ_ONLY_UNKNOWN_ACTION: &str = "'{n}' is a read-only skill (built-in or legacy shared). Create a custom skill with the same name to shadow it.";
pub const UNSUPPORTED_ACTION: &str = "Unsupported action '{a}'.";
pub const CONTENT_REQUIRED: &str = "content is required for {a}.";
pub const FIND_REPLACE_REQUIRED: &str = "find and replace are required for patch.";
pub const PATCH_NOT_FOUND: &str = "Patch target not found in SKILL.md.";
pub const PATCH_COUNT: &str = "Expected {n} replacements but found {m}.";
pub const PATH_CONTENT_REQUIRED: &str = "path and content are required for write_file.";
pub const PATH_REQUIRED: &str = "path is required for remove_file.";
pub const SUPPORT_NOT_FOUND: &str = "Supporting file '{p}' not found for skill '{n}'.";
pub const SCAN_BLOCKED: &str = "Security scan blocked the write: {reason}";
pub const SCAN_REJECTED_EXECUTABLE: &str = "Security scan rejected executable content: {reason}";
pub const STATIC_SCAN_FAILED: &str = "Static security scan failed for skill '{n}': {error}";
/// The run has no user directory for custom skills (no skills root, or an unsafe user id).
pub const NO_USER_SKILLS: &str =
    "Custom skills are not available in this run (no skills root or no valid user id).";

/// Where a supporting file is executable for the LLM scan.
const EXECUTABLE_MARKER: &str = "scripts/";
/// The history directory inside a user's custom skills directory.
const HISTORY_DIR: &str = ".history";

/// `skill_manage`'s configuration: whether it runs at all in this run, the static scan
/// switch (`skill_scan.enabled`), `skill_evolution.security_fail_closed`, and the model the
/// LLM scan asks (`skill_evolution.moderation_model_name`; `None`: the run's own).
#[derive(Clone)]
pub struct SkillManageSettings {
    pub static_scan: bool,
    pub fail_closed: bool,
    pub moderation_model: Option<std::sync::Arc<dyn ChatModel>>,
}

impl std::fmt::Debug for SkillManageSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SkillManageSettings")
            .field("static_scan", &self.static_scan)
            .field("fail_closed", &self.fail_closed)
            .field(
                "moderation_model",
                &self.moderation_model.as_ref().map(|m| m.name().to_owned()),
            )
            .finish()
    }
}

impl Default for SkillManageSettings {
    fn default() -> Self {
        SkillManageSettings {
            static_scan: true,
            fail_closed: true,
            moderation_model: None,
        }
    }
}

impl SkillManageSettings {
    /// `Some` when `skill_evolution.enabled`; the scan asks the run's model.
    pub fn from_config(app: &AppConfig) -> Option<Self> {
        app.skill_evolution.enabled.then(|| SkillManageSettings {
            static_scan: app
                .other
                .get("skill_scan")
                .and_then(|s| s.get("enabled"))
                .and_then(Value::as_bool)
                .unwrap_or(true),
            fail_closed: app.skill_evolution.security_fail_closed,
            moderation_model: None,
        })
    }
}

/// The moderation model `skill_evolution.moderation_model_name` names when it cannot be
/// built (not in `models:`, a missing key): every scan it is asked fails with the reason,
/// so the write is refused when `security_fail_closed` (DeerFlow's `create_chat_model`
/// raises there too).
pub struct UnavailableModel {
    pub name: String,
    pub reason: String,
}

impl ChatModel for UnavailableModel {
    fn name(&self) -> &str {
        &self.name
    }

    fn complete<'a>(
        &'a self,
        _request: crate::model::ModelRequest<'a>,
    ) -> futures::future::BoxFuture<'a, Result<crate::model::ModelReply, crate::model::ModelError>>
    {
        Box::pin(async move {
            Err(crate::model::ModelError::InvalidConfig {
                model: self.name.clone(),
                message: self.reason.clone(),
            })
        })
    }
}

/// A failure the model sees: DeerFlow raises `ValueError` or `FileNotFoundError`.
#[derive(Debug)]
enum ActionError {
    Value(String),
    NotFound(String),
    /// A scan's block: the whole text reaches the model, never cut mid-reason.
    Blocked(String),
}

impl ActionError {
    fn value(text: impl Into<String>) -> Self {
        ActionError::Value(text.into())
    }
}

/// The per-(skills directory, skill) locks, held weakly: a lock lives while an action
/// holds or waits for it. One registry per process, since every run of the process may
/// write the same directories.
type LockKey = (PathBuf, String);
static LOCKS: LazyLock<Mutex<HashMap<LockKey, Weak<tokio::sync::Mutex<()>>>>> =
    LazyLock::new(Mutex::default);

fn skill_lock(user_dir: &Path, name: &str) -> Arc<tokio::sync::Mutex<()>> {
    // Held for a map lookup only, never across an await.
    let mut locks = LOCKS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    locks.retain(|_, lock| lock.strong_count() > 0);
    let key = (user_dir.to_path_buf(), name.to_owned());
    if let Some(lock) = locks.get(&key).and_then(Weak::upgrade) {
        return lock;
    }
    let lock = Arc::new(tokio::sync::Mutex::new(()));
    locks.insert(key, Arc::downgrade(&lock));
    lock
}

/// What one `skill_manage` call needs from its run.
pub struct SkillManager<'a> {
    pub store: &'a SkillStore,
    pub settings: &'a SkillManageSettings,
    /// The run's model, which runs the LLM scan.
    pub model: &'a dyn ChatModel,
    pub thread_id: &'a str,
}

/// The parsed arguments.
struct Args {
    action: String,
    name: String,
    content: Option<String>,
    path: Option<String>,
    find: Option<String>,
    replace: Option<String>,
    expected_count: Option<usize>,
}

fn parse_args(args: &Value) -> Result<Args, ToolFailure> {
    let text = |key: &str| -> Result<Option<String>, ToolFailure> {
        match args.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(ToolFailure::new(
                FailureClass::ValidationError,
                format!("{key}: must be a string"),
            )),
        }
    };
    let required = |key: &str| {
        text(key)?.ok_or_else(|| {
            ToolFailure::new(
                FailureClass::ValidationError,
                format!("{key}: field required (a string)"),
            )
        })
    };
    let expected_count = match args.get("expected_count") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .filter(|n| *n >= 1)
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| {
                    ToolFailure::new(
                        FailureClass::ValidationError,
                        "expected_count: must be an integer of at least 1",
                    )
                })?,
        ),
    };
    Ok(Args {
        action: required("action")?,
        name: required("name")?,
        content: text("content")?,
        path: text("path")?,
        find: text("find")?,
        replace: text("replace")?,
        expected_count,
    })
}

/// The write an action makes once both scans pass.
enum Write {
    Skill { content: String, create: bool },
    Support { target: PathBuf, content: String },
}

/// An action's checked plan: the write, what the scans see, and the reply.
struct Plan {
    write: Write,
    candidate: Vec<CandidateFile>,
    /// The scanned file's path inside the skill, and whether it is executable.
    scan_path: String,
    executable: bool,
    content: String,
    prev_content: Option<String>,
    reply: String,
}

impl SkillManager<'_> {
    /// Runs one call; the reply is the tool message.
    pub async fn execute(&self, call: &ToolCall) -> Result<StateUpdate, ToolFailure> {
        let args = parse_args(&call.args)?;
        let name = validation::skill_name(&args.name)
            .map_err(|e| ToolFailure::new(FailureClass::ValueError, e))?
            .to_owned();
        let (user_dir, _) = self
            .store
            .user_custom_dir()
            .ok_or_else(|| ToolFailure::new(FailureClass::ValueError, NO_USER_SKILLS))?;
        let lock = skill_lock(&user_dir, &name);
        let _held = lock.lock().await;
        match self.action(&args, &name, &user_dir).await {
            Ok(reply) => Ok(StateUpdate::messages([Message::tool(
                &call.id,
                SKILL_MANAGE,
                reply,
                ToolStatus::Success,
            )])),
            Err(ActionError::Value(text)) => Err(ToolFailure::new(FailureClass::ValueError, text)),
            Err(ActionError::NotFound(text)) => {
                Err(ToolFailure::new(FailureClass::FileNotFoundError, text))
            }
            Err(ActionError::Blocked(text)) => Ok(StateUpdate::messages([Message::tool(
                &call.id,
                SKILL_MANAGE,
                TOOL_FAILED
                    .replacen("{name}", SKILL_MANAGE, 1)
                    .replacen("{class}", "ValueError", 1)
                    .replacen("{detail}", text.trim(), 1),
                ToolStatus::Error,
            )])),
        }
    }

    /// One action, by kind: a write (planned, scanned, then made), a removal, or an
    /// action `skill_manage` does not have.
    async fn action(
        &self,
        args: &Args,
        name: &str,
        user_dir: &Path,
    ) -> Result<String, ActionError> {
        match args.action.as_str() {
            "create" | "edit" | "patch" | "write_file" => self.write(args, name, user_dir).await,
            "delete" | "remove_file" => self.remove(args, name, user_dir).await,
            other => self.unsupported(name, other).await,
        }
    }

    /// `delete` (the whole skill) or `remove_file` (one support file), each with its
    /// history entry.
    async fn remove(
        &self,
        args: &Args,
        name: &str,
        user_dir: &Path,
    ) -> Result<String, ActionError> {
        let skill_dir = user_dir.join(name);
        let action = args.action.as_str();
        let store = self.store.clone();
        let (name, action) = (name.to_owned(), action.to_owned());
        let (path, thread) = (args.path.clone(), self.thread_id.to_owned());
        let user_dir = user_dir.to_path_buf();
        blocking(move || {
            ensure_editable(&store, &skill_dir, &name)?;
            if action == "delete" {
                let prev = std::fs::read_to_string(skill_dir.join(SKILL_FILE)).ok();
                std::fs::remove_dir_all(&skill_dir).map_err(io_error)?;
                history(
                    &user_dir, &name, "delete", &thread, SKILL_FILE, prev, None, None,
                );
                return Ok(DELETED.replacen("{n}", &name, 1));
            }
            let path = path
                .filter(|p| !p.is_empty())
                .ok_or_else(|| ActionError::value(PATH_REQUIRED))?;
            let target = validation::support_path(&skill_dir, &path).map_err(ActionError::value)?;
            if !target.is_file() {
                return Err(ActionError::NotFound(
                    SUPPORT_NOT_FOUND
                        .replacen("{p}", &path, 1)
                        .replacen("{n}", &name, 1),
                ));
            }
            let prev = std::fs::read_to_string(&target).ok();
            std::fs::remove_file(&target).map_err(io_error)?;
            history(
                &user_dir,
                &name,
                "remove_file",
                &thread,
                &path,
                prev,
                None,
                None,
            );
            Ok(REMOVED
                .replacen("{path}", &path, 1)
                .replacen("{n}", &name, 1))
        })
        .await
    }

    /// An action `skill_manage` does not have: read-only for a shared skill of that name,
    /// unsupported otherwise.
    async fn unsupported(&self, name: &str, other: &str) -> Result<String, ActionError> {
        let fill = |t: &str| t.replacen("{n}", name, 1);
        let store = self.store.clone();
        let shared = {
            let name = name.to_owned();
            blocking(move || {
                Ok(store
                    .scan()
                    .into_iter()
                    .any(|s| s.skill.name == name && s.category != CUSTOM_CATEGORY))
            })
            .await?
        };
        Err(ActionError::value(if shared {
            fill(READ_ONLY_UNKNOWN_ACTION)
        } else {
            UNSUPPORTED_ACTION.replacen("{a}", other, 1)
        }))
    }

    /// A write action: its plan, the scans of the skill as it would be, then the write
    /// and its history entry.
    async fn write(&self, args: &Args, name: &str, user_dir: &Path) -> Result<String, ActionError> {
        let skill_dir = user_dir.join(name);
        let action = args.action.as_str();
        let plan = {
            let store = self.store.clone();
            let (name, action) = (name.to_owned(), action.to_owned());
            let (content, path, find, replace, expected) = (
                args.content.clone(),
                args.path.clone(),
                args.find.clone(),
                args.replace.clone(),
                args.expected_count,
            );
            let skill_dir = skill_dir.clone();
            blocking(move || {
                plan(
                    &store, &skill_dir, &name, &action, content, path, find, replace, expected,
                )
            })
            .await?
        };
        let (findings, verdict) = self.scan_plan(name, &plan).await?;
        let (name, action, thread) = (
            name.to_owned(),
            action.to_owned(),
            self.thread_id.to_owned(),
        );
        let user_dir = user_dir.to_path_buf();
        blocking(move || {
            match &plan.write {
                Write::Skill { content, create } => {
                    if *create {
                        std::fs::create_dir_all(&skill_dir).map_err(io_error)?;
                    }
                    write_atomically(&skill_dir.join(SKILL_FILE), content.as_bytes())?;
                }
                Write::Support { target, content } => {
                    if let Some(parent) = target.parent() {
                        std::fs::create_dir_all(parent).map_err(io_error)?;
                    }
                    // Checked again now the directories exist (a symlink placed since).
                    let relative = target
                        .strip_prefix(&skill_dir)
                        .map(|r| r.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    validation::support_path(&skill_dir, &relative).map_err(ActionError::value)?;
                    write_atomically(target, content.as_bytes())?;
                }
            }
            history(
                &user_dir,
                &name,
                &action,
                &thread,
                &plan.scan_path,
                plan.prev_content.clone(),
                Some(plan.content.clone()),
                Some((&verdict, &findings)),
            );
            Ok(plan.reply)
        })
        .await
    }

    /// The static scan (when on) and the moderation model's verdict on a plan: a blocking
    /// finding, a block verdict, or an executable the verdict does not allow refuses it.
    async fn scan_plan(
        &self,
        name: &str,
        plan: &Plan,
    ) -> Result<(Vec<Finding>, Verdict), ActionError> {
        let findings = if self.settings.static_scan {
            let candidate = plan.candidate.clone();
            let findings = tokio::task::spawn_blocking(move || scan::scan(&candidate))
                .await
                .map_err(|e| {
                    ActionError::value(STATIC_SCAN_FAILED.replacen("{n}", name, 1).replacen(
                        "{error}",
                        &e.to_string(),
                        1,
                    ))
                })?;
            if scan::blocking(&findings) {
                return Err(ActionError::Blocked(scan::blocked_message(name, &findings)));
            }
            findings
        } else {
            Vec::new()
        };
        let verdict = moderation::scan(
            self.model,
            &ScanInput {
                skill: name,
                path: &plan.scan_path,
                executable: plan.executable,
                content: &plan.content,
                findings: &findings,
            },
            self.settings.fail_closed,
        )
        .await;
        if verdict.decision == Decision::Block {
            return Err(ActionError::Blocked(SCAN_BLOCKED.replacen(
                "{reason}",
                &verdict.reason,
                1,
            )));
        }
        if plan.executable && verdict.decision != Decision::Allow {
            return Err(ActionError::Blocked(SCAN_REJECTED_EXECUTABLE.replacen(
                "{reason}",
                &verdict.reason,
                1,
            )));
        }
        Ok((findings, verdict))
    }
}

/// Checks and prepares one write action (create, edit, patch, write_file).
#[allow(clippy::too_many_arguments)]
fn plan(
    store: &SkillStore,
    skill_dir: &Path,
    name: &str,
    action: &str,
    content: Option<String>,
    path: Option<String>,
    find: Option<String>,
    replace: Option<String>,
    expected: Option<usize>,
) -> Result<Plan, ActionError> {
    let mut plan = match action {
        "create" => plan_create(skill_dir, name, content)?,
        "edit" => plan_edit(store, skill_dir, name, content)?,
        "patch" => plan_patch(store, skill_dir, name, find, replace, expected)?,
        _ => plan_support(store, skill_dir, name, path, content)?,
    };
    plan.candidate = candidate_after(skill_dir, &plan)?;
    Ok(plan)
}

/// `create`: a new skill from its full SKILL.md.
fn plan_create(skill_dir: &Path, name: &str, content: Option<String>) -> Result<Plan, ActionError> {
    let fill = |t: &str| t.replacen("{n}", name, 1);
    let skill_file = skill_dir.join(SKILL_FILE);
    if skill_file.exists() {
        return Err(ActionError::value(fill(ALREADY_EXISTS)));
    }
    let content =
        content.ok_or_else(|| ActionError::value(CONTENT_REQUIRED.replacen("{a}", "create", 1)))?;
    validation::frontmatter(&content, name).map_err(ActionError::Value)?;
    Ok(Plan {
        write: Write::Skill {
            content: content.clone(),
            create: true,
        },
        candidate: Vec::new(),
        scan_path: SKILL_FILE.to_owned(),
        executable: false,
        content,
        prev_content: None,
        reply: fill(CREATED),
    })
}

/// `edit`: the whole SKILL.md replaced.
fn plan_edit(
    store: &SkillStore,
    skill_dir: &Path,
    name: &str,
    content: Option<String>,
) -> Result<Plan, ActionError> {
    let fill = |t: &str| t.replacen("{n}", name, 1);
    let skill_file = skill_dir.join(SKILL_FILE);
    ensure_editable(store, skill_dir, name)?;
    let content =
        content.ok_or_else(|| ActionError::value(CONTENT_REQUIRED.replacen("{a}", "edit", 1)))?;
    validation::frontmatter(&content, name).map_err(ActionError::Value)?;
    let prev = std::fs::read_to_string(&skill_file).ok();
    Ok(Plan {
        write: Write::Skill {
            content: content.clone(),
            create: false,
        },
        candidate: Vec::new(),
        scan_path: SKILL_FILE.to_owned(),
        executable: false,
        content,
        prev_content: prev,
        reply: fill(UPDATED),
    })
}

/// `patch`: `find` replaced by `replace` in SKILL.md, exactly `expected` times (1).
fn plan_patch(
    store: &SkillStore,
    skill_dir: &Path,
    name: &str,
    find: Option<String>,
    replace: Option<String>,
    expected: Option<usize>,
) -> Result<Plan, ActionError> {
    let fill = |t: &str| t.replacen("{n}", name, 1);
    let skill_file = skill_dir.join(SKILL_FILE);
    ensure_editable(store, skill_dir, name)?;
    let (Some(find), Some(replace)) = (find.filter(|f| !f.is_empty()), replace) else {
        return Err(ActionError::value(FIND_REPLACE_REQUIRED));
    };
    let current = std::fs::read_to_string(&skill_file).map_err(io_error)?;
    let found = current.matches(find.as_str()).count();
    if found == 0 {
        return Err(ActionError::value(PATCH_NOT_FOUND));
    }
    let wanted = expected.unwrap_or(1);
    if found != wanted {
        return Err(ActionError::value(
            PATCH_COUNT
                .replacen("{n}", &wanted.to_string(), 1)
                .replacen("{m}", &found.to_string(), 1),
        ));
    }
    let content = current.replacen(find.as_str(), &replace, wanted);
    validation::frontmatter(&content, name).map_err(ActionError::Value)?;
    let reply = fill(PATCHED)
        .replacen("{k}", &wanted.to_string(), 1)
        .replacen("{m}", &found.to_string(), 1);
    Ok(Plan {
        write: Write::Skill {
            content: content.clone(),
            create: false,
        },
        candidate: Vec::new(),
        scan_path: SKILL_FILE.to_owned(),
        executable: false,
        content,
        prev_content: Some(current),
        reply,
    })
}

/// `write_file`: one support file of the skill, inside its directory.
fn plan_support(
    store: &SkillStore,
    skill_dir: &Path,
    name: &str,
    path: Option<String>,
    content: Option<String>,
) -> Result<Plan, ActionError> {
    ensure_editable(store, skill_dir, name)?;
    let (Some(path), Some(content)) = (path.filter(|p| !p.is_empty()), content) else {
        return Err(ActionError::value(PATH_CONTENT_REQUIRED));
    };
    let target = validation::support_path(skill_dir, &path).map_err(ActionError::value)?;
    let prev = std::fs::read_to_string(&target).ok();
    let reply = WROTE.replacen("{path}", &path, 1).replacen("{n}", name, 1);
    let executable = path.contains(EXECUTABLE_MARKER);
    Ok(Plan {
        write: Write::Support {
            target,
            content: content.clone(),
        },
        candidate: Vec::new(),
        scan_path: path,
        executable,
        content,
        prev_content: prev,
        reply,
    })
}

/// The whole skill as it would be after the plan's write (DeerFlow scans only SKILL.md
/// for create, edit and patch; here every file of the skill is scanned).
fn candidate_after(skill_dir: &Path, plan: &Plan) -> Result<Vec<CandidateFile>, ActionError> {
    let mut candidate = if skill_dir.is_dir() {
        read_skill_files(skill_dir)?
    } else {
        Vec::new()
    };
    let relative = match &plan.write {
        Write::Skill { .. } => SKILL_FILE.to_owned(),
        Write::Support { .. } => plan.scan_path.clone(),
    };
    candidate.retain(|f| candidate_path(f) != relative);
    candidate.push(CandidateFile::Regular {
        path: relative,
        bytes: plan.content.clone().into_bytes(),
    });
    Ok(candidate)
}

fn candidate_path(file: &CandidateFile) -> &str {
    match file {
        CandidateFile::Regular { path, .. }
        | CandidateFile::Oversized { path, .. }
        | CandidateFile::Symlink { path } => path,
    }
}

/// Every file of a skill directory (symlinks reported, not followed).
fn read_skill_files(dir: &Path) -> Result<Vec<CandidateFile>, ActionError> {
    fn walk(
        root: &Path,
        dir: &Path,
        depth: usize,
        out: &mut Vec<CandidateFile>,
    ) -> std::io::Result<()> {
        let mut entries: Vec<_> = std::fs::read_dir(dir)?.filter_map(Result::ok).collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let path = entry.path();
            let relative = path
                .strip_prefix(root)
                .map(|r| r.to_string_lossy().into_owned())
                .unwrap_or_default();
            let meta = std::fs::symlink_metadata(&path)?;
            if meta.file_type().is_symlink() {
                out.push(CandidateFile::Symlink { path: relative });
            } else if meta.is_dir() {
                if depth < 16 {
                    walk(root, &path, depth + 1, out)?;
                }
            } else if meta.len() > scan::MAX_FILE_BYTES {
                out.push(CandidateFile::Oversized {
                    path: relative,
                    size: meta.len(),
                });
            } else {
                out.push(CandidateFile::Regular {
                    path: relative,
                    bytes: std::fs::read(&path)?,
                });
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, dir, 0, &mut out)
        .map_err(|e| ActionError::value(format!("cannot read the skill: {e}")))?;
    Ok(out)
}

/// DeerFlow's "ensure editable": the user's own skill, or why not.
fn ensure_editable(store: &SkillStore, skill_dir: &Path, name: &str) -> Result<(), ActionError> {
    if skill_dir.join(SKILL_FILE).is_file() {
        return Ok(());
    }
    let shared = store
        .scan()
        .into_iter()
        .find(|s| s.skill.name == name && s.category != CUSTOM_CATEGORY);
    let fill = |t: &str| t.replacen("{n}", name, 1);
    Err(match shared.map(|s| s.category) {
        Some("legacy") => ActionError::value(fill(LEGACY)),
        Some(_) => ActionError::value(fill(BUILT_IN)),
        None => ActionError::NotFound(fill(NOT_FOUND)),
    })
}

fn io_error(e: std::io::Error) -> ActionError {
    ActionError::value(e.to_string())
}

/// Writes through a temporary file and a rename, so a reader never sees half a file.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), ActionError> {
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = path.with_file_name(format!(
        ".{file_name}.{}.tmp",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::write(&temp, bytes).map_err(io_error)?;
    std::fs::rename(&temp, path).map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        io_error(e)
    })
}

/// Appends one record to `{user_dir}/.history/{name}.jsonl` (a failure is logged: the
/// write it records is done).
#[allow(clippy::too_many_arguments)]
fn history(
    user_dir: &Path,
    name: &str,
    action: &str,
    thread_id: &str,
    file_path: &str,
    prev_content: Option<String>,
    new_content: Option<String>,
    scanner: Option<(&Verdict, &[Finding])>,
) {
    use std::io::Write as _;
    let record = json!({
        "ts": rfc3339_now(),
        "action": action,
        "author": "agent",
        "thread_id": thread_id,
        "file_path": file_path,
        "prev_content": prev_content,
        "new_content": new_content,
        "scanner": scanner.map(|(verdict, findings)| json!({
            "decision": verdict.decision,
            "reason": verdict.reason,
            "static_findings": findings,
        })),
    });
    let dir = user_dir.join(HISTORY_DIR);
    let written = std::fs::create_dir_all(&dir).and_then(|()| {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(format!("{name}.jsonl")))?;
        writeln!(file, "{record}")
    });
    if let Err(e) = written {
        tracing::warn!(skill = name, "skill history not written: {e}");
    }
}

/// Now in UTC as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub(crate) fn rfc3339_now() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs();
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        now.subsec_millis()
    )
}

/// Runs filesystem work on a blocking thread.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ActionError> + Send + 'static,
) -> Result<T, ActionError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ActionError::value(format!("the skill operation stopped: {e}")))?
}
