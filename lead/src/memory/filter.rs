//! What of a conversation memory reads (DeerFlow's `filter_messages_for_memory`,
//! `filter_trivial`, `detect_signals`): the user's turns (not the hidden ones the
//! framework adds, not a summary) with their upload blocks stripped, and the answers
//! without tool calls; an upload-only turn goes with the answer after it, and so does a
//! bare acknowledgment ("ok", "thanks"). Each kept message has an identity, so a
//! thread's watermark finds where the last update stopped even after a summary removed
//! the conversation's front.

use std::sync::LazyLock;

use antler_engine::Message;
use regex::Regex;
use sha2::{Digest, Sha256};

use crate::runs::store::memory::MemoryMessage;

/// The longest message an update reads whole: longer ones keep their head and tail.
const MAX_MESSAGE_CHARS: usize = 1000;
/// What replaces a long message's middle (DeerFlow's marker).
const TRUNCATED: &str = "\n...[truncated]...\n";
/// The human message name of a conversation summary (not the user's words).
const SUMMARY_NAME: &str = "summary";

static UPLOAD_BLOCKS: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    ["uploaded_files", "current_uploads"]
        .iter()
        .filter_map(|tag| Regex::new(&format!(r"(?is)<{tag}>.*?</{tag}>\n*")).ok())
        .collect()
});

/// DeerFlow's signal patterns (`core/message_patterns/*.yaml`), by signal.
const SIGNALS: &[(&str, &[&str])] = &[
    (
        "correction",
        &[
            r"(?i)\bthat(?:'s| is) (?:wrong|incorrect)\b",
            r"(?i)\byou misunderstood\b",
            r"(?i)\btry again\b",
            r"(?i)\bredo\b",
            "不对",
            "你理解错了",
            "你理解有误",
            "重试",
            "重新来",
            "换一种",
            "改用",
        ],
    ),
    (
        "reinforcement",
        &[
            r"(?i)\byes[,.]?\s+(?:exactly|perfect|that(?:'s| is) (?:right|correct|it))\b",
            r"(?i)\bperfect(?:[.!?]|$)",
            r"(?i)\bexactly\s+(?:right|correct)\b",
            r"(?i)\bthat(?:'s| is)\s+(?:exactly\s+)?(?:right|correct|what i (?:wanted|needed|meant))\b",
            r"(?i)\bkeep\s+(?:doing\s+)?that\b",
            r"(?i)\bjust\s+(?:like\s+)?(?:that|this)\b",
            r"(?i)\bthis is (?:great|helpful)\b(?:[.!?]|$)",
            r"(?i)\bthis is what i wanted\b(?:[.!?]|$)",
            r"对[，,]?\s*就是这样(?:[。！？!?.]|$)",
            r"完全正确(?:[。！？!?.]|$)",
            r"(?:对[，,]?\s*)?就是这个意思(?:[。！？!?.]|$)",
            r"正是我想要的(?:[。！？!?.]|$)",
            r"继续保持(?:[。！？!?.]|$)",
            r"(?:以后|今后)(?:都|一直)?保持这样(?:[。！？!?.]|$)",
        ],
    ),
    (
        "preference",
        &[
            r"(?i)\bI (?:really )?(?:prefer|like|love|enjoy|favor)\b",
            r"(?i)\bI (?:really )?(?:hate|dislike|don.t like|cannot stand)\b",
            r"(?i)\bmy favorite\b",
            r"(?i)\bI.d rather\b",
            "我喜欢",
            "我偏好",
            "我更喜欢",
            "我偏爱",
            "我讨厌",
            "我不喜欢",
            "我钟爱",
            "我最喜欢",
        ],
    ),
    (
        "identity",
        &[
            r"(?i)\bI am (?:a |an )?[a-z][a-z -]{2,}\b",
            r"(?i)\bI work as\b",
            r"(?i)\bI.m (?:a |an )?[a-z][a-z -]{2,}\b",
            r"(?i)\bmy job is\b",
            "我是",
            "我的职业是",
            "我的工作是",
            "我担任",
            "我是一名",
        ],
    ),
    (
        "goal",
        &[
            r"(?i)\bI (?:plan to|want to|am going to|aim to|intend to)\b",
            r"(?i)\bmy goal is\b",
            r"(?i)\bI.m going to\b",
            r"(?i)\bnext I.ll\b",
            "我的目标是",
            "我打算",
            "我准备",
            "接下来我要",
            "接下来我打算",
            "我想做",
        ],
    ),
    (
        "decision",
        &[
            r"(?i)\blet.s (?:go with|use|pick|choose)\b",
            r"(?i)\bI.ll (?:go with|use|pick|choose)\b",
            r"(?i)\bwe (?:should|will) (?:go with|use|pick|choose)\b",
            r"(?i)\bI (?:decide|chose|selected) to\b",
            "就用",
            "决定用",
            "决定采用",
            "我们选",
            "我选",
            "就采用",
        ],
    ),
];

