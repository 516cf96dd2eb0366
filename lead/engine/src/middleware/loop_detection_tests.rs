#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use serde_json::json;

fn call(name: &str, args: Value) -> ToolCall {
    ToolCall {
        id: "c".into(),
        name: name.into(),
        args,
    }
}

fn reply(n: usize, calls: Vec<ToolCall>) -> ModelReply {
    ModelReply {
        id: format!("ai-{n}"),
        content: "again".into(),
        tool_calls: calls,
        finish_reason: Some("tool_calls".into()),
        ..ModelReply::default()
    }
}

/// Each reply through `detection` as the run loop does, its message added after; the
/// verdicts.
fn run(detection: &LoopDetection, replies: Vec<ModelReply>) -> (Vec<LoopVerdict>, Vec<Message>) {
    let mut history = vec![Message::human("go")];
    let mut verdicts = Vec::new();
    for mut r in replies {
        verdicts.push(detection.after_model(&history, &mut r));
        history.push(r.into_message());
    }
    (verdicts, history)
}

#[test]
fn the_golden_hashes_are_deerflows() {
    let read = [call(
        "read_file",
        json!({"path": "/mnt/user-data/uploads/a.txt"}),
    )];
    assert_eq!(call_set_hash(&read), "cb1298147e8f");
    let x = [call("bash", json!({"command": "ls", "description": "x"}))];
    let y = [call("bash", json!({"command": "ls", "description": "y"}))];
    assert_eq!(call_set_hash(&x), "644d05a19cdd");
    assert_eq!(call_set_hash(&y), "644d05a19cdd");
    assert_eq!(
        stable_key(
            "read_file",
            &json!({"path": "/a", "start_line": 150, "end_line": 450})
        ),
        "/a:0-2"
    );
    // Order does not matter; non-ASCII is escaped as Python's json.dumps does.
    let two = [
        call("web_search", json!({"query": "café"})),
        call("bash", json!({"command": "ls"})),
    ];
    let swapped = [two[1].clone(), two[0].clone()];
    assert_eq!(call_set_hash(&two), "010638f7decb");
    assert_eq!(call_set_hash(&swapped), "010638f7decb");
}

#[test]
fn keys_follow_each_tools_rule() {
    // String arguments are parsed; a reversed or missing range is sorted and floored.
    assert_eq!(
        stable_key(
            "read_file",
            &json!("{\"path\": \"/a\", \"start_line\": 401, \"end_line\": 2}")
        ),
        "/a:0-2"
    );
    assert_eq!(
        stable_key("read_file", &json!({"path": "/a", "start_line": -5})),
        "/a:0-0"
    );
    // write_file and str_replace: the whole arguments.
    assert_eq!(
        stable_key("write_file", &json!({"path": "/a", "content": "x"})),
        r#"{"content": "x", "path": "/a"}"#
    );
    // Other tools: the salient fields that are set, else the fallback, else everything.
    assert_eq!(
        stable_key(
            "web_fetch",
            &json!({"url": "https://a", "query": null, "n": 3})
        ),
        r#"{"url": "https://a"}"#
    );
    assert_eq!(stable_key("think", &json!("not json")), "not json");
    assert_eq!(stable_key("think", &json!("[1, 2]")), "[1, 2]");
    assert_eq!(
        stable_key("think", &json!({"b": 1, "a": [true]})),
        r#"{"a": [true], "b": 1}"#
    );
}

#[test]
fn five_identical_calls_warn_at_three_once_and_stop_at_five() {
    let detection = LoopDetection::default();
    let replies = (1..=5)
        .map(|n| reply(n, vec![call("web_search", json!({"query": "same"}))]))
        .collect();
    let (verdicts, history) = run(&detection, replies);
    assert_eq!(verdicts[0], LoopVerdict::Pass);
    assert_eq!(verdicts[1], LoopVerdict::Pass);
    assert_eq!(verdicts[2], LoopVerdict::Warn(LOOP_WARNING.to_owned()));
    assert_eq!(verdicts[3], LoopVerdict::Pass, "the hash warned already");
    assert_eq!(verdicts[4], LoopVerdict::HardStop(StopReason::LoopCapped));
    assert_eq!(
        history.last(),
        Some(&Message::Ai {
            id: "ai-5".into(),
            content: format!("again\n\n{LOOP_HARD_STOP}"),
            tool_calls: vec![],
            reasoning: None,
        })
    );
}

#[test]
fn a_hard_stop_makes_the_finish_reason_stop_and_fills_empty_content() {
    let detection = LoopDetection {
        warn_threshold: 1,
        hard_limit: 1,
        ..LoopDetection::default()
    };
    let mut r = reply(1, vec![call("bash", json!({"command": "ls"}))]);
    r.content.clear();
    assert_eq!(
        detection.after_model(&[], &mut r),
        LoopVerdict::HardStop(StopReason::LoopCapped)
    );
    assert_eq!(r.content, format!("\n\n{LOOP_HARD_STOP}"));
    assert_eq!(r.finish_reason.as_deref(), Some("stop"));
    assert!(r.tool_calls.is_empty());
}

