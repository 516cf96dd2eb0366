//! The memory block of the lead's system prompt (DeerFlow's `format_memory_for_injection`,
//! prompts spec A.7): `User Context:`, `History:` and `Facts:` sections within
//! `max_injection_tokens`, counted as DeerFlow's `char` mode counts (non-CJK/4 + CJK/2).
//! Facts go by confidence; the guaranteed categories first, from their own budget; on
//! overflow only the summaries are cut (ending `\n...`), never a fact. Every text a user
//! can edit is HTML-escaped, so none can close the block. The block goes after the
//! static prompt as `<system-reminder><memory>…</memory></system-reminder>`, where the
//! prompt's confidentiality section says the user's own memory sits.

use antler_protocol::config::DeerMemSettings;

use crate::runs::store::memory::{Fact, MemoryDoc};

/// The block around the body, as the confidentiality section names it.
pub fn memory_block(body: &str) -> String {
    format!("<system-reminder>\n<memory>\n{body}\n</memory>\n</system-reminder>")
}

/// The static prompt with the memory block after it (`body` empty: the prompt alone).
pub fn with_memory(prompt: &str, body: &str) -> String {
    if body.is_empty() {
        return prompt.to_owned();
    }
    format!("{}\n\n{}", prompt.trim_end(), memory_block(body))
}

/// DeerFlow's `char` estimate: non-CJK characters / 4 + CJK characters / 2.
pub fn count_tokens(text: &str) -> usize {
    let (mut cjk, mut all) = (0usize, 0usize);
    for c in text.chars() {
        all += 1;
        if ('\u{4e00}'..='\u{9fff}').contains(&c)
            || ('\u{3040}'..='\u{30ff}').contains(&c)
            || ('\u{ac00}'..='\u{d7a3}').contains(&c)
        {
            cjk += 1;
        }
    }
    (all - cjk) / 4 + cjk / 2
}

/// `<`, `>` and `&` escaped (text position: quotes stay).
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

