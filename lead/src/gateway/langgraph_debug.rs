//! The payloads of LangGraph's `tasks`, `checkpoints` and `debug` stream modes (spec A.5),
//! as langgraph's `map_debug_tasks`, `map_debug_task_results` and `map_debug_checkpoint`
//! shape them, for Antler's run: a model turn is a task of the node `model`, a tool call
//! a task of the node `tools` (as LangChain's agent sends each call to `tools`), and
//! each checkpoint the run writes a checkpoint. `debug` wraps each in `{type, timestamp,
//! step, payload}`. Task ids are derived from the run and the turn or call, so a replay
//! of the same run names the same tasks. Pure: `langgraph_stream` sends them.

use serde_json::{json, Value};
use sha2::Digest as _;

/// The graph's node of a model call, and of a tool call.
pub(super) const MODEL_NODE: &str = "model";
pub(super) const TOOLS_NODE: &str = "tools";

/// A task's id: a UUID from the run, the node and the turn or call it runs.
pub(super) fn task_id(run_id: &str, node: &str, key: &str) -> String {
    let digest = sha2::Sha256::digest(format!("{run_id}\0{node}\0{key}").as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    // Version 8 (custom), RFC 4122 variant.
    bytes[6] = (bytes[6] & 0x0f) | 0x80;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    uuid::Uuid::from_bytes(bytes).to_string()
}

/// A task that starts: `{id, name, input, triggers}`.
pub(super) fn task_start(id: &str, name: &str, input: Value, triggers: &[&str]) -> Value {
    json!({"id": id, "name": name, "input": input, "triggers": triggers})
}

/// A task's result: `{id, name, error, result, interrupts}`, `result` its writes as
/// `[channel, value]` pairs.
pub(super) fn task_result(id: &str, name: &str, writes: Vec<(&str, Value)>) -> Value {
    let result: Vec<Value> = writes
        .into_iter()
        .map(|(channel, value)| json!([channel, value]))
        .collect();
    json!({"id": id, "name": name, "error": null, "result": result, "interrupts": []})
}

/// The `config` of a run's checkpoint `step` on `thread`.
fn checkpoint_config(thread: &str, run_id: &str, step: i64) -> Value {
    json!({"configurable": {
        "thread_id": thread,
        "checkpoint_ns": "",
        "checkpoint_id": format!("{run_id}:{step}"),
    }})
}

/// One checkpoint of the run: `{config, parent_config, values, metadata, next, tasks}`
/// (`next` empty: Antler writes a checkpoint once a step's work is merged).
pub(super) fn checkpoint(thread: &str, run_id: &str, step: i64, values: Value) -> Value {
    json!({
        "config": checkpoint_config(thread, run_id, step),
        "parent_config": (step > 0).then(|| checkpoint_config(thread, run_id, step - 1)),
        "values": values,
        "metadata": {
            "source": if step == 0 { "input" } else { "loop" },
            "step": step,
            "parents": {},
            "run_id": run_id,
            "thread_id": thread,
        },
        "next": [],
        "tasks": [],
    })
}

/// A `debug` frame: `{type, timestamp, step, payload}`; `type` is `checkpoint`, `task`
/// or `task_result`.
pub(super) fn debug(kind: &str, step: i64, payload: Value) -> Value {
    let now = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    json!({"type": kind, "timestamp": now, "step": step, "payload": payload})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_ids_are_uuids_named_by_the_run_and_the_work() {
        let id = task_id("run-1", MODEL_NODE, "1");
        assert_eq!(id, task_id("run-1", MODEL_NODE, "1"));
        assert_ne!(id, task_id("run-1", MODEL_NODE, "2"));
        assert_ne!(id, task_id("run-2", MODEL_NODE, "1"));
        assert!(uuid::Uuid::parse_str(&id).is_ok(), "{id}");
    }

    #[test]
    fn payloads_have_langgraphs_fields() {
        let start = task_start(
            "t1",
            TOOLS_NODE,
            json!({"name": "ls"}),
            &["branch:to:tools"],
        );
        assert_eq!(start["triggers"], json!(["branch:to:tools"]));
        let result = task_result(
            "t1",
            TOOLS_NODE,
            vec![("messages", json!([{"type": "tool"}]))],
        );
        assert_eq!(result["result"], json!([["messages", [{"type": "tool"}]]]));
        assert_eq!(
            (&result["error"], &result["interrupts"]),
            (&Value::Null, &json!([]))
        );
        let first = checkpoint("t", "r", 0, json!({"messages": []}));
        assert_eq!(first["parent_config"], Value::Null);
        assert_eq!(first["metadata"]["source"], "input");
        let next = checkpoint("t", "r", 2, json!({}));
        assert_eq!(
            next["parent_config"]["configurable"]["checkpoint_id"],
            "r:1"
        );
        assert_eq!(next["config"]["configurable"]["checkpoint_id"], "r:2");
        let frame = debug("checkpoint", 2, next.clone());
        assert_eq!(
            (frame["type"].as_str(), frame["step"].as_i64()),
            (Some("checkpoint"), Some(2))
        );
        assert_eq!(frame["payload"], next);
        assert!(frame["timestamp"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')));
    }
}
