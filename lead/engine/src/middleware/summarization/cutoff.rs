//! Where the cut falls (spec C.2): the cutoff `keep` asks for, moved so that no tool call
//! is separated from its result, the rescue of the current request (and its clarification
//! answers), and the fallbacks when a summary cannot help: whole old turns trimmed, the
//! request's longest contents bounded.

use antler_protocol::config::ContextSize;

use super::counter::TokenCounter;
use super::prompt::bounded_message;
use crate::catalog::builtins::ASK_CLARIFICATION;
use crate::thread::state::Message;

/// A `keep` by fraction without a window keeps this many messages (LangChain's default).
pub(crate) const DEFAULT_MESSAGES_TO_KEEP: usize = 20;

/// The cutoff moved so that it separates no tool call from its result (C.2): at a tool
/// message it moves back to the AI message that made the call (LangChain's rule, forward
/// past the results only when no such message exists); then, stronger than LangChain, any
/// kept result whose call is cut, or cut call whose result is kept, moves it back again.
pub fn safe_cutoff(messages: &[Message], cutoff: usize) -> usize {
    if cutoff == 0 || cutoff >= messages.len() {
        return cutoff.min(messages.len());
    }
    let mut cutoff = cutoff;
    if matches!(messages[cutoff], Message::Tool { .. }) {
        let mut end = cutoff;
        let mut ids = std::collections::HashSet::new();
        while let Some(Message::Tool { tool_call_id, .. }) = messages.get(end) {
            ids.insert(tool_call_id.as_str());
            end += 1;
        }
        cutoff = messages[..cutoff]
            .iter()
            .rposition(|m| m.tool_calls().iter().any(|c| ids.contains(c.id.as_str())))
            .unwrap_or(end);
    }
    // Every pair on one side: a call's AI message and its result message.
    loop {
        let moved = messages[cutoff..].iter().find_map(|m| match m {
            Message::Tool { tool_call_id, .. } => messages[..cutoff]
                .iter()
                .rposition(|a| a.tool_calls().iter().any(|c| &c.id == tool_call_id)),
            _ => None,
        });
        match moved {
            Some(at) if at < cutoff => cutoff = at,
            _ => return cutoff,
        }
    }
}

/// LangChain's `_find_token_based_cutoff`: the earliest index whose suffix fits `target`
/// tokens (at least one message kept when there are several), then made safe.
pub(crate) fn token_cutoff(messages: &[Message], counter: &TokenCounter, target: u64) -> usize {
    if messages.is_empty() || counter.messages(messages) <= target {
        return 0;
    }
    // Suffix sums from the end: the first index whose suffix fits.
    let mut total = 0;
    let mut cutoff = messages.len();
    for (i, m) in messages.iter().enumerate().rev() {
        total += counter.message(m);
        if total > target {
            break;
        }
        cutoff = i;
    }
    if cutoff >= messages.len() {
        if messages.len() == 1 {
            return 0;
        }
        cutoff = messages.len() - 1;
    }
    safe_cutoff(messages, cutoff)
}

/// The cutoff `keep` asks for (C.2): by messages `len - keep` (nothing when `len <=
/// keep`), by tokens or fraction the shortest suffix within budget; always made safe.
pub fn keep_cutoff(
    messages: &[Message],
    keep: ContextSize,
    window: Option<u64>,
    counter: &TokenCounter,
) -> usize {
    let by_messages = |keep: usize| {
        if messages.len() <= keep {
            0
        } else {
            safe_cutoff(messages, messages.len() - keep)
        }
    };
    match keep {
        ContextSize::Messages(n) => by_messages(n as usize),
        ContextSize::Tokens(n) => token_cutoff(messages, counter, n.max(1)),
        ContextSize::Fraction(f) => match window {
            Some(window) => token_cutoff(messages, counter, ((window as f64 * f) as u64).max(1)),
            None => by_messages(DEFAULT_MESSAGES_TO_KEEP),
        },
    }
}

/// Whether message `index` answers a clarification: the user's reply right after an
/// `ask_clarification` result.
pub(crate) fn is_clarification_answer(messages: &[Message], index: usize) -> bool {
    index > 0
        && matches!(&messages[index - 1], Message::Tool { name, .. } if name == ASK_CLARIFICATION)
}

