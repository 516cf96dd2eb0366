//! A run's `ThreadState` and DeerFlow's reducers (`agents/thread_state.py`): every step
//! returns a [`StateUpdate`] and [`ThreadState::apply`] merges it, so the state only
//! changes through the reducers. Invariants: artifacts keep first-seen order without
//! duplicates; promotions count only under one catalog hash; the sandbox id, once set,
//! never changes (another id is a [`StateConflict`]); active skills keep first-seen order
//! without duplicates, except that there is at most one slash-activated skill (the last).

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::approvals::ApprovalState;
use crate::catalog::{merge_promoted, Promoted};

/// One tool call the model asked for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub args: Value,
}

/// What a model thought before it answered: kept on its AI message so that it is shown
/// (events, the page) and, where the provider requires it, sent back; never part of the
/// answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Reasoning {
    /// The readable reasoning (DeepSeek's `reasoning_content`, Anthropic's thinking,
    /// Gemini's thought parts, a Responses reasoning summary).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub text: String,
    /// What the provider needs back verbatim in later requests, in its own shape:
    /// Anthropic's thinking blocks with their signatures, Responses reasoning items with
    /// their encrypted content, Gemini's thought signatures.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replay: Vec<ReplayItem>,
}

/// One provider-shaped item of [`Reasoning::replay`]: only the provider that wrote it
/// reads it (a conversation that changes model drops what the new one cannot read).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplayItem {
    /// The provider module's tag (`anthropic`, `gemini`, `openai_responses`, ...).
    pub provider: String,
    pub item: Value,
}

/// Whether a tool message reports success or an error (`ToolMessage.status`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolStatus {
    #[default]
    Success,
    Error,
}

/// One message of the conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    System {
        content: String,
    },
    Human {
        content: String,
        /// `"summary"` marks a summary, not a user turn.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        hide_from_ui: bool,
        /// LangChain's `additional_kwargs`: `files` (the uploads this turn carries, by
        /// name) and `original_user_content` (the text before the uploads block).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        additional_kwargs: Option<Box<Value>>,
    },
    Ai {
        /// Stable id: an update carrying the id of an existing AI message replaces it.
        id: String,
        content: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
        /// What the model thought before this message (never part of the answer).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning: Option<Reasoning>,
    },
    Tool {
        tool_call_id: String,
        name: String,
        content: String,
        #[serde(default)]
        status: ToolStatus,
        /// Structured fields beside the content (a task's `subagent_*` fields, 7.2).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        additional_kwargs: Option<Box<Value>>,
    },
}

impl Message {
    /// A plain user turn.
    pub fn human(content: impl Into<String>) -> Message {
        Message::Human {
            content: content.into(),
            name: None,
            hide_from_ui: false,
            additional_kwargs: None,
        }
    }

    /// A user turn that carries uploaded files (`additional_kwargs.files`, by name).
    pub fn human_with_files(content: impl Into<String>, files: &[String]) -> Message {
        let files: Vec<Value> = files
            .iter()
            .map(|f| serde_json::json!({ "filename": f }))
            .collect();
        Message::Human {
            content: content.into(),
            name: None,
            hide_from_ui: false,
            additional_kwargs: (!files.is_empty())
                .then(|| Box::new(serde_json::json!({ "files": files }))),
        }
    }

    /// A tool result.
    pub fn tool(
        tool_call_id: impl Into<String>,
        name: impl Into<String>,
        content: impl Into<String>,
        status: ToolStatus,
    ) -> Message {
        Message::Tool {
            tool_call_id: tool_call_id.into(),
            name: name.into(),
            content: content.into(),
            status,
            additional_kwargs: None,
        }
    }

    /// The tool calls of an AI message (none for any other message).
    pub fn tool_calls(&self) -> &[ToolCall] {
        match self {
            Message::Ai { tool_calls, .. } => tool_calls,
            _ => &[],
        }
    }
}

/// What `view_image` records for one image (no bytes: they are read when needed).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewedImage {
    pub mime_type: String,
    pub size: u64,
    pub actual_path: String,
}

/// The sandbox a run is attached to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxState {
    pub sandbox_id: String,
}

