//! Subagent capacity and worker loss through the whole cluster (one worker with one
//! slot): a task that finds every slot busy says so and gets a capacity result at its
//! deadline (never an unbounded queue); a worker killed with SIGKILL mid-task ends its
//! task `failed` with an error naming the worker, well within the heartbeat window, the
//! run goes on, and the restarted worker takes the next task.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::subagent_support::{Follow, Run, SubagentCluster};
use antler_tests::{signal, wait_for};

const CONFIG: &str = r#"
tool_search:
  enabled: true
sandbox:
  use: deerflow.community.aio_sandbox:AioSandboxProvider
subagents:
  slot_wait_s: 1
antler:
  worker_slots: 1
"#;

const BUSY: &str = r#"
turns:
  - tool_calls:
      - {id: slow, name: task, args: {description: slow, prompt: p, subagent_type: general-purpose}}
      - {id: queued, name: task, args: {description: queued, prompt: p, subagent_type: general-purpose}}
  - content: Done with what I could.
subagents:
  slow:
    turns:
      - {delay_ms: 4000, content: slow done}
  queued:
    turns:
      - {delay_ms: 4000, content: queued done}
"#;

const KILLED: &str = r#"
turns:
  - tool_calls:
      - {id: doomed, name: task, args: {description: doomed, prompt: p, subagent_type: general-purpose}}
  - content: The worker was lost; I did it myself.
subagents:
  doomed:
    turns:
      - {delay_ms: 30000, content: too late}
"#;

const AFTER: &str = r#"
turns:
  - tool_calls:
      - {id: again, name: task, args: {description: again, prompt: p, subagent_type: general-purpose}}
  - content: ok
subagents:
  again:
    turns:
      - content: back at work
"#;

#[test]
fn capacity_and_a_lost_worker_end_tasks_with_results_the_model_can_act_on() {
    let cluster = SubagentCluster::up(CONFIG, 1);

    // One slot: the second task waits for it, says so, and is refused at its deadline.
    let run = cluster.run(BUSY, &[]);
    assert_eq!(
        run.view["status"], "success",
        "{:#}\n{}",
        run.view, run.stderr
    );
    // The two calls race for the slot (their order is not the model's): whichever got it
    // succeeded, the other waited, said so, and was refused at its deadline.
    let content = |id: &str| {
        cluster.task_message(&run.run_id(), id)["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (ran, queued) = if content("slow").starts_with("Task Succeeded") {
        ("slow", "queued")
    } else {
        ("queued", "slow")
    };
    assert_eq!(
        content(ran),
        format!("Task Succeeded. Result: {ran} done"),
        "{:#}",
        run.view
    );
    let text = content(queued);
    assert!(
        text.starts_with("Task failed. Error: No subagent worker had a free slot in time (1 of 1 slots busy on 1 worker(s))"),
        "{text}"
    );
    assert_eq!(run.task_events(queued), ["task_waiting", "task_failed"]);
    assert_eq!(run.task_event(queued, "task_waiting")["deadline_ms"], 1000);

    // SIGKILL of the worker while its task runs.
    let mut child = cluster
        .run_command(KILLED, &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut follow = Follow::stderr(&mut child);
    let started = follow.until(Duration::from_secs(60), |l| l.contains("\"task_started\""));
    assert!(
        started.is_some(),
        "the task never started: {:#?}",
        follow.seen
    );
    let pid = cluster.worker_pid(0).expect("the worker's pid");
    signal(pid, libc::SIGKILL);
    let killed = Instant::now();
    let mut failed_after = None;
    let stderr = follow.rest(|line| {
        if failed_after.is_none() && line.contains("\"task_failed\"") {
            failed_after = Some(killed.elapsed());
        }
    });
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
    assert!(child.wait().unwrap().success());
    let run = Run::parse(&stdout, &stderr);
    assert_eq!(run.view["status"], "success", "{:#}", run.view);
    let lost = cluster.task_message(&run.run_id(), "doomed");
    let text = lost["content"].as_str().unwrap();
    assert!(
        text.starts_with("Task failed. Error: the subagent worker subagent-0 was lost mid-task"),
        "{text}"
    );
    // The heartbeat window is 3 s (1 s x 3 misses); the socket closing tells sooner.
    let failed_after = failed_after.expect("a task_failed event");
    assert!(failed_after < Duration::from_secs(10), "{failed_after:?}");

    // The supervisor restarts the worker, and it takes the next task.
    let back = wait_for(Duration::from_secs(30), || {
        let worker = cluster
            .status()?
            .into_iter()
            .find(|p| p["role"] == "subagent")?;
        (worker["healthy"] == true && worker["restarts"].as_u64() >= Some(1)).then_some(())
    });
    assert!(back.is_some(), "{:?}", cluster.status());
    let run = cluster.run(AFTER, &[]);
    assert_eq!(
        cluster.task_message(&run.run_id(), "again")["content"],
        "Task Succeeded. Result: back at work"
    );
}

const LEAD_CONFIG: &str = r#"
tool_search:
  enabled: true
tools:
  - name: bash
    group: bash
    use: deerflow.sandbox.tools:bash_tool
sandbox:
  use: deerflow.community.aio_sandbox:AioSandboxProvider
"#;

const OUTLIVES: &str = r#"
turns:
  - tool_calls:
      - {id: long, name: task, args: {description: long, prompt: p, subagent_type: general-purpose}}
  - content: collected
subagents:
  long:
    turns:
      - tool_calls:
          - {name: bash, args: {description: mark, command: "echo ran >> /mnt/user-data/workspace/ran.txt"}}
      - {delay_ms: 6000, content: finished on the worker}
"#;

#[test]
fn a_task_outlives_a_killed_lead_and_the_resumed_run_collects_it_once() {
    let mut cluster = SubagentCluster::up(LEAD_CONFIG, 1);
    let playbook = cluster.write("outlives.yaml", OUTLIVES);
    let out = antler_tests::antler(
        &cluster.runtime(),
        &[
            "run",
            "Delegate",
            "--detach",
            "--json",
            "--subagents",
            "--playbook",
            playbook.to_str().unwrap(),
        ],
    );
    let submitted: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let run_id = submitted["run_id"].as_str().unwrap().to_owned();
    let marker = cluster
        .base()
        .join("users/default/threads")
        .join(&run_id)
        .join("user-data/workspace/ran.txt");
    assert!(
        wait_for(Duration::from_secs(60), || marker.exists().then_some(())).is_some(),
        "the task's first step never ran"
    );
    let worker = cluster.worker_pid(0).unwrap();

    // The lead dies mid-task; the worker does not.
    let mut lead = cluster.lead.take().unwrap();
    signal(lead.id(), libc::SIGKILL);
    let _ = lead.wait();
    std::thread::sleep(Duration::from_millis(500));
    assert!(antler_tests::alive(worker), "the worker died with the lead");

    // A new lead adopts the worker; the resumed run collects the task's result.
    cluster.start();
    assert_eq!(
        cluster.worker_pid(0),
        Some(worker),
        "the worker was not adopted"
    );
    let status = wait_for(Duration::from_secs(60), || {
        let state = cluster.state(&run_id);
        let done = state["messages"]
            .as_array()?
            .iter()
            .any(|m| m["role"] == "ai" && m["content"] == "collected");
        done.then_some(state)
    });
    assert!(
        status.is_some(),
        "the resumed run did not finish: {:#}",
        cluster.state(&run_id)
    );
    let task = cluster.task_message(&run_id, "long");
    assert_eq!(
        task["content"],
        "Task Succeeded. Result: finished on the worker"
    );
    // Collected, not run again: its first step ran once.
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "ran\n");
}
