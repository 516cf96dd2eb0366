//! The memory update (DeerFlow's `memory_update.chat.yaml` and `MemoryUpdater`): the
//! prompt (DeerFlow's system text, then the current memory, the new conversation, the
//! signal hints and the staleness review), the reply read leniently (the first JSON
//! object with `user`, `history` and `newFacts`, wherever the model put it), and the
//! write gate that decides what of it is kept: a fact needs `scope=user`,
//! `durability=durable`, `authority=descriptive` and `fact_confidence_threshold`; a
//! summary `scope=user` and `authority=descriptive`; a removal `scope=user` and a reason.

use std::sync::LazyLock;

use antler_protocol::config::DeerMemSettings;
use regex::Regex;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::time::{days_between, iso_date, parse_iso};
use crate::runs::store::memory::{Fact, MemoryDoc, MemoryMessage, Section, SECTIONS};

/// DeerFlow's system text of the update call (`memory_update.chat.yaml`), verbatim.
pub const SYSTEM: &str = include_str!("update_system.txt");
/// DeerFlow's staleness review section (`staleness_review.yaml`); `{stale_facts}` is
/// replaced by the candidates.
const STALENESS: &str = include_str!("staleness_review.txt");

/// DeerFlow's hints for the signals seen in the conversation, by signal.
const HINTS: &[(&str, &str)] = &[
    ("correction", "IMPORTANT: Explicit correction signals were detected in this conversation. Record a correction with confidence >= 0.95 only when it describes a durable, user-level working preference that is safe to reuse across unrelated tasks. A correction to facts, files, directions, or constraints in the current task is thread- or project-scoped and must not be stored."),
    ("reinforcement", "IMPORTANT: Positive reinforcement signals were detected in this conversation. Record the confirmed approach, style, or preference with high confidence only if it is a durable, user-level pattern. Approval of the current result or current task is thread-scoped and must not be stored."),
    ("preference", "IMPORTANT: A preference signal was detected. Record it with high confidence only when it is a durable, user-level preference; a one-off choice for the current task is thread-scoped and must not be stored."),
    ("identity", "IMPORTANT: An identity signal was detected. Record the user's stated role, profession, or background only when it is user-level and durable across tasks."),
    ("goal", "IMPORTANT: A goal signal was detected. Record only a durable, user-level goal that remains useful across unrelated tasks; the objective of the current task, sprint, PR, or thread must not be stored."),
    ("decision", "IMPORTANT: A decision signal was detected. Record only a durable, user-level decision or working pattern; a choice made for the current task, file, PR, or thread must not be stored."),
];

/// The fact categories DeerFlow's prompt names; any other becomes `other`.
pub const CATEGORIES: &[&str] = &[
    "preference",
    "knowledge",
    "context",
    "behavior",
    "goal",
    "correction",
];

/// Sentences about an upload event (DeerFlow's `_UPLOAD_SENTENCE_RE`): never kept.
static UPLOAD_SENTENCE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"(?i)[^.!?]*\b(?:upload(?:ed|ing)?(?:\s+\w+){0,3}\s+(?:file|files?|document|documents?|attachment|attachments?)|file\s+upload|/mnt/user-data/uploads/|<(?:uploaded_files|current_uploads)>)[^.!?]*[.!?]?\s*",
    )
    .ok()
});

/// Why a reply could not be used (the update is tried again later).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum UpdateError {
    #[error("the memory model's reply holds no JSON object with user, history and newFacts")]
    NoJson,
    #[error("the memory model's reply removes facts while some of its new facts are malformed")]
    UnsafePartial,
}

/// The user text of the update call: DeerFlow's template filled.
pub fn user_prompt(
    current: &MemoryDoc,
    conversation: &[MemoryMessage],
    signals: &[&str],
    staleness: &str,
) -> String {
    let memory = escape_all(current.to_json());
    let memory = serde_json::to_string_pretty(&memory).unwrap_or_default();
    let hints: Vec<&str> = HINTS
        .iter()
        .filter(|(name, _)| signals.contains(name))
        .map(|(_, hint)| *hint)
        .collect();
    format!(
        "Current Memory State:\n<current_memory>\n{memory}\n</current_memory>\n\nNew Conversation to Process:\n<conversation>\n{}\n</conversation>\n\n{}\n\n{staleness}\n\n\n\nUpdate the memory based on the above conversation.",
        conversation_text(conversation),
        hints.join("\n"),
    )
}

