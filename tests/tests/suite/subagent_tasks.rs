//! Subagents through the whole cluster (`antler up --workers 2`, real workers, the real
//! `everything` MCP server, bubblewrap sandboxes): a lead run delegates to
//! `general-purpose` (which writes a file in the parent's sandbox that the lead then
//! presents) and to a custom agent (which finds and calls an MCP tool), in parallel on
//! different workers; the task messages carry 7.2's texts and `additional_kwargs`, the
//! events come in order, the tasks' tokens add to the run's once; an unknown type and a
//! timeout end as DeerFlow says; and a run over its limits gets capacity results.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::subagent_support;

use crate::subagent_support::SubagentCluster;
use serde_json::Value;
use sha2::{Digest, Sha256};

const CONFIG: &str = r#"
tool_search:
  enabled: true
tools:
  - name: read_file
    group: file:read
    use: deerflow.sandbox.tools:read_file_tool
  - name: write_file
    group: file:write
    use: deerflow.sandbox.tools:write_file_tool
sandbox:
  use: deerflow.community.aio_sandbox:AioSandboxProvider
subagents:
  max_concurrent: 3
  max_total_per_run: 4
  custom_agents:
    researcher:
      description: "Research agent\nFinds things out with MCP tools."
      system_prompt: You research with the tools you have.
      tools: [everything_echo, read_file]
    sleeper:
      description: Takes its time
      timeout_seconds: 1
antler:
  worker_slots: 2
"#;

const DELEGATING: &str = r##"
turns:
  - content: Splitting the work.
    usage: {input_tokens: 100, output_tokens: 10, total_tokens: 110}
    tool_calls:
      - {id: t-note, name: task, args: {description: write the note, prompt: "Write a note to outputs", subagent_type: general-purpose}}
      - {id: t-echo, name: task, args: {description: echo it, prompt: "Echo a greeting", subagent_type: researcher}}
      - {id: t-slow, name: task, args: {description: sleep, prompt: "Take your time", subagent_type: sleeper}}
  - tool_calls:
      - {id: t-nope, name: task, args: {description: unknown, prompt: "x", subagent_type: nope}}
  - tool_calls:
      - {id: present, name: present_files, args: {filepaths: [/mnt/user-data/outputs/note.md]}}
  - content: The note is ready.
subagents:
  write the note:
    turns:
      - usage: {input_tokens: 7, output_tokens: 3, total_tokens: 10}
        tool_calls:
          - name: write_file
            args: {description: note, path: /mnt/user-data/outputs/note.md, content: "# Note from a subagent\n"}
      - usage: {input_tokens: 9, output_tokens: 4, total_tokens: 13}
        tool_calls:
          - name: read_file
            args: {description: check, path: /mnt/user-data/outputs/note.md}
      - content: "Wrote /mnt/user-data/outputs/note.md"
        usage: {input_tokens: 11, output_tokens: 6, total_tokens: 17}
  echo it:
    turns:
      - tool_calls:
          - {name: tool_search, args: {query: "select:everything_echo"}}
      - tool_calls:
          - {name: everything_echo, args: {message: from the researcher}}
      - tool_calls:
          - {name: task, args: {description: nested, prompt: "recurse", subagent_type: general-purpose}}
      - content: The echo answered.
  sleep:
    turns:
      - delay_ms: 5000
        content: too late
"##;

fn task_tools(run: &subagent_support::Run, id: &str) -> Vec<(String, bool)> {
    run.events
        .iter()
        .filter(|e| e["event"] == "task" && e["tool_call_id"] == id && e["type"] == "task_tool")
        .map(|e| (e["name"].as_str().unwrap().to_owned(), e["error"] == true))
        .collect()
}

