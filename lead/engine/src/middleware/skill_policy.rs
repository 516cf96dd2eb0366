//! `SkillToolPolicyMiddleware` (spec 4.3, 2.8): while skills are active, the tools a
//! model may see and call are the union of their `allowed-tools` plus the framework
//! tools; a skill that declares nothing contributes nothing, and when none declares the
//! field everything is allowed. Skills that cannot be loaded are skipped, and when no
//! active skill loads the policy fails closed to the framework tools. `tool_search`
//! results are rewritten so a denied tool is neither promoted nor shown. A skill's
//! front matter may also carry `approvals:` rules (issue 37), compiled when it loads so a
//! rule whose examples fail refuses the skill; the run's approval stage joins them.

use std::collections::HashSet;
use std::path::Path;

use antler_protocol::approvals::{skill_origin, ApprovalPolicy, PolicyEnv, RuleConfig};
use serde::Deserialize;
use serde_json::Value;

use super::error_message;
use crate::catalog::{Promoted, ToolSpec, TOOL_SEARCH_NAME};
use crate::thread::state::{Message, StateUpdate, ToolStatus};

/// A call the active skill policy does not allow.
pub const NOT_ALLOWED_BY_SKILL: &str =
    "Error: Tool '{name}' is not allowed by the active skill policy.";
/// A `tool_search` result whose every match the policy denies.
pub const NO_TOOLS_MATCH_POLICY: &str = "No tools found matching the active skill policy.";
/// A `tool_search` result the policy could not read.
pub const SEARCH_RESULT_UNVERIFIABLE: &str = "Error: tool_search returned a result that could not be validated against the active skill policy.";
/// Tools every skill policy allows.
pub const FRAMEWORK_TOOLS: [&str; 4] = [
    "describe_skill",
    "read_file",
    "review_skill_package",
    TOOL_SEARCH_NAME,
];

/// A skill as the policy reads it: its `SKILL.md` front matter.
#[derive(Clone, Debug, PartialEq)]
pub struct Skill {
    pub name: String,
    /// `description` from the front matter (`""` when absent).
    pub description: String,
    /// `allowed-tools`, when the skill declares it.
    pub allowed_tools: Option<Vec<String>>,
    /// `approvals:`: approval rules (a list, or a mapping with `rules`) that join the
    /// run's policy while the skill is enabled, examples checked at load (none: empty).
    pub approvals: Vec<RuleConfig>,
}

#[derive(Deserialize)]
struct FrontMatter {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default, rename = "allowed-tools")]
    allowed_tools: Option<AllowedTools>,
    #[serde(default)]
    approvals: Option<serde_yaml::Value>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum AllowedTools {
    List(Vec<String>),
    Text(String),
}

/// A skill that could not be loaded (it is skipped by the policy).
#[derive(Debug, thiserror::Error)]
pub enum SkillError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: front matter: {message}")]
    FrontMatter { path: String, message: String },
    /// The skill's `approvals:` rules do not parse or compile (a failing example, a bad
    /// matcher): the skill is refused.
    #[error("skill {name} ({path}): approvals: {message}")]
    Approvals {
        name: String,
        path: String,
        message: String,
    },
    /// An active path that names no installed skill.
    #[error("no installed skill has {path}")]
    Unresolved { path: String },
    /// An active skill switched off in extensions_config.json.
    #[error("skill {name} is disabled")]
    Disabled { name: String },
}

impl Skill {
    /// Loads the skill in `dir` from its `SKILL.md`; `allowed-tools` is a list, or a
    /// string of names separated by commas or spaces.
    pub fn load(dir: &Path) -> Result<Skill, SkillError> {
        let path = dir.join("SKILL.md");
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(&path).map_err(|source| SkillError::Read {
            path: shown.clone(),
            source,
        })?;
        let invalid = |message: String| SkillError::FrontMatter {
            path: shown.clone(),
            message,
        };
        let front = front_matter(&text).ok_or_else(|| invalid("missing (--- ... ---)".into()))?;
        let parsed: FrontMatter =
            serde_yaml::from_str(front).map_err(|e| invalid(e.to_string()))?;
        let fallback = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let name = parsed.name.unwrap_or(fallback);
        let approvals =
            skill_approvals(&name, parsed.approvals).map_err(|message| SkillError::Approvals {
                name: name.clone(),
                path: shown.clone(),
                message,
            })?;
        Ok(Skill {
            name,
            approvals,
            description: parsed.description.unwrap_or_default().trim().to_owned(),
            allowed_tools: parsed.allowed_tools.map(|tools| match tools {
                AllowedTools::List(names) => names,
                AllowedTools::Text(text) => text
                    .split(|c: char| c == ',' || c.is_whitespace())
                    .filter(|n| !n.is_empty())
                    .map(str::to_owned)
                    .collect(),
            }),
        })
    }
}