/// The conversation as the update reads it: `User: …` and `Assistant: …`, escaped so a
/// turn cannot close the block.
pub fn conversation_text(messages: &[MemoryMessage]) -> String {
    messages
        .iter()
        .map(|m| {
            let who = if m.role == "human" {
                "User"
            } else {
                "Assistant"
            };
            format!("{who}: {}", super::inject::escape(&m.content))
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// Every string of `value` HTML-escaped, quotes included (DeerFlow's
/// `_escape_memory_for_prompt`).
fn escape_all(value: Value) -> Value {
    match value {
        Value::String(s) => Value::String(
            super::inject::escape(&s)
                .replace('"', "&quot;")
                .replace('\'', "&#x27;"),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(escape_all).collect()),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, escape_all(v))).collect())
        }
        other => other,
    }
}

/// The facts due for review: not of a protected category, and older (since
/// `lastConfirmedAt`, else `createdAt`) than their lifetime (`expected_valid_days`, else
/// `staleness_age_days`).
pub fn stale_candidates<'a>(doc: &'a MemoryDoc, s: &DeerMemSettings, now: &str) -> Vec<&'a Fact> {
    doc.facts
        .iter()
        .filter(|f| !s.staleness_protected_categories.contains(&f.category))
        .filter(|f| {
            let reference = f
                .last_confirmed_at
                .as_deref()
                .and_then(parse_iso)
                .or_else(|| parse_iso(&f.created_at));
            let age = f.expected_valid_days.unwrap_or(s.staleness_age_days);
            match (reference, parse_iso(now)) {
                (Some(at), Some(now)) => days_between(at, now) > age as i64,
                _ => false,
            }
        })
        .collect()
}

/// DeerFlow's staleness review section, when enough facts are due (else empty).
pub fn staleness_section(doc: &MemoryDoc, s: &DeerMemSettings, now: &str) -> String {
    if !s.staleness_review_enabled {
        return String::new();
    }
    let candidates = stale_candidates(doc, s, now);
    if candidates.len() < s.staleness_min_candidates {
        return String::new();
    }
    let lines: Vec<String> = candidates
        .iter()
        .map(|f| {
            let reviewed = f
                .last_confirmed_at
                .as_deref()
                .filter(|d| parse_iso(d).is_some())
                .unwrap_or(&f.created_at);
            format!(
                "- [{} | {} | {:.2} | {} | valid:{}d] \"{}\"",
                f.id,
                super::inject::escape(&f.category),
                f.confidence,
                iso_date(reviewed),
                f.expected_valid_days.unwrap_or(s.staleness_age_days),
                super::inject::escape(&f.content)
            )
        })
        .collect();
    STALENESS.replace("{stale_facts}", &lines.join("\n"))
}

/// The first JSON object of `reply` that has `user`, `history` and `newFacts` (inside
/// code fences, after prose or thinking, as models write it).
pub fn parse_reply(reply: &str) -> Result<Map<String, Value>, UpdateError> {
    for (at, _) in reply.match_indices('{') {
        let mut stream = serde_json::Deserializer::from_str(&reply[at..]).into_iter::<Value>();
        if let Some(Ok(Value::Object(map))) = stream.next() {
            if ["user", "history", "newFacts"]
                .iter()
                .all(|k| map.contains_key(*k))
            {
                return Ok(map);
            }
        }
    }
    Err(UpdateError::NoJson)
}

/// A label the gate reads, trimmed and lower-cased.
fn label(value: Option<&Value>) -> Option<String> {
    value
        .and_then(Value::as_str)
        .map(|s| s.trim().to_lowercase())
        .filter(|s| !s.is_empty())
}

/// A fact's content as duplicates are found: whitespace collapsed, case folded.
pub fn content_key(content: &str) -> String {
    content
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// `category` as stored: one of [`CATEGORIES`], `other`, or `context` when missing.
pub fn category(raw: Option<&str>) -> String {
    match raw.map(str::trim).filter(|c| !c.is_empty()) {
        None => "context".to_owned(),
        Some(c) if CATEGORIES.contains(&c.to_lowercase().as_str()) => c.to_lowercase(),
        Some(_) => "other".to_owned(),
    }
}

/// A confidence as a number in [0, 1] (a numeric string is read; a boolean is not).
fn confidence(value: Option<&Value>) -> Option<f64> {
    let x = match value {
        None => 0.5,
        Some(Value::Number(n)) => n.as_f64()?,
        Some(Value::String(s)) => s.trim().parse().ok()?,
        _ => return None,
    };
    x.is_finite().then(|| x.clamp(0.0, 1.0))
}

/// A deterministic fact id for `content` in one memory (`seed`: its user and agent).
pub fn fact_id(seed: &str, content: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(seed.as_bytes());
    hash.update([0]);
    hash.update(content_key(content).as_bytes());
    format!("fact_{}", &hex::encode(hash.finalize())[..8])
}

/// What the gate did, for the log.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Applied {
    pub facts_added: usize,
    pub facts_removed: usize,
    pub sections_updated: usize,
    pub rejected: usize,
}

