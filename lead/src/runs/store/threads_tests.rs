use super::*;
use antler_engine::{Message, StateUpdate};
use serde_json::json;

fn store() -> (tempfile::TempDir, CheckpointStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = CheckpointStore::open(&dir.path().join("runs.sqlite")).unwrap();
    (dir, store)
}

fn run(run_id: &str, user: &str, thread: &str) -> RunRecord {
    RunRecord {
        run_id: run_id.into(),
        user_id: user.into(),
        thread_id: thread.into(),
        task: "hello".into(),
        model: "scripted:play.yaml".into(),
        status: RunStatus::Running,
        detail: None,
        clarification: false,
        agent: None,
        bootstrap: false,
        non_interactive: false,
        subagents: false,
        role: None,
    }
}

fn meta(value: serde_json::Value) -> Map<String, Value> {
    value.as_object().unwrap().clone()
}

#[test]
fn a_thread_belongs_to_its_user_and_creating_it_again_changes_nothing() {
    let (_dir, store) = store();
    let (row, created) = store
        .create_thread("alice", "t1", &meta(json!({"topic": "x"})))
        .unwrap();
    assert!(created);
    assert_eq!(row.status, ThreadStatus::Idle);
    let (again, created) = store
        .create_thread("alice", "t1", &meta(json!({"topic": "y"})))
        .unwrap();
    assert!(!created);
    assert_eq!(again.metadata["topic"], "x");
    assert!(store.thread("bob", "t1").unwrap().is_none());
    assert!(matches!(
        store.delete_thread("bob", "t1").unwrap(),
        Err(ThreadRefusal::NotFound(_))
    ));
    assert!(store
        .search_threads("bob", &Map::new(), None, 10, 0)
        .unwrap()
        .is_empty());
}

#[test]
fn a_run_holds_its_thread_until_it_ends_and_leaves_its_state_there() {
    let (_dir, store) = store();
    store.create_thread("alice", "t1", &Map::new()).unwrap();
    assert_eq!(
        store.claim_thread("alice", "t1", "run-1").unwrap().unwrap(),
        None
    );
    let mut state = ThreadState::new("hello");
    store
        .create_run(&run("run-1", "alice", "t1"), &state)
        .unwrap();
    let busy = store
        .claim_thread("alice", "t1", "run-2")
        .unwrap()
        .unwrap_err();
    assert_eq!(busy.to_string(), "Thread t1 already has an active run");
    assert!(matches!(
        store.delete_thread("alice", "t1").unwrap(),
        Err(ThreadRefusal::Busy { .. })
    ));
    assert_eq!(
        store.thread("alice", "t1").unwrap().unwrap().status,
        ThreadStatus::Busy
    );
    state
        .apply(StateUpdate::messages([Message::Ai {
            id: "ai-1".into(),
            content: "hi".into(),
            tool_calls: vec![],
            reasoning: None,
        }]))
        .unwrap();
    store.save("run-1", 1, &state).unwrap();
    store.set_status("run-1", RunStatus::Success, None).unwrap();
    let row = store.thread("alice", "t1").unwrap().unwrap();
    assert_eq!(
        (row.status, row.active_run_id.as_deref()),
        (ThreadStatus::Idle, None)
    );
    assert_eq!(row.last_run_id.as_deref(), Some("run-1"));
    let kept = store.claim_thread("alice", "t1", "run-2").unwrap().unwrap();
    assert_eq!(kept, Some(state));
    // A claim whose run is never created is let go of.
    store.release_thread("alice", "t1", "run-2", &row).unwrap();
    let row = store.thread("alice", "t1").unwrap().unwrap();
    assert_eq!(row.active_run_id, None);
    assert_eq!(row.last_run_id.as_deref(), Some("run-1"));
    store.delete_thread("alice", "t1").unwrap().unwrap();
    assert!(store.thread("alice", "t1").unwrap().is_none());
}

#[test]
fn an_errored_run_leaves_the_thread_in_error_and_its_runs_are_listed() {
    let (_dir, store) = store();
    store.create_thread("alice", "t1", &Map::new()).unwrap();
    store.claim_thread("alice", "t1", "run-1").unwrap().unwrap();
    store
        .create_run(&run("run-1", "alice", "t1"), &ThreadState::new("q"))
        .unwrap();
    store
        .set_status("run-1", RunStatus::Error, Some("boom"))
        .unwrap();
    let row = store.thread("alice", "t1").unwrap().unwrap();
    assert_eq!(row.status, ThreadStatus::Error);
    let runs = store.thread_runs("alice", "t1", 10, 0).unwrap();
    assert_eq!(runs.len(), 1);
    assert!(store.thread_runs("bob", "t1", 10, 0).unwrap().is_empty());
}

#[test]
fn search_matches_metadata_exactly_newest_first() {
    let (_dir, store) = store();
    store
        .create_thread(
            "alice",
            "a",
            &meta(json!({"graph_id": "lead_agent", "n": 1})),
        )
        .unwrap();
    store
        .create_thread(
            "alice",
            "b",
            &meta(json!({"graph_id": "lead_agent", "n": 2})),
        )
        .unwrap();
    store
        .create_thread("alice", "c", &meta(json!({"graph_id": "other"})))
        .unwrap();
    let found: Vec<String> = store
        .search_threads(
            "alice",
            &meta(json!({"graph_id": "lead_agent"})),
            None,
            10,
            0,
        )
        .unwrap()
        .into_iter()
        .map(|r| r.thread_id)
        .collect();
    assert_eq!(found, ["b", "a"]);
    let page = store
        .search_threads(
            "alice",
            &meta(json!({"graph_id": "lead_agent"})),
            None,
            1,
            1,
        )
        .unwrap();
    assert_eq!(page[0].thread_id, "a");
    let patched = store
        .patch_thread("alice", "a", &meta(json!({"n": 3})), true)
        .unwrap()
        .unwrap();
    assert_eq!(patched.metadata["n"], 3);
    assert_eq!(patched.metadata["graph_id"], "lead_agent");
}