/// A skill's `approvals:` (a list of rules, or a mapping with `rules`), parsed and
/// compiled as the layer `skill NAME`, so a rule whose examples fail is refused here.
fn skill_approvals(
    name: &str,
    section: Option<serde_yaml::Value>,
) -> Result<Vec<RuleConfig>, String> {
    let rules = match section {
        None | Some(serde_yaml::Value::Null) => return Ok(Vec::new()),
        Some(serde_yaml::Value::Mapping(mut map)) => map
            .remove("rules")
            .ok_or_else(|| "expected a list of rules, or a mapping with rules".to_owned())?,
        Some(list) => list,
    };
    let rules: Vec<RuleConfig> = serde_yaml::from_value(rules).map_err(|e| e.to_string())?;
    ApprovalPolicy::layer(&rules, &skill_origin(name), &PolicyEnv::default())
        .map_err(|e| e.to_string())?;
    Ok(rules)
}

fn front_matter(text: &str) -> Option<&str> {
    let rest = text.strip_prefix("---")?.strip_prefix('\n')?;
    let end = rest.find("\n---")?;
    Some(&rest[..end])
}

/// The active policy: `None` allows every tool.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SkillPolicy {
    allowed: Option<HashSet<String>>,
}

impl SkillPolicy {
    /// The policy of the active skills (their load results, in activation order). No
    /// active skill is the passive policy (everything allowed).
    pub fn resolve(active: Vec<Result<Skill, SkillError>>) -> SkillPolicy {
        if active.is_empty() {
            return SkillPolicy::default();
        }
        let loaded: Vec<Skill> = active
            .into_iter()
            .filter_map(|skill| {
                skill
                    .inspect_err(|e| tracing::warn!("skill skipped by the tool policy: {e}"))
                    .ok()
            })
            .collect();
        if loaded.is_empty() {
            return SkillPolicy::framework_only();
        }
        if loaded.iter().all(|s| s.allowed_tools.is_none()) {
            return SkillPolicy::default();
        }
        let mut allowed: HashSet<String> =
            FRAMEWORK_TOOLS.iter().map(|n| (*n).to_owned()).collect();
        allowed.extend(
            loaded
                .into_iter()
                .flat_map(|s| s.allowed_tools.unwrap_or_default()),
        );
        SkillPolicy {
            allowed: Some(allowed),
        }
    }

    /// Fail-closed: the framework tools only.
    pub fn framework_only() -> SkillPolicy {
        SkillPolicy {
            allowed: Some(FRAMEWORK_TOOLS.iter().map(|n| (*n).to_owned()).collect()),
        }
    }

    pub fn allows(&self, name: &str) -> bool {
        self.allowed.as_ref().is_none_or(|a| a.contains(name))
    }

    /// The tools it allows, sorted; `None`: every tool.
    pub fn allowed(&self) -> Option<Vec<String>> {
        self.allowed.as_ref().map(|a| {
            let mut names: Vec<String> = a.iter().cloned().collect();
            names.sort();
            names
        })
    }

