//! Changing a running cluster's workers and cancelling runs, against the real binaries:
//! `antler workers N` adds workers (healthy, with their slots in `antler status`) and
//! removes them only once their tasks have finished; `antler cancel RUN_ID` ends a run
//! `error` "the run was cancelled" while its subagent task sleeps, and the worker's slot
//! is free again; the gateway's cancel route answers 404 and 409; a task waiting for a
//! slot is placed on a worker added meanwhile.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    os::unix::fs::PermissionsExt,
    path::PathBuf,
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

use crate::lead_support::{http_full, sql};
use antler_protocol::{calls::WorkerCalls, Role};
use antler_tests::{antler, bin, signal, wait_for};
use serde_json::Value;

/// A cluster with `workers` workers and `config` as its config.yaml; every process goes
/// with it.
struct Ops {
    dir: tempfile::TempDir,
    lead: Child,
}

impl Ops {
    fn up(workers: u32, config: &str, gateway: bool) -> Ops {
        let dir = tempfile::Builder::new()
            .prefix("antler-wk")
            .tempdir_in("/tmp")
            .expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        std::fs::write(dir.path().join("config.yaml"), config).expect("config");
        let lead = Command::new(bin("antler"))
            .arg("--runtime-dir")
            .arg(dir.path().join("run"))
            .args(["up", "--workers", &workers.to_string(), "--config"])
            .arg(dir.path().join("config.yaml"))
            .env("ANTLER_SANDBOX_BASE_DIR", dir.path().join("base"))
            .env(
                "ANTLER_GATEWAY_ADDR",
                if gateway { "127.0.0.1:0" } else { "off" },
            )
            .env("RUST_LOG", "warn")
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start antler up");
        let ops = Ops { dir, lead };
        let healthy = wait_for(Duration::from_secs(60), || {
            let list = ops.status()?;
            let workers_ready = ops.workers_with_slots(&list) == workers as usize;
            (list.len() == 3 + workers as usize
                && list.iter().all(|p| p["healthy"] == true)
                && workers_ready)
                .then_some(())
        });
        assert!(
            healthy.is_some(),
            "the cluster did not come up: {:?}",
            ops.status()
        );
        ops
    }

    fn runtime(&self) -> PathBuf {
        self.dir.path().join("run")
    }

    fn antler(&self, args: &[&str]) -> Output {
        antler(&self.runtime(), args)
    }

    fn status(&self) -> Option<Vec<Value>> {
        let out = self.antler(&["status", "--json"]);
        serde_json::from_slice::<Value>(&out.stdout)
            .ok()?
            .as_array()
            .cloned()
    }

    /// The subagent rows of `list`.
    fn workers(list: &[Value]) -> Vec<Value> {
        list.iter()
            .filter(|p| p["role"] == "subagent")
            .cloned()
            .collect()
    }

    /// Healthy workers whose slots the dispatcher knows.
    fn workers_with_slots(&self, list: &[Value]) -> usize {
        Self::workers(list)
            .iter()
            .filter(|p| p["healthy"] == true && p["slots"].as_u64().is_some_and(|s| s > 0))
            .count()
    }

    /// Worker `index`'s slots in use, as `antler status --json` shows them.
    fn in_use(&self, index: u64) -> Option<u64> {
        let list = self.status()?;
        Self::workers(&list)
            .into_iter()
            .find(|p| p["index"].as_u64() == Some(index))?["in_use"]
            .as_u64()
    }

