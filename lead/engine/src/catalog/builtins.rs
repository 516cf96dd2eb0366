//! The builtin tools' names, schemas and descriptions, and the conditions under which
//! assembly includes each (DeerFlow's order: spec 1.1 step 4 and 1.2). Their behaviour
//! lives with the run; this module only says what the model sees.

use serde_json::json;

use super::tool::ToolSpec;

pub const PRESENT_FILES: &str = "present_files";
pub const ASK_CLARIFICATION: &str = "ask_clarification";
pub const LIST_UPLOADED_FILES: &str = "list_uploaded_files";
pub const SKILL_MANAGE: &str = "skill_manage";
pub const TASK: &str = "task";
pub const VIEW_IMAGE: &str = "view_image";
pub const SETUP_AGENT: &str = "setup_agent";
pub const UPDATE_AGENT: &str = "update_agent";
pub const INVOKE_ACP_AGENT: &str = "invoke_acp_agent";
pub const DESCRIBE_SKILL: &str = "describe_skill";

/// Channels whose requests come from a webhook fan-out: `update_agent` is never offered there.
pub const WEBHOOK_CHANNELS: &[&str] = &["github"];

pub fn present_files() -> ToolSpec {
    ToolSpec::builtin(
        PRESENT_FILES,
        "Make files visible to the user for viewing and rendering in the client interface.\n\nOnly files in /mnt/user-data/outputs can be presented; move or write files there first.",
        json!({"type": "object", "properties": {"filepaths": {"type": "array", "items": {"type": "string"}, "description": "Absolute paths of the files to present, under /mnt/user-data/outputs."}}, "required": ["filepaths"]}),
    )
}

pub fn ask_clarification() -> ToolSpec {
    ToolSpec::builtin(
        ASK_CLARIFICATION,
        "Ask the user for clarification when the request is missing information, ambiguous, needs a choice between approaches, or needs confirmation of a risky action. The run pauses until the user answers.",
        json!({"type": "object", "properties": {
            "question": {"type": "string", "description": "The question to ask."},
            "clarification_type": {"type": "string", "enum": ["missing_info", "ambiguous_requirement", "approach_choice", "risk_confirmation", "suggestion"]},
            "context": {"type": "string", "description": "Why the question is needed."},
            "options": {"type": "array", "items": {"type": "string"}, "description": "Choices to offer."},
            "fields": {"type": "array", "items": {"type": "object", "properties": {
                "name": {"type": "string"}, "label": {"type": "string"},
                "type": {"type": "string", "enum": ["text", "textarea", "number", "select", "multi_select", "checkbox", "date"]},
                "required": {"type": "boolean"}, "options": {"type": "array", "items": {"type": "string"}}, "placeholder": {"type": "string"}
            }, "required": ["name"]}, "description": "A form to fill in instead of a free answer."}
        }, "required": ["question", "clarification_type"]}),
    )
}

pub fn list_uploaded_files() -> ToolSpec {
    ToolSpec::builtin(
        LIST_UPLOADED_FILES,
        "List the files the user uploaded to this thread, newest first.",
        json!({"type": "object", "properties": {
            "include_outline": {"anyOf": [{"type": "boolean"}, {"type": "array", "items": {"type": "string"}}], "default": false},
            "max_results": {"type": "integer", "default": 20, "minimum": 1, "maximum": 100}
        }}),
    )
}

pub fn skill_manage() -> ToolSpec {
    ToolSpec::builtin(
        SKILL_MANAGE,
        "Create, edit, patch or delete the user's custom skills and their files.",
        json!({"type": "object", "properties": {
            "action": {"type": "string", "enum": ["create", "edit", "patch", "delete", "write_file", "remove_file"]},
            "name": {"type": "string"}, "content": {"type": "string"}, "path": {"type": "string"},
            "find": {"type": "string"}, "replace": {"type": "string"}, "expected_count": {"type": "integer"}
        }, "required": ["action", "name"]}),
    )
}

pub fn task() -> ToolSpec {
    ToolSpec::builtin(
        TASK,
        "Delegate a bounded piece of work to a subagent that runs it in its own context and returns the result.",
        json!({"type": "object", "properties": {
            "description": {"type": "string", "description": "A short (3-5 word) description of the task."},
            "prompt": {"type": "string", "description": "The full task for the subagent."},
            "subagent_type": {"type": "string", "description": "Which subagent to use."}
        }, "required": ["description", "prompt", "subagent_type"]}),
    )
}