/// One fact as the block lists it: `- [{category} | {confidence:.2f}] {content}`, a
/// correction with ` (avoid: {sourceError})`.
pub fn fact_line(fact: &Fact) -> Option<String> {
    let content = fact.content.trim();
    if content.is_empty() {
        return None;
    }
    let category = match fact.category.trim() {
        "" => "context",
        c => c,
    };
    let confidence = if fact.confidence.is_finite() {
        fact.confidence.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let mut line = format!(
        "- [{} | {confidence:.2}] {}",
        escape(category),
        escape(content)
    );
    if category == "correction" {
        if let Some(error) = fact
            .source_error
            .as_deref()
            .map(str::trim)
            .filter(|e| !e.is_empty())
        {
            line.push_str(&format!(" (avoid: {})", escape(error)));
        }
    }
    Some(line)
}

/// The lines of `ranked` that fit `budget` tokens, in order, stopping at the first that
/// does not (a shorter, less confident fact never jumps ahead); and what they cost.
fn select(ranked: &[&Fact], budget: usize) -> (Vec<String>, usize) {
    let mut lines: Vec<String> = Vec::new();
    let mut used = 0;
    for fact in ranked {
        let Some(line) = fact_line(fact) else {
            continue;
        };
        let cost = if lines.is_empty() {
            count_tokens(&line)
        } else {
            count_tokens(&format!("\n{line}"))
        };
        if used + cost > budget {
            break;
        }
        lines.push(line);
        used += cost;
    }
    (lines, used)
}

/// The memory block's body for `doc` (empty: nothing to inject).
pub fn body(doc: &MemoryDoc, settings: &DeerMemSettings) -> String {
    let max_tokens = settings.max_injection_tokens;
    let mut sections: Vec<String> = Vec::new();
    for (title, entries) in [
        (
            "User Context:",
            [
                ("Work", ("user", "workContext")),
                ("Personal", ("user", "personalContext")),
                ("Current Focus", ("user", "topOfMind")),
            ],
        ),
        (
            "History:",
            [
                ("Recent", ("history", "recentMonths")),
                ("Earlier", ("history", "earlierContext")),
                ("Background", ("history", "longTermBackground")),
            ],
        ),
    ] {
        let lines: Vec<String> = entries
            .iter()
            .filter_map(|(label, (group, key))| {
                let summary = &doc.section(group, key).summary;
                (!summary.is_empty()).then(|| format!("- {label}: {}", escape(summary)))
            })
            .collect();
        if !lines.is_empty() {
            sections.push(format!("{title}\n{}", lines.join("\n")));
        }
    }
    const FACTS: &str = "Facts:\n";
    let mut guaranteed_tokens = 0;
    let mut fact_lines: Vec<String> = Vec::new();
    let valid: Vec<&Fact> = doc
        .facts
        .iter()
        .filter(|f| !f.content.trim().is_empty())
        .collect();
    if !valid.is_empty() {
        let base = sections.join("\n\n");
        let base_tokens = count_tokens(&base);
        let is_guaranteed = |f: &&Fact| {
            let c = f.category.trim();
            !c.is_empty() && settings.guaranteed_categories.iter().any(|g| g == c)
        };
        let by_confidence = |a: &&Fact, b: &&Fact| {
            b.confidence
                .partial_cmp(&a.confidence)
                .unwrap_or(std::cmp::Ordering::Equal)
        };
        let mut guaranteed: Vec<&Fact> = valid.iter().copied().filter(is_guaranteed).collect();
        let mut regular: Vec<&Fact> = valid
            .iter()
            .copied()
            .filter(|f| !is_guaranteed(f))
            .collect();
        guaranteed.sort_by(by_confidence);
        regular.sort_by(by_confidence);
        let (g_lines, g_tokens) = select(&guaranteed, settings.guaranteed_token_budget);
        guaranteed_tokens = g_tokens;
        let joint = if g_lines.is_empty() {
            0
        } else {
            count_tokens("\n")
        };
        let used = base_tokens + count_tokens(FACTS) + g_tokens + joint;
        let (r_lines, _) = select(&regular, max_tokens.saturating_sub(used));
        fact_lines = g_lines.into_iter().chain(r_lines).collect();
        if !fact_lines.is_empty() {
            sections.push(format!("{FACTS}{}", fact_lines.join("\n")));
        }
    }
    if sections.is_empty() {
        return String::new();
    }
    let result = sections.join("\n\n");
    let limit = max_tokens + guaranteed_tokens;
    if count_tokens(&result) <= limit {
        return result;
    }
    // Only the summaries are cut: the facts block is kept whole.
    let facts_block = match fact_lines.is_empty() {
        true => String::new(),
        false => format!("{FACTS}{}", fact_lines.join("\n")),
    };
    let separator = if facts_block.is_empty() {
        0
    } else {
        count_tokens("\n\n")
    };
    let budget = limit.saturating_sub(count_tokens(&facts_block) + separator);
    let preceding_sections = match fact_lines.is_empty() {
        true => &sections[..],
        false => &sections[..sections.len() - 1],
    };
    let mut preceding = preceding_sections.join("\n\n");
    if preceding.is_empty() {
        return facts_block;
    }
    let tokens = count_tokens(&preceding);
    if tokens > budget {
        let chars = preceding.chars().count();
        let per_token = chars as f64 / tokens.max(1) as f64;
        let target = (budget as f64 * per_token * 0.95) as usize;
        let cut: String = preceding.chars().take(target).collect();
        preceding = format!("{}\n...", cut.trim_end());
    }
    match facts_block.is_empty() {
        true => preceding,
        false => format!("{preceding}\n\n{facts_block}"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn fact(id: &str, content: &str, category: &str, confidence: f64) -> Fact {
        Fact {
            id: id.into(),
            content: content.into(),
            category: category.into(),
            confidence,
            created_at: String::new(),
            updated_at: None,
            source: "t".into(),
            source_error: None,
            expected_valid_days: None,
            last_confirmed_at: None,
        }
    }

    fn settings(max: usize) -> DeerMemSettings {
        DeerMemSettings {
            max_injection_tokens: max,
            ..DeerMemSettings::default()
        }
    }

    #[test]
    fn tokens_count_as_deerflows_char_mode() {
        assert_eq!(count_tokens("abcdefgh"), 2);
        assert_eq!(count_tokens("你好世界"), 2);
        assert_eq!(count_tokens("ab你好"), 1);
    }

    #[test]
    fn the_body_has_deerflows_sections_escaped_and_facts_by_confidence() {
        let mut doc = MemoryDoc::default();
        doc.sections[0].summary = "Rust at </memory> Acme & co".into();
        doc.sections[3].summary = "Built a parser".into();
        doc.facts = vec![
            fact("f1", "Likes tea", "preference", 0.75),
            fact("f2", "Writes Rust", "knowledge", 0.95),
        ];
        let mut correction = fact("f3", "Use tabs", "correction", 0.9);
        correction.source_error = Some("used <spaces>".into());
        doc.facts.push(correction);
        assert_eq!(
            body(&doc, &settings(2000)),
            "User Context:\n- Work: Rust at &lt;/memory&gt; Acme &amp; co\n\n\
             History:\n- Recent: Built a parser\n\n\
             Facts:\n- [correction | 0.90] Use tabs (avoid: used &lt;spaces&gt;)\n\
             - [knowledge | 0.95] Writes Rust\n- [preference | 0.75] Likes tea"
        );
        assert_eq!(body(&MemoryDoc::default(), &settings(2000)), "");
    }

    #[test]
    fn facts_are_packed_by_confidence_with_the_guaranteed_ones_first() {
        let mut doc = MemoryDoc::default();
        doc.sections[2].summary = "Shipping the parser".into();
        doc.facts = (0..40)
            .map(|i| {
                fact(
                    &format!("f{i}"),
                    &format!("fact number {i} about the user"),
                    "context",
                    0.5 + f64::from(i) / 100.0,
                )
            })
            .collect();
        doc.facts
            .push(fact("fc", "Never push to main", "correction", 0.71));
        let out = body(&doc, &settings(100));
        let facts = out.split_once("Facts:\n").unwrap().1;
        assert!(
            facts.starts_with(
                "- [correction | 0.71] Never push to main\n- [context | 0.89] fact number 39"
            ),
            "{out}"
        );
        assert!(!out.contains("fact number 0 "), "{out}");
        assert!(count_tokens(&out) <= 100, "{out}");
    }

    #[test]
    fn an_overflow_cuts_only_the_summaries() {
        let mut doc = MemoryDoc::default();
        doc.sections[2].summary = "focus ".repeat(200);
        doc.facts = vec![
            fact("fc", "Never push to main", "correction", 0.9),
            fact("f1", "Likes tea", "preference", 0.8),
        ];
        let out = body(&doc, &settings(100));
        let (summaries, facts) = out.split_once("\n\nFacts:\n").unwrap();
        assert!(summaries.starts_with("User Context:\n- Current Focus: focus"));
        assert!(summaries.ends_with("\n..."), "{summaries}");
        // The summaries took the regular budget; the guaranteed fact stays.
        assert_eq!(facts, "- [correction | 0.90] Never push to main");
        assert!(count_tokens(&out) <= 100 + count_tokens(facts));
    }
}
