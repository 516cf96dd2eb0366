//! Manual compaction (`POST /api/threads/{id}/compact`, spec C.4): the same compaction
//! as before a model call, without the trigger, with DeerFlow's response fields and texts.

use antler_protocol::config::ContextSize;

use super::cutoff::keep_cutoff;
use super::prompt::durable_context;
use super::{Summarization, SummaryError};
use crate::model::ChatModel;
use crate::thread::state::{StateUpdate, ThreadState};

/// How a manual compaction ended (C.4): DeerFlow's response fields.
#[derive(Clone, Debug, PartialEq)]
pub struct CompactOutcome {
    pub compacted: bool,
    /// Why nothing was compacted (`not_enough_messages`).
    pub reason: Option<&'static str>,
    pub removed_message_count: usize,
    pub preserved_message_count: usize,
    pub summary_updated: bool,
    /// The counted tokens of the thread before the compaction.
    pub total_tokens: u64,
    /// What to apply to the thread's state (empty when nothing was compacted).
    pub update: StateUpdate,
}

/// The reason of a manual compaction that had nothing to do.
pub const NOT_ENOUGH_MESSAGES: &str = "not_enough_messages";

/// Why a manual compaction failed, with DeerFlow's texts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompactError {
    /// 409.
    #[error("Context compaction is disabled.")]
    Disabled,
    /// 500 (the reasons are logged, never shown).
    #[error("Failed to compact thread context.")]
    SummaryFailed(SummaryError),
}

/// Manual compaction (`POST /api/threads/{id}/compact`, C.4): the same compaction
/// without the trigger, keeping `keep` (else the configured keep). The caller applies
/// `update` to the thread's state and checkpoints it.
pub async fn compact(
    state: &ThreadState,
    model: &dyn ChatModel,
    summarization: Option<&Summarization>,
    keep: Option<ContextSize>,
) -> Result<CompactOutcome, CompactError> {
    let Some(s) = summarization.filter(|s| s.config.enabled) else {
        return Err(CompactError::Disabled);
    };
    let mut counted = state.messages.clone();
    counted.extend(durable_context(state.summary_text.as_deref()));
    let total_tokens = s.counter.messages(&counted);
    let keep = keep.unwrap_or(s.config.keep);
    let cutoff = keep_cutoff(&state.messages, keep, s.window, &s.counter);
    match s.compact_at(model, state, cutoff).await {
        Ok(Some(compaction)) => Ok(CompactOutcome {
            compacted: true,
            reason: None,
            removed_message_count: compaction.removed,
            preserved_message_count: compaction.kept,
            summary_updated: true,
            total_tokens,
            update: compaction.update,
        }),
        Ok(None) => Ok(CompactOutcome {
            compacted: false,
            reason: Some(NOT_ENOUGH_MESSAGES),
            removed_message_count: 0,
            preserved_message_count: state.messages.len(),
            summary_updated: false,
            total_tokens,
            update: StateUpdate::default(),
        }),
        Err(e) => Err(CompactError::SummaryFailed(e)),
    }
}
