//! A run's context settings from config.yaml: `summarization:` with the run model's
//! window (its `models:` entry's `max_input_tokens` or `context_window`) and its summary
//! model, and `title:` with its title model (spec C.1, C.5). A fraction without a window
//! is a config error naming the model.

use std::sync::Arc;

use antler_engine::{
    CompactError, CompactOutcome, RunSettings, Summarization, ThreadState, Titling, TokenCounter,
};
use antler_protocol::config::{
    AppConfig, ContextSize, ModelConfig, SummarizationConfig, TitleConfig,
};

use super::model::{label_model, model_for, named_model};
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

/// Why a thread could not be compacted.
// The compact route (`POST /api/threads/{id}/compact`) is its caller.
#[allow(dead_code)]
#[derive(Debug, thiserror::Error)]
pub(crate) enum CompactThreadError {
    /// The config or the model (a 500 naming what is wrong in the config).
    #[error(transparent)]
    Config(#[from] PrepareError),
    /// DeerFlow's 409 (disabled) or 500 (the summary failed).
    #[error(transparent)]
    Compact(#[from] CompactError),
}

/// Manual compaction of a thread (`POST /api/threads/{id}/compact`, spec C.4): `state`
/// compacted by the model `model_name` names (the request's, else the custom agent's;
/// `None`: the first of `models:`), keeping `keep` (else the configured keep). The caller
/// applies `outcome.update` to the thread's state and checkpoints it.
pub(crate) async fn compact_thread(
    app: &AppConfig,
    model_name: Option<&str>,
    state: &ThreadState,
    keep: Option<ContextSize>,
) -> Result<CompactOutcome, CompactThreadError> {
    let config = SummarizationConfig::from_section(app.other.get("summarization"))
        .map_err(PrepareError::Config)?;
    if !config.enabled {
        return Err(CompactError::Disabled.into());
    }
    let label = format!("{MODEL_PREFIX}{}", model_name.unwrap_or(""));
    let model = model_for(&label, app)?;
    let summarization = summarization_for(config, app, &label)?;
    Ok(antler_engine::compact(state, model.as_ref(), Some(&summarization), keep).await?)
}

/// The `models:` entry a run label names (the first for `model:`), none for a playbook.
pub(crate) fn run_entry<'a>(app: &'a AppConfig, label: &str) -> Option<&'a ModelConfig> {
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

impl super::RunEnv {
    /// [`compact_thread`] with config.yaml as it is now (`POST /api/threads/{id}/compact`).
    pub(crate) async fn compact_thread(
        &self,
        state: &ThreadState,
        model_name: Option<&str>,
        keep: Option<ContextSize>,
    ) -> Result<CompactOutcome, CompactThreadError> {
        let app = self.load_config(None).await?;
        let outcome = compact_thread(&app, model_name, state, keep).await;
        if let Err(CompactThreadError::Compact(CompactError::SummaryFailed(e))) = &outcome {
            tracing::warn!("a manual compaction failed: {e}");
        }
        outcome
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn app(yaml: &str) -> AppConfig {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[tokio::test]
    async fn compaction_is_refused_while_summarization_is_off() {
        let state = ThreadState::new("hello");
        let err = compact_thread(&app("models: []\n"), None, &state, None)
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "Context compaction is disabled.");
    }

    #[test]
    fn a_fraction_without_a_window_names_the_model() {
        let app = app("models:\n  - {name: local, use: langchain_openai:ChatOpenAI, model: m, base_url: http://127.0.0.1:1/v1}\nsummarization:\n  enabled: true\n  trigger: {type: fraction, value: 0.8}\n");
        let Err(err) = with_context(RunSettings::default(), &app, "model:local") else {
            panic!("a fraction without a window is refused");
        };
        assert!(err.to_string().contains("model `local`"), "{err}");
        let windowed = app_with_window();
        let settings = with_context(RunSettings::default(), &windowed, "model:").unwrap();
        let summarization = settings.summarization.unwrap();
        assert_eq!(summarization.window, Some(8192));
        assert!(settings.title.is_some());
    }

    fn app_with_window() -> AppConfig {
        app("models:\n  - {name: local, use: langchain_openai:ChatOpenAI, model: m, base_url: http://127.0.0.1:1/v1, context_window: 8192}\nsummarization:\n  enabled: true\n  trigger: [{type: fraction, value: 0.8}]\n")
    }
}
