//! A subagent's ask goes to the parent run's user (issue 37), through a running cluster
//! with a subagent worker: the subagent's push is held on the worker while the parent's
//! event stream and view carry an `approval_requested` marked with the subagent; approved
//! through the gateway, the held call runs (its file on the thread's disk, its result in the
//! task's events); approved for the thread, the parent's own next push on that thread is
//! not asked; denied through `antler run --resume PARENT --deny CALL --reason TEXT`, the
//! subagent's model reads the reason and the command never ran; unanswered by the
//! deadline, it is a denial; asked on a terminal by `antler run`; answered on the
//! inspector page (its card names the subagent); cancelling the parent
//! ends the wait; another user neither sees nor answers it; a lead killed while the call is
//! held reads it back when it restarts and takes the answer to the worker (the worker's
//! report of it again, as the lead re-attaches, asks nobody twice); a lead killed before it
//! stored the ask learns of the held call again from the worker when it re-attaches, and
//! asks it again (the window reproduced by a fault injection: the first lead does not
//! store that ask).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use antler_tests::{bin, wait_for};
use serde_json::Value;

use super::run_approvals::{
    config, events, last_lead_events, latest_run, peer, run_json, wait_status, with_subagents,
    workspace,
};
use crate::lead_support::{http_full, sql, LeadCluster};
use crate::suite::inspector_page::Browser;

/// Another user of the gateway.
const BOB: &str = "bob-token-00000000000002";

/// The parent delegates; its subagent pushes (asked) and then writes a note (allowed).
const DELEGATE: &str = r#"
turns:
  - tool_calls:
      - {id: job, name: task, args: {description: ship, prompt: Push the work., subagent_type: general-purpose}}
  - content: The subagent is done.
subagents:
  ship:
    turns:
      - tool_calls:
          - {name: bash, id: sub-push, args: {description: push, command: "echo hi > /mnt/user-data/workspace/sub-pushed.txt && git push origin main; true"}}
      - tool_calls:
          - {name: bash, id: sub-ok, args: {description: note, command: "echo ok > /mnt/user-data/workspace/sub-ok.txt"}}
      - content: Pushed and noted.
"#;

/// The parent's own push (the thread's next run).
const PUSH: &str = r#"
turns:
  - tool_calls:
      - {name: bash, id: push-1, args: {description: push, command: "echo hi > /mnt/user-data/workspace/pushed.txt && git push origin main; true"}}
  - content: Done pushing.
"#;

/// The parent's name of the subagent's held push.
const HELD: &str = "job.sub-push";

/// The lead's fault injection: it lists the named held call but does not store it.
const UNSTORED_ASK: &str = "ANTLER_FAULT_UNSTORED_SUBAGENT_ASK";

fn with_bob(config: &str) -> String {
    format!("{config}antler:\n  gateway:\n    tokens:\n      - {{token: {BOB}, user: bob, role: member}}\n")
}

/// Submits the delegating run on `thread`; its id, once its view lists the held call.
fn held(c: &LeadCluster, playbook: &str, thread: &str) -> (String, Value) {
    let run_id = c.submit("Delegate", playbook, &["--thread", thread, "--subagents"]);
    let asked = listed(c, &run_id);
    (run_id, asked)
}

/// The held call as the run's view lists it, once it does.
fn listed(c: &LeadCluster, run_id: &str) -> Value {
    let (addr, token) = (c.gateway(), c.gateway_token());
    let path = format!("/api/runs/{run_id}");
    let asked = wait_for(Duration::from_secs(90), || {
        let (status, _, body) = http_full(&addr, &token, "GET", &path, None);
        let view: Value = serde_json::from_str(&body).ok()?;
        let approvals = view["approvals"].as_array()?;
        let held = approvals.iter().find(|a| a["tool_call_id"] == HELD)?;
        (status == 200).then(|| held.clone())
    });
    asked.unwrap_or_else(|| {
        panic!(
            "the subagent's push was never asked of the parent's user: run {} {:?}",
            c.run_status(run_id),
            http_full(&addr, &token, "GET", &path, None)
        )
    })
}