    fn write(&self, name: &str, text: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    fn submit(&self, playbook: &str, extra: &[&str]) -> String {
        let mut args = vec![
            "run",
            "Delegate the work",
            "--detach",
            "--json",
            "--playbook",
            playbook,
        ];
        args.extend_from_slice(extra);
        let out = self.antler(&args);
        let submitted: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
        });
        submitted["run_id"].as_str().unwrap().to_owned()
    }

    /// The run's (status, detail) in the checkpoint store.
    fn run_row(&self, run_id: &str) -> (String, String) {
        let rows = sql(
            &self.runtime().join("runs.sqlite"),
            "select status, detail from runs where run_id = ?",
            run_id,
        );
        let rows: Value = serde_json::from_str(&rows).unwrap_or(Value::Null);
        (
            rows[0][0].as_str().unwrap_or_default().to_owned(),
            rows[0][1].as_str().unwrap_or_default().to_owned(),
        )
    }

    /// The contents of the run's `task` tool messages in its last checkpoint.
    fn task_messages(&self, run_id: &str) -> Vec<String> {
        let rows = sql(
            &self.runtime().join("runs.sqlite"),
            "select state from checkpoints where run_id = ? order by step desc limit 1",
            run_id,
        );
        let rows: Value = serde_json::from_str(&rows).unwrap();
        let state: Value = serde_json::from_str(rows[0][0].as_str().unwrap()).unwrap();
        let text = state.to_string();
        // Messages are tagged enums; find every tool message of `task` wherever it sits.
        let mut found = Vec::new();
        collect_task_contents(&state, &mut found);
        assert!(!found.is_empty(), "no task message in {text}");
        found
    }

    /// Worker `index`'s busy slots, asked of the worker itself (not the lead's count).
    fn worker_busy(&self, index: u32) -> Option<u32> {
        let capacity =
            antler_tests::host_call(&self.runtime(), Role::Subagent, index, async |c| {
                c.capacity(Duration::from_secs(10)).await
            })?;
        Some(capacity.busy)
    }

    /// Waits until the run stopped; asserts it succeeded with `tasks` tasks, each
    /// `Task Succeeded`.
    fn assert_tasks_succeeded(&self, run_id: &str, tasks: usize) {
        let ended = wait_for(Duration::from_secs(60), || {
            let (status, _) = self.run_row(run_id);
            (status != "running").then_some(status)
        });
        assert_eq!(
            ended.as_deref(),
            Some("success"),
            "{:?}",
            self.run_row(run_id)
        );
        let messages = self.task_messages(run_id);
        assert_eq!(messages.len(), tasks, "{messages:?}");
        for m in &messages {
            assert!(m.starts_with("Task Succeeded"), "{messages:?}");
        }
    }
}

impl Drop for Ops {
    fn drop(&mut self) {
        signal(self.lead.id(), libc::SIGTERM);
        let gone = wait_for(Duration::from_secs(20), || {
            matches!(self.lead.try_wait(), Ok(Some(_))).then_some(())
        });
        if gone.is_none() {
            let _ = self.lead.kill();
            let _ = self.lead.wait();
        }
    }
}