/// One subagent delegation of a run (`delegations[]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delegation {
    pub id: String,
    pub run_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
}

/// Tokens a provider reported (`usage`), or their sum over a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// The provider's `total_tokens` when it gives one, else input + output.
    pub total_tokens: u64,
    /// Input tokens written to the provider's prompt cache (Anthropic's
    /// `cache_creation_input_tokens`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_creation_input_tokens: u64,
    /// Input tokens read from the provider's prompt cache (Anthropic's
    /// `cache_read_input_tokens`, OpenAI's `cached_tokens`, Gemini's
    /// `cachedContentTokenCount`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read_input_tokens: u64,
    /// Output tokens spent on reasoning, when the provider says.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl TokenUsage {
    pub fn is_zero(&self) -> bool {
        *self == TokenUsage::default()
    }

    /// The usage as a run shows it: `None` ("not reported", JSON `null`) when no
    /// provider reported any (llama.cpp's server, a scripted model), never zeros.
    pub fn reported(self) -> Option<TokenUsage> {
        (!self.is_zero()).then_some(self)
    }
}

impl std::ops::Add for TokenUsage {
    type Output = TokenUsage;
    fn add(self, other: TokenUsage) -> TokenUsage {
        TokenUsage {
            input_tokens: self.input_tokens.saturating_add(other.input_tokens),
            output_tokens: self.output_tokens.saturating_add(other.output_tokens),
            total_tokens: self.total_tokens.saturating_add(other.total_tokens),
            cache_creation_input_tokens: self
                .cache_creation_input_tokens
                .saturating_add(other.cache_creation_input_tokens),
            cache_read_input_tokens: self
                .cache_read_input_tokens
                .saturating_add(other.cache_read_input_tokens),
            reasoning_tokens: self.reasoning_tokens.saturating_add(other.reasoning_tokens),
        }
    }
}

/// Why a run stopped early (DeerFlow's run-level stop reasons, spec 8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    LoopCapped,
    TokenCapped,
    SafetyCapped,
    SubagentLimitCapped,
    ModelLengthCapped,
    /// The model's replies were all invalid tool calls `llm_call.max_invalid_tool_calls`
    /// times in a row (`middleware::invalid_calls`).
    InvalidToolCallsCapped,
}

/// How a skill became active in a run (spec 4.3's policy sources).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkillSource {
    /// The user typed `/skill-name` (DeerFlow's `slash` source, which dominates).
    Slash,
    /// The model read the skill's `SKILL.md` (DeerFlow's `skill_context` entries).
    Read,
}

/// A skill active in the run: the container path of its `SKILL.md`, which the policy
/// resolves against the installed skills at each model turn.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActiveSkill {
    /// The name it was activated under (slash: the skill's name; read: its directory).
    pub name: String,
    /// e.g. `/mnt/skills/public/my-skill/SKILL.md`.
    pub path: String,
    pub source: SkillSource,
}

/// A run's state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadState {
    pub messages: Vec<Message>,
    pub artifacts: Vec<String>,
    pub promoted: Option<Promoted>,
    pub sandbox: Option<SandboxState>,
    pub viewed_images: BTreeMap<String, ViewedImage>,
    pub delegations: Vec<Delegation>,
    pub stop_reason: Option<StopReason>,
    /// The custom agent `setup_agent` created in this thread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_agent_name: Option<String>,
    /// Skills activated in this run, through [`merge_active_skills`] (absent in
    /// checkpoints written before skills could be activated).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub active_skills: Vec<ActiveSkill>,
    /// The tokens the run's model calls used, as the provider reported them.
    #[serde(default, skip_serializing_if = "TokenUsage::is_zero")]
    pub token_usage: TokenUsage,
    /// The AI messages the thread held when this run started (earlier runs' turns): the
    /// run's turn limit counts only its own. Zero for a thread's first run.
    #[serde(default, skip_serializing_if = "is_zero_usize")]
    pub turns_before: usize,
    /// The thread's title (spec C.5), set once after the first exchange.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What summarization folded away (spec C.3): sent with every model request as
    /// durable context, never a message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_text: Option<String>,
    /// The AI messages summarization removed, so turn numbers (and the ids `ai-{turn}`)
    /// keep counting after a compaction.
    #[serde(default, skip_serializing_if = "is_zero_usize")]
    pub summarized_turns: usize,
    /// The files the run's last user turn uploaded (`UploadsMiddleware`, set at the start
    /// of every run, `[]` when there are none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub uploaded_files: Vec<UploadedFile>,
    /// The thread's active goal (spec A.6 "Goals"): kept across runs, cleared once met.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<super::goal::GoalState>,
    /// The thread's approvals: calls waiting for a person, their answers, the rules
    /// approved for the thread (`thread::approvals`).
    #[serde(default, skip_serializing_if = "ApprovalState::is_empty")]
    pub approvals: ApprovalState,
}