/// The subagent's `task_tool` event of its call `call` in the parent's events.
fn subagent_tool(c: &LeadCluster, run_id: &str, call: &str) -> Value {
    events(c, run_id, "task")
        .into_iter()
        .find(|e| e["type"] == "task_tool" && e["call_id"] == call)
        .unwrap_or_else(|| panic!("no task_tool of {call}: {:?}", events(c, run_id, "task")))
}

/// The kept decision of the parent's call `call`: (choice, decided_by, reason).
fn kept_decision(c: &LeadCluster, run_id: &str, call: &str) -> Value {
    let rows = sql(
        &c.runtime().join("runs.sqlite"),
        "select tool_call_id, choice, decided_by, reason, rule from approval_decisions where run_id = ?",
        run_id,
    );
    let rows: Value = serde_json::from_str(&rows).unwrap();
    rows.as_array()
        .unwrap()
        .iter()
        .find(|row| row[0] == call)
        .cloned()
        .unwrap_or_else(|| panic!("no decision kept for {call}: {rows}"))
}

/// The held calls the runs store still lists for `run_id`.
fn still_held(c: &LeadCluster, run_id: &str) -> usize {
    let rows = sql(
        &c.runtime().join("runs.sqlite"),
        "select tool_call_id from subagent_asks where run_id = ?",
        run_id,
    );
    serde_json::from_str::<Value>(&rows)
        .unwrap()
        .as_array()
        .map_or(0, Vec::len)
}

