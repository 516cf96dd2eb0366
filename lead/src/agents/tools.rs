//! `setup_agent` (spec 3.4) and `update_agent` (spec 3.5): a custom agent's `config.yaml`
//! and `SOUL.md`, written through [`super::store`]. Every check runs before the
//! disk is touched, so a refused call changes nothing; a failed write leaves the agent
//! as it was (and removes a directory it had just created).

use serde_json::Value;
use serde_yaml::{Mapping, Value as Yaml};

use super::store::{
    legacy_agent_dir, user_agent_dir, user_default_dir, validate_agent_name, write_files,
    CONFIG_FILENAME, SOUL_FILENAME,
};
use antler_engine::{
    catalog::builtins::{SETUP_AGENT, UPDATE_AGENT, WEBHOOK_CHANNELS},
    FailureClass, Message, RunContext, StateUpdate, ToolCall, ToolFailure, ToolStatus,
};

/// `setup_agent` with a blank soul (checked before anything else).
pub const SETUP_EMPTY_SOUL: &str =
    "Error: soul content is empty; refusing to create agent with an empty SOUL.md";
/// `setup_agent`'s reply on success; `{name}` is `None` for the default agent (Python's
/// f-string of `None`: DeerFlow's text, kept).
pub const AGENT_CREATED: &str = "Agent '{name}' created successfully!";
/// How DeerFlow's reply names the default agent.
pub const DEFAULT_AGENT_NAME: &str = "None";

/// `update_agent` on a webhook channel.
pub const UPDATE_DISABLED_ON_CHANNEL: &str = "update_agent is disabled on the '{channel}' channel. Self-mutation requests must come from an operator-trusted surface (chat UI or the HTTP API), not a webhook fan-out.";
/// `update_agent` with every field omitted (or null-like).
pub const NO_FIELDS: &str = "No fields provided. Pass at least one of: soul, description, skills, tool_groups, model. Omit unchanged fields instead of passing null-like strings such as \"null\", \"none\", or \"undefined\".";
/// `update_agent` with a blank soul.
pub const UPDATE_EMPTY_SOUL: &str = "soul content is empty; refusing to update agent with an empty SOUL.md. Omit the soul field if you do not want to change it.";
/// `update_agent` outside a custom agent's chat.
pub const NOT_IN_CUSTOM_AGENT: &str = "update_agent is only available inside a custom agent's chat. There is no agent_name in the current runtime context, so there is nothing to update. If you are inside the bootstrap flow, use setup_agent instead.";
/// A model that is not in config.yaml.
pub const UNKNOWN_MODEL: &str =
    "Unknown model '{model}'. Pass a model name that exists in config.yaml's models section.";
/// An agent found only in `{base}/agents/{name}`.
pub const LEGACY_ONLY: &str = "Agent '{name}' only exists in the legacy shared layout and is not scoped to a user. Run scripts/migrate_user_isolation.py to move legacy agents into the per-user layout before updating.";
/// No `config.yaml` for this user's agent.
pub const AGENT_MISSING: &str = "Agent '{name}' does not exist for the current user. Use setup_agent to create a new agent first.";
/// A `config.yaml` that does not parse as a mapping.
pub const UNREADABLE_CONFIG: &str = "Agent '{name}' has an unreadable config: {error}";
/// The write failed (the agent is left as it was).
pub const UPDATE_FAILED: &str = "Failed to update agent '{name}': {error}";
/// Every value given matched the config, and no soul was given.
pub const NO_CHANGES: &str =
    "No changes applied to agent '{name}'. The provided values matched the existing config.";
/// `update_agent`'s reply on success; `{fields}` in the order they are checked.
pub const AGENT_UPDATED: &str = "Agent '{name}' updated successfully. Changed: {fields}. The new configuration takes effect on the next user turn.";

/// Strings `update_agent` takes for an omitted field (trimmed, any case).
const NULLISH: &[&str] = &["null", "none", "undefined"];
/// The config keys `update_agent` manages; every other key is kept as it is.
const MANAGED: &[&str] = &["name", "description", "model", "tool_groups", "skills"];