/// `describe_skill`, offered when `skills.deferred_discovery` is on (spec A.3's index mode).
pub fn describe_skill() -> ToolSpec {
    ToolSpec::builtin(
        DESCRIBE_SKILL,
        "Describe installed skills by name: what each is for, the tools it allows and where its SKILL.md is. Names come from <skill_index>; several may be given, separated by commas.",
        json!({"type": "object", "properties": {"name": {"type": "string", "description": "A skill name from <skill_index>, or several separated by commas."}}, "required": ["name"]}),
    )
}

pub fn view_image() -> ToolSpec {
    ToolSpec::builtin(
        VIEW_IMAGE,
        "Read an image file so that you can see it. Supported formats: .jpg, .jpeg, .png, .webp, .gif.",
        json!({"type": "object", "properties": {"image_path": {"type": "string", "description": "Absolute path under /mnt/user-data/{workspace,uploads,outputs}."}}, "required": ["image_path"]}),
    )
}

pub fn setup_agent() -> ToolSpec {
    ToolSpec::builtin(
        SETUP_AGENT,
        "Create the agent being set up: its SOUL.md, description and skills.",
        json!({"type": "object", "properties": {
            "soul": {"type": "string"}, "description": {"type": "string"},
            "skills": {"type": "array", "items": {"type": "string"}}
        }, "required": ["soul", "description"]}),
    )
}

pub fn update_agent() -> ToolSpec {
    ToolSpec::builtin(
        UPDATE_AGENT,
        "Update this custom agent's SOUL.md, description, skills, tool groups or model. Omit fields you do not want to change.",
        json!({"type": "object", "properties": {
            "soul": {"type": "string"}, "description": {"type": "string"},
            "skills": {"type": "array", "items": {"type": "string"}},
            "tool_groups": {"type": "array", "items": {"type": "string"}},
            "model": {"type": "string"}
        }}),
    )
}

/// `invoke_acp_agent`, its description listing each configured agent.
pub fn invoke_acp_agent<'a>(agents: impl Iterator<Item = (&'a str, &'a str)>) -> ToolSpec {
    let mut description = String::from(
        "Invoke an external ACP-compatible agent with a prompt and return its answer.\n\nAvailable agents:\n",
    );
    for (name, about) in agents {
        description.push_str(&format!("- {name}: {about}\n"));
    }
    description.push_str(
        "\nDo not pass /mnt/user-data paths to the agent: it cannot see them. Its outputs are readable at /mnt/acp-workspace/ (read-only).",
    );
    let mut spec = ToolSpec::builtin(
        INVOKE_ACP_AGENT,
        description,
        json!({"type": "object", "properties": {
            "agent": {"type": "string", "description": "The agent to invoke."},
            "prompt": {"type": "string", "description": "What the agent should do."}
        }, "required": ["agent", "prompt"]}),
    );
    spec.source = super::tool::ToolSource::Acp;
    spec
}

/// Which builtins a run gets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct BuiltinConditions {
    pub interactive: bool,
    pub include_upload_tool: bool,
    pub skill_evolution: bool,
    pub subagent_enabled: bool,
    pub vision: bool,
    pub bootstrap: bool,
    /// Set for a custom agent's chat.
    pub agent_name: Option<String>,
    pub channel: Option<String>,
}

/// The builtins in DeerFlow's order under `cond`.
pub fn builtins(cond: &BuiltinConditions) -> Vec<ToolSpec> {
    let mut out = vec![present_files()];
    if cond.interactive {
        out.push(ask_clarification());
    }
    if cond.include_upload_tool {
        out.push(list_uploaded_files());
    }
    if cond.skill_evolution {
        out.push(skill_manage());
    }
    if cond.subagent_enabled {
        out.push(task());
    }
    if cond.vision {
        out.push(view_image());
    }
    if cond.bootstrap {
        out.push(setup_agent());
    }
    let webhook = cond
        .channel
        .as_deref()
        .is_some_and(|c| WEBHOOK_CHANNELS.contains(&c));
    if cond.agent_name.is_some() && !webhook {
        out.push(update_agent());
    }
    out
}