/// DeerFlow's pure acknowledgments (`trivial.yaml`), matched against a whole turn.
const TRIVIAL: &[&str] = &[
    "嗯+",
    "(?i)ok(?:ay)?",
    "好的[呢]?",
    "好[的呀]?",
    "谢谢",
    "感谢",
    "多谢",
    "对",
    "是的",
    "收到",
    "明白",
    "了解",
    "知道了",
    "(?i)got it",
    "(?i)thanks",
    "(?i)thank you",
    "(?i)cheers",
];

/// Trailing characters dropped before a turn is matched as trivial.
const TRIVIAL_TRAIL: &[char] = &[
    ' ', '\t', '\n', '\r', '.', '。', ',', '，', '!', '！', '?', '？', ';', '；',
];

static SIGNAL_PATTERNS: LazyLock<Vec<(&'static str, Vec<Regex>)>> = LazyLock::new(|| {
    SIGNALS
        .iter()
        .map(|(name, patterns)| {
            let compiled = patterns.iter().filter_map(|p| Regex::new(p).ok()).collect();
            (*name, compiled)
        })
        .collect()
});

static TRIVIAL_PATTERNS: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    TRIVIAL
        .iter()
        .filter_map(|p| Regex::new(&format!("^(?:{p})$")).ok())
        .collect()
});

/// A kept message and its identity (a hash of its role and whole text).
#[derive(Debug, Clone, PartialEq)]
pub struct Kept {
    pub message: MemoryMessage,
    pub identity: String,
}

/// The messages of a conversation memory reads, in order, with their identities; empty
/// when it lacks a user turn or an answer (nothing to learn).
pub fn for_memory(messages: &[Message]) -> Vec<Kept> {
    read(messages.iter()).into_iter().map(|(_, k)| k).collect()
}

/// What memory reads of the messages a summary removes (`removed`), read in the
/// conversation they were part of (`removed` then the `kept` tail: the human/AI check and
/// the upload-only rule see the whole), and only those after `given` (the last message
/// already given to memory) when it is among them; the flush of DeerFlow's
/// `memory_flush_hook`.
pub fn removed_for_memory(removed: &[Message], kept: &[Message], given: Option<&str>) -> Vec<Kept> {
    let all = read(removed.iter().chain(kept));
    let boundary = all
        .iter()
        .position(|(at, _)| *at >= removed.len())
        .unwrap_or(all.len());
    let start = given
        .and_then(|g| all.iter().position(|(_, k)| k.identity == g))
        .map_or(0, |at| at + 1);
    all[start.min(boundary)..boundary]
        .iter()
        .map(|(_, k)| k.clone())
        .collect()
}