    /// `wrap_model_call`: the tools the policy lets the model see.
    pub fn filter<'c>(&self, tools: Vec<&'c ToolSpec>) -> Vec<&'c ToolSpec> {
        tools.into_iter().filter(|t| self.allows(&t.name)).collect()
    }

    /// `wrap_tool_call`: a denied call gets the policy's error message.
    pub fn check_call(&self, name: &str, tool_call_id: &str) -> Result<(), Message> {
        if self.allows(name) {
            return Ok(());
        }
        Err(error_message(
            tool_call_id,
            name,
            NOT_ALLOWED_BY_SKILL.replacen("{name}", name, 1),
        ))
    }

    /// Rewrites a `tool_search` result: denied names leave the promotion and their
    /// schemas leave the content.
    pub fn rewrite_tool_search(&self, mut update: StateUpdate) -> StateUpdate {
        if self.allowed.is_none() {
            return update;
        }
        if let Some(Promoted { names, .. }) = &mut update.promoted {
            names.retain(|name| self.allows(name));
        }
        for message in &mut update.messages {
            let Message::Tool {
                name,
                content,
                status,
                ..
            } = message
            else {
                continue;
            };
            if name != TOOL_SEARCH_NAME || content.starts_with("No tools found matching: ") {
                continue;
            }
            match serde_json::from_str::<Vec<Value>>(content) {
                Ok(schemas) => {
                    let kept: Vec<Value> = schemas
                        .into_iter()
                        .filter(|s| s["name"].as_str().is_some_and(|n| self.allows(n)))
                        .collect();
                    *content = if kept.is_empty() {
                        NO_TOOLS_MATCH_POLICY.to_owned()
                    } else {
                        serde_json::to_string_pretty(&kept).unwrap_or_default()
                    };
                }
                Err(_) => {
                    *content = SEARCH_RESULT_UNVERIFIABLE.to_owned();
                    *status = ToolStatus::Error;
                }
            }
        }
        update
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn skill(dir: &Path, name: &str, front: &str) -> Result<Skill, SkillError> {
        let skill_dir = dir.join(name);
        std::fs::create_dir_all(&skill_dir).unwrap();
        std::fs::write(
            skill_dir.join("SKILL.md"),
            format!("---\n{front}\n---\n# {name}\n"),
        )
        .unwrap();
        Skill::load(&skill_dir)
    }

    #[test]
    fn the_policy_is_the_union_of_declared_tools_plus_the_framework_tools() {
        let dir = tempfile::tempdir().unwrap();
        let policy = SkillPolicy::resolve(vec![
            skill(
                dir.path(),
                "report",
                "name: report\nallowed-tools: [write_file, bash]",
            ),
            skill(dir.path(), "charts", "allowed-tools: present_files, ls"),
            skill(dir.path(), "legacy", "name: legacy"),
        ]);
        for name in [
            "write_file",
            "bash",
            "present_files",
            "ls",
            "read_file",
            "tool_search",
        ] {
            assert!(policy.allows(name), "{name}");
        }
        assert_eq!(
            policy.check_call("web_fetch", "c1"),
            Err(Message::tool(
                "c1",
                "web_fetch",
                "Error: Tool 'web_fetch' is not allowed by the active skill policy.",
                ToolStatus::Error
            ))
        );
    }

    #[test]
    fn no_declaration_allows_everything_and_no_loadable_skill_fails_closed() {
        let dir = tempfile::tempdir().unwrap();
        let open = SkillPolicy::resolve(vec![skill(dir.path(), "legacy", "name: legacy")]);
        assert!(open.allows("anything"));
        assert!(SkillPolicy::resolve(vec![]).allows("anything"));
        let broken = SkillPolicy::resolve(vec![Skill::load(&dir.path().join("missing"))]);
        assert!(broken.allows("read_file") && !broken.allows("write_file"));
    }

    #[test]
    fn a_skill_carries_approval_rules_and_one_whose_examples_fail_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let rules = "approvals:\n  - name: prod-deploy\n    tool: bash\n    command: [deploy, prod]\n    decision: ask\n    examples:\n      match: [\"deploy prod --now\"]\n      not_match: [\"{NOT}\"]";
        let deploy = skill(
            dir.path(),
            "deploy",
            &format!("name: deploy\n{}", rules.replace("{NOT}", "deploy staging")),
        )
        .unwrap();
        assert_eq!(deploy.approvals.len(), 1);
        assert_eq!(deploy.approvals[0].name, "prod-deploy");
        // The mapping form, as in config.yaml.
        let mapped = skill(
            dir.path(),
            "mapped",
            "name: mapped\napprovals:\n  rules:\n    - {name: no-curl, tool: bash, command: [curl], decision: deny}",
        )
        .unwrap();
        assert_eq!(mapped.approvals[0].name, "no-curl");
        assert!(skill(dir.path(), "plain", "name: plain")
            .unwrap()
            .approvals
            .is_empty());
        let broken = skill(
            dir.path(),
            "broken",
            &format!("name: broken\n{}", rules.replace("{NOT}", "deploy prod")),
        )
        .unwrap_err();
        let text = broken.to_string();
        assert!(matches!(broken, SkillError::Approvals { ref name, .. } if name == "broken"));
        assert!(
            text.starts_with("skill broken (")
                && text.contains("prod-deploy")
                && text.contains("deploy prod"),
            "{text}"
        );
        let bad = skill(
            dir.path(),
            "bad",
            "name: bad\napprovals: {deny: everything}",
        )
        .unwrap_err()
        .to_string();
        assert!(bad.contains("skill bad") && bad.contains("rules"), "{bad}");
    }

    #[test]
    fn tool_search_results_lose_denied_tools() {
        let policy = SkillPolicy::framework_only();
        let search = |content: &str| StateUpdate {
            promoted: Some(Promoted {
                catalog_hash: "h".into(),
                names: vec!["mcp_a".into()],
            }),
            messages: vec![Message::tool(
                "c1",
                TOOL_SEARCH_NAME,
                content,
                ToolStatus::Success,
            )],
            ..StateUpdate::default()
        };
        let schemas = json!([{"name": "mcp_a", "description": "", "parameters": {}}]).to_string();
        let rewritten = policy.rewrite_tool_search(search(&schemas));
        assert_eq!(rewritten.promoted.unwrap().names, Vec::<String>::new());
        assert_eq!(
            rewritten.messages,
            [Message::tool(
                "c1",
                TOOL_SEARCH_NAME,
                "No tools found matching the active skill policy.",
                ToolStatus::Success
            )]
        );
        let garbled = policy.rewrite_tool_search(search("{not a list"));
        assert_eq!(
            garbled.messages,
            [Message::tool(
                "c1",
                TOOL_SEARCH_NAME,
                "Error: tool_search returned a result that could not be validated against the active skill policy.",
                ToolStatus::Error
            )]
        );
    }
}
