//! A run's approval stage (issue 37): the config's `approvals:` policy (its rules and the
//! shipped defaults, compiled once per version of config.yaml: compiling checks every
//! rule's examples), the run's role's rules (`approvals.roles`), its custom agent's
//! (`approvals:` in the agent's config.yaml) and its enabled skills' (`approvals:` in a
//! `SKILL.md` front matter). The strictest matching rule of all of them decides a call.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use antler_engine::ApprovalGate;
use antler_engine::InstalledSkill;
use antler_protocol::approvals::{ApprovalPolicy, PolicyEnv};
use antler_protocol::config::approvals::RuleConfig;
use antler_protocol::config::AppConfig;

use super::PrepareError;

/// The workspace as the sandbox's commands see it (their working directory).
pub const SANDBOX_WORKSPACE: &str = "/mnt/user-data/workspace";

/// The compiled global policy of the last config.yaml seen (the document cache answers the
/// same `Arc` for an unchanged file).
#[derive(Default)]
pub(crate) struct PolicyCache {
    last: Mutex<Option<(Arc<AppConfig>, ApprovalPolicy)>>,
}

impl PolicyCache {
    fn global(&self, app: &Arc<AppConfig>) -> Result<ApprovalPolicy, PrepareError> {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((config, policy)) = last.as_ref() {
            if Arc::ptr_eq(config, app) {
                return Ok(policy.clone());
            }
        }
        let policy = ApprovalPolicy::from_config(&app.approvals, &policy_env(app))
            .map_err(|e| PrepareError::Config(format!("approvals: {e}")))?;
        *last = Some((Arc::clone(app), policy.clone()));
        Ok(policy)
    }

    /// The run's approval stage: the global policy with its role's, agent's and skills'
    /// rules; `None` when no rule applies at all.
    pub(crate) fn gate(
        &self,
        app: &Arc<AppConfig>,
        run: RunLayers<'_>,
    ) -> Result<Option<Arc<ApprovalGate>>, PrepareError> {
        let env = policy_env(app);
        let mut policy = self.global(app)?;
        for (origin, rules) in layers(app, run) {
            let layer = ApprovalPolicy::layer(rules, &origin, &env)
                .map_err(|e| PrepareError::Config(format!("{origin}: {e}")))?;
            policy = policy.with(&layer);
        }
        if policy.is_empty() {
            return Ok(None);
        }
        let deadline = Duration::from_secs(app.approvals.deadline_seconds);
        Ok(Some(ApprovalGate::new(policy, deadline)))
    }
}

/// What the policy's path rules know of the sandbox: its workspace and the host
/// directories mounted writable into it.
pub fn policy_env(app: &AppConfig) -> PolicyEnv {
    PolicyEnv {
        workspace: SANDBOX_WORKSPACE.to_owned(),
        writable_mounts: app
            .sandbox
            .iter()
            .flat_map(|s| s.mounts.iter())
            .filter(|m| !m.read_only)
            .map(|m| m.container_path.clone())
            .collect(),
    }
}

/// The policy a run's subagent tasks carry (`task::approvals`): the config's section, the
/// role's, the agent's and the skills' rules, the sandbox's mounts. `None` when it does not
/// encode (it always does: the config types are plain data).
pub(crate) fn task_approvals(app: &AppConfig, run: RunLayers<'_>) -> Option<String> {
    let env = policy_env(app);
    let layers = layers(app, run)
        .into_iter()
        .map(|(origin, rules)| (origin, rules.to_vec()))
        .collect();
    let task = antler_engine::TaskApprovals {
        config: app.approvals.clone(),
        layers,
        workspace: env.workspace,
        writable_mounts: env.writable_mounts,
        // The thread's approved rules and whether its user answers come per task (`TaskCall`).
        thread_rules: Vec::new(),
        parent_answers: false,
    };
    match task.to_wire() {
        Ok(wire) => Some(wire),
        Err(e) => {
            tracing::error!("the approval policy does not encode for subagents: {e}");
            None
        }
    }
}

/// What a run adds to the config's policy: its role, its custom agent's rules (with the
/// agent's name) and its enabled skills' rules ([`skill_rules`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RunLayers<'a> {
    pub role: Option<&'a str>,
    pub agent: Option<(&'a str, &'a [RuleConfig])>,
    pub skills: &'a [(String, Vec<RuleConfig>)],
}

/// A run's skills' rules, by skill name (scanned once per run: its stage and its tasks'
/// policy take them).
pub(crate) type SkillRules = Vec<(String, Vec<RuleConfig>)>;

/// The rules of the skills a run may use, by skill name: the enabled ones (among
/// `allowed`, the agent's skills, when it names them) that carry `approvals:`.
pub(crate) fn skill_rules(
    installed: &[InstalledSkill],
    allowed: Option<&HashSet<String>>,
) -> SkillRules {
    installed
        .iter()
        .filter(|s| s.enabled && !s.skill.approvals.is_empty())
        .filter(|s| allowed.is_none_or(|names| names.contains(&s.skill.name)))
        .map(|s| (s.skill.name.clone(), s.skill.approvals.clone()))
        .collect()
}

/// The layers beyond the config's own, with their origins: the role's rules
/// (`approvals.roles.<role>`), the custom agent's (`agent <name>`) and each skill's
/// (`skill <name>`), when they have any.
fn layers<'a>(app: &'a AppConfig, run: RunLayers<'a>) -> Vec<(String, &'a [RuleConfig])> {
    let mut layers = Vec::new();
    if let Some((role, rules)) = run
        .role
        .and_then(|r| app.approvals.roles.get(r).map(|rules| (r, rules)))
    {
        layers.push((format!("approvals.roles.{role}"), rules.as_slice()));
    }
    if let Some((name, rules)) = run.agent.filter(|(_, rules)| !rules.is_empty()) {
        layers.push((format!("agent {name}"), rules));
    }
    for (name, rules) in run.skills {
        layers.push((
            antler_protocol::approvals::skill_origin(name),
            rules.as_slice(),
        ));
    }
    layers
}