/// [`for_memory`] with each kept message's index in `messages`.
fn read<'a>(messages: impl Iterator<Item = &'a Message>) -> Vec<(usize, Kept)> {
    let mut kept: Vec<(usize, Kept)> = Vec::new();
    let mut skip_next_ai = false;
    for (at, message) in messages.enumerate() {
        match message {
            Message::Human {
                content,
                name,
                hide_from_ui,
                ..
            } => {
                if *hide_from_ui || name.as_deref() == Some(SUMMARY_NAME) {
                    continue;
                }
                let mut text = content.clone();
                for block in UPLOAD_BLOCKS.iter() {
                    text = block.replace_all(&text, "").into_owned();
                }
                let text = text.trim();
                if text.is_empty() || is_trivial(text) {
                    skip_next_ai = true;
                    continue;
                }
                skip_next_ai = false;
                kept.push((at, keep("human", text)));
            }
            Message::Ai {
                content,
                tool_calls,
                ..
            } if tool_calls.is_empty() => {
                if std::mem::take(&mut skip_next_ai) || content.trim().is_empty() {
                    continue;
                }
                kept.push((at, keep("ai", content.trim())));
            }
            _ => {}
        }
    }
    let has = |role: &str| kept.iter().any(|(_, k)| k.message.role == role);
    if !has("human") || !has("ai") {
        return Vec::new();
    }
    kept
}

/// What follows the message whose identity is `watermark`: all of `kept` when it is not
/// there (the first update of a thread, or its front summarised away: read again rather
/// than lose a turn). The first match counts, as DeerFlow's.
pub fn after_watermark<'a>(kept: &'a [Kept], watermark: Option<&str>) -> &'a [Kept] {
    let Some(watermark) = watermark else {
        return kept;
    };
    match kept.iter().position(|k| k.identity == watermark) {
        Some(at) => &kept[at + 1..],
        None => kept,
    }
}

/// The signals (correction, reinforcement, preference, identity, goal, decision) of the
/// user's turns among the last six messages, in DeerFlow's order.
pub fn signals(messages: &[MemoryMessage]) -> Vec<&'static str> {
    let recent: Vec<&str> = messages
        .iter()
        .rev()
        .take(6)
        .filter(|m| m.role == "human")
        .map(|m| m.content.trim())
        .collect();
    SIGNAL_PATTERNS
        .iter()
        .filter(|(_, patterns)| {
            recent
                .iter()
                .any(|text| patterns.iter().any(|p| p.is_match(text)))
        })
        .map(|(name, _)| *name)
        .collect()
}

fn is_trivial(text: &str) -> bool {
    let text = text.trim_end_matches(TRIVIAL_TRAIL);
    !text.is_empty() && TRIVIAL_PATTERNS.iter().any(|p| p.is_match(text))
}

fn keep(role: &str, text: &str) -> Kept {
    let mut hash = Sha256::new();
    hash.update(role.as_bytes());
    hash.update([0]);
    hash.update(text.as_bytes());
    let identity = hex::encode(&hash.finalize()[..16]);
    Kept {
        message: MemoryMessage {
            role: role.to_owned(),
            content: truncated(text),
        },
        identity,
    }
}

