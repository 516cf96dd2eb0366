//! A run's context settings from config.yaml: `summarization:` with the run model's
//! window (its `models:` entry's `max_input_tokens` or `context_window`) and its summary
//! model, and `title:` with its title model (spec C.1, C.5). A fraction without a window
//! is a config error naming the model.

use std::sync::Arc;

use antler_engine::{RunSettings, Summarization, Titling, TokenCounter};
use antler_protocol::config::{AppConfig, ModelConfig, SummarizationConfig, TitleConfig};

use super::model::{label_model, named_model};
use super::{PrepareError, MODEL_PREFIX};

/// `settings` with the run's summarization and titling for the run label `label`.
pub(super) fn with_context(
    mut settings: RunSettings,
    app: &AppConfig,
    label: &str,
) -> Result<RunSettings, PrepareError> {
    let summarization = SummarizationConfig::from_section(app.other.get("summarization"))
        .map_err(PrepareError::Config)?;
    let title = TitleConfig::from_section(app.other.get("title")).map_err(PrepareError::Config)?;
    if summarization.enabled {
        settings.summarization = Some(Arc::new(summarization_for(summarization, app, label)?));
    }
    if title.enabled {
        let model = title
            .model_name
            .as_deref()
            .and_then(|name| named(app, name, "title.model_name"));
        settings.title = Some(Arc::new(Titling {
            config: title,
            model,
        }));
    }
    Ok(settings)
}

/// `summarization:` for a run (or a manual compaction, `POST /api/threads/{id}/compact`)
/// of the model the run label `label` names: its window, its counter and the summary
/// model. A fraction without a window is a config error naming the model.
pub(crate) fn summarization_for(
    config: SummarizationConfig,
    app: &AppConfig,
    label: &str,
) -> Result<Summarization, PrepareError> {
    let entry = run_entry(app, label);
    let window = entry.and_then(antler_engine::window_of);
    let counter = entry.map(TokenCounter::for_entry).unwrap_or_default();
    let model_name = entry.map_or_else(|| super::model::shown_model(label), |e| e.name.clone());
    let model = config
        .model_name
        .as_deref()
        .and_then(|name| named(app, name, "summarization.model_name"));
    Summarization::new(config, &model_name, window, model, counter)
        .map_err(|e| PrepareError::Config(e.to_string()))
}

/// The `models:` entry a run label names (the first for `model:`), none for a playbook.
fn run_entry<'a>(app: &'a AppConfig, label: &str) -> Option<&'a ModelConfig> {
    if !label.starts_with(MODEL_PREFIX) {
        return None;
    }
    match label_model(label) {
        Some(name) => app.models.iter().find(|m| m.name == name),
        None => app.models.first(),
    }
}

/// The model `name` of `models:` for `key`; one that cannot be built is warned about and
/// the run's own model is used instead (DeerFlow caches it as unusable).
fn named(app: &AppConfig, name: &str, key: &str) -> Option<Arc<dyn antler_engine::ChatModel>> {
    match named_model(app, Some(name)) {
        Ok(model) => Some(model),
        Err(e) => {
            tracing::warn!("{key}: {e}; the run's model is used instead");
            None
        }
    }
}

/// Why a manual compaction could not be made (`POST /api/threads/{id}/compact`).
#[derive(Debug, thiserror::Error)]
pub enum CompactFailure {
    /// DeerFlow's 409 `Context compaction is disabled.` and 500 `Failed to compact
    /// thread context.` (the summary call's reasons are logged, never shown).
    #[error(transparent)]
    Compact(#[from] antler_engine::CompactError),
    /// config.yaml cannot be read, or names a model that cannot be built (400).
    #[error(transparent)]
    Prepare(#[from] PrepareError),
}

impl super::RunEnv {
    /// A manual compaction of a thread's `state` (spec C.4) with the model `model_name`,
    /// else the first of `models:`, and `keep` messages or tokens, else the configured
    /// keep. The caller writes the outcome's update to the thread.
    pub async fn compact_thread(
        &self,
        state: &antler_engine::ThreadState,
        model_name: Option<&str>,
        keep: Option<antler_protocol::config::ContextSize>,
    ) -> Result<antler_engine::CompactOutcome, CompactFailure> {
        let app = self.load_config(None).await?;
        let config = SummarizationConfig::from_section(app.other.get("summarization"))
            .map_err(PrepareError::Config)?;
        if !config.enabled {
            return Err(antler_engine::CompactError::Disabled.into());
        }
        let label = format!("{MODEL_PREFIX}{}", model_name.unwrap_or(""));
        let model = named_model(&app, model_name)?;
        let summarization = summarization_for(config, &app, &label)?;
        let outcome =
            antler_engine::compact(state, model.as_ref(), Some(&summarization), keep).await;
        if let Err(antler_engine::CompactError::SummaryFailed(e)) = &outcome {
            tracing::warn!("a manual compaction failed: {e}");
        }
        Ok(outcome?)
    }
}