/// `setup_agent(soul, description, skills=None)`: writes the agent named by the run
/// context (`{base}/users/{user}/agents/{name}/config.yaml` with `name`, `description`
/// when not empty and `skills` when given, plus `SOUL.md`), or, with no name, the user's
/// default agent's `{base}/users/{user}/SOUL.md` (DeerFlow writes the global
/// `{base}/SOUL.md`, which every user's runs read: here only the operator edits that).
/// An upsert: an existing agent is overwritten.
pub fn setup_agent(call: &ToolCall, context: &RunContext) -> Result<StateUpdate, ToolFailure> {
    let soul = required_text(&call.args, "soul")?;
    let description = required_text(&call.args, "description")?;
    let skills = string_list(&call.args, "skills", false)?;
    let reply = |content: String, status| {
        StateUpdate::messages([Message::tool(&call.id, SETUP_AGENT, content, status)])
    };
    if soul.trim().is_empty() {
        return Ok(reply(SETUP_EMPTY_SOUL.to_owned(), ToolStatus::Error));
    }
    let agents = &context.agent;
    let written = match agents.agent_name.as_deref() {
        Some(raw) => {
            let name = match validate_agent_name(raw) {
                Ok(name) => name,
                Err(e) => return Ok(reply(format!("Error: {e}"), ToolStatus::Error)),
            };
            let mut config = Mapping::new();
            config.insert("name".into(), name.into());
            if !description.is_empty() {
                config.insert("description".into(), description.into());
            }
            if let Some(skills) = skills {
                config.insert("skills".into(), yaml_list(skills));
            }
            let config = yaml_text(&config);
            let dir = user_agent_dir(&agents.base_dir, &context.user_id, name);
            write_files(
                &dir,
                &[
                    (CONFIG_FILENAME, config.as_bytes()),
                    (SOUL_FILENAME, soul.as_bytes()),
                ],
            )
        }
        // The caller's own default agent, never the global SOUL every user's runs read.
        None => write_files(
            &user_default_dir(&agents.base_dir, &context.user_id),
            &[(SOUL_FILENAME, soul.as_bytes())],
        ),
    };
    if let Err(e) = written {
        return Ok(reply(format!("Error: {e}"), ToolStatus::Error));
    }
    let name = agents.agent_name.as_deref().unwrap_or(DEFAULT_AGENT_NAME);
    let mut update = reply(
        AGENT_CREATED.replacen("{name}", name, 1),
        ToolStatus::Success,
    );
    update.created_agent_name = agents.agent_name.clone();
    Ok(update)
}

/// `update_agent(soul?, description?, skills?, tool_groups?, model?)`: changes only the
/// fields given, in the custom agent this run belongs to. The checks run in DeerFlow's
/// order; each refusal is an `Error: ...` message and leaves the disk as it was.
pub fn update_agent(call: &ToolCall, context: &RunContext) -> Result<StateUpdate, ToolFailure> {
    let soul = optional_text(&call.args, "soul")?;
    let description = optional_text(&call.args, "description")?;
    let skills = string_list(&call.args, "skills", true)?;
    let tool_groups = string_list(&call.args, "tool_groups", true)?;
    let model = optional_text(&call.args, "model")?;
    let reply = |content: String, status| {
        StateUpdate::messages([Message::tool(&call.id, UPDATE_AGENT, content, status)])
    };
    let error = |text: String| Ok(reply(format!("Error: {text}"), ToolStatus::Error));
    let agents = &context.agent;

    if let Some(channel) = agents
        .channel_name
        .as_deref()
        .filter(|c| WEBHOOK_CHANNELS.contains(c))
    {
        return error(UPDATE_DISABLED_ON_CHANNEL.replacen("{channel}", channel, 1));
    }
    if soul.is_none()
        && description.is_none()
        && skills.is_none()
        && tool_groups.is_none()
        && model.is_none()
    {
        return error(NO_FIELDS.to_owned());
    }
    if soul.as_deref().is_some_and(|s| s.trim().is_empty()) {
        return error(UPDATE_EMPTY_SOUL.to_owned());
    }
    let name = match agents.agent_name.as_deref().map(validate_agent_name) {
        None => return error(NOT_IN_CUSTOM_AGENT.to_owned()),
        Some(Err(e)) => return error(e),
        Some(Ok(name)) => name,
    };
    let named = |text: &str| text.replacen("{name}", name, 1);
    if let Some(model) = model
        .as_deref()
        .filter(|m| !agents.models.iter().any(|k| k == m))
    {
        return error(UNKNOWN_MODEL.replacen("{model}", model, 1));
    }
    let dir = user_agent_dir(&agents.base_dir, &context.user_id, name);
    let legacy = legacy_agent_dir(&agents.base_dir, name);
    if !dir.join(CONFIG_FILENAME).exists() && legacy.join(CONFIG_FILENAME).exists() {
        return error(named(LEGACY_ONLY));
    }
    let existing = match read_config(&dir.join(CONFIG_FILENAME)) {
        Ok(Some(existing)) => existing,
        Ok(None) => return error(named(AGENT_MISSING)),
        Err(e) => return error(named(UNREADABLE_CONFIG).replacen("{error}", &e, 1)),
    };

    // `name` always matches the directory, whatever the file says.
    let mut config = Mapping::new();
    config.insert("name".into(), name.into());
    let mut changed: Vec<&str> = Vec::new();
    let old_description = existing
        .get("description")
        .cloned()
        .unwrap_or_else(|| Yaml::from(""));
    let new_description = description.map(Yaml::from);
    config.insert(
        "description".into(),
        new_description.clone().unwrap_or(old_description.clone()),
    );
    if new_description.is_some_and(|d| d != old_description) {
        changed.push("description");
    }
    let fields = [
        ("model", model.map(Yaml::from)),
        ("tool_groups", tool_groups.map(yaml_list)),
        ("skills", skills.map(yaml_list)),
    ];
    for (key, given) in fields {
        let old = existing.get(key).filter(|v| !v.is_null());
        if let Some(value) = given.as_ref().or(old) {
            config.insert(key.into(), value.clone());
        }
        if given.is_some_and(|given| Some(&given) != old) {
            changed.push(key);
        }
    }
    for (key, value) in &existing {
        if !key.as_str().is_some_and(|k| MANAGED.contains(&k)) && !config.contains_key(key) {
            config.insert(key.clone(), value.clone());
        }
    }
    let config_changed = !changed.is_empty();
    let config = yaml_text(&config);
    let mut files: Vec<(&str, &[u8])> = Vec::new();
    if config_changed {
        files.push((CONFIG_FILENAME, config.as_bytes()));
    }
    if let Some(soul) = &soul {
        files.push((SOUL_FILENAME, soul.as_bytes()));
        changed.push("soul");
    }
    if !files.is_empty() {
        if let Err(e) = write_files(&dir, &files) {
            return error(named(UPDATE_FAILED).replacen("{error}", &e.to_string(), 1));
        }
    }
    if changed.is_empty() {
        return Ok(reply(named(NO_CHANGES), ToolStatus::Success));
    }
    Ok(reply(
        named(AGENT_UPDATED).replacen("{fields}", &changed.join(", "), 1),
        ToolStatus::Success,
    ))
}