/// `text` whole up to [`MAX_MESSAGE_CHARS`], else its first and last 500 characters.
fn truncated(text: &str) -> String {
    let count = text.chars().count();
    if count <= MAX_MESSAGE_CHARS {
        return text.to_owned();
    }
    let head: String = text.chars().take(MAX_MESSAGE_CHARS / 2).collect();
    let tail: String = text.chars().skip(count - MAX_MESSAGE_CHARS / 2).collect();
    format!("{head}{TRUNCATED}{tail}")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use antler_engine::ToolCall;

    fn human(text: &str) -> Message {
        Message::human(text)
    }

    fn ai(text: &str, calls: usize) -> Message {
        Message::Ai {
            id: format!("ai-{text}"),
            content: text.into(),
            tool_calls: (0..calls)
                .map(|i| ToolCall {
                    id: format!("c{i}"),
                    name: "ls".into(),
                    args: serde_json::json!({}),
                })
                .collect(),
            reasoning: None,
        }
    }

    fn texts(kept: &[Kept]) -> Vec<String> {
        kept.iter()
            .map(|k| format!("{}: {}", k.message.role, k.message.content))
            .collect()
    }

    #[test]
    fn the_filter_keeps_user_turns_and_final_answers_only() {
        let messages = vec![
            Message::Human {
                content: "<memory>old</memory>".into(),
                name: None,
                hide_from_ui: true,
                additional_kwargs: None,
            },
            human("I write Rust.\n<uploaded_files>\n- a.pdf\n</uploaded_files>\n"),
            ai("", 1),
            Message::tool("c0", "ls", "a.pdf", antler_engine::ToolStatus::Success),
            ai("Noted.", 0),
            human("<current_uploads>\n- b.pdf\n</current_uploads>"),
            ai("I see b.pdf.", 0),
            human("ok!"),
            ai("Anything else?", 0),
            Message::Human {
                content: "Earlier: ...".into(),
                name: Some("summary".into()),
                hide_from_ui: false,
                additional_kwargs: None,
            },
        ];
        assert_eq!(
            texts(&for_memory(&messages)),
            ["human: I write Rust.", "ai: Noted."]
        );
        // No answer: nothing to learn.
        assert!(for_memory(&[human("hello")]).is_empty());
    }

    #[test]
    fn the_watermark_sends_only_what_is_new_and_everything_when_it_is_gone() {
        let first = for_memory(&[human("I like tea"), ai("Tea it is.", 0)]);
        let all = for_memory(&[
            human("I like tea"),
            ai("Tea it is.", 0),
            human("I moved to Lyon"),
            ai("Bonjour.", 0),
        ]);
        let mark = first.last().map(|k| k.identity.as_str());
        assert_eq!(
            texts(after_watermark(&all, mark)),
            ["human: I moved to Lyon", "ai: Bonjour."]
        );
        assert_eq!(after_watermark(&all, Some("gone")).len(), 4);
        assert_eq!(after_watermark(&all, None).len(), 4);
    }

    #[test]
    fn a_summary_flushes_what_it_removes_after_what_memory_was_given() {
        let removed = [
            human("I like tea"),
            ai("Tea it is.", 0),
            human("I moved to Lyon"),
            ai("", 1),
            Message::tool("c0", "ls", "x", antler_engine::ToolStatus::Success),
        ];
        let kept = [
            ai("Bonjour.", 0),
            human("thanks, and Paris?"),
            ai("Also nice.", 0),
        ];
        // Nothing given yet: every removed message memory reads, none of the kept tail.
        assert_eq!(
            texts(&removed_for_memory(&removed, &kept, None)),
            [
                "human: I like tea",
                "ai: Tea it is.",
                "human: I moved to Lyon"
            ]
        );
        // The first exchange was given at the last run's end: only what follows it.
        let given = for_memory(&removed[..2]).last().unwrap().identity.clone();
        assert_eq!(
            texts(&removed_for_memory(&removed, &kept, Some(&given))),
            ["human: I moved to Lyon"]
        );
        // Given up to a kept message (an earlier flush): nothing removed is new.
        let later = for_memory(&kept).first().unwrap().identity.clone();
        assert!(removed_for_memory(&removed, &kept, Some(&later)).is_empty());
        // A removed part without an answer is read with the tail that answers it.
        assert_eq!(
            texts(&removed_for_memory(&removed[2..], &kept, None)),
            ["human: I moved to Lyon"]
        );
        assert!(removed_for_memory(&removed[2..], &[], None).is_empty());
    }

    #[test]
    fn long_messages_keep_head_and_tail_and_signals_are_found() {
        let long = "a".repeat(600) + &"b".repeat(600);
        let kept = for_memory(&[human(&long), ai("ok then", 0)]);
        let content = &kept[0].message.content;
        assert!(content.starts_with(&"a".repeat(500)) && content.ends_with(&"b".repeat(500)));
        assert!(content.contains(TRUNCATED));
        let msgs = |t: &str| {
            vec![MemoryMessage {
                role: "human".into(),
                content: t.into(),
            }]
        };
        assert_eq!(signals(&msgs("That's wrong, try again")), ["correction"]);
        assert_eq!(signals(&msgs("I prefer tabs")), ["preference"]);
        assert!(signals(&msgs("what time is it")).is_empty());
    }
}
