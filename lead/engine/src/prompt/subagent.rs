//! A subagent's own system prompt (spec B.1-B.3): its type's prompt verbatim, then the skills
//! section when any skill is loaded, then its catalog's deferred-tools and routing-hints
//! sections, joined by blank lines. No SOUL, clarification or lead template reaches it;
//! `None` when there is no part (no system message is added then).

use std::collections::HashSet;

use crate::catalog::builtins::{DESCRIBE_SKILL, SKILL_MANAGE};
use crate::catalog::Catalog;
use crate::tools::skills::InstalledSkill;

use super::delegation::{BASH_NAME, GENERAL_PURPOSE_NAME};
use super::skills;

/// The built-in `general-purpose` subagent's system prompt (spec B.2).
pub const GENERAL_PURPOSE_PROMPT: &str = "You are a general-purpose subagent. The lead agent \
delegated one task to you: finish it on your own and return a clear, actionable result.

<guidelines>
- Stay on the delegated task.
- Think step by step, then act decisively.
- When something fails, say what and why.
- End with a concise summary of what you did and found.
- Do not ask for clarification: work with what you were given and state your assumptions.
</guidelines>

<tool_restrictions>
The `task` tool is NOT available to you and you must NEVER call it. Work directly with `bash`, \
`web_search`, `web_fetch`, `read_file` and the other tools you have; for parallel work, run \
background processes.
</tool_restrictions>

<file_editing_workflow>
Prefer `str_replace` to rewriting a file; write long files in sections with `append=True`.
</file_editing_workflow>

<output_format>
1. Summary of the result.
2. Key findings.
3. Paths of the files and artifacts you made.
4. Issues or open questions.
5. Sources as `[citation:Title](URL)`.
</output_format>

<working_directory>
- Uploads: `/mnt/user-data/uploads`; workspace: `/mnt/user-data/workspace`; deliverables: \
`/mnt/user-data/outputs`. Custom mounts may exist as well.
- Treat `/mnt/user-data/workspace` as the default working directory for coding and file IO, and \
prefer relative paths such as `hello.txt`, `../uploads/input.csv`, `../outputs/result.md`.
</working_directory>";

/// The built-in `bash` subagent's system prompt (spec B.2).
pub const BASH_PROMPT: &str = "You are a bash command execution specialist. Run the commands \
the delegated task needs and report what happened.

<guidelines>
- Execute commands one at a time when they depend on each other; run independent ones in \
parallel.
- Report stdout and stderr.
- When a command fails, explain the error.
- Use paths relative to the workspace; absolute paths only for custom mounts.
- Be careful with destructive commands (`rm`, overwrites, force pushes).
- The `task` tool is NOT available to you and you must NEVER call it.
</guidelines>

<output_format>
For each command: what ran, whether it succeeded, the relevant output (summarised), and any \
errors or warnings.
</output_format>

<working_directory>
- Uploads: `/mnt/user-data/uploads`; workspace: `/mnt/user-data/workspace`; outputs: \
`/mnt/user-data/outputs`. Custom mounts may exist as well.
- Treat `/mnt/user-data/workspace` as the default working directory for coding and file IO, and \
prefer relative paths such as `hello.txt`, `../uploads/input.csv`, `../outputs/result.md`.
</working_directory>";

/// The built-in system prompt of the subagent type `name`, if it is a built-in.
pub fn builtin_system_prompt(name: &str) -> Option<&'static str> {
    match name {
        GENERAL_PURPOSE_NAME => Some(GENERAL_PURPOSE_PROMPT),
        BASH_NAME => Some(BASH_PROMPT),
        _ => None,
    }
}

/// What a subagent's system prompt is built from.
pub struct SubagentPromptParts<'a> {
    /// The subagent's own catalog (its deferred tools and routing hints).
    pub catalog: &'a Catalog,
    /// The type's system prompt, verbatim: [`builtin_system_prompt`] for a built-in, the
    /// config `system_prompt` of a custom agent. Empty or `None`: no such part.
    pub system_prompt: Option<&'a str>,
    /// Installed skills (enabled and disabled), and the type's `skills` list already
    /// intersected with the lead's (`None`: every skill; empty: no skills).
    pub skills: &'a [InstalledSkill],
    pub allowed_skills: Option<&'a HashSet<String>>,
    pub skills_container_root: &'a str,
    /// `skill_evolution.enabled` (legacy mode only, and only with `skill_manage` offered).
    pub skill_evolution: bool,
    /// `skills.deferred_discovery`: the index mode when `describe_skill` is offered.
    pub skill_index: bool,
}

/// The subagent's system prompt, or `None` when it has no part.
pub fn subagent_system_prompt(parts: &SubagentPromptParts<'_>) -> Option<String> {
    let offers = |name: &str| parts.catalog.get(name).is_some();
    let mut out: Vec<String> = Vec::new();
    if let Some(own) = parts.system_prompt.filter(|p| !p.is_empty()) {
        out.push(own.to_owned());
    }
    let loaded = parts.skills.iter().any(|s| {
        s.enabled
            && parts
                .allowed_skills
                .is_none_or(|a| a.contains(&s.skill.name))
    });
    if loaded {
        let index = parts.skill_index && offers(DESCRIBE_SKILL);
        let (section, _) = skills::section(&skills::SkillsInput {
            installed: parts.skills,
            allowed: parts.allowed_skills,
            container_root: parts.skills_container_root,
            evolution: !index && parts.skill_evolution && offers(SKILL_MANAGE),
            index,
        });
        push_trimmed(&mut out, &section);
    }
    push_trimmed(&mut out, parts.catalog.prompt_section());
    push_trimmed(&mut out, parts.catalog.routing_hints_section());
    (!out.is_empty()).then(|| out.join("\n\n"))
}

/// Adds `section` without its trailing newline, if it is not empty.
fn push_trimmed(out: &mut Vec<String>, section: &str) {
    let section = section.trim_end_matches('\n');
    if !section.is_empty() {
        out.push(section.to_owned());
    }
}

#[cfg(test)]
#[path = "subagent_tests.rs"]
mod tests;
