//! The subagent types a run may delegate to (spec 7.1): the built-ins `general-purpose`
//! and `bash` (only when host bash is allowed) and `subagents.custom_agents`, each with
//! its tools, disallowed tools, skills, model, turn limit and timeout after the override
//! precedence of `get_subagent_config`.

use antler_engine::{
    catalog::builtins::{ASK_CLARIFICATION, PRESENT_FILES, TASK},
    BASH_SUBAGENT, BASH_SUBAGENT_DISABLED, GENERAL_PURPOSE, UNKNOWN_SUBAGENT,
};
use antler_protocol::config::{is_host_bash_allowed, AppConfig, TokenBudgetConfig};

/// One subagent type, its limits resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct SubagentType {
    pub name: String,
    /// What the lead's prompt says of it (first line).
    pub description: String,
    /// The type's own system prompt (a custom agent's, verbatim); `None` for built-ins,
    /// whose prompt the engine has.
    pub system_prompt: Option<String>,
    /// Allowlist (`None`: every tool) and denylist.
    pub tools: Option<Vec<String>>,
    pub disallowed_tools: Vec<String>,
    /// Skill allowlist (`None`: all).
    pub skills: Option<Vec<String>>,
    /// A model of `models:`; `None` inherits the parent's.
    pub model: Option<String>,
    pub max_turns: u32,
    pub timeout_seconds: u64,
    pub token_budget: Option<TokenBudgetConfig>,
    pub builtin: bool,
}

fn denied() -> Vec<String> {
    [TASK, ASK_CLARIFICATION, PRESENT_FILES]
        .map(String::from)
        .to_vec()
}

/// The built-in types before overrides.
fn builtins(app: &AppConfig) -> Vec<SubagentType> {
    let mut types = vec![SubagentType {
        name: GENERAL_PURPOSE.to_owned(),
        description:
            "A capable agent for complex, multi-step tasks that need exploration and action."
                .to_owned(),
        system_prompt: None,
        tools: None,
        disallowed_tools: denied(),
        skills: None,
        model: None,
        max_turns: 150,
        timeout_seconds: app.subagents.timeout_seconds,
        token_budget: None,
        builtin: true,
    }];
    if is_host_bash_allowed(app) {
        types.push(SubagentType {
            name: BASH_SUBAGENT.to_owned(),
            description:
                "Command execution specialist for running bash commands in a separate context."
                    .to_owned(),
            system_prompt: None,
            tools: Some(
                ["bash", "ls", "read_file", "write_file", "str_replace"]
                    .map(String::from)
                    .to_vec(),
            ),
            disallowed_tools: denied(),
            skills: None,
            model: None,
            max_turns: 60,
            timeout_seconds: app.subagents.timeout_seconds,
            token_budget: None,
            builtin: true,
        });
    }
    types
}

/// Every type a run of `app` may delegate to, overrides applied, in the order the
/// lead's prompt lists them.
pub fn available(app: &AppConfig) -> Vec<SubagentType> {
    let section = &app.subagents;
    let mut types = builtins(app);
    for (name, custom) in section.custom_agents.iter() {
        if types.iter().any(|t| t.name == name) {
            continue;
        }
        types.push(SubagentType {
            name: name.to_owned(),
            description: custom.description.clone(),
            system_prompt: custom.system_prompt.clone(),
            tools: custom.tools.clone(),
            disallowed_tools: custom.disallowed_tools.clone(),
            skills: custom.skills.clone(),
            model: Some(custom.model.clone()).filter(|m| m != "inherit"),
            max_turns: custom.max_turns,
            timeout_seconds: custom.timeout_seconds,
            token_budget: custom.token_budget.clone(),
            builtin: false,
        });
    }
    for t in &mut types {
        let over = section.agents.get(&t.name);
        // Timeout and turns: the per-agent override, else the global value for
        // built-ins, else the type's own (custom agents do not inherit the global).
        if let Some(timeout) = over.and_then(|o| o.timeout_seconds) {
            t.timeout_seconds = timeout;
        }
        match over.and_then(|o| o.max_turns) {
            Some(turns) => t.max_turns = turns,
            None if t.builtin => {
                if let Some(turns) = section.max_turns {
                    t.max_turns = turns;
                }
            }
            None => {}
        }
        if let Some(model) = over.and_then(|o| o.model.clone()) {
            t.model = Some(model).filter(|m| m != "inherit");
        }
        if let Some(skills) = over.and_then(|o| o.skills.clone()) {
            t.skills = Some(skills);
        }
        if let Some(budget) = over.and_then(|o| o.token_budget.clone()) {
            t.token_budget = Some(budget);
        }
        if t.token_budget.is_none() {
            t.token_budget = section.token_budget.clone();
        }
        // `task` is never a subagent's, whatever its config says.
        if !t.disallowed_tools.iter().any(|d| d == TASK) {
            t.disallowed_tools.push(TASK.to_owned());
        }
    }
    types
}