fn is_zero_usize(n: &usize) -> bool {
    *n == 0
}

/// One file of [`ThreadState::uploaded_files`] (DeerFlow's `uploaded_files` entry; `size`
/// is the server's count of the bytes on disk, never the client's claim).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadedFile {
    pub filename: String,
    pub size: u64,
    /// `/mnt/user-data/uploads/{filename}`.
    pub path: String,
    /// `.pdf`, or empty.
    pub extension: String,
}

/// What one step returns; `None` and empty fields leave the state as it is, except
/// `viewed_images: Some(empty)`, which clears the images (DeerFlow's reset signal).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StateUpdate {
    pub messages: Vec<Message>,
    pub artifacts: Vec<String>,
    pub promoted: Option<Promoted>,
    pub sandbox: Option<SandboxState>,
    pub viewed_images: Option<BTreeMap<String, ViewedImage>>,
    pub delegations: Vec<Delegation>,
    pub stop_reason: Option<StopReason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_agent_name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub active_skills: Vec<ActiveSkill>,
    /// Tokens to add to the run's total.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_usage: Option<TokenUsage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_text: Option<String>,
    /// Replaces every message before `messages` is applied (DeerFlow's
    /// `RemoveMessage("__remove_all__")` followed by the preserved tail).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_messages: Option<Vec<Message>>,
    /// AI messages removed by this update's `replace_messages`, added to
    /// [`ThreadState::summarized_turns`].
    #[serde(default, skip_serializing_if = "is_zero_usize")]
    pub summarized_turns: usize,
    /// The uploads of this run (replaces the list; `Some(empty)` clears it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uploaded_files: Option<Vec<UploadedFile>>,
    /// A user turn rewritten in place (the uploads block prepended): its index in
    /// `messages` and the new message; ignored unless that message is a user turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewritten_human: Option<Box<(usize, Message)>>,
    /// The thread's approvals after this update (replaces them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals: Option<ApprovalState>,
}

impl StateUpdate {
    /// An update that only adds messages.
    pub fn messages(messages: impl IntoIterator<Item = Message>) -> StateUpdate {
        StateUpdate {
            messages: messages.into_iter().collect(),
            ..StateUpdate::default()
        }
    }

    /// Folds `later` into this update (both applied in order give the same state).
    pub fn then(mut self, later: StateUpdate) -> StateUpdate {
        if later.replace_messages.is_some() {
            // A later replacement drops every message the earlier update added.
            self.messages.clear();
            self.replace_messages = later.replace_messages;
        }
        self.messages.extend(later.messages);
        self.artifacts.extend(later.artifacts);
        self.promoted = merge_promoted(self.promoted, later.promoted);
        self.sandbox = later.sandbox.or(self.sandbox);
        self.viewed_images = match (self.viewed_images, later.viewed_images) {
            (images, None) => images,
            (_, Some(later)) if later.is_empty() => Some(later),
            (None, Some(later)) => Some(later),
            (Some(mut images), Some(later)) => {
                images.extend(later);
                Some(images)
            }
        };
        self.delegations.extend(later.delegations);
        self.stop_reason = later.stop_reason.or(self.stop_reason);
        self.created_agent_name = later.created_agent_name.or(self.created_agent_name);
        self.active_skills.extend(later.active_skills);
        self.token_usage = match (self.token_usage, later.token_usage) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        self.title = later.title.or(self.title);
        self.summary_text = later.summary_text.or(self.summary_text);
        self.summarized_turns += later.summarized_turns;
        self.uploaded_files = later.uploaded_files.or(self.uploaded_files);
        self.rewritten_human = later.rewritten_human.or(self.rewritten_human);
        self.approvals = later.approvals.or(self.approvals);
        self
    }
}

