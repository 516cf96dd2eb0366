use super::*;
use serde_json::json;

fn ai(id: &str, content: &str, calls: &[(&str, &str)]) -> Message {
    Message::Ai {
        id: id.to_owned(),
        content: content.to_owned(),
        tool_calls: calls
            .iter()
            .map(|(id, name)| ToolCall {
                id: (*id).to_owned(),
                name: (*name).to_owned(),
                args: json!({}),
            })
            .collect(),
        reasoning: None,
    }
}

fn sandbox(id: &str) -> Option<SandboxState> {
    Some(SandboxState {
        sandbox_id: id.to_owned(),
    })
}

fn image(path: &str) -> (String, ViewedImage) {
    (
        path.to_owned(),
        ViewedImage {
            mime_type: "image/png".into(),
            size: 8,
            actual_path: format!("/host{path}"),
        },
    )
}

#[test]
fn messages_append_and_an_ai_message_with_a_known_id_replaces_it() {
    let mut state = ThreadState::new("task");
    state
        .apply(StateUpdate::messages([ai("m1", "", &[("c1", "bash")])]))
        .unwrap();
    state
        .apply(StateUpdate::messages([
            Message::tool("c1", "bash", "ok", ToolStatus::Success),
            ai("m1", "rewritten", &[]),
        ]))
        .unwrap();
    assert_eq!(state.messages.len(), 3);
    assert_eq!(state.messages[1], ai("m1", "rewritten", &[]));
}

#[test]
fn artifacts_concatenate_with_ordered_dedupe() {
    let mut state = ThreadState::default();
    let paths = |p: &[&str]| p.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    state
        .apply(StateUpdate {
            artifacts: paths(&["/a", "/b", "/a"]),
            ..StateUpdate::default()
        })
        .unwrap();
    state
        .apply(StateUpdate {
            artifacts: paths(&["/c", "/b"]),
            ..StateUpdate::default()
        })
        .unwrap();
    assert_eq!(state.artifacts, paths(&["/a", "/b", "/c"]));
}

#[test]
fn promoted_merges_through_the_catalog_reducer() {
    let promoted = |hash: &str, names: &[&str]| {
        Some(Promoted {
            catalog_hash: hash.to_owned(),
            names: names.iter().map(|n| (*n).to_owned()).collect(),
        })
    };
    let mut state = ThreadState::default();
    for update in [promoted("h1", &["a"]), promoted("h1", &["b", "a"]), None] {
        state
            .apply(StateUpdate {
                promoted: update,
                ..StateUpdate::default()
            })
            .unwrap();
    }
    assert_eq!(state.promoted, promoted("h1", &["a", "b"]));
    state
        .apply(StateUpdate {
            promoted: promoted("h2", &[]),
            ..StateUpdate::default()
        })
        .unwrap();
    assert_eq!(state.promoted, promoted("h2", &[]));
}

#[test]
fn sandbox_id_is_idempotent_and_another_id_is_a_conflict() {
    let mut state = ThreadState::default();
    let set = |id| StateUpdate {
        sandbox: sandbox(id),
        ..StateUpdate::default()
    };
    state.apply(set("sb-1")).unwrap();
    state.apply(set("sb-1")).unwrap();
    state.apply(StateUpdate::default()).unwrap();
    assert_eq!(state.sandbox, sandbox("sb-1"));
    let before = state.clone();
    let mut conflicting = set("sb-2");
    conflicting.artifacts = vec!["/x".into()];
    let err = state.apply(conflicting).unwrap_err();
    assert_eq!(
        err.to_string(),
        "sandbox conflict: the run is attached to sandbox \"sb-1\", an update names \"sb-2\""
    );
    assert_eq!(state, before, "a refused update changes nothing");
}