/// `doc` with the reply's updates that pass the gate applied.
pub fn apply(
    doc: &MemoryDoc,
    reply: &Map<String, Value>,
    s: &DeerMemSettings,
    signals: &[&str],
    thread: &str,
    seed: &str,
    now: &str,
) -> Result<(MemoryDoc, Applied), UpdateError> {
    let mut out = doc.clone();
    let mut applied = Applied::default();
    let list = |key: &str| -> Vec<Value> {
        reply
            .get(key)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let new_facts = list("newFacts");
    let removals = list("factsToRemove");
    let malformed = new_facts.iter().any(|f| {
        f.get("content")
            .and_then(Value::as_str)
            .is_none_or(|c| c.trim().is_empty())
            || confidence(f.get("confidence")).is_none()
    });
    if malformed && !removals.is_empty() {
        return Err(UpdateError::UnsafePartial);
    }
    // An explicit confirmation restarts a fact's review clock.
    if signals.contains(&"reinforcement") {
        for entry in list("factsToReinforce") {
            let ok = label(entry.get("scope")).as_deref() == Some("user")
                && entry
                    .get("reason")
                    .and_then(Value::as_str)
                    .is_some_and(|r| !r.trim().is_empty());
            let Some(id) = entry.get("id").and_then(Value::as_str).filter(|_| ok) else {
                continue;
            };
            if let Some(fact) = out.facts.iter_mut().find(|f| f.id == id.trim()) {
                fact.last_confirmed_at = Some(now.to_owned());
            }
        }
    }
    for (at, (group, key)) in SECTIONS.iter().enumerate() {
        let Some(update) = reply.get(*group).and_then(|g| g.get(*key)) else {
            continue;
        };
        let wanted = update.get("shouldUpdate").and_then(Value::as_bool) == Some(true);
        let Some(summary) = update
            .get("summary")
            .and_then(Value::as_str)
            .filter(|s| wanted && !s.trim().is_empty())
        else {
            continue;
        };
        if label(update.get("scope")).as_deref() != Some("user")
            || label(update.get("authority")).as_deref() != Some("descriptive")
        {
            applied.rejected += 1;
            continue;
        }
        out.sections[at] = Section {
            summary: summary.to_owned(),
            updated_at: now.to_owned(),
        };
        applied.sections_updated += 1;
    }
    stale_review(&mut out, doc, reply, s, now, &mut applied);
    // New facts through the gate.
    let cap = (s.staleness_age_days as f64 * s.staleness_max_lifetime_multiplier) as u64;
    let mut keys: Vec<String> = out.facts.iter().map(|f| content_key(&f.content)).collect();
    let mut replacement_keys: Vec<Option<String>> = vec![None; new_facts.len()];
    for (index, fact) in new_facts.iter().enumerate() {
        let passes = label(fact.get("scope")).as_deref() == Some("user")
            && label(fact.get("durability")).as_deref() == Some("durable")
            && label(fact.get("authority")).as_deref() == Some("descriptive");
        if !passes {
            applied.rejected += 1;
            continue;
        }
        let Some(conf) = confidence(fact.get("confidence")) else {
            continue;
        };
        let Some(content) = fact
            .get("content")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|c| !c.is_empty())
        else {
            continue;
        };
        if conf < s.fact_confidence_threshold {
            applied.rejected += 1;
            continue;
        }
        let key = content_key(content);
        replacement_keys[index] = Some(key.clone());
        if keys.contains(&key) {
            continue;
        }
        let evd = fact
            .get("expected_valid_days")
            .filter(|v| !v.is_boolean())
            .and_then(Value::as_f64)
            .filter(|d| d.is_finite() && *d >= 1.0)
            .map(|d| (d as u64).min(cap));
        out.facts.push(Fact {
            id: fact_id(seed, content),
            content: content.to_owned(),
            category: category(fact.get("category").and_then(Value::as_str)),
            confidence: conf,
            created_at: now.to_owned(),
            updated_at: None,
            source: thread.to_owned(),
            source_error: fact
                .get("sourceError")
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(str::to_owned),
            expected_valid_days: evd,
            last_confirmed_at: None,
        });
        keys.push(key);
        applied.facts_added += 1;
    }
    keep_most_confident(&mut out.facts, s.max_facts);
    // Removals last: a removal tied to a replacement needs the replacement kept.
    let mut remove: Vec<String> = Vec::new();
    for removal in removals {
        let id = removal.get("id").and_then(Value::as_str).map(str::trim);
        let reason_ok = removal
            .get("reason")
            .and_then(Value::as_str)
            .is_some_and(|r| !r.trim().is_empty());
        let (Some(id), true, Some("user")) =
            (id, reason_ok, label(removal.get("scope")).as_deref())
        else {
            applied.rejected += 1;
            continue;
        };
        if let Some(index) = removal.get("replacementFactIndex") {
            let key = index
                .as_u64()
                .and_then(|i| replacement_keys.get(i as usize).cloned().flatten());
            let kept = key.is_some_and(|key| {
                out.facts
                    .iter()
                    .any(|f| f.id != id && content_key(&f.content) == key)
            });
            if !kept {
                applied.rejected += 1;
                continue;
            }
        }
        remove.push(id.to_owned());
    }
    let before = out.facts.len();
    out.facts.retain(|f| !remove.contains(&f.id));
    applied.facts_removed += before - out.facts.len();
    strip_upload_mentions(&mut out);
    Ok((out, applied))
}