/// An update the state refuses (an operator-facing error: it fails the run).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StateConflict {
    #[error(
        "sandbox conflict: the run is attached to sandbox {existing:?}, an update names {new:?}"
    )]
    Sandbox { existing: String, new: String },
}

impl ThreadState {
    /// A new run's state: the user's task as the first message.
    pub fn new(task: impl Into<String>) -> ThreadState {
        ThreadState {
            messages: vec![Message::human(task)],
            ..ThreadState::default()
        }
    }

    /// The state a new run on a thread starts from (spec A.6's carry-over): the thread's
    /// messages, artifacts, promoted tools, viewed images, delegations, sandbox id, active
    /// skills and every field not named here (title, summary) kept; the stop reason and
    /// the token usage reset; `task` appended as the user's new message.
    pub fn continued(self, task: impl Into<String>) -> ThreadState {
        let turns_before = self.turns();
        let approvals = self.approvals.clone().carried_over();
        let mut state = ThreadState {
            stop_reason: None,
            token_usage: TokenUsage::default(),
            turns_before,
            approvals,
            ..self
        };
        state.messages.push(Message::human(task));
        state
    }

    /// The model turns of the thread so far: its AI messages and those summarization
    /// folded away.
    pub fn turns(&self) -> usize {
        self.messages
            .iter()
            .filter(|m| matches!(m, Message::Ai { .. }))
            .count()
            + self.summarized_turns
    }

    /// The model turns of this run so far (those of earlier runs on the thread excluded).
    pub fn turns_this_run(&self) -> usize {
        self.turns().saturating_sub(self.turns_before)
    }

    /// Merges `update` through every reducer. A conflict leaves the state unchanged.
    pub fn apply(&mut self, update: StateUpdate) -> Result<(), StateConflict> {
        self.sandbox = merge_sandbox(self.sandbox.as_ref(), update.sandbox)?;
        if let Some(replaced) = update.replace_messages {
            self.messages = replaced;
        }
        add_messages(&mut self.messages, update.messages);
        merge_artifacts(&mut self.artifacts, update.artifacts);
        self.promoted = merge_promoted(self.promoted.take(), update.promoted);
        merge_viewed_images(&mut self.viewed_images, update.viewed_images);
        merge_delegations(&mut self.delegations, update.delegations);
        if update.stop_reason.is_some() {
            self.stop_reason = update.stop_reason;
        }
        if update.created_agent_name.is_some() {
            self.created_agent_name = update.created_agent_name;
        }
        merge_active_skills(&mut self.active_skills, update.active_skills);
        if let Some(usage) = update.token_usage {
            self.token_usage = self.token_usage + usage;
        }
        if update.title.is_some() {
            self.title = update.title;
        }
        if update.summary_text.is_some() {
            self.summary_text = update.summary_text;
        }
        self.summarized_turns += update.summarized_turns;
        if let Some(files) = update.uploaded_files {
            self.uploaded_files = files;
        }
        if let Some(approvals) = update.approvals {
            self.approvals = approvals;
        }
        if let Some((index, message)) = update.rewritten_human.map(|r| *r) {
            if let (Some(slot @ Message::Human { .. }), Message::Human { .. }) =
                (self.messages.get_mut(index), &message)
            {
                *slot = message;
            }
        }
        Ok(())
    }

    /// The AI message's tool calls that have no tool result yet, in call order.
    pub fn pending_tool_calls(&self) -> Vec<ToolCall> {
        let Some(index) = self
            .messages
            .iter()
            .rposition(|m| matches!(m, Message::Ai { .. }))
        else {
            return Vec::new();
        };
        let answered: HashSet<&str> = self.messages[index..]
            .iter()
            .filter_map(|m| match m {
                Message::Tool { tool_call_id, .. } => Some(tool_call_id.as_str()),
                _ => None,
            })
            .collect();
        self.messages[index]
            .tool_calls()
            .iter()
            .filter(|call| !answered.contains(call.id.as_str()))
            .cloned()
            .collect()
    }
}

