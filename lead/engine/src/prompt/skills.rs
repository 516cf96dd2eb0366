//! The `<skill_system>` section of the lead's prompt (spec A.3). Legacy mode: the enabled
//! skills as `<available_skills>` items, the disabled ones as `<disabled_skills>`, both
//! narrowed by the agent's `skills` whitelist. Index mode (`skills.deferred_discovery` and
//! `describe_skill` offered, with at least one usable skill): their names alone in
//! `<skill_index>`. `""` when there is nothing to show. Item formats and escaping are
//! DeerFlow's, byte for byte.

use std::collections::HashSet;

use crate::catalog::deferred::html_escape;
use crate::tools::skills::InstalledSkill;

/// What the section is built from.
pub struct SkillsInput<'a> {
    /// Every installed skill, enabled or not, in load order.
    pub installed: &'a [InstalledSkill],
    /// The agent's `skills` whitelist (`None`: every skill).
    pub allowed: Option<&'a HashSet<String>>,
    /// Where skills are in the sandbox (`/mnt/skills`).
    pub container_root: &'a str,
    /// `skill_evolution.enabled` (and `skill_manage` offered).
    pub evolution: bool,
    /// Index mode: `skills.deferred_discovery` with `describe_skill` offered.
    pub index: bool,
}

/// Which form the section took (the critical reminders name it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkillsMode {
    None,
    Legacy,
    Index,
}

const INDEX_INTRO: &str = "<skill_system>
Skills are tested workflows for specific kinds of task. Skill Discovery:
1. Check <skill_index> for a skill that matches the task.
2. Call `describe_skill(name)` to see what it does and where it is.
3. `read_file` the location it returns.
4. Follow its instructions.

Explicit Slash Skill Activation: a message starting with `/<skill-name>` activates that skill; \
its content is injected for you, so do not `read_file` it again.
";

const INTRO: &str = "<skill_system>
Skills are tested workflows for specific kinds of task. Progressive Loading Pattern:
1. Match the task against the skills below.
2. `read_file` the skill's `<location>` before starting.
3. Follow its instructions.
4. Load the resources it references only when a step needs them.
5. Keep to its workflow unless the user says otherwise.

Explicit Slash Skill Activation: a message starting with `/<skill-name>` activates that skill; \
its content is injected for you, so do not `read_file` it again.

";

const EVOLUTION: &str = "
## Skill Self-Evolution
After a task that took 5 or more tool calls, hit non-obvious pitfalls, needed the user's \
corrections, or is likely to recur, offer to save it as a skill, or patch the skill you used.
- Every skill operation goes through `skill_manage`: `skill_manage(action=\"create\", name=..., content=...)`, \
`skill_manage(action=\"patch\", name=..., find=..., replace=..., expected_count=...)`, `skill_manage(action=\"edit\", ...)`, \
`skill_manage(action=\"write_file\", ...)`, `skill_manage(action=\"remove_file\", ...)`, `skill_manage(action=\"delete\", ...)`.
- Never write a SKILL.md into the workspace or the outputs.
- Prefer patch to edit; confirm with the user before creating; skip one-off tasks.
";

const DISABLED_INTRO: &str = "<disabled_skills>
These skills are installed but disabled.
You MUST NOT read them, follow them or use them.
If the user asks for one, say it is disabled and can be enabled in the skills settings.
Only the skills in <available_skills> are usable.
";

/// DeerFlow's label of a skill category.
fn label(category: &str) -> &'static str {
    match category {
        "custom" => "[custom, editable]",
        "legacy" => "[legacy, read-only]",
        _ => "[built-in]",
    }
}

/// The section, or `""` (spec A.3's empty cases), and its mode.
pub fn section(input: &SkillsInput<'_>) -> (String, SkillsMode) {
    let allowed = |s: &&InstalledSkill| input.allowed.is_none_or(|a| a.contains(&s.skill.name));
    let enabled: Vec<&InstalledSkill> = input
        .installed
        .iter()
        .filter(|s| s.enabled)
        .filter(allowed)
        .collect();
    if input.index && !enabled.is_empty() {
        return (index_section(input, &enabled), SkillsMode::Index);
    }
    let legacy = legacy_section(input, &enabled);
    let mode = if legacy.is_empty() {
        SkillsMode::None
    } else {
        SkillsMode::Legacy
    };
    (legacy, mode)
}

fn index_section(input: &SkillsInput<'_>, enabled: &[&InstalledSkill]) -> String {
    let mut out = String::from(INDEX_INTRO);
    if input.evolution {
        out.push('\n');
        out.push_str(EVOLUTION);
    }
    let mut names: Vec<&str> = enabled.iter().map(|s| s.skill.name.as_str()).collect();
    names.sort_unstable();
    out.push_str("<skill_index>\n");
    for (i, name) in names.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        html_escape(&mut out, name);
    }
    out.push_str("\n</skill_index>\nSkills are located at: ");
    out.push_str(input.container_root);
    out.push_str("\n</skill_system>\n");
    out
}

fn legacy_section(input: &SkillsInput<'_>, enabled: &[&InstalledSkill]) -> String {
    let allowed = |s: &&InstalledSkill| input.allowed.is_none_or(|a| a.contains(&s.skill.name));
    let disabled: Vec<&InstalledSkill> = input
        .installed
        .iter()
        .filter(|s| !s.enabled)
        .filter(allowed)
        .collect();
    if enabled.is_empty() && (input.allowed.is_some() || (disabled.is_empty() && !input.evolution))
    {
        return String::new();
    }
    let mut out = String::from(INTRO);
    out.push_str("**Skills are located at:** ");
    out.push_str(input.container_root);
    out.push('\n');
    if input.evolution {
        out.push_str(EVOLUTION);
    }
    if !enabled.is_empty() {
        out.push_str("<available_skills>\n");
        for (i, skill) in enabled.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            out.push_str("    <skill>\n        <name>");
            html_escape(&mut out, &skill.skill.name);
            out.push_str("</name>\n        <description>");
            html_escape(
                &mut out,
                &format!("{} {}", skill.skill.description, label(skill.category)),
            );
            out.push_str("</description>\n        <location>");
            html_escape(&mut out, &skill.container_file);
            out.push_str("</location>\n    </skill>");
        }
        out.push_str("\n</available_skills>");
    }
    if !disabled.is_empty() {
        out.push('\n');
        out.push_str(DISABLED_INTRO);
        for skill in &disabled {
            out.push_str(&format!(
                "    - {} ({})\n",
                skill.skill.name, skill.category
            ));
        }
        out.push_str("</disabled_skills>");
    }
    out.push_str("\n\n</skill_system>\n");
    out
}
