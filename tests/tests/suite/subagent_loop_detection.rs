//! A subagent runs with the lead's `loop_detection:` (spec C.7), not the defaults: through
//! the whole cluster (`antler up --workers 1`, a real worker), a subagent that repeats one
//! tool call is stopped at the configured hard limit of 2 (the default is 5): its second
//! call is stripped and the task ends with DeerFlow's forced-stop text, capped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::subagent_support::SubagentCluster;

const CONFIG: &str = r#"
tool_search:
  enabled: true
sandbox:
  use: deerflow.community.aio_sandbox:AioSandboxProvider
loop_detection:
  warn_threshold: 1
  hard_limit: 2
antler:
  worker_slots: 1
"#;

const LOOPING: &str = r##"
turns:
  - tool_calls:
      - {id: t-loop, name: task, args: {description: search again, prompt: "Find the echo tool", subagent_type: general-purpose}}
  - content: The subagent stopped.
subagents:
  search again:
    turns:
      - content: Searching.
        tool_calls:
          - {name: tool_search, args: {query: "select:everything_echo"}}
      - content: Searching.
        tool_calls:
          - {name: tool_search, args: {query: "select:everything_echo"}}
      - content: Searching.
        tool_calls:
          - {name: tool_search, args: {query: "select:everything_echo"}}
      - content: never played
"##;

#[test]
fn a_subagents_loop_stops_at_the_leads_hard_limit() {
    let cluster = SubagentCluster::up(CONFIG, 1);
    let run = cluster.run(LOOPING, &[]);
    assert_eq!(
        run.view["status"], "success",
        "{:#}\n{}",
        run.view, run.stderr
    );
    let message = cluster.task_message(&run.run_id(), "t-loop");
    let text = "Searching.\n\n[FORCED STOP] Repeated tool calls exceeded the safety limit. Producing final answer with results collected so far.";
    assert_eq!(
        message["content"],
        format!("Task Succeeded (capped: repeated tool-call loop). Result: {text}"),
        "{message:#}"
    );
    assert_eq!(
        message["additional_kwargs"]["subagent_stop_reason"],
        "loop_capped"
    );
    // One search ran; the second, the hard limit's, was stripped.
    let searches = run
        .events
        .iter()
        .filter(|e| e["type"] == "task_tool" && e["name"] == "tool_search")
        .count();
    assert_eq!(searches, 1, "{:#?}", run.events);
}
