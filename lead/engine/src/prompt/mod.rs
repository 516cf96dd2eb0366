//! What the model reads besides the conversation: the lead's static system prompt (spec A.2,
//! built from the run's catalog, agent and skills, and cached by those inputs so a turn
//! reuses it), and each request's context (spec A.7): the date reminder coalesced into the
//! one leading system message, and the last genuine user message sanitized and wrapped as
//! data. Request changes are made to the request's copy of the messages, never to the state.

pub mod delegation;
pub mod sections;
pub mod skills;
pub mod subagent;

use std::collections::HashSet;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, Weak};

use crate::catalog::builtins::{
    ASK_CLARIFICATION, DESCRIBE_SKILL, LIST_UPLOADED_FILES, PRESENT_FILES, SKILL_MANAGE, TASK,
    UPDATE_AGENT,
};
use crate::catalog::deferred::html_escape;
use crate::catalog::Catalog;
use crate::thread::state::Message;
use crate::tools::skills::InstalledSkill;

pub use crate::thread::input::sanitize_user_input;
pub use delegation::SubagentPromptInputs;
pub use subagent::{subagent_system_prompt, SubagentPromptParts};

/// Tools whose results are external sources, so the citations section is rendered.
const WEB_TOOLS: &[&str] = &["web_search", "web_fetch", "image_search", "web_capture"];
/// The sandbox's file tools the editing reminder names.
const STR_REPLACE: &str = "str_replace";
const WRITE_FILE: &str = "write_file";

/// One `sandbox.mounts` entry as the prompt shows it.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct PromptMount {
    pub container_path: String,
    pub read_only: bool,
}

/// Everything the static prompt depends on.
pub struct PromptInputs<'a> {
    pub catalog: &'a Arc<Catalog>,
    /// The custom agent's name (not on the bootstrap path).
    pub agent_name: Option<&'a str>,
    /// `antler.agent_name`: the name without a custom agent (`None`:
    /// [`sections::DEFAULT_AGENT_NAME`]).
    pub default_agent_name: Option<&'a str>,
    /// The agent's (or the default) SOUL.md, stripped.
    pub soul: Option<&'a str>,
    /// Installed skills (enabled and disabled), and the agent's whitelist.
    pub skills: &'a [InstalledSkill],
    pub allowed_skills: Option<&'a HashSet<String>>,
    pub skills_container_root: &'a str,
    pub skill_evolution: bool,
    /// `skills.deferred_discovery`: the index mode when `describe_skill` is offered.
    pub skill_index: bool,
    /// `acp_agents` is non-empty.
    pub acp_agents: bool,
    pub mounts: &'a [PromptMount],
    /// The run's subagent settings; the `<subagent_system>` section and its bullets are
    /// rendered only with these and `task` offered.
    pub subagents: Option<SubagentPromptInputs<'a>>,
}

/// The lead's system prompt for `inputs`, sections in DeerFlow's order (spec A.2); a
/// section about a tool the catalog does not offer is left out.
pub fn system_prompt(inputs: &PromptInputs<'_>) -> String {
    let offers = |name: &str| inputs.catalog.get(name).is_some();
    let clarification = offers(ASK_CLARIFICATION);
    let subagents = inputs.subagents.as_ref().filter(|_| offers(TASK));
    let agent_name = inputs
        .agent_name
        .or(inputs.default_agent_name)
        .unwrap_or(sections::DEFAULT_AGENT_NAME);
    let mut out = String::with_capacity(8 * 1024);
    out.push_str(&sections::role(agent_name));
    out.push_str(sections::CONFIDENTIALITY);
    if let Some(soul) = inputs.soul.filter(|s| !s.trim().is_empty()) {
        out.push_str("<soul>\n");
        html_escape(&mut out, soul);
        out.push_str("\n</soul>\n");
    }
    if let Some(name) = inputs.agent_name.filter(|_| offers(UPDATE_AGENT)) {
        out.push_str(&sections::self_update(name));
    }
    let subagent_thinking = subagents.map(delegation::thinking).unwrap_or_default();
    out.push_str(&sections::thinking_style(&subagent_thinking));
    if clarification {
        out.push_str(sections::CLARIFICATION);
    }
    let (skills, skills_mode) = skills::section(&skills::SkillsInput {
        installed: inputs.skills,
        allowed: inputs.allowed_skills,
        container_root: inputs.skills_container_root,
        evolution: inputs.skill_evolution && offers(SKILL_MANAGE),
        index: inputs.skill_index && offers(DESCRIBE_SKILL),
    });
    out.push_str(&skills);
    for section in [
        inputs.catalog.prompt_section(),
        inputs.catalog.routing_hints_section(),
    ] {
        if !section.is_empty() {
            out.push_str(section);
            if !section.ends_with('\n') {
                out.push('\n');
            }
        }
    }
    if let Some(subagents) = subagents {
        out.push_str(&delegation::section(subagents));
    }
    out.push_str(&sections::working_directory(
        offers(LIST_UPLOADED_FILES),
        offers(PRESENT_FILES),
    ));
    let mut extra = Vec::new();
    if inputs.acp_agents {
        extra.push(sections::ACP_BLOCK.to_owned());
    }
    if !inputs.mounts.is_empty() {
        let mut block = String::from(sections::CUSTOM_MOUNTS_HEADING);
        for m in inputs.mounts {
            block.push_str(&sections::custom_mount(&m.container_path, m.read_only));
        }
        block.push_str(sections::CUSTOM_MOUNTS_CLOSING);
        extra.push(block);
    }
    out.push_str(&extra.join("\n"));
    out.push_str("</working_directory>\n");
    out.push_str(sections::RESPONSE_STYLE);
    let sources: Vec<String> = WEB_TOOLS
        .iter()
        .filter(|t| offers(t))
        .map(|t| format!("`{t}`"))
        .collect();
    if !sources.is_empty() {
        out.push_str(&sections::citations(&sources.join(", ")));
    }
    let skill_first = match skills_mode {
        skills::SkillsMode::None => "",
        skills::SkillsMode::Legacy => sections::SKILL_FIRST_LEGACY,
        skills::SkillsMode::Index => sections::SKILL_FIRST_INDEX,
    };
    let subagent_reminder = subagents.map(delegation::reminder).unwrap_or_default();
    out.push_str(&sections::critical_reminders(&sections::Reminders {
        subagent: &subagent_reminder,
        skill_first,
        clarification,
        editing: sections::editing(offers(STR_REPLACE), offers(WRITE_FILE)),
        present: offers(PRESENT_FILES),
    }));
    out
}