#[test]
fn viewed_images_merge_and_an_empty_map_clears() {
    let mut state = ThreadState::default();
    let update = |images: Vec<(String, ViewedImage)>| StateUpdate {
        viewed_images: Some(images.into_iter().collect()),
        ..StateUpdate::default()
    };
    state.apply(update(vec![image("/a.png")])).unwrap();
    state.apply(update(vec![image("/b.png")])).unwrap();
    state.apply(StateUpdate::default()).unwrap();
    assert_eq!(
        state.viewed_images.keys().collect::<Vec<_>>(),
        ["/a.png", "/b.png"]
    );
    state.apply(update(vec![])).unwrap();
    assert!(state.viewed_images.is_empty());
}

#[test]
fn delegations_update_by_id_and_append_new_ids() {
    let delegation = |id: &str, status: &str| Delegation {
        id: id.to_owned(),
        run_id: "run-1".to_owned(),
        status: Some(status.to_owned()),
    };
    let mut state = ThreadState::default();
    state
        .apply(StateUpdate {
            delegations: vec![delegation("t1", "running"), delegation("t2", "running")],
            ..StateUpdate::default()
        })
        .unwrap();
    state
        .apply(StateUpdate {
            delegations: vec![delegation("t1", "completed")],
            ..StateUpdate::default()
        })
        .unwrap();
    assert_eq!(
        state.delegations,
        [delegation("t1", "completed"), delegation("t2", "running")]
    );
}

#[test]
fn stop_reason_is_set_and_kept() {
    let mut state = ThreadState::default();
    state
        .apply(StateUpdate {
            stop_reason: Some(StopReason::LoopCapped),
            ..StateUpdate::default()
        })
        .unwrap();
    state.apply(StateUpdate::default()).unwrap();
    assert_eq!(state.stop_reason, Some(StopReason::LoopCapped));
}

#[test]
fn pending_tool_calls_are_the_unanswered_calls_of_the_last_ai_message() {
    let mut state = ThreadState::new("task");
    state
        .apply(StateUpdate::messages([
            ai("m1", "", &[("c1", "bash"), ("c2", "ls")]),
            Message::tool("c1", "bash", "ok", ToolStatus::Success),
        ]))
        .unwrap();
    let pending: Vec<String> = state
        .pending_tool_calls()
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(pending, ["c2"]);
}

#[test]
fn state_round_trips_through_json_with_deerflow_field_names() {
    let mut state = ThreadState::new("task");
    state
        .apply(StateUpdate {
            messages: vec![ai("m1", "", &[("c1", "bash")])],
            sandbox: sandbox("sb-1"),
            stop_reason: Some(StopReason::SubagentLimitCapped),
            ..StateUpdate::default()
        })
        .unwrap();
    let json = serde_json::to_value(&state).unwrap();
    assert_eq!(json["stop_reason"], "subagent_limit_capped");
    assert_eq!(json["sandbox"]["sandbox_id"], "sb-1");
    assert_eq!(json["messages"][1]["role"], "ai");
    let back: ThreadState = serde_json::from_value(json).unwrap();
    assert_eq!(back, state);
}

#[test]
fn folded_updates_apply_like_the_sequence() {
    let first = StateUpdate {
        artifacts: vec!["/a".into()],
        viewed_images: Some([image("/a.png")].into_iter().collect()),
        ..StateUpdate::default()
    };
    let second = StateUpdate {
        artifacts: vec!["/b".into(), "/a".into()],
        viewed_images: Some([image("/b.png")].into_iter().collect()),
        ..StateUpdate::default()
    };
    let mut sequential = ThreadState::default();
    sequential.apply(first.clone()).unwrap();
    sequential.apply(second.clone()).unwrap();
    let mut folded = ThreadState::default();
    folded.apply(first.then(second)).unwrap();
    assert_eq!(folded, sequential);
}

#[test]
fn active_skills_dedupe_in_order_and_keep_only_the_latest_slash_skill() {
    let skill = |name: &str, source: SkillSource| ActiveSkill {
        name: name.to_owned(),
        path: format!("/mnt/skills/public/{name}/SKILL.md"),
        source,
    };
    let mut state = ThreadState::default();
    for batch in [
        vec![
            skill("a", SkillSource::Read),
            skill("s1", SkillSource::Slash),
        ],
        vec![skill("b", SkillSource::Read), skill("a", SkillSource::Read)],
        vec![skill("s1", SkillSource::Slash)],
        vec![skill("s2", SkillSource::Slash)],
    ] {
        state
            .apply(StateUpdate {
                active_skills: batch,
                ..StateUpdate::default()
            })
            .unwrap();
    }
    assert_eq!(
        state.active_skills,
        [
            skill("a", SkillSource::Read),
            skill("b", SkillSource::Read),
            skill("s2", SkillSource::Slash)
        ]
    );
}

