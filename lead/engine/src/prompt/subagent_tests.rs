#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use serde_json::json;

use super::*;
use crate::catalog::routing::{McpRouting, RoutingMode};
use crate::catalog::ToolSpec;
use crate::middleware::skill_policy::Skill;

/// A subagent catalog of `builtins`, plus a deferred MCP tool with `prefer` routing when
/// `mcp` is set.
fn catalog(builtins: &[&str], mcp: bool) -> Catalog {
    let mut tools: Vec<ToolSpec> = builtins
        .iter()
        .map(|n| ToolSpec::builtin(*n, "d", json!({"type": "object", "properties": {}})))
        .collect();
    if mcp {
        let mut query = ToolSpec::mcp(
            "db_query",
            "Run SQL.",
            json!({"type": "object"}),
            Some("db".into()),
            "query",
        );
        query.routing = Some(McpRouting {
            mode: RoutingMode::Prefer,
            priority: 10,
            keywords: vec!["SQL".into()],
        });
        tools.push(query);
    }
    Catalog::build(tools, true).unwrap()
}

fn skill(name: &str, enabled: bool) -> InstalledSkill {
    InstalledSkill {
        skill: Skill {
            name: name.into(),
            description: format!("{name} workflow."),
            allowed_tools: None,
            approvals: Vec::new(),
        },
        category: "public",
        dir: PathBuf::from("/x"),
        container_file: format!("/mnt/skills/public/{name}/SKILL.md"),
        enabled,
    }
}

fn parts<'a>(
    catalog: &'a Catalog,
    system_prompt: Option<&'a str>,
    skills: &'a [InstalledSkill],
) -> SubagentPromptParts<'a> {
    SubagentPromptParts {
        catalog,
        system_prompt,
        skills,
        allowed_skills: None,
        skills_container_root: "/mnt/skills",
        skill_evolution: false,
        skill_index: false,
    }
}

#[test]
fn parts_come_in_deerflows_order_joined_by_blank_lines() {
    let c = catalog(&["read_file"], true);
    let skills = [skill("deep-research", true), skill("old", false)];
    let p =
        subagent_system_prompt(&parts(&c, Some("You review <code> verbatim."), &skills)).unwrap();
    assert!(
        p.starts_with("You review <code> verbatim.\n\n<skill_system>\n"),
        "{p}"
    );
    let skills_end = p
        .find("</skill_system>\n\n<available-deferred-tools>\n")
        .unwrap();
    let hints = p
        .find("</available-deferred-tools>\n\n<mcp_routing_hints>\n")
        .unwrap();
    assert!(skills_end < hints, "{p}");
    assert!(p.ends_with("</mcp_routing_hints>"), "{p}");
    assert!(p.contains("<name>deep-research</name>") && p.contains("    - old (public)"));
    for absent in [
        "<soul>",
        "<role>",
        "<clarification_system>",
        "<thinking_style>",
        "<critical_reminders>",
        "<subagent_system>",
        "BEGIN USER INPUT",
        "disallowed_tools",
    ] {
        assert!(!p.contains(absent), "{absent} rendered:\n{p}");
    }
}

#[test]
fn no_part_means_no_prompt() {
    let c = catalog(&["read_file"], false);
    assert_eq!(subagent_system_prompt(&parts(&c, None, &[])), None);
    assert_eq!(subagent_system_prompt(&parts(&c, Some(""), &[])), None);
    // Disabled skills alone are no loaded skill.
    let off = [skill("old", false)];
    assert_eq!(subagent_system_prompt(&parts(&c, None, &off)), None);
    // An empty skills list loads none.
    let on = [skill("deep-research", true)];
    let none = HashSet::new();
    let mut p = parts(&c, None, &on);
    p.allowed_skills = Some(&none);
    assert_eq!(subagent_system_prompt(&p), None);
    // The deferred section alone is a prompt.
    let mcp = catalog(&[], true);
    let only = subagent_system_prompt(&parts(&mcp, None, &[])).unwrap();
    assert!(only.starts_with("<available-deferred-tools>\n"), "{only}");
}

#[test]
fn index_mode_has_no_evolution_and_legacy_mode_keeps_it() {
    let c = catalog(&["describe_skill", "skill_manage"], false);
    let skills = [skill("zeta", true), skill("alpha", true)];
    let mut p = parts(&c, None, &skills);
    p.skill_evolution = true;
    p.skill_index = true;
    let index = subagent_system_prompt(&p).unwrap();
    assert!(
        index.contains("<skill_index>\nalpha, zeta\n</skill_index>"),
        "{index}"
    );
    assert!(!index.contains("Skill Self-Evolution"), "{index}");
    p.skill_index = false;
    let legacy = subagent_system_prompt(&p).unwrap();
    assert!(legacy.contains("<available_skills>"), "{legacy}");
    assert!(legacy.contains("## Skill Self-Evolution"), "{legacy}");
}

#[test]
fn the_built_in_prompts_carry_deerflows_tested_texts() {
    for prompt in [GENERAL_PURPOSE_PROMPT, BASH_PROMPT] {
        for needle in [
            "Treat `/mnt/user-data/workspace` as the default working directory for coding and file IO",
            "`hello.txt`, `../uploads/input.csv`, `../outputs/result.md`",
            "NOT available",
            "must NEVER",
        ] {
            assert!(prompt.contains(needle), "{needle} missing:\n{prompt}");
        }
        assert!(!prompt.contains("disallowed_tools"));
        assert!(!prompt.contains("<soul>"));
    }
    assert!(BASH_PROMPT.contains("Execute commands one at a time when they depend on each other"));
    assert!(GENERAL_PURPOSE_PROMPT.contains("Do not ask for clarification"));
    assert_eq!(
        builtin_system_prompt("general-purpose"),
        Some(GENERAL_PURPOSE_PROMPT)
    );
    assert_eq!(builtin_system_prompt("bash"), Some(BASH_PROMPT));
    assert_eq!(builtin_system_prompt("researcher"), None);
    // A built-in's prompt is the first part, verbatim.
    let c = catalog(&["bash"], true);
    let p = subagent_system_prompt(&parts(&c, builtin_system_prompt("bash"), &[])).unwrap();
    assert!(
        p.starts_with(&format!("{BASH_PROMPT}\n\n<available-deferred-tools>")),
        "{p}"
    );
}