/// The staleness review's removals (at most `staleness_max_removals_per_cycle`, the least
/// confident first) and lifetime extensions, only of facts that were due for review.
fn stale_review(
    out: &mut MemoryDoc,
    before: &MemoryDoc,
    reply: &Map<String, Value>,
    s: &DeerMemSettings,
    now: &str,
    applied: &mut Applied,
) {
    let candidates: Vec<String> = stale_candidates(before, s, now)
        .iter()
        .map(|f| f.id.clone())
        .collect();
    let ids = |key: &str| -> Vec<(String, Value)> {
        reply
            .get(key)
            .and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .filter_map(|e| Some((e.get("id")?.as_str()?.to_owned(), e.clone())))
                    .collect()
            })
            .unwrap_or_default()
    };
    let proposed: Vec<String> = ids("staleFactsToRemove")
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let mut doomed: Vec<&Fact> = out
        .facts
        .iter()
        .filter(|f| proposed.contains(&f.id) && candidates.contains(&f.id))
        .collect();
    doomed.sort_by(|a, b| {
        a.confidence
            .partial_cmp(&b.confidence)
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let doomed: Vec<String> = doomed
        .into_iter()
        .take(s.staleness_max_removals_per_cycle)
        .map(|f| f.id.clone())
        .collect();
    let count = out.facts.len();
    out.facts.retain(|f| !doomed.contains(&f.id));
    applied.facts_removed += count - out.facts.len();
    for (id, entry) in ids("staleFactsToExtend") {
        if proposed.contains(&id) || !candidates.contains(&id) {
            continue;
        }
        let Some(extend) = entry
            .get("extend_by_days")
            .filter(|v| !v.is_boolean())
            .and_then(Value::as_f64)
            .filter(|d| d.is_finite() && *d >= 1.0)
        else {
            continue;
        };
        if let Some(fact) = out.facts.iter_mut().find(|f| f.id == id) {
            let since = fact
                .last_confirmed_at
                .as_deref()
                .and_then(parse_iso)
                .or_else(|| parse_iso(&fact.created_at))
                .zip(parse_iso(now))
                .map(|(at, now)| days_between(at, now).max(0) as u64)
                .unwrap_or(0);
            fact.expected_valid_days =
                Some((since + extend as u64).min(s.staleness_max_extension_days));
        }
    }
}

/// At most `max` facts, the least confident dropped (the order of the others kept).
pub fn keep_most_confident(facts: &mut Vec<Fact>, max: usize) {
    if facts.len() <= max {
        return;
    }
    let mut ranked: Vec<(usize, f64)> = facts.iter().map(|f| f.confidence).enumerate().collect();
    // Most confident first; among equals the newer (later) one stays.
    ranked.sort_by(|a, b| {
        b.1.partial_cmp(&a.1)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(b.0.cmp(&a.0))
    });
    let mut keep: Vec<usize> = ranked.into_iter().take(max).map(|(i, _)| i).collect();
    keep.sort_unstable();
    let mut at = 0;
    facts.retain(|_| {
        let kept = keep.binary_search(&at).is_ok();
        at += 1;
        kept
    });
}

/// Sentences about uploads removed from the summaries, facts about them dropped (an
/// upload belongs to one thread; remembering it sends later runs looking for it).
fn strip_upload_mentions(doc: &mut MemoryDoc) {
    let Some(re) = UPLOAD_SENTENCE.as_ref() else {
        return;
    };
    for section in &mut doc.sections {
        if re.is_match(&section.summary) {
            let cleaned = re.replace_all(&section.summary, "");
            section.summary = cleaned
                .split(' ')
                .filter(|w| !w.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
                .trim()
                .to_owned();
        }
    }
    doc.facts.retain(|f| !re.is_match(&f.content));
}

#[cfg(test)]
#[path = "update_tests.rs"]
mod tests;
