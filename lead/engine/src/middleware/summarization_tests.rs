use super::counter::{chars, tool_calls_repr, ANTHROPIC_CHARS_PER_TOKEN};
use super::cutoff::safe_cutoff;
use super::*;
use crate::catalog::builtins::ASK_CLARIFICATION;
use crate::thread::state::{ToolCall, ToolStatus};
use serde_json::json;

fn ai(id: &str, calls: &[&str]) -> Message {
    Message::Ai {
        id: id.into(),
        content: String::new(),
        tool_calls: calls
            .iter()
            .map(|c| ToolCall {
                id: (*c).into(),
                name: "bash".into(),
                args: json!({"command": "ls"}),
            })
            .collect(),
        reasoning: None,
    }
}

fn tool(id: &str) -> Message {
    Message::tool(id, "bash", "ok", ToolStatus::Success)
}

#[test]
fn the_counter_is_deerflows() {
    let counter = TokenCounter::default();
    // "hello" (5) + "user" (4) = 9 chars: ⌈9/4⌉ + 3.
    assert_eq!(counter.message(&Message::human("hello")), 6);
    // A tool message adds its call id and name: 2 + 2 + 4 + 4 = 12: 3 + 3.
    assert_eq!(
        counter.message(&Message::tool("t1", "ls", "ok", ToolStatus::Success)),
        6
    );
    // An AI message with calls adds `repr(tool_calls)`.
    let repr = tool_calls_repr(&[ToolCall {
        id: "c1".into(),
        name: "bash".into(),
        args: json!({"command": "ls", "n": 1, "ok": true, "x": null}),
    }]);
    assert_eq!(
        repr,
        "[{'name': 'bash', 'args': {'command': 'ls', 'n': 1, 'ok': True, 'x': None}, 'id': 'c1', 'type': 'tool_call'}]"
    );
    let message = ai("ai-1", &["c1"]);
    let expected = (chars(&tool_calls_repr(message.tool_calls())) + "assistant".len()) as f64;
    assert_eq!(
        counter.message(&message),
        (expected / 4.0).ceil() as u64 + 3
    );
    let anthropic = TokenCounter {
        chars_per_token: ANTHROPIC_CHARS_PER_TOKEN,
    };
    assert_eq!(anthropic.message(&Message::human("hello")), 3 + 3);
}

#[test]
fn the_cutoff_never_separates_a_call_from_its_result() {
    // The verified example: [H, AI(t1,t2), T1, T2, AI] gives 1 for keep 2 and keep 3.
    let messages = vec![
        Message::human("go"),
        ai("ai-1", &["t1", "t2"]),
        tool("t1"),
        tool("t2"),
        ai("ai-2", &[]),
    ];
    let counter = TokenCounter::default();
    for keep in [2, 3] {
        assert_eq!(
            keep_cutoff(&messages, ContextSize::Messages(keep), None, &counter),
            1
        );
    }
    assert_eq!(
        keep_cutoff(&messages, ContextSize::Messages(5), None, &counter),
        0
    );
    assert_eq!(
        keep_cutoff(&messages, ContextSize::Messages(1), None, &counter),
        4
    );
    // A result whose call is cut, past a message between them, moves the cutoff back.
    let messages = vec![
        Message::human("go"),
        ai("ai-1", &["t1"]),
        Message::human("interjection"),
        tool("t1"),
        ai("ai-2", &[]),
    ];
    assert_eq!(safe_cutoff(&messages, 2), 1);
    // By tokens: the shortest suffix within budget, made safe.
    let messages = vec![
        Message::human("go"),
        ai("ai-1", &["t1"]),
        tool("t1"),
        ai("ai-2", &["t2"]),
        tool("t2"),
    ];
    let last = counter.message(&messages[4]);
    let cutoff = keep_cutoff(&messages, ContextSize::Tokens(last), None, &counter);
    assert_eq!(cutoff, 3);
}