fn collect_task_contents(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if map.get("name").and_then(Value::as_str) == Some("task")
                && map.contains_key("tool_call_id")
            {
                if let Some(content) = map.get("content").and_then(Value::as_str) {
                    out.push(content.to_owned());
                }
            }
            for v in map.values() {
                collect_task_contents(v, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_task_contents(v, out)),
        _ => {}
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A lead whose first turn delegates `tasks` tasks (descriptions `job-0`, ...), each
/// sleeping `delay_ms` in its one model turn before it answers.
fn delegating_playbook(tasks: usize, delay_ms: u64) -> String {
    let mut calls = String::new();
    let mut subagents = String::new();
    for i in 0..tasks {
        calls.push_str(&format!(
            "      - id: call-{i}\n        name: task\n        args: {{description: job-{i}, prompt: Do job {i}., subagent_type: general-purpose}}\n"
        ));
        subagents.push_str(&format!(
            "  job-{i}:\n    turns:\n      - delay_ms: {delay_ms}\n        content: job {i} done\n"
        ));
    }
    format!(
        "turns:\n  - tool_calls:\n{calls}  - content: All jobs are done.\nsubagents:\n{subagents}"
    )
}

#[test]
fn workers_scale_up_and_down_on_a_running_cluster() {
    let ops = Ops::up(1, "antler:\n  worker_slots: 2\n", false);
    let started = Instant::now();
    let out = ops.antler(&["workers", "3"]);
    assert!(out.status.success(), "workers 3: {}", stderr(&out));
    let table = stdout(&out);
    for row in ["subagent-0", "subagent-1", "subagent-2"] {
        assert!(table.contains(row), "workers 3 printed {table}");
    }
    let list = ops.status().expect("status");
    let workers = Ops::workers(&list);
    assert_eq!(workers.len(), 3, "{list:?}");
    for w in &workers {
        assert_eq!(w["healthy"], true, "{w}");
        assert_eq!(w["slots"], 2, "{w}");
        assert_eq!(w["in_use"], 0, "{w}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "adding took {:?}",
        started.elapsed()
    );
    let human = stdout(&ops.antler(&["status"]));
    assert!(
        human.contains("SLOTS") && human.contains("0/2"),
        "status table: {human}"
    );
    let pids: Vec<u64> = workers.iter().filter_map(|w| w["pid"].as_u64()).collect();

    let out = ops.antler(&["workers", "1"]);
    assert!(out.status.success(), "workers 1: {}", stderr(&out));
    let list = ops.status().expect("status");
    let workers = Ops::workers(&list);
    assert_eq!(workers.len(), 1, "{list:?}");
    assert_eq!(workers[0]["index"], 0);
    assert_eq!(workers[0]["healthy"], true);
    // The removed workers' processes are gone, not restarted.
    for pid in &pids[1..] {
        let gone = wait_for(Duration::from_secs(10), || {
            (!antler_tests::alive(*pid as u32)).then_some(())
        });
        assert!(gone.is_some(), "worker pid {pid} still runs");
    }
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(Ops::workers(&ops.status().unwrap()).len(), 1);

    // Out of range.
    let out = ops.antler(&["workers", "0"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("from 1 to 64"), "{}", stderr(&out));
}

#[test]
fn a_removed_worker_finishes_its_task_before_it_stops() {
    // A stop's grace (SIGTERM to SIGKILL) far shorter than the task: only the lead's
    // drain keeps the task alive.
    let ops = Ops::up(2, "antler:\n  worker_slots: 1\n  drain_grace_s: 1\n", false);
    let playbook = ops.write("p.yaml", &delegating_playbook(2, 8000));
    let run_id = ops.submit(&playbook, &["--subagents"]);
    // One task on each worker (one slot each): worker 1 is busy.
    let busy = wait_for(Duration::from_secs(30), || {
        (ops.in_use(0) == Some(1) && ops.in_use(1) == Some(1)).then_some(())
    });
    assert!(busy.is_some(), "tasks not placed: {:?}", ops.status());
    let asked = Instant::now();
    let out = ops.antler(&["workers", "1"]);
    assert!(out.status.success(), "workers 1: {}", stderr(&out));
    // It returned once worker 1's task had ended, not before.
    assert!(
        asked.elapsed() >= Duration::from_secs(3),
        "workers 1 returned after {:?}, before the task ended",
        asked.elapsed()
    );
    ops.assert_tasks_succeeded(&run_id, 2);
    let workers = Ops::workers(&ops.status().unwrap());
    assert_eq!(workers.len(), 1, "{workers:?}");
}

#[test]
fn cancel_ends_a_run_and_frees_its_workers_slot() {
    let ops = Ops::up(1, "antler:\n  worker_slots: 2\n", true);
    let playbook = ops.write("sleep.yaml", &delegating_playbook(1, 20_000));
    let run_id = ops.submit(&playbook, &["--subagents"]);
    let placed = wait_for(Duration::from_secs(30), || {
        (ops.in_use(0) == Some(1) && ops.worker_busy(0) == Some(1)).then_some(())
    });
    assert!(placed.is_some(), "task not placed: {:?}", ops.status());

    let asked = Instant::now();
    let out = ops.antler(&["cancel", &run_id]);
    assert!(out.status.success(), "cancel: {}", stderr(&out));
    assert!(stdout(&out).contains("cancelled"), "{}", stdout(&out));
    let ended = wait_for(Duration::from_secs(10), || {
        let row = ops.run_row(&run_id);
        (row.0 != "running").then_some(row)
    });
    assert_eq!(
        ended,
        Some(("error".to_owned(), "the run was cancelled".to_owned()))
    );
    assert!(
        asked.elapsed() < Duration::from_secs(12),
        "the cancel took {:?}",
        asked.elapsed()
    );
    // The task is cancelled on the worker, and the slot is free in the lead and there.
    let free = wait_for(Duration::from_secs(10), || {
        (ops.in_use(0) == Some(0) && ops.worker_busy(0) == Some(0)).then_some(())
    });
    assert!(
        free.is_some(),
        "slot still busy: lead {:?}, worker {:?}",
        ops.in_use(0),
        ops.worker_busy(0)
    );
    assert!(
        asked.elapsed() < Duration::from_secs(18),
        "freed only after {:?}: the task was not cancelled",
        asked.elapsed()
    );
    // A second cancel: the run has ended.
    let out = ops.antler(&["cancel", &run_id, "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let reply: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(reply["cancelled"], false);
    assert_eq!(reply["status"], "error");

    // The gateway: 404 for an unknown run, 409 for an ended one, the bearer token needed.
    let addr = wait_for(Duration::from_secs(10), || {
        std::fs::read_to_string(ops.runtime().join("gateway.addr")).ok()
    })
    .expect("gateway.addr");
    let port = addr.trim().rsplit_once(':').unwrap().1.to_owned();
    let addr = format!("127.0.0.1:{port}");
    let token = wait_for(Duration::from_secs(10), || {
        std::fs::read_to_string(ops.runtime().join("gateway.token")).ok()
    })
    .expect("gateway.token");
    let token = token.trim();
    let (code, _, body) = http_full(&addr, token, "POST", "/api/runs/run-nope/cancel", None);
    assert_eq!(code, 404, "{body}");
    let (code, _, body) = http_full(
        &addr,
        token,
        "POST",
        &format!("/api/runs/{run_id}/cancel"),
        None,
    );
    assert_eq!(code, 409, "{body}");
    let (code, _, _) = http_full(
        &addr,
        "wrong-token",
        "POST",
        &format!("/api/runs/{run_id}/cancel"),
        None,
    );
    assert_eq!(code, 401);
    let (code, _, body) = http_full(&addr, token, "GET", &format!("/api/runs/{run_id}"), None);
    assert_eq!(code, 200, "{body}");
    let view: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(view["status"], "error", "{view}");
    assert_eq!(view["error"], "the run was cancelled", "{view}");
    // A cancelled run is never driven again.
    let out = ops.antler(&["run", "--resume", &run_id]);
    assert!(!out.status.success(), "a cancelled run was resumed");
    assert!(stderr(&out).contains("not running"), "{}", stderr(&out));

    // A run waiting for an answer is cancelled at once, through the gateway.
    let asking = ops.write(
        "ask.yaml",
        "turns:\n  - tool_calls:\n      - name: ask_clarification\n        args: {question: \"Which year?\", clarification_type: missing_info}\n  - content: Never reached.\n",
    );
    let waiting = ops.submit(&asking, &[]);
    let interrupted = wait_for(Duration::from_secs(30), || {
        (ops.run_row(&waiting).0 == "interrupted").then_some(())
    });
    assert!(interrupted.is_some(), "{:?}", ops.run_row(&waiting));
    let (code, _, body) = http_full(
        &addr,
        token,
        "POST",
        &format!("/api/runs/{waiting}/cancel"),
        None,
    );
    assert_eq!(code, 202, "{body}");
    assert_eq!(
        ops.run_row(&waiting),
        ("error".to_owned(), "the run was cancelled".to_owned())
    );
    let out = ops.antler(&["run", "--resume", &waiting, "--answer", "2025"]);
    assert!(!out.status.success(), "a cancelled run took an answer");
}

#[test]
fn a_task_waiting_for_a_slot_is_placed_on_a_worker_added_under_load() {
    // One worker with one slot: the second task waits (up to 60 s) while the first runs.
    let ops = Ops::up(
        1,
        "antler:\n  worker_slots: 1\nsubagents:\n  slot_wait_s: 60\n",
        false,
    );
    let playbook = ops.write("p.yaml", &delegating_playbook(2, 10_000));
    let run_id = ops.submit(&playbook, &["--subagents"]);
    let placed = wait_for(Duration::from_secs(30), || {
        (ops.in_use(0) == Some(1)).then_some(())
    });
    assert!(
        placed.is_some(),
        "first task not placed: {:?}",
        ops.status()
    );
    let out = ops.antler(&["workers", "2"]);
    assert!(out.status.success(), "workers 2: {}", stderr(&out));
    // The waiting task goes to the new worker while the first still runs on worker 0.
    let both = wait_for(Duration::from_secs(8), || {
        (ops.in_use(0) == Some(1) && ops.in_use(1) == Some(1)).then_some(())
    });
    assert!(
        both.is_some(),
        "the waiting task was not placed on the added worker: {:?}",
        ops.status()
    );
    ops.assert_tasks_succeeded(&run_id, 2);
}
