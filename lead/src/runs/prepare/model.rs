//! The model of a run: a run label (`scripted:PATH`, `scripted-yaml:…` or `model:NAME`),
//! the model it names (a scripted playbook, or a model of config.yaml's `models:`), a
//! named playbook found beneath the configured directories, the moderation model, and the
//! label as a person reads it. A `models:` model comes wrapped in its retries, circuit
//! breaker and fallbacks (`antler_engine::ResilientModel`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use antler_engine::{ChatModel, ScriptedModel};
use antler_protocol::config::AppConfig;

use super::{PrepareError, MODEL_PREFIX, SCRIPTED_INLINE_PREFIX, SCRIPTED_PREFIX};

/// `skill_evolution.moderation_model_name`'s model for `skill_manage`'s LLM scan (`None`:
/// unset, the run's model scans); one that cannot be built refuses every scan.
pub(super) fn moderation_model(app: &AppConfig) -> Option<Arc<dyn ChatModel>> {
    let name = app.skill_evolution.moderation_model_name.as_deref()?;
    Some(named_model(app, Some(name)).unwrap_or_else(|e| {
        tracing::warn!("skill_evolution.moderation_model_name: {e}; skill scans fail");
        Arc::new(antler_engine::UnavailableModel {
            name: name.to_owned(),
            reason: e.to_string(),
        })
    }))
}

/// A run label as a person reads it: the model's name (`default` for the first model of
/// `models:` or the environment's endpoint), `scripted (PATH)` for a playbook file, and
/// `scripted (inline playbook)` for one sent inline (the label holds it; it is not quoted).
pub fn shown_model(label: &str) -> String {
    if label.starts_with(SCRIPTED_INLINE_PREFIX) {
        return "scripted (inline playbook)".to_owned();
    }
    if let Some(path) = label.strip_prefix(SCRIPTED_PREFIX) {
        return format!("scripted ({path})");
    }
    match label.strip_prefix(MODEL_PREFIX) {
        Some("") => "default".to_owned(),
        Some(name) => name.to_owned(),
        None => label.to_owned(),
    }
}

/// The model of `models:` a run label names (`None`: a playbook, or the first model).
pub(super) fn label_model(label: &str) -> Option<String> {
    label
        .strip_prefix(MODEL_PREFIX)
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
}

/// The model a run label names: `scripted:PATH` or `model:NAME`.
pub fn model_for(label: &str, app: &AppConfig) -> Result<Arc<dyn ChatModel>, PrepareError> {
    if let Some(path) = label.strip_prefix(SCRIPTED_PREFIX) {
        return Ok(Arc::new(ScriptedModel::from_file(Path::new(path))?));
    }
    if let Some(yaml) = label.strip_prefix(SCRIPTED_INLINE_PREFIX) {
        return Ok(Arc::new(ScriptedModel::from_yaml(yaml, "(inline)")?));
    }
    let name = label.strip_prefix(MODEL_PREFIX).filter(|n| !n.is_empty());
    named_model(app, name)
}

/// A model of config.yaml's `models:` (the first when unnamed), or the endpoint the
/// environment names when `models:` is empty: any OpenAI-compatible server. It is built
/// with its retries, its process-wide circuit breaker and the models of its `fallback:`
/// list (`llm_call:`, `circuit_breaker:`, spec D.5).
pub(super) fn named_model(
    app: &AppConfig,
    name: Option<&str>,
) -> Result<Arc<dyn ChatModel>, PrepareError> {
    Ok(antler_engine::resilient_model_from_config(
        app,
        name,
        &antler_protocol::config::process_env,
    )?)
}

/// The file `name` names in one of `dirs` (relative ones under `base`, config.yaml's
/// directory): a relative path of plain components, resolved beneath its directory (a link
/// that leads out of it is not followed), the first directory that has it.
pub(super) fn named_playbook(
    dirs: &[PathBuf],
    base: Option<&Path>,
    name: &str,
) -> Result<PathBuf, PrepareError> {
    use std::path::Component;
    let shown: String = name.chars().take(200).collect();
    let plain = !name.is_empty()
        && name.len() <= 1024
        && Path::new(name)
            .components()
            .all(|c| matches!(c, Component::Normal(_)));
    if !plain {
        return Err(PrepareError::Playbook(format!(
            "playbook {shown:?}: name a file of antler.playbook_dirs by a relative path without `..`, or send the YAML as `playbook_yaml`"
        )));
    }
    if dirs.is_empty() {
        return Err(PrepareError::Playbook(format!(
            "playbook {shown:?}: no playbook directories are configured (antler.playbook_dirs); send the YAML as `playbook_yaml`"
        )));
    }
    for dir in dirs {
        let dir = match base {
            Some(base) if dir.is_relative() => base.join(dir),
            _ => dir.clone(),
        };
        let (Ok(root), Ok(found)) = (dir.canonicalize(), dir.join(name).canonicalize()) else {
            continue;
        };
        if found.starts_with(&root) && found != root {
            return Ok(found);
        }
    }
    Err(PrepareError::Playbook(format!(
        "playbook {shown:?}: no such file in antler.playbook_dirs"
    )))
}