/// The type `name`, or the text of the failed task that asked for it.
pub fn resolve(app: &AppConfig, name: &str) -> Result<SubagentType, String> {
    let types = available(app);
    if let Some(found) = types.iter().find(|t| t.name == name) {
        return Ok(found.clone());
    }
    if name == BASH_SUBAGENT {
        return Err(BASH_SUBAGENT_DISABLED.to_owned());
    }
    let names: Vec<&str> = types.iter().map(|t| t.name.as_str()).collect();
    Err(UNKNOWN_SUBAGENT
        .replace("{t}", name)
        .replace("{names}", &names.join(", ")))
}

/// The skills a subagent loads: its allowlist intersected with the parent's (`None`
/// on either side takes the other's; 7.1).
pub fn skills_for(child: Option<&[String]>, parent: Option<&[String]>) -> Option<Vec<String>> {
    match (child, parent) {
        (None, None) => None,
        (Some(c), None) => Some(c.to_vec()),
        (None, Some(p)) => Some(p.to_vec()),
        (Some(c), Some(p)) => Some(c.iter().filter(|s| p.contains(s)).cloned().collect()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn app(yaml: &str) -> AppConfig {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn overrides_follow_deerflows_precedence() {
        let app = app("subagents:\n  timeout_seconds: 1200\n  max_turns: 70\n  agents:\n    general-purpose:\n      timeout_seconds: 2700\n    researcher:\n      model: big\n  custom_agents:\n    researcher:\n      description: \"Research agent\\nmore\"\n      system_prompt: You research.\n");
        let types = available(&app);
        let gp = &types[0];
        assert_eq!((gp.timeout_seconds, gp.max_turns), (2700, 70));
        let researcher = types.iter().find(|t| t.name == "researcher").unwrap();
        // A custom agent keeps its own limits (900 s, 50 turns), not the global ones.
        assert_eq!(
            (researcher.timeout_seconds, researcher.max_turns),
            (900, 50)
        );
        assert_eq!(researcher.model.as_deref(), Some("big"));
        assert_eq!(
            researcher.disallowed_tools,
            ["task", "ask_clarification", "present_files"]
        );
        assert_eq!(researcher.system_prompt.as_deref(), Some("You research."));
    }

    #[test]
    fn bash_is_hidden_and_refused_unless_host_bash_is_allowed() {
        let default = AppConfig::default();
        assert!(!available(&default).iter().any(|t| t.name == "bash"));
        assert_eq!(
            resolve(&default, "bash").unwrap_err(),
            BASH_SUBAGENT_DISABLED
        );
        assert_eq!(
            resolve(&default, "nope").unwrap_err(),
            "Unknown subagent type 'nope'. Available: general-purpose"
        );
    }

    #[test]
    fn skills_intersect_with_the_parents() {
        let c = vec!["a".to_owned(), "b".to_owned()];
        let p = vec!["b".to_owned()];
        assert_eq!(skills_for(Some(&c), Some(&p)), Some(vec!["b".to_owned()]));
        assert_eq!(skills_for(None, Some(&p)), Some(p.clone()));
        assert_eq!(skills_for(Some(&c), None), Some(c.clone()));
        assert_eq!(skills_for(None, None), None);
    }
}