#[test]
fn repeats_outside_the_window_do_not_count_and_a_hash_may_warn_again() {
    let detection = LoopDetection {
        window_size: 4,
        ..LoopDetection::default()
    };
    let same = || vec![call("bash", json!({"command": "ls"}))];
    let other = |n: usize| vec![call("bash", json!({"command": format!("echo {n}")}))];
    // ls ls ls (warn) x x x x (ls leaves the window) ls ls ls (warns again).
    let mut replies = Vec::new();
    for n in 0..3 {
        replies.push(reply(n, same()));
    }
    for n in 3..7 {
        replies.push(reply(n, other(n)));
    }
    for n in 7..10 {
        replies.push(reply(n, same()));
    }
    let (verdicts, _) = run(&detection, replies);
    let warned: Vec<usize> = verdicts
        .iter()
        .enumerate()
        .filter(|(_, v)| matches!(v, LoopVerdict::Warn(_)))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(warned, [2, 9]);
}

#[test]
fn one_tool_called_too_often_warns_once_then_stops_with_its_own_texts() {
    let detection = LoopDetection {
        tool_freq_warn: 3,
        tool_freq_hard_limit: 5,
        ..LoopDetection::default()
    };
    let replies = (1..=5)
        .map(|n| {
            reply(
                n,
                vec![call("read_file", json!({"path": format!("/f{n}")}))],
            )
        })
        .collect();
    let (verdicts, history) = run(&detection, replies);
    let warning = "[LOOP DETECTED] You have called read_file 3 times without producing a final answer. Stop calling tools and produce your final answer now. If you cannot complete the task, summarize what you accomplished so far.";
    assert_eq!(
        verdicts,
        [
            LoopVerdict::Pass,
            LoopVerdict::Pass,
            LoopVerdict::Warn(warning.to_owned()),
            LoopVerdict::Pass,
            LoopVerdict::HardStop(StopReason::LoopCapped),
        ]
    );
    let Some(Message::Ai { content, .. }) = history.last() else {
        panic!()
    };
    assert_eq!(
        content,
        "again\n\n[FORCED STOP] Tool read_file called 5 times — exceeded the per-tool safety limit. Producing final answer with results collected so far."
    );
}

#[test]
fn overrides_set_one_tools_thresholds_and_widen_the_window() {
    let mut overrides = BTreeMap::new();
    overrides.insert(
        "bash".to_owned(),
        ToolFreqLimits {
            warn: 60,
            hard_limit: 80,
        },
    );
    let detection = LoopDetection {
        tool_freq_warn: 2,
        tool_freq_hard_limit: 3,
        tool_freq_overrides: overrides,
        ..LoopDetection::default()
    };
    assert_eq!(detection.freq_window(), 80);
    let replies = (1..=10)
        .map(|n| {
            reply(
                n,
                vec![call("bash", json!({"command": format!("echo {n}")}))],
            )
        })
        .collect();
    let (verdicts, _) = run(&detection, replies);
    assert!(
        verdicts.iter().all(|v| *v == LoopVerdict::Pass),
        "{verdicts:?}"
    );
}

#[test]
fn layer_two_runs_only_when_layer_one_says_nothing() {
    let detection = LoopDetection {
        warn_threshold: 2,
        tool_freq_warn: 2,
        tool_freq_hard_limit: 10,
        ..LoopDetection::default()
    };
    let replies = (1..=3)
        .map(|n| reply(n, vec![call("bash", json!({"command": "ls"}))]))
        .collect();
    let (verdicts, _) = run(&detection, replies);
    // 2: layer 1 warns (bash is not counted by layer 2 then); 3: layer 1 warned already,
    // layer 2 counts bash twice and warns.
    assert_eq!(verdicts[1], LoopVerdict::Warn(LOOP_WARNING.to_owned()));
    assert_eq!(
        verdicts[2],
        LoopVerdict::Warn(freq_text(TOOL_FREQ_WARNING, "bash", 2))
    );
}

#[test]
fn disabled_detection_passes_everything() {
    let detection = LoopDetection {
        enabled: false,
        ..LoopDetection::default()
    };
    let replies = (1..=6)
        .map(|n| reply(n, vec![call("bash", json!({"command": "ls"}))]))
        .collect();
    let (verdicts, _) = run(&detection, replies);
    assert!(verdicts.iter().all(|v| *v == LoopVerdict::Pass));
}

#[test]
fn queued_warnings_are_deduplicated_capped_at_four_and_sent_once() {
    let mut queue = LoopWarnings::default();
    for text in ["a", "b", "a", "c", "d", "e"] {
        queue.queue(text.to_owned());
    }
    assert_eq!(
        queue.take_message(),
        Some(Message::Human {
            content: "b\n\nc\n\nd\n\ne".into(),
            name: Some("loop_warning".into()),
            hide_from_ui: true,
            additional_kwargs: None,
        })
    );
    assert_eq!(queue.take_message(), None);
}