#[test]
fn a_subagents_ask_reaches_the_parents_user() {
    let c = with_subagents(&with_bob(&config(3600)));
    let (addr, token) = (c.gateway(), c.gateway_token());
    let delegate = c.write("delegate.yaml", DELEGATE);

    // Asked of the parent's user: the parent's view lists it, marked with its subagent;
    // the command waits on the worker.
    let (run_id, asked) = held(&c, &delegate, "t-approve");
    assert_eq!(asked["tool"], "bash", "{asked}");
    assert_eq!(asked["rule"], "push");
    assert_eq!(asked["justification"], "Pushing publishes commits");
    assert_eq!(asked["subagent"]["task_call_id"], "job");
    assert_eq!(asked["subagent"]["call_id"], "sub-push");
    assert_eq!(asked["subagent"]["subagent_type"], "general-purpose");
    assert!(asked["args"]["command"]
        .as_str()
        .unwrap()
        .contains("git push origin main"));
    assert_eq!(c.run_status(&run_id), "running");
    let stored = wait_for(Duration::from_secs(10), || {
        (still_held(&c, &run_id) == 1).then_some(())
    });
    assert!(stored.is_some(), "the held call is not in the runs store");
    let ws = workspace(&c, "default", "t-approve");
    assert!(!ws.join("sub-pushed.txt").exists(), "a held call ran");

    // Another user neither sees the run nor answers its subagent's call.
    let answer = format!("/api/runs/{run_id}/approvals/{HELD}");
    let (status, _, body) = http_full(&addr, BOB, "GET", &format!("/api/runs/{run_id}"), None);
    assert_eq!(status, 404, "{body}");
    let (status, _, body) = http_full(
        &addr,
        BOB,
        "POST",
        &answer,
        Some(r#"{"decision":"approve"}"#),
    );
    assert_eq!(status, 404, "{body}");
    assert!(
        !ws.join("sub-pushed.txt").exists(),
        "another user's answer ran the call"
    );

    // Approved through the parent's route: the held call runs, the task goes on.
    let (status, _, body) = http_full(
        &addr,
        &token,
        "POST",
        &answer,
        Some(r#"{"decision":"approve"}"#),
    );
    assert_eq!(status, 200, "{body}");
    wait_status(&c, &run_id, "success");
    assert_eq!(
        std::fs::read_to_string(ws.join("sub-pushed.txt")).unwrap(),
        "hi\n"
    );
    assert!(ws.join("sub-ok.txt").exists());
    let pushed = subagent_tool(&c, &run_id, "sub-push");
    assert_eq!(pushed["error"], false, "{pushed}");
    let requested = events(&c, &run_id, "approval_requested");
    assert_eq!(requested.len(), 1, "{requested:?}");
    assert_eq!(requested[0]["tool_call_id"], HELD);
    assert_eq!(requested[0]["subagent"]["task_call_id"], "job");
    let decided = events(&c, &run_id, "approval_decided");
    assert_eq!(decided.len(), 1, "{decided:?}");
    assert_eq!(decided[0]["decision"], "approve");
    assert_eq!(decided[0]["by"], "default");
    assert_eq!(decided[0]["rule"], "push");
    assert_eq!(decided[0]["subagent"]["call_id"], "sub-push");
    let kept = kept_decision(&c, &run_id, HELD);
    assert_eq!(kept[1], "approve", "{kept}");
    assert_eq!(kept[2], "default");
    assert_eq!(still_held(&c, &run_id), 0);
    // Answered once: it no longer waits.
    let (status, _, body) = http_full(
        &addr,
        &token,
        "POST",
        &answer,
        Some(r#"{"decision":"deny"}"#),
    );
    assert_eq!(status, 404, "{body}");

    // Approved for the thread: remembered for the parent's thread, whose next run
    // pushes without being asked.
    let (run_id, _) = held(&c, &delegate, "t-thread");
    let answer = format!("/api/runs/{run_id}/approvals/{HELD}");
    let (status, _, body) = http_full(
        &addr,
        &token,
        "POST",
        &answer,
        Some(r#"{"decision":"approve_for_thread"}"#),
    );
    assert_eq!(status, 200, "{body}");
    wait_status(&c, &run_id, "success");
    let push = c.write("push.yaml", PUSH);
    let again = run_json(&c, &["Again", "--playbook", &push, "--thread", "t-thread"]);
    assert_eq!(again["status"], "success", "{again}");
    let again_id = again["run_id"].as_str().unwrap();
    assert!(events(&c, again_id, "approval_requested").is_empty());
    assert_eq!(
        events(&c, again_id, "approval_decided")[0]["decision"],
        "thread_rule"
    );
    assert!(workspace(&c, "default", "t-thread")
        .join("pushed.txt")
        .exists());

    // Denied through `antler run --resume PARENT --deny CALL`: the subagent's model reads
    // the reason as its tool message, the command never ran, the task went on.
    let (run_id, _) = held(&c, &delegate, "t-deny");
    let done = run_json(
        &c,
        &[
            "--resume",
            &run_id,
            "--deny",
            HELD,
            "--reason",
            "not on a Friday",
        ],
    );
    assert_eq!(done["status"], "success", "{done}");
    let ws = workspace(&c, "default", "t-deny");
    assert!(!ws.join("sub-pushed.txt").exists(), "a denied call ran");
    assert!(ws.join("sub-ok.txt").exists(), "the task did not go on");
    let denied = subagent_tool(&c, &run_id, "sub-push");
    assert_eq!(denied["error"], true, "{denied}");
    assert_eq!(denied["message"], "denied by default: not on a Friday");
    let decided = events(&c, &run_id, "approval_decided");
    assert_eq!(decided[0]["decision"], "deny", "{decided:?}");
    assert_eq!(decided[0]["reason"], "not on a Friday");
    let kept = kept_decision(&c, &run_id, HELD);
    assert_eq!(kept[1], "deny", "{kept}");
    assert_eq!(kept[3], "not on a Friday");

    // On a terminal, `antler run` asks as the subagent's call waits, and the answer
    // reaches the subagent.
    let out = std::process::Command::new("python3")
        .arg(peer("pty_answers.py"))
        .arg(r#"[["[n]o:", "n"], ["reason (optional):", "too risky"]]"#)
        .arg(bin("antler"))
        .arg("--runtime-dir")
        .arg(c.runtime())
        .args([
            "run",
            "Delegate",
            "--thread",
            "t-pty",
            "--subagents",
            "--playbook",
            &delegate,
        ])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{printed}");
    assert!(printed.contains("git push origin main"), "{printed}");
    assert!(printed.contains("The subagent is done."), "{printed}");
    let pty_run = latest_run(&c, "t-pty");
    assert_eq!(
        subagent_tool(&c, &pty_run, "sub-push")["message"],
        "denied by default: too risky"
    );
    assert!(!workspace(&c, "default", "t-pty")
        .join("sub-pushed.txt")
        .exists());

    // Approved from the inspector page (headless Chromium) while the parent runs: the held
    // call's card names its subagent, its button answers it.
    let (page_run, _) = held(&c, &delegate, "t-page");
    let mut b = Browser::start();
    let base = format!("http://{addr}/");
    b.goto(&format!("{base}#token={token}"));
    b.goto(&format!("{base}#/runs/{page_run}"));
    let card = format!("[data-approval=\"{HELD}\"]");
    b.wait(&format!(
        "!!document.querySelector('{card} [data-decision=\"approve\"]')"
    ));
    assert_eq!(
        b.eval(&format!(
            "document.querySelector('{card}').textContent.includes('general-purpose subagent') && document.querySelector('{card} code').textContent.includes('git push origin main')"
        )),
        true
    );
    b.eval(&format!(
        "document.querySelector('{card} [data-decision=\"approve\"]').click()"
    ));
    wait_status(&c, &page_run, "success");
    assert_eq!(
        b.send(serde_json::json!({"op": "errors"})),
        serde_json::json!([])
    );
    drop(b);
    assert!(workspace(&c, "default", "t-page")
        .join("sub-pushed.txt")
        .exists());
    assert_eq!(kept_decision(&c, &page_run, HELD)[1], "approve");

    // Cancelling the parent ends the wait: the call never runs and waits no more.
    let (run_id, _) = held(&c, &delegate, "t-cancel");
    let (status, _, body) = http_full(
        &addr,
        &token,
        "POST",
        &format!("/api/runs/{run_id}/cancel"),
        None,
    );
    assert_eq!(status, 202, "{body}");
    wait_status(&c, &run_id, "error");
    let cleared = wait_for(Duration::from_secs(30), || {
        (still_held(&c, &run_id) == 0).then_some(())
    });
    assert!(
        cleared.is_some(),
        "a cancelled run's held call is still listed"
    );
    let answer = format!("/api/runs/{run_id}/approvals/{HELD}");
    let (status, _, body) = http_full(
        &addr,
        &token,
        "POST",
        &answer,
        Some(r#"{"decision":"approve"}"#),
    );
    assert_eq!(status, 404, "{body}");
    assert!(!workspace(&c, "default", "t-cancel")
        .join("sub-pushed.txt")
        .exists());
}

#[test]
fn a_subagents_ask_nobody_answers_by_its_deadline_is_a_denial() {
    let c = with_subagents(&config(1));
    let delegate = c.write("delegate.yaml", DELEGATE);
    let run_id = c.submit(
        "Delegate",
        &delegate,
        &["--thread", "t-late", "--subagents"],
    );
    wait_status(&c, &run_id, "success");
    let ws = workspace(&c, "default", "t-late");
    assert!(!ws.join("sub-pushed.txt").exists(), "an expired call ran");
    assert!(ws.join("sub-ok.txt").exists(), "the task did not go on");
    let denied = subagent_tool(&c, &run_id, "sub-push");
    assert_eq!(
        denied["message"],
        "denied by policy: nobody approved this call within 1 s (rule push)"
    );
    assert_eq!(events(&c, &run_id, "approval_requested").len(), 1);
    let decided = events(&c, &run_id, "approval_decided");
    assert_eq!(decided[0]["decision"], "expired", "{decided:?}");
    assert_eq!(decided[0]["subagent"]["task_call_id"], "job");
    let kept = kept_decision(&c, &run_id, HELD);
    assert_eq!(kept[1], "expired", "{kept}");
    assert_eq!(still_held(&c, &run_id), 0);
}

#[test]
fn a_subagents_held_call_is_answered_after_the_lead_restarts() {
    let mut c = with_subagents(&config(3600));
    let delegate = c.write("delegate.yaml", DELEGATE);
    let (run_id, _) = held(&c, &delegate, "t-restart");
    let stored = wait_for(Duration::from_secs(10), || {
        (still_held(&c, &run_id) == 1).then_some(())
    });
    assert!(stored.is_some(), "the held call is not in the runs store");

    // The lead dies while the subagent's call is held on the worker; the restarted lead
    // reads the held call back and takes the parent's user's answer to the worker.
    c.kill_lead();
    c.start();
    // The parent's user answers what the restarted lead shows waiting.
    listed(&c, &run_id);
    let done = run_json(&c, &["--resume", &run_id, "--approve", HELD]);
    assert_eq!(done["status"], "success", "{done}");
    wait_status(&c, &run_id, "success");
    let ws = workspace(&c, "default", "t-restart");
    let pushed = (
        events(&c, &run_id, "task"),
        events(&c, &run_id, "approval_requested"),
        events(&c, &run_id, "approval_decided"),
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("sub-pushed.txt")).ok(),
        Some("hi\n".to_owned()),
        "{pushed:#?}\n{:#}",
        c.run_state(&run_id)["messages"]
    );
    // The worker tells the re-attached lead of the held call again; the call was known
    // (read back from the store), so the resumed drive asks nobody again: the killed
    // lead's drive asked, the restarted one's did not.
    let again = last_lead_events(&c, &run_id, "approval_requested");
    assert!(again.is_empty(), "{again:#?}\n{pushed:#?}");
}

#[test]
fn a_subagents_ask_the_killed_lead_never_stored_is_asked_again_after_it_restarts() {
    // Fault injection: the first lead lists the held call but does not store it, as a lead
    // killed between receiving the ask and storing it leaves the runs store.
    let config = config(3600).replace("tool_search:", "subagents:\n  enabled: true\ntool_search:");
    let mut c = LeadCluster::up_with_workers(
        &config,
        &[],
        &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0"), (UNSTORED_ASK, HELD)],
        1,
    );
    let delegate = c.write("delegate.yaml", DELEGATE);
    // Asked (the view lists it), but not in the runs store.
    let (run_id, _) = held(&c, &delegate, "t-unstored");
    assert_eq!(
        still_held(&c, &run_id),
        0,
        "the fault did not keep the row out"
    );

    // The lead dies; the one started next (without the fault) knows nothing of the held
    // call until the resumed parent re-attaches to its task and the worker tells it again.
    c.kill_lead();
    c.unset_env(UNSTORED_ASK);
    c.start();
    let asked = listed(&c, &run_id);
    assert_eq!(asked["subagent"]["call_id"], "sub-push", "{asked}");
    assert_eq!(asked["rule"], "push");
    assert_eq!(asked["justification"], "Pushing publishes commits");
    assert!(asked["args"]["command"]
        .as_str()
        .unwrap()
        .contains("git push origin main"));
    let stored = wait_for(Duration::from_secs(10), || {
        (still_held(&c, &run_id) == 1).then_some(())
    });
    assert!(stored.is_some(), "the held call told again is not stored");
    let ws = workspace(&c, "default", "t-unstored");
    assert!(!ws.join("sub-pushed.txt").exists(), "a held call ran");

    let done = run_json(&c, &["--resume", &run_id, "--approve", HELD]);
    assert_eq!(done["status"], "success", "{done}");
    wait_status(&c, &run_id, "success");
    assert_eq!(
        std::fs::read_to_string(ws.join("sub-pushed.txt")).ok(),
        Some("hi\n".to_owned()),
        "{:#?}",
        events(&c, &run_id, "task")
    );
    assert!(ws.join("sub-ok.txt").exists(), "the task did not go on");
    // Asked again by the restarted lead (its drive's events, not the killed lead's);
    // decided once, by the parent's user.
    let requested = last_lead_events(&c, &run_id, "approval_requested");
    assert_eq!(requested.len(), 1, "{requested:#?}");
    assert_eq!(requested[0]["tool_call_id"], HELD);
    assert_eq!(requested[0]["subagent"]["call_id"], "sub-push");
    let decided = events(&c, &run_id, "approval_decided");
    assert_eq!(decided.len(), 1, "{decided:#?}");
    assert_eq!(decided[0]["decision"], "approve");
    assert_eq!(kept_decision(&c, &run_id, HELD)[1], "approve");
    assert_eq!(still_held(&c, &run_id), 0);
}