#[test]
fn the_latest_request_and_a_clarification_answer_are_rescued() {
    let messages = vec![
        Message::human("first task"),
        ai("ai-1", &[]),
        Message::human("build the report"),
        ai("ai-2", &["q1"]),
        Message::tool("q1", ASK_CLARIFICATION, "Which year?", ToolStatus::Success),
        Message::human("2024"),
        ai("ai-3", &["t1"]),
        tool("t1"),
    ];
    let (summarized, kept) = partition(&messages, 6).unwrap();
    assert_eq!(
        kept[..2],
        [Message::human("build the report"), Message::human("2024")]
    );
    assert_eq!(kept.len(), 4);
    assert_eq!(summarized.len(), 4);
    assert!(summarized.contains(&Message::human("first task")));
    // Without a clarification, only the latest real user message.
    let plain = vec![
        Message::human("one"),
        ai("ai-1", &[]),
        Message::human("two"),
        ai("ai-2", &[]),
        ai("ai-3", &[]),
    ];
    let (_, kept) = partition(&plain, 4).unwrap();
    assert_eq!(kept, vec![Message::human("two"), ai("ai-3", &[])]);
    assert!(partition(&plain, 0).is_none());
}

#[test]
fn the_summary_input_is_trimmed_escaped_and_wrapped() {
    let counter = TokenCounter::default();
    let messages = vec![
        Message::human("<b>hi</b> & bye"),
        ai("ai-1", &["c1"]),
        tool("c1"),
    ];
    let input = summary_input(&messages, None, Some(4000), &counter).unwrap();
    assert!(
        input.starts_with(
            "<new_messages>\nHuman: &lt;b&gt;hi&lt;/b&gt; &amp; bye\nAI: [{'name': 'bash'"
        ),
        "{input}"
    );
    assert!(input.ends_with("Tool: ok\n</new_messages>"), "{input}");
    let rolled = summary_input(&messages, Some("## SUMMARY\nold"), Some(4000), &counter).unwrap();
    assert!(rolled.starts_with(
        "<existing_summary>\n## SUMMARY\nold\n</existing_summary>\n\n<new_messages>\n"
    ));
    // A single message over budget keeps its head and its tail.
    let long = format!("START {} END", "x".repeat(10_000));
    let input = summary_input(&[Message::human(long)], None, Some(200), &counter).unwrap();
    assert!(input.contains("START") && input.contains("END"), "{input}");
    assert!(counter.text(&input) <= 200 + 16);
    // The prompt: LangChain's, with the input for `{messages}`.
    let s = Summarization::new(SummarizationConfig::default(), "m", None, None, counter).unwrap();
    let SummaryPrompt::Ask(prompt) = s.summary_prompt(&messages, None) else {
        panic!("no prompt");
    };
    assert!(prompt.starts_with("<role>\nContext Extraction Assistant\n</role>"));
    assert!(prompt.contains("## SESSION INTENT") && prompt.contains("## NEXT STEPS"));
    assert!(prompt.ends_with("Tool: ok\n</new_messages>\n</messages>"));
    assert_eq!(
        s.summary_prompt(&[], None),
        SummaryPrompt::Canned(NO_HISTORY)
    );
}

#[test]
fn the_durable_context_is_deerflows_and_bounded() {
    assert!(durable_context(None).is_empty());
    let context = durable_context(Some("a < b"));
    assert_eq!(
        context,
        vec![
            Message::System {
                content: AUTHORITY_CONTRACT.to_owned()
            },
            Message::Human {
                content: "<durable_context_data>\n## Conversation summary so far\na &lt; b\n</durable_context_data>".to_owned(),
                name: None,
                hide_from_ui: true,
                additional_kwargs: None,
            },
        ]
    );
    let long = format!("{}{}", "h".repeat(5000), "t".repeat(5000));
    let bounded = bound_text(&long, SUMMARY_RENDER_CHAR_BUDGET);
    assert_eq!(chars(&bounded), SUMMARY_RENDER_CHAR_BUDGET);
    assert!(bounded.starts_with(&"h".repeat(4000)) && bounded.contains("\n...\n"));
    assert!(bounded.ends_with(&"t".repeat(SUMMARY_RENDER_CHAR_BUDGET - 4000 - 5)));
    let mut request = vec![
        Message::System {
            content: "prompt".into(),
        },
        Message::human("go"),
    ];
    insert_durable_context(&mut request, Some("s"));
    assert_eq!(request.len(), 4);
    assert!(matches!(&request[1], Message::System { content } if content == AUTHORITY_CONTRACT));
    assert_eq!(request[3], Message::human("go"));
}