#[test]
fn usage_no_provider_reported_is_none_not_zeros() {
    assert_eq!(TokenUsage::default().reported(), None);
    let some = TokenUsage {
        input_tokens: 3,
        output_tokens: 2,
        total_tokens: 5,
        ..TokenUsage::default()
    };
    assert_eq!(some.reported(), Some(some));
}

#[test]
fn a_continued_thread_keeps_its_conversation_and_resets_the_run_counters() {
    let mut state = ThreadState::new("first question");
    state
        .apply(StateUpdate {
            messages: vec![ai("ai-1", "first answer", &[])],
            artifacts: vec!["/mnt/user-data/outputs/a.md".into()],
            sandbox: sandbox("sb-1"),
            stop_reason: Some(StopReason::LoopCapped),
            token_usage: Some(TokenUsage {
                input_tokens: 3,
                output_tokens: 4,
                total_tokens: 7,
                ..TokenUsage::default()
            }),
            ..StateUpdate::default()
        })
        .unwrap();
    let next = state.clone().continued("second question");
    assert_eq!(next.messages.len(), 3);
    assert_eq!(next.messages[..2], state.messages[..]);
    assert_eq!(next.messages[2], Message::human("second question"));
    assert_eq!(next.artifacts, state.artifacts);
    assert_eq!(next.sandbox, state.sandbox);
    assert_eq!(next.stop_reason, None);
    assert!(next.token_usage.is_zero());
    assert_eq!(next.turns_before, 1);
    assert_eq!(next.turns_this_run(), 0);
}

#[test]
fn the_next_ai_id_is_ai_turn_unless_taken_and_then_still_unique() {
    let fresh = vec![Message::human("hi"), ai("ai-1", "hello", &[])];
    assert_eq!(next_ai_id(&fresh, 2), "ai-2");
    // A summarization left ai-3 and ai-4 behind two messages: turn 3 is taken.
    let summarized = vec![
        Message::human("summary"),
        ai("ai-3", "a", &[]),
        ai("ai-4", "b", &[]),
    ];
    assert_eq!(next_ai_id(&summarized, 3), "ai-3-2");
    let mut messages = summarized.clone();
    add_messages(
        &mut messages,
        vec![ai(&next_ai_id(&summarized, 3), "c", &[])],
    );
    assert_eq!(
        messages.len(),
        4,
        "the reply is appended, nothing is replaced"
    );
    assert_eq!(next_ai_id(&messages, 3), "ai-3-3");
    // The same messages give the same id (a replayed step).
    assert_eq!(next_ai_id(&summarized, 3), next_ai_id(&summarized, 3));
}

#[test]
fn a_scripted_model_plays_each_run_of_a_thread_from_its_first_turn() {
    use crate::model::ScriptedModel;
    let model = ScriptedModel::from_yaml(
        "turns:\n  - tool_calls: [{name: ls}]\n  - content: done\n",
        "p.yaml",
    )
    .unwrap();
    // The thread's earlier run left two AI messages; this run's first turn is turn 1,
    // its call id numbered by the thread's turn (never an earlier run's).
    let messages = vec![
        Message::human("a"),
        ai("ai-1", "", &[("call-1-1", "ls")]),
        Message::tool("call-1-1", "ls", "x", ToolStatus::Success),
        ai("ai-2", "done", &[]),
        Message::human("b"),
    ];
    let reply = model.reply_after(&messages, 2).unwrap();
    assert_eq!(reply.tool_calls[0].id, "call-3-1");
    assert!(
        model.reply(&messages).is_err(),
        "counted from the thread's start, the playbook is over"
    );
}