/// `add_messages`: append, except that an AI message whose id is already present
/// replaces that message in place (a middleware rewriting the model's reply).
pub fn add_messages(messages: &mut Vec<Message>, new: Vec<Message>) {
    for message in new {
        let existing = match &message {
            Message::Ai { id, .. } => messages
                .iter()
                .position(|m| matches!(m, Message::Ai { id: other, .. } if other == id)),
            _ => None,
        };
        match existing {
            Some(index) => messages[index] = message,
            None => messages.push(message),
        }
    }
}

/// The id the run loop gives the AI message of `turn` (chosen before the model is asked,
/// so its streamed deltas carry it): `ai-{turn}`, unless an AI message of `messages`
/// already has that id (a summarization removed earlier messages, a thread continued
/// across runs), then `ai-{turn}-{n}` with the smallest `n >= 2` free. Unique in
/// `messages`, so `add_messages` appends the reply instead of replacing an old message,
/// and a function of the messages alone, so a replayed step gets the same id.
pub fn next_ai_id(messages: &[Message], turn: usize) -> String {
    let taken: HashSet<&str> = messages
        .iter()
        .filter_map(|m| match m {
            Message::Ai { id, .. } => Some(id.as_str()),
            _ => None,
        })
        .collect();
    let plain = format!("ai-{turn}");
    if !taken.contains(plain.as_str()) {
        return plain;
    }
    (2..)
        .map(|n| format!("ai-{turn}-{n}"))
        .find(|id| !taken.contains(id.as_str()))
        .unwrap_or(plain)
}

/// `merge_artifacts`: concatenate, keep the first occurrence of each path.
pub fn merge_artifacts(artifacts: &mut Vec<String>, new: Vec<String>) {
    let mut seen: HashSet<String> = artifacts.iter().cloned().collect();
    artifacts.extend(new.into_iter().filter(|path| seen.insert(path.clone())));
}

/// The sandbox reducer: idempotent for the same id; a different id is refused.
pub fn merge_sandbox(
    existing: Option<&SandboxState>,
    new: Option<SandboxState>,
) -> Result<Option<SandboxState>, StateConflict> {
    match (existing, new) {
        (existing, None) => Ok(existing.cloned()),
        (None, Some(new)) => Ok(Some(new)),
        (Some(existing), Some(new)) if *existing == new => Ok(Some(new)),
        (Some(existing), Some(new)) => Err(StateConflict::Sandbox {
            existing: existing.sandbox_id.clone(),
            new: new.sandbox_id,
        }),
    }
}

/// `merge_viewed_images`: no update keeps; an empty map clears; otherwise the new
/// entries are merged over the existing ones.
pub fn merge_viewed_images(
    images: &mut BTreeMap<String, ViewedImage>,
    new: Option<BTreeMap<String, ViewedImage>>,
) {
    match new {
        None => {}
        Some(new) if new.is_empty() => images.clear(),
        Some(new) => images.extend(new),
    }
}

/// Delegations by id: a known id is updated in place (its status moves on), a new id
/// is appended.
pub fn merge_delegations(delegations: &mut Vec<Delegation>, new: Vec<Delegation>) {
    for delegation in new {
        match delegations.iter_mut().find(|d| d.id == delegation.id) {
            Some(existing) => *existing = delegation,
            None => delegations.push(delegation),
        }
    }
}

/// Active skills: ordered dedupe (a skill already active keeps its place), except that
/// a slash activation replaces an earlier one of another skill, since DeerFlow keeps
/// only the latest slash activation of a run (spec 4.3: source `slash`, one path).
pub fn merge_active_skills(active: &mut Vec<ActiveSkill>, new: Vec<ActiveSkill>) {
    for skill in new {
        if active.contains(&skill) {
            continue;
        }
        if skill.source == SkillSource::Slash {
            active.retain(|s| s.source != SkillSource::Slash);
        }
        active.push(skill);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
#[path = "state_tests.rs"]
mod tests;
