//! What the skill_manage tests share: a skills root on disk, a run of the real run loop
//! for one user with a scripted model (whose playbook answers the security scans), and
//! a model that counts the scans in flight at once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use antler_engine::{
    catalog::{builtins, Catalog},
    ChatModel, HostError, Message, ModelError, ModelReply, ModelRequest, RunContext, RunLoop,
    RunSettings, ScriptedModel, SkillManageSettings, SkillStore, ToolHosts, ToolStatus,
};
use antler_protocol::messages::{Reply, Request};
use antler_protocol::Role;
use futures::future::BoxFuture;

/// A scan reply that allows the write.
pub const ALLOW: &str = r#"{"decision":"allow","reason":"Plain workflow instructions."}"#;

/// Hosts that are down (skill_manage needs none).
struct UnreachableHosts;

impl ToolHosts for UnreachableHosts {
    fn request(
        &self,
        role: Role,
        _: Request,
        _: Duration,
    ) -> BoxFuture<'_, Result<Reply, HostError>> {
        Box::pin(async move { Err(HostError::failed(format!("{role:?} unreachable"))) })
    }
}

/// A data root with `skills/` under it.
pub struct Data {
    pub dir: tempfile::TempDir,
}

impl Data {
    pub fn new() -> Data {
        let data = Data {
            dir: tempfile::tempdir().unwrap(),
        };
        std::fs::create_dir_all(data.skills()).unwrap();
        data
    }

    pub fn skills(&self) -> PathBuf {
        self.dir.path().join("skills")
    }

    /// `{skills}/users/{user}/custom/{name}`.
    pub fn custom(&self, user: &str, name: &str) -> PathBuf {
        self.skills()
            .join("users")
            .join(user)
            .join("custom")
            .join(name)
    }

    /// Installs a shared skill under `{skills}/{dir}/{name}`.
    pub fn install(&self, dir: &str, name: &str) {
        let at = self.skills().join(dir).join(name);
        std::fs::create_dir_all(&at).unwrap();
        std::fs::write(at.join("SKILL.md"), skill_md(name, "A shared skill.")).unwrap();
    }

    pub fn store(&self, user: &str) -> SkillStore {
        SkillStore {
            root: Some(self.skills()),
            ..SkillStore::default()
        }
        .for_user(user)
    }
}

/// A valid SKILL.md for `name`.
pub fn skill_md(name: &str, description: &str) -> String {
    format!("---\nname: {name}\ndescription: {description}\n---\n# {name}\n\n1. Step one.\n2. Step two.\n")
}

/// The error text a failed skill_manage call gets.
pub fn failed(class: &str, detail: &str) -> String {
    format!("Error: Tool 'skill_manage' failed with {class}: {detail}. Continue with available context, or choose an alternative tool.")
}

/// Drives one run of `model` for `user` to its end; the tool messages, in order, as
/// (call id, content, status).
pub async fn run_with(
    data: &Data,
    user: &str,
    thread: &str,
    model: Arc<dyn ChatModel>,
) -> Vec<(String, String, ToolStatus)> {
    run_with_settings(data, user, thread, model, SkillManageSettings::default()).await
}

/// [`run_with`] with `skill_manage`'s settings.
pub async fn run_with_settings(
    data: &Data,
    user: &str,
    thread: &str,
    model: Arc<dyn ChatModel>,
    skill_manage: SkillManageSettings,
) -> Vec<(String, String, ToolStatus)> {
    let catalog = Arc::new(
        Catalog::build(
            vec![builtins::skill_manage(), builtins::describe_skill()],
            true,
        )
        .unwrap(),
    );
    let base = data.dir.path().to_path_buf();
    let context = RunContext::local(&base, user, thread, &format!("run-{user}-{thread}"));
    context.paths.create().unwrap();
    let settings = RunSettings {
        skills: data.store(user),
        skill_manage: Some(skill_manage),
        settle: false,
        ..RunSettings::default()
    };
    let mut run = RunLoop::builder(context, model, catalog, Arc::new(UnreachableHosts))
        .settings(settings)
        .start("manage skills")
        .await
        .unwrap();
    let outcome = run.drive().await;
    assert_eq!(outcome.error, None, "{outcome:?}");
    run.state()
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool {
                tool_call_id,
                content,
                status,
                ..
            } => Some((tool_call_id.clone(), content.clone(), *status)),
            _ => None,
        })
        .collect()
}

/// [`run_with`] with the playbook `yaml`.
/// The playbook's `security_scan` answers as the operator's moderation model (a scripted
/// run never moderates itself).
pub async fn run(data: &Data, user: &str, yaml: &str) -> Vec<(String, String, ToolStatus)> {
    let model = Arc::new(ScriptedModel::from_yaml(yaml, "inline").unwrap());
    let settings = SkillManageSettings {
        moderation_model: Some(Arc::new(
            ScriptedModel::from_yaml(yaml, "moderator").unwrap(),
        )),
        ..SkillManageSettings::default()
    };
    run_with_settings(data, user, "t1", model, settings).await
}

/// A blocking [`run`] on a runtime of its own.
pub fn run_blocking(data: &Data, user: &str, yaml: &str) -> Vec<(String, String, ToolStatus)> {
    runtime().block_on(run(data, user, yaml))
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The scans in flight at once, over every [`CountingScans`] sharing it.
#[derive(Default)]
pub struct ScanGauge {
    pub in_flight: AtomicUsize,
    pub most: AtomicUsize,
    pub done: AtomicUsize,
}

/// The scripted model, whose every scan waits (up to `wait`) for `peers` scans to be in
/// flight at once before it answers: scans that can overlap do, scans that are
/// serialised each wait the full `wait` alone.
pub struct CountingScans {
    pub model: ScriptedModel,
    pub gauge: Arc<ScanGauge>,
    pub peers: usize,
    pub wait: Duration,
}

impl ChatModel for CountingScans {
    fn name(&self) -> &str {
        self.model.name()
    }

    fn reads_prompt(&self) -> bool {
        false
    }

    fn complete<'a>(
        &'a self,
        request: ModelRequest<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        self.model.complete(request)
    }

    fn moderate<'a>(
        &'a self,
        system: &'a str,
        user: &'a str,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(async move {
            let now = self.gauge.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.gauge.most.fetch_max(now, Ordering::SeqCst);
            let deadline = Instant::now() + self.wait;
            while self.gauge.most.load(Ordering::SeqCst) < self.peers && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let reply = self.model.moderate(system, user).await;
            self.gauge.in_flight.fetch_sub(1, Ordering::SeqCst);
            self.gauge.done.fetch_add(1, Ordering::SeqCst);
            reply
        })
    }
}

/// The history records of a user's skill.
pub fn history(data: &Data, user: &str, name: &str) -> Vec<serde_json::Value> {
    let file = data
        .skills()
        .join("users")
        .join(user)
        .join("custom/.history")
        .join(format!("{name}.jsonl"));
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}
