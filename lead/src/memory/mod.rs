//! Memory (DeerFlow spec C.6): what a user's runs taught about the user, kept in the runs
//! store (`runs::store::memory`), learned after each successful run off its critical path
//! and put into the next run's system prompt. A finished run queues its new messages
//! (`filter`) for its user and agent; the [`worker::MemoryWorker`] of a long-lived lead asks
//! the memory model once a user has been quiet for `debounce_seconds`, or at the latest
//! `max_delay_seconds` after the first pending update (`worker`), and applies what passes
//! the write gate (`update`). Messages a summary removes mid-run are queued as it removes
//! them (`flush`), appended to the thread's pending update like a run's.
//! Every run reads the memory current at its start (`inject`).
//! A failed update is logged and tried again later; it never fails a run.

pub mod filter;
pub mod flush;
pub mod inject;
pub mod time;
pub mod update;
pub mod worker;

use std::sync::Arc;

use antler_engine::{ChatModel, RunRecord};
use antler_protocol::config::{AppConfig, MemoryConfig, MemoryModel, ModelConfig};

use crate::runs::prepare::{PrepareError, RunEnv, SCRIPTED_INLINE_PREFIX, SCRIPTED_PREFIX};
use crate::runs::store::memory::{Enqueued, QueueItem, QueueKey, DEFAULT_AGENT};

/// The name the memory model's synthesized `models:` entry has.
const MEMORY_MODEL_NAME: &str = "memory";

/// The facts bucket of a run's agent: its name lower-cased, `__default__` without one.
pub fn agent_key(agent: Option<&str>) -> String {
    agent
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_lowercase)
        .unwrap_or_else(|| DEFAULT_AGENT.to_owned())
}

/// `memory:` of `app`; a value Antler cannot honour is the run's config error.
pub fn config(app: &AppConfig) -> Result<MemoryConfig, PrepareError> {
    MemoryConfig::from_config(app.other.get("memory"))
        .map_err(|p| PrepareError::Config(format!("config.yaml {p}")))
}

/// The model of the update call: `memory.backend_config.model` (a `models:` entry by its
/// name, else an endpoint of its own), or else the first of `models:`.
pub fn model(app: &AppConfig, memory: &MemoryConfig) -> Result<Arc<dyn ChatModel>, PrepareError> {
    let Some(wanted) = memory.deermem.model.as_ref() else {
        return crate::runs::prepare::model_for(crate::runs::prepare::MODEL_PREFIX, app);
    };
    if app.models.iter().any(|m| m.name == wanted.model) {
        return crate::runs::prepare::model_for(
            &format!("{}{}", crate::runs::prepare::MODEL_PREFIX, wanted.model),
            app,
        );
    }
    let mut own = app.clone();
    own.models.insert(0, entry(wanted));
    crate::runs::prepare::model_for(
        &format!("{}{MEMORY_MODEL_NAME}", crate::runs::prepare::MODEL_PREFIX),
        &own,
    )
}

/// `backend_config.model` as a `models:` entry.
fn entry(wanted: &MemoryModel) -> ModelConfig {
    let use_ = match wanted.provider.as_deref() {
        Some("anthropic") => "langchain_anthropic:ChatAnthropic",
        _ => antler_engine::USE_CHAT_OPENAI,
    };
    let mut extra = serde_json::Map::new();
    if let Some(t) = wanted.temperature {
        extra.insert("temperature".into(), serde_json::json!(t));
    }
    ModelConfig {
        name: MEMORY_MODEL_NAME.to_owned(),
        display_name: None,
        use_: use_.to_owned(),
        model: wanted.model.clone(),
        supports_vision: false,
        supports_thinking: false,
        api_key: wanted.api_key.clone(),
        base_url: wanted.base_url.clone(),
        extra,
    }
}

/// The memory block for a run of `user` with `agent` (empty: none), or the config error.
pub async fn block_for_run(
    env: &RunEnv,
    app: &AppConfig,
    user: &str,
    agent: Option<&str>,
) -> Result<String, PrepareError> {
    let memory = config(app)?;
    if memory.is_off() || !memory.injection_enabled {
        return Ok(String::new());
    }
    let (user, agent) = (user.to_owned(), agent_key(agent));
    match env
        .store
        .call(move |store| store.memory(&user, &agent))
        .await
    {
        Ok(doc) => Ok(inject::body(&doc, &memory.deermem)),
        Err(e) => {
            // Memory is context, not the run: a run goes on without it.
            tracing::warn!("cannot read memory for the run's prompt: {e}");
            Ok(String::new())
        }
    }
}

/// A run ended with `record`: its new messages are queued for its user and agent, and the
/// worker (a long-lived lead's) told. A scripted run (a test or demo) is not remembered.
pub async fn run_ended(env: Arc<RunEnv>, record: RunRecord) {
    if record.model.starts_with(SCRIPTED_PREFIX) || record.model.starts_with(SCRIPTED_INLINE_PREFIX)
    {
        return;
    }
    let Ok(app) = env.load_config(None).await else {
        return;
    };
    let Ok(memory) = config(&app) else {
        return;
    };
    if memory.is_off() {
        return;
    }
    let key = QueueKey {
        user: record.user_id.clone(),
        agent: agent_key(record.agent.as_deref()),
        thread: record.thread_id.clone(),
    };
    let depth = memory.deermem.queue_max_depth;
    let run_id = record.run_id.clone();
    let queued = env
        .store
        .call(move |store| {
            let Some((_, state)) = store.latest(&run_id)? else {
                return Ok(None);
            };
            let kept = filter::for_memory(&state.messages);
            let given = store.memory_given(&key)?;
            let fresh = filter::after_watermark(&kept, given.as_deref());
            let Some(last) = fresh.last() else {
                return Ok(None);
            };
            let messages: Vec<_> = fresh.iter().map(|k| k.message.clone()).collect();
            let now = crate::runs::store::memory::memory_now_ms();
            let item = QueueItem {
                key,
                signal: !filter::signals(&messages).is_empty(),
                messages,
                last_identity: last.identity.clone(),
                first_ms: now,
                enqueued_ms: now,
                attempts: 0,
                next_attempt_ms: 0,
            };
            store.enqueue_memory(&item, depth).map(Some)
        })
        .await;
    match queued {
        Ok(Some(Enqueued::Queued)) => {
            if let Some(worker) = env.memory_worker.get() {
                worker.do_send(worker::Nudge);
            }
        }
        Ok(Some(Enqueued::Full)) => tracing::warn!(
            run = %record.run_id,
            "the memory queue is full (memory.backend_config.queue_max_depth): this run's update is dropped"
        ),
        Ok(None) => {}
        Err(e) => tracing::warn!(run = %record.run_id, "cannot queue the run's memory update: {e}"),
    }
}