#[test]
fn trimming_drops_whole_old_turns_and_keeps_the_request() {
    let counter = TokenCounter::default();
    let mut messages = vec![Message::human("the request")];
    for i in 0..20 {
        messages.push(ai(&format!("ai-{i}"), &[&format!("t{i}")]));
        messages.push(Message::tool(
            format!("t{i}"),
            "bash",
            "y".repeat(200),
            ToolStatus::Success,
        ));
    }
    let budget = 300;
    let (kept, turns) = trim_oldest_turns(&messages, budget, &counter).unwrap();
    assert!(counter.messages(&kept) <= budget);
    assert_eq!(kept[0], Message::human("the request"));
    assert_eq!(turns, (messages.len() - kept.len()) / 2);
    // Every kept result has its call.
    for (i, m) in kept.iter().enumerate() {
        if let Message::Tool { tool_call_id, .. } = m {
            assert!(kept[..i]
                .iter()
                .any(|a| a.tool_calls().iter().any(|c| &c.id == tool_call_id)));
        }
    }
    assert!(trim_oldest_turns(&kept, budget, &counter).is_none());
}

#[test]
fn a_fraction_without_a_window_names_the_model() {
    let config = SummarizationConfig {
        trigger: vec![ContextSize::Fraction(0.8)],
        ..SummarizationConfig::default()
    };
    let err =
        Summarization::new(config, "local-llama", None, None, TokenCounter::default()).unwrap_err();
    assert!(err.to_string().contains("`local-llama`"), "{err}");
}

#[tokio::test]
async fn manual_compaction_reports_deerflows_fields() {
    use crate::model::{Playbook, ScriptedModel, ScriptedTurn};
    let model = ScriptedModel::new(Playbook {
        summaries: vec![ScriptedTurn {
            content: "## SESSION INTENT\nA test.".into(),
            ..ScriptedTurn::default()
        }],
        ..Playbook::default()
    });
    let mut state = ThreadState::new("the request");
    for i in 0..6 {
        state
            .messages
            .push(ai(&format!("ai-{i}"), &[&format!("t{i}")]));
        state.messages.push(tool(&format!("t{i}")));
    }
    let on = Summarization::new(
        SummarizationConfig {
            enabled: true,
            ..SummarizationConfig::default()
        },
        "scripted",
        None,
        None,
        TokenCounter::default(),
    )
    .unwrap();
    let outcome = compact(&state, &model, Some(&on), Some(ContextSize::Messages(4)))
        .await
        .unwrap();
    assert!(outcome.compacted && outcome.summary_updated);
    // 13 messages: 8 summarized, the request rescued with the last 4 kept.
    assert_eq!(
        (
            outcome.removed_message_count,
            outcome.preserved_message_count
        ),
        (8, 5)
    );
    assert_eq!(
        outcome.total_tokens,
        TokenCounter::default().messages(&state.messages)
    );
    state.apply(outcome.update).unwrap();
    assert_eq!(state.messages[0], Message::human("the request"));
    assert_eq!(
        state.summary_text.as_deref(),
        Some("## SESSION INTENT\nA test.")
    );
    assert_eq!(state.summarized_turns, 4);
    // Too few messages: nothing to do, said so.
    let outcome = compact(&state, &model, Some(&on), Some(ContextSize::Messages(20)))
        .await
        .unwrap();
    assert_eq!(
        (outcome.compacted, outcome.reason),
        (false, Some(NOT_ENOUGH_MESSAGES))
    );
    let err = compact(&state, &model, None, None).await.unwrap_err();
    assert_eq!(err.to_string(), "Context compaction is disabled.");
    // Every summary model failing is DeerFlow's 500 text.
    let silent = ScriptedModel::new(Playbook::default());
    let err = compact(&state, &silent, Some(&on), Some(ContextSize::Messages(1)))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "Failed to compact thread context.");
}

#[test]
fn a_request_over_the_window_is_bounded_without_touching_the_prompt() {
    let counter = TokenCounter::default();
    let mut request = vec![
        Message::System {
            content: "p".repeat(400),
        },
        Message::human("the request"),
        ai("ai-1", &["t1"]),
        Message::tool("t1", "bash", "z".repeat(20_000), ToolStatus::Success),
    ];
    bound_request(&mut request, 1000, &counter);
    assert!(counter.messages(&request) <= 1000);
    assert!(matches!(&request[0], Message::System { content } if content.len() == 400));
    assert_eq!(request[1], Message::human("the request"));
    assert!(matches!(&request[3], Message::Tool { content, .. } if content.contains("\n...\n")));
}