#[test]
fn a_lead_run_delegates_to_workers_and_presents_what_a_subagent_wrote() {
    let cluster = SubagentCluster::up(CONFIG, 2);
    let run = cluster.run(DELEGATING, &[]);
    assert_eq!(
        run.view["status"], "success",
        "{:#}\n{}",
        run.view, run.stderr
    );
    assert_eq!(run.view["final_answer"], "The note is ready.");
    assert_eq!(run.view["delivery"]["satisfied"], true, "{:#}", run.view);
    let note = cluster
        .base()
        .join("users/default/threads")
        .join(run.run_id())
        .join("user-data/outputs/note.md");
    assert_eq!(
        std::fs::read_to_string(note).unwrap(),
        "# Note from a subagent\n"
    );
    let run_id = run.run_id();

    // general-purpose: the sandbox tools ran in the parent's sandbox.
    let note = cluster.task_message(&run_id, "t-note");
    let result = "Wrote /mnt/user-data/outputs/note.md";
    assert_eq!(note["content"], format!("Task Succeeded. Result: {result}"));
    let kwargs = &note["additional_kwargs"];
    assert_eq!(kwargs["subagent_status"], "completed");
    assert_eq!(kwargs["subagent_result_brief"], result);
    assert_eq!(
        kwargs["subagent_result_sha256"],
        hex::encode(Sha256::digest(result.as_bytes()))
    );
    assert_eq!(kwargs["subagent_model_name"], "scripted");
    assert_eq!(
        kwargs["subagent_token_usage"],
        serde_json::json!({"input_tokens": 27, "output_tokens": 13, "total_tokens": 40})
    );
    assert_eq!(
        task_tools(&run, "t-note"),
        [
            ("write_file".to_owned(), false),
            ("read_file".to_owned(), false)
        ]
    );

    // The custom agent found the MCP tool, called it on the real server, and its forged
    // `task` call was refused: a subagent's catalog has no `task`.
    let echo = cluster.task_message(&run_id, "t-echo");
    assert_eq!(
        echo["content"],
        "Task Succeeded. Result: The echo answered."
    );
    assert_eq!(
        task_tools(&run, "t-echo"),
        [
            ("tool_search".to_owned(), false),
            ("everything_echo".to_owned(), false),
            ("task".to_owned(), true)
        ]
    );
    let refused = run
        .events
        .iter()
        .find(|e| e["type"] == "task_tool" && e["name"] == "task")
        .unwrap();
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("is not a valid tool"),
        "{refused}"
    );

    // The sleeper's own timeout (1 s), DeerFlow's texts.
    let slow = cluster.task_message(&run_id, "t-slow");
    assert_eq!(
        slow["content"],
        "Task timed out. Error: Execution timed out after 1 seconds"
    );
    assert_eq!(slow["additional_kwargs"]["subagent_status"], "timed_out");
    assert_eq!(slow["status"], "error");

    let nope = cluster.task_message(&run_id, "t-nope");
    assert_eq!(
        nope["content"],
        "Task failed. Error: Unknown subagent type 'nope'. Available: general-purpose, bash, researcher, sleeper"
    );

    // Events in order: started (on a worker), running per AI message, the tools, then
    // the terminal event before the call's tool_finished.
    let kinds = run.task_events("t-note");
    assert_eq!(
        kinds.first().map(String::as_str),
        Some("task_started"),
        "{kinds:?}"
    );
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("task_completed"),
        "{kinds:?}"
    );
    assert_eq!(
        kinds.iter().filter(|k| *k == "task_running").count(),
        3,
        "{kinds:?}"
    );
    let ended = run
        .position(|e| e["type"] == "task_completed" && e["tool_call_id"] == "t-note")
        .unwrap();
    let finished = run
        .position(|e| e["event"] == "tool_finished" && e["tool_call_id"] == "t-note")
        .unwrap();
    assert!(ended < finished);
    assert_eq!(run.task_events("t-slow").last().unwrap(), "task_timed_out");
    assert_eq!(run.task_events("t-nope"), ["task_failed"]);
    let running = run.task_event("t-note", "task_running");
    assert_eq!(running["message_index"], 1);

    // The three tasks ran at once, on both workers.
    let workers: std::collections::BTreeSet<String> = ["t-note", "t-echo", "t-slow"]
        .iter()
        .map(|id| {
            run.task_event(id, "task_started")["worker"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(workers.len(), 2, "{workers:?}");

    // Tokens: the lead's own call plus each task's, once.
    let state = cluster.state(&run_id);
    assert_eq!(state["token_usage"]["total_tokens"], 110 + 40);
    let delegations: Vec<&Value> = state["delegations"].as_array().unwrap().iter().collect();
    assert_eq!(delegations.len(), 4);
}

const OVER_LIMITS: &str = r#"
turns:
  - tool_calls:
      - {id: a1, name: task, args: {description: one, prompt: p, subagent_type: general-purpose}}
      - {id: a2, name: task, args: {description: two, prompt: p, subagent_type: general-purpose}}
      - {id: a3, name: task, args: {description: three, prompt: p, subagent_type: general-purpose}}
      - {id: a4, name: task, args: {description: four, prompt: p, subagent_type: general-purpose}}
      - {id: a5, name: task, args: {description: five, prompt: p, subagent_type: general-purpose}}
  - tool_calls:
      - {id: b1, name: task, args: {description: six, prompt: p, subagent_type: general-purpose}}
      - {id: b2, name: task, args: {description: seven, prompt: p, subagent_type: general-purpose}}
  - content: Still more to do.
    tool_calls:
      - {id: c1, name: task, args: {description: eight, prompt: p, subagent_type: general-purpose}}
subagents:
  default:
    turns:
      - content: done
"#;

#[test]
fn a_run_over_its_limits_keeps_three_per_response_and_four_in_all() {
    let cluster = SubagentCluster::up(CONFIG, 2);
    let run = cluster.run(OVER_LIMITS, &[]);
    assert_eq!(
        run.view["status"], "success",
        "{:#}\n{}",
        run.view, run.stderr
    );
    let state = cluster.state(&run.run_id());
    let ai: Vec<&Value> = state["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "ai")
        .collect();
    let ids = |m: &Value| -> Vec<String> {
        m["tool_calls"]
            .as_array()
            .map(|c| {
                c.iter()
                    .map(|c| c["id"].as_str().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    // Five asked, three kept (max_concurrent); then one of two (4 in all); then none.
    assert_eq!(ids(ai[0]), ["a1", "a2", "a3"]);
    assert_eq!(ids(ai[1]), ["b1"]);
    assert!(ids(ai[2]).is_empty());
    assert!(run.view["final_answer"]
        .as_str()
        .unwrap()
        .ends_with("[SUBAGENT LIMIT REACHED] The subagent delegation limit for this run has been reached. Continue using the subagent results already collected, execute remaining simple work directly, or summarize the remaining work instead of launching more subagents."));
    assert_eq!(state["stop_reason"], "subagent_limit_capped");
    for id in ["a1", "a2", "a3", "b1"] {
        assert_eq!(
            cluster.task_message(&run.run_id(), id)["content"],
            "Task Succeeded. Result: done"
        );
    }
    assert_eq!(run.task_events("a4"), Vec::<String>::new());
}