/// The agent's config (`{}` for an empty file), `None` when there is no file; an error
/// text when it cannot be read or is not a mapping.
fn read_config(path: &std::path::Path) -> Result<Option<Mapping>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    match serde_yaml::from_str::<Yaml>(&text) {
        Ok(Yaml::Mapping(config)) => Ok(Some(config)),
        Ok(Yaml::Null) => Ok(Some(Mapping::new())),
        Ok(_) => Err(format!("{CONFIG_FILENAME} is not a mapping")),
        Err(e) => Err(e.to_string()),
    }
}

/// `yaml.dump(config, default_flow_style=False, allow_unicode=True, sort_keys=False)`.
fn yaml_text(config: &Mapping) -> String {
    // A mapping of strings and string lists always serialises.
    serde_yaml::to_string(config).unwrap_or_default()
}

fn yaml_list(items: Vec<String>) -> Yaml {
    Yaml::Sequence(items.into_iter().map(Yaml::from).collect())
}

fn invalid(key: &str, expected: &str) -> ToolFailure {
    ToolFailure::new(FailureClass::ValidationError, format!("{key}: {expected}"))
}

/// A required string argument.
fn required_text(args: &Value, key: &str) -> Result<String, ToolFailure> {
    match args.get(key) {
        Some(Value::String(text)) => Ok(text.clone()),
        None => Err(invalid(key, "field required (a string)")),
        Some(_) => Err(invalid(key, "input should be a valid string")),
    }
}

/// An optional string argument of `update_agent`: a null-like string counts as omitted.
fn optional_text(args: &Value, key: &str) -> Result<Option<String>, ToolFailure> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) if is_nullish(text) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(invalid(key, "input should be a valid string")),
    }
}

/// An optional list of strings; with `nullish`, a null-like string counts as omitted.
fn string_list(args: &Value, key: &str, nullish: bool) -> Result<Option<Vec<String>>, ToolFailure> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) if nullish && is_nullish(text) => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| item.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .map(Some)
            .ok_or_else(|| invalid(key, "input should be a valid list of strings")),
        Some(_) => Err(invalid(key, "input should be a valid list of strings")),
    }
}

fn is_nullish(text: &str) -> bool {
    NULLISH.contains(&text.trim().to_lowercase().as_str())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
#[path = "tools_tests.rs"]
mod tests;