/// `STR"<system-reminder>\n<current_date>{%Y-%m-%d, %A}</current_date>\n</system-reminder>"`.
pub fn date_reminder(date: &str) -> String {
    format!("<system-reminder>\n<current_date>{date}</current_date>\n</system-reminder>")
}

/// Today in local time as `%Y-%m-%d, %A` (e.g. `2026-05-08, Friday`).
pub fn today() -> String {
    // SAFETY: time(NULL) and localtime_r into a zeroed tm owned here.
    let tm = unsafe {
        let now = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&now, &mut tm);
        tm
    };
    const DAYS: [&str; 7] = [
        "Sunday",
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
    ];
    format!(
        "{:04}-{:02}-{:02}, {}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        DAYS[tm.tm_wday.rem_euclid(7) as usize]
    )
}

/// Makes `messages` (the request's copy) what the model receives: every system message
/// coalesced, after the static prompt and the date reminder, into one leading system
/// message joined by blank lines; the last genuine user message sanitized and wrapped.
pub fn prepare_request(messages: &mut Vec<Message>, system: Option<&str>, date: &str) {
    let Some(system) = system else {
        return;
    };
    if let Some(at) = messages
        .iter()
        .rposition(crate::tools::skills::is_real_user_message)
    {
        if let Message::Human {
            content,
            additional_kwargs,
            ..
        } = &mut messages[at]
        {
            // The uploads block is the server's: only the user's own text is sanitized.
            *content = match crate::middleware::uploads::split_block(
                content,
                additional_kwargs.as_deref(),
            ) {
                Some((at, user)) => format!("{}{}", &content[..at], sanitize_user_input(&user)),
                None => sanitize_user_input(content),
            };
        }
    }
    let mut leading = String::with_capacity(system.len() + 128);
    // A subagent with no prompt parts still gets the date and the input markers (B.1).
    if !system.trim().is_empty() {
        leading.push_str(system.trim_end());
        leading.push_str("\n\n");
    }
    leading.push_str(&date_reminder(date));
    messages.retain(|m| match m {
        Message::System { content } => {
            leading.push_str("\n\n");
            leading.push_str(content);
            false
        }
        _ => true,
    });
    messages.insert(0, Message::System { content: leading });
}

/// Built prompts by their inputs, so runs of one catalog, agent and skills share one. A
/// catalog is recognised by identity: an entry holds a `Weak` to it, which keeps its
/// allocation (so its address) from being reused while the entry lives, and an entry
/// whose catalog is gone is dropped.
#[derive(Default)]
pub struct PromptCache {
    entries: Mutex<Vec<CacheEntry>>,
}

struct CacheEntry {
    catalog: Weak<Catalog>,
    key: u64,
    prompt: Arc<str>,
}

/// How many prompts the cache keeps (the oldest goes first).
const CACHE_ENTRIES: usize = 32;

impl PromptCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<CacheEntry>> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The prompt for `inputs`, built only when no cached one has the same inputs.
    pub fn get(&self, inputs: &PromptInputs<'_>) -> Arc<str> {
        let key = cache_key(inputs);
        let same = |e: &CacheEntry| {
            e.key == key && std::ptr::eq(e.catalog.as_ptr(), Arc::as_ptr(inputs.catalog))
        };
        if let Some(hit) = self.lock().iter().find(|e| same(e)) {
            return hit.prompt.clone();
        }
        let built: Arc<str> = Arc::from(system_prompt(inputs));
        let mut entries = self.lock();
        entries.retain(|e| e.catalog.strong_count() > 0);
        if entries.len() >= CACHE_ENTRIES {
            entries.remove(0);
        }
        entries.push(CacheEntry {
            catalog: Arc::downgrade(inputs.catalog),
            key,
            prompt: built.clone(),
        });
        built
    }
}

/// A hash of every input of [`system_prompt`] but the catalog (recognised by identity).
fn cache_key(inputs: &PromptInputs<'_>) -> u64 {
    let mut h = foldhash::fast::FixedState::with_seed(0x616e_746c_6572).build_hasher();
    inputs.agent_name.hash(&mut h);
    inputs.default_agent_name.hash(&mut h);
    inputs.soul.hash(&mut h);
    for s in inputs.skills {
        (
            &s.skill.name,
            &s.skill.description,
            s.category,
            &s.container_file,
            s.enabled,
        )
            .hash(&mut h);
    }
    let mut allowed: Option<Vec<&String>> = inputs.allowed_skills.map(|a| a.iter().collect());
    if let Some(a) = allowed.as_mut() {
        a.sort();
    }
    allowed.hash(&mut h);
    (
        inputs.skills_container_root,
        inputs.skill_evolution,
        inputs.skill_index,
        inputs.acp_agents,
        inputs.mounts,
        inputs.subagents,
    )
        .hash(&mut h);
    h.finish()
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
