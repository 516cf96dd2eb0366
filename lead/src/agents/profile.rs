//! What a run reads of the agent it talks as, once when it is prepared: the SOUL (the
//! custom agent's, under the user's agents then the legacy shared layout; else the user's
//! default agent's `{base}/users/{user}/SOUL.md`, else the operator's `{base}/SOUL.md`) and, from its `config.yaml`, the `skills` whitelist, the
//! `tool_groups` that filter its catalog and the `model` it runs on (a bootstrap run is
//! narrowed to the `bootstrap` skill). Files are read bounded; one that cannot be read
//! counts as absent, with a warning.

use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};

use antler_protocol::config::approvals::RuleConfig;
use serde_yaml::Value as Yaml;

use super::store::{
    legacy_agent_dir, user_agent_dir, user_default_dir, validate_agent_name, CONFIG_FILENAME,
    SOUL_FILENAME,
};
use antler_engine::AgentContext;

/// The largest SOUL or agent config read.
const MAX_AGENT_FILE: u64 = 256 * 1024;
/// The one skill a bootstrap run sees (spec A.9).
pub const BOOTSTRAP_SKILL: &str = "bootstrap";

/// The agent's files as the prompt uses them.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentProfile {
    pub soul: Option<String>,
    /// `None`: every skill.
    pub skills: Option<HashSet<String>>,
    /// `None`: every configured tool group.
    pub tool_groups: Option<Vec<String>>,
    /// The model of `models:` the agent runs on (`None`: the run's or the first).
    pub model: Option<String>,
    /// The agent's approval rules (`approvals:` in its config.yaml: a list of rules, or a
    /// mapping with `rules:`), or why they do not load (the run refuses to start).
    pub approvals: Result<Vec<RuleConfig>, String>,
}

impl Default for AgentProfile {
    fn default() -> Self {
        AgentProfile {
            soul: None,
            skills: None,
            tool_groups: None,
            model: None,
            approvals: Ok(Vec::new()),
        }
    }
}

impl AgentProfile {
    /// Reads the profile of `agent` for `user_id`.
    pub fn load(agent: &AgentContext, user_id: &str) -> AgentProfile {
        if agent.bootstrap {
            return AgentProfile {
                skills: Some([BOOTSTRAP_SKILL.to_owned()].into()),
                ..AgentProfile::default()
            };
        }
        let Some(name) = agent
            .agent_name
            .as_deref()
            .filter(|n| validate_agent_name(n).is_ok())
        else {
            // The user's own default soul, else the operator's global one.
            let soul =
                read_bounded(&user_default_dir(&agent.base_dir, user_id).join(SOUL_FILENAME))
                    .or_else(|| read_bounded(&agent.base_dir.join(SOUL_FILENAME)));
            return AgentProfile {
                soul,
                ..AgentProfile::default()
            };
        };
        let dirs: [PathBuf; 2] = [
            user_agent_dir(&agent.base_dir, user_id, name),
            legacy_agent_dir(&agent.base_dir, name),
        ];
        let Some(dir) = dirs.iter().find(|d| d.is_dir()) else {
            return AgentProfile::default();
        };
        let config: Option<Yaml> = read_bounded(&dir.join(CONFIG_FILENAME))
            .and_then(|text| serde_yaml::from_str(&text).ok());
        let list = |key: &str| -> Option<Vec<String>> {
            let items = config.as_ref()?.get(key)?.as_sequence()?;
            Some(
                items
                    .iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect(),
            )
        };
        AgentProfile {
            soul: read_bounded(&dir.join(SOUL_FILENAME)),
            skills: list("skills").map(|names| names.into_iter().collect()),
            tool_groups: list("tool_groups"),
            model: config
                .as_ref()
                .and_then(|c| c.get("model"))
                .and_then(Yaml::as_str)
                .filter(|m| !m.trim().is_empty())
                .map(str::to_owned),
            approvals: agent_approvals(config.as_ref()),
        }
    }
}

/// The `approvals:` rules of an agent's config.yaml.
fn agent_approvals(config: Option<&Yaml>) -> Result<Vec<RuleConfig>, String> {
    let Some(section) = config.and_then(|c| c.get("approvals")) else {
        return Ok(Vec::new());
    };
    let rules = match section.get("rules") {
        Some(rules) if section.is_mapping() => rules.clone(),
        _ => section.clone(),
    };
    serde_yaml::from_value(rules).map_err(|e| format!("approvals: {e}"))
}

/// A regular file's text, stripped, at most [`MAX_AGENT_FILE`] bytes; `None` when absent,
/// empty or unreadable.
fn read_bounded(path: &Path) -> Option<String> {
    let file = std::fs::File::open(path).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    if let Err(e) = file.take(MAX_AGENT_FILE).read_to_end(&mut bytes) {
        tracing::warn!("cannot read {}: {e}", path.display());
        return None;
    }
    let text = String::from_utf8_lossy(&bytes).trim().to_owned();
    (!text.is_empty()).then_some(text)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_custom_agent_brings_its_soul_and_skills_and_bootstrap_only_its_skill() {
        let base = tempfile::tempdir().unwrap();
        let dir = user_agent_dir(base.path(), "u1", "researcher");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(SOUL_FILENAME), "\n  Curious and exact.\n").unwrap();
        std::fs::write(
            dir.join(CONFIG_FILENAME),
            "name: researcher\nskills: [deep-research]\ntool_groups: [web]\nmodel: fast\n",
        )
        .unwrap();
        std::fs::write(base.path().join(SOUL_FILENAME), "Default soul").unwrap();
        let mut agent = AgentContext::new(base.path());
        assert_eq!(
            AgentProfile::load(&agent, "u1").soul.as_deref(),
            Some("Default soul")
        );
        // A user's own default soul comes before the operator's global one, for that
        // user only.
        let own = user_default_dir(base.path(), "u2");
        std::fs::create_dir_all(&own).unwrap();
        std::fs::write(own.join(SOUL_FILENAME), "Bob's soul").unwrap();
        assert_eq!(
            AgentProfile::load(&agent, "u2").soul.as_deref(),
            Some("Bob's soul")
        );
        assert_eq!(
            AgentProfile::load(&agent, "u1").soul.as_deref(),
            Some("Default soul")
        );
        agent.agent_name = Some("researcher".into());
        let profile = AgentProfile::load(&agent, "u1");
        assert_eq!(profile.soul.as_deref(), Some("Curious and exact."));
        assert_eq!(profile.skills, Some(["deep-research".to_owned()].into()));
        assert_eq!(profile.tool_groups, Some(vec!["web".to_owned()]));
        assert_eq!(profile.model.as_deref(), Some("fast"));
        agent.bootstrap = true;
        let profile = AgentProfile::load(&agent, "u1");
        assert_eq!(profile.soul, None);
        assert_eq!(profile.skills, Some([BOOTSTRAP_SKILL.to_owned()].into()));
    }
}