/// The messages rescued from the summarized prefix (C.2), by index: the latest real
/// user message, and, better than DeerFlow (C.9 quirk 5), when that is a clarification
/// answer, the request it answers and every answer after it.
pub(crate) fn rescued(messages: &[Message]) -> Vec<usize> {
    let real: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| crate::tools::skills::is_real_user_message(m))
        .map(|(i, _)| i)
        .collect();
    let Some(&latest) = real.last() else {
        return Vec::new();
    };
    if !is_clarification_answer(messages, latest) {
        return vec![latest];
    }
    let request = real
        .iter()
        .rev()
        .find(|&&i| !is_clarification_answer(messages, i))
        .copied();
    real.into_iter()
        .filter(|&i| request.is_none_or(|r| i >= r))
        .collect()
}

/// The prefix to summarize and the tail to keep for a cutoff, with the rescued user
/// messages moved, in order, to the head of the tail. `None`: nothing to summarize.
pub fn partition(messages: &[Message], cutoff: usize) -> Option<(Vec<Message>, Vec<Message>)> {
    if cutoff == 0 {
        return None;
    }
    let rescue: Vec<usize> = rescued(messages)
        .into_iter()
        .filter(|&i| i < cutoff)
        .collect();
    let mut summarized = Vec::with_capacity(cutoff);
    let mut kept = Vec::with_capacity(messages.len() - cutoff + rescue.len());
    for (i, m) in messages[..cutoff].iter().enumerate() {
        if rescue.contains(&i) {
            kept.push(m.clone());
        } else {
            summarized.push(m.clone());
        }
    }
    kept.extend_from_slice(&messages[cutoff..]);
    (!summarized.is_empty()).then_some((summarized, kept))
}

/// The oldest whole turns dropped until `messages` cost at most `budget` tokens with
/// `overhead` besides (the fallback when a summary fails or cannot help, C.9 quirk 2):
/// a turn is an AI message with its tool results, or a lone message; the latest real
/// user message (and the clarification answers it rescues) and the last turn stay.
/// Returns the kept messages and how many AI messages were dropped, or `None` when
/// nothing needs dropping.
pub fn trim_oldest_turns(
    messages: &[Message],
    budget: u64,
    counter: &TokenCounter,
) -> Option<(Vec<Message>, usize)> {
    let mut total = counter.messages(messages);
    if total <= budget {
        return None;
    }
    let protected = rescued(messages);
    let units = turn_units(messages);
    let last = units.len().saturating_sub(1);
    let mut dropped = vec![false; messages.len()];
    let mut any = false;
    for (u, range) in units.iter().enumerate() {
        if total <= budget || u == last {
            break;
        }
        if range.clone().any(|i| protected.contains(&i)) {
            continue;
        }
        for i in range.clone() {
            dropped[i] = true;
            total -= counter.message(&messages[i]);
        }
        any = true;
    }
    if !any {
        return None;
    }
    let turns = messages
        .iter()
        .zip(&dropped)
        .filter(|(m, d)| **d && matches!(m, Message::Ai { .. }))
        .count();
    let kept = messages
        .iter()
        .zip(&dropped)
        .filter(|(_, d)| !**d)
        .map(|(m, _)| m.clone())
        .collect();
    Some((kept, turns))
}

/// The message ranges that are dropped whole: an AI message with the tool results that
/// follow it, or any other single message.
pub(crate) fn turn_units(messages: &[Message]) -> Vec<std::ops::Range<usize>> {
    let mut units = Vec::new();
    let mut i = 0;
    while i < messages.len() {
        let start = i;
        i += 1;
        if matches!(messages[start], Message::Ai { .. }) {
            while matches!(messages.get(i), Some(Message::Tool { .. })) {
                i += 1;
            }
        }
        units.push(start..i);
    }
    units
}

/// The request's messages with the longest contents bounded until they cost at most
/// `budget` tokens: the last guard, on the request only, when even the kept turn is
/// larger than the window.
pub fn bound_request(messages: &mut [Message], budget: u64, counter: &TokenCounter) {
    for _ in 0..messages.len() * 2 {
        let total = counter.messages(messages);
        if total <= budget {
            return;
        }
        // The longest message; never the system prompt.
        let Some((at, size)) = messages
            .iter()
            .enumerate()
            .filter(|(_, m)| !matches!(m, Message::System { .. }))
            .map(|(i, m)| (i, counter.message(m)))
            .max_by_key(|(_, size)| *size)
        else {
            return;
        };
        let excess = total - budget;
        let target = size.saturating_sub(excess + 8);
        let cap = counter.chars_within(target).saturating_sub(16);
        messages[at] = bounded_message(&messages[at], cap);
        if counter.message(&messages[at]) >= size {
            return;
        }
    }
}
