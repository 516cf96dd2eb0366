//! Cluster mode across hosts: the lead, mcp-host, two sandbox-host replicas and the
//! subagent workers each in a network namespace of its own, joined over veth to a
//! bridge, talking TCP with mutual TLS (`antler cluster init` certificates). The lead
//! starts no process: `antler.cluster` names the hosts, and the workers are a name its
//! `/etc/hosts` resolves (standing in for the cluster DNS), resolved again every second.
//! - The bundled example runs and delivers; its report lands on the sandbox-host replica
//!   its thread hashes to, and a second run of the thread finds it there.
//! - Two subagent tasks run on two workers at once.
//! - A worker cut off the network mid-task ends that task failed; the next task goes to
//!   the other worker; a worker added to the name is found and used, and one removed
//!   from it is dropped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::mcp_support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::netns_support::{Node, Topology};
use crate::subagent_support::{Follow, Run};
use antler_protocol::placement;
use antler_tests::{antler, bin, wait_for};
use serde_json::{json, Value};

const WORKERS_NAME: &str = "workers.antler.test";
/// The operator's gateway token.
const GATEWAY_TOKEN: &str = "multihost-operator-token";

/// The layout: a lead, an mcp-host, two sandbox-host replicas and workers.
struct MultiHost {
    net: Topology,
    lead: Node,
    sandboxes: Vec<Node>,
    workers: Vec<Node>,
}

fn config(net: &Topology, sandboxes: &[Node], mcp: &Node) -> String {
    let certs = net.certs();
    let example = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/report/config.yaml"),
    )
    .unwrap();
    let sandbox_hosts: Vec<String> = sandboxes
        .iter()
        .map(|n| format!("tcp:{}:7103", n.ip))
        .collect();
    format!(
        "{example}
subagents:
  max_concurrent: 3
antler:
  heartbeat_interval_ms: 300
  worker_slots: 1
  tls:
    ca: {ca}
    cert: {cert}
    key: {key}
  cluster:
    sandbox_hosts: {sandbox_hosts:?}
    mcp_hosts: [\"tcp:{mcp}:7102\"]
    workers: [\"tcp:{WORKERS_NAME}:7104\"]
    resolve_interval_s: 1
",
        ca = certs.join("ca.crt").display(),
        cert = certs.join("lead.crt").display(),
        key = certs.join("lead.key").display(),
        mcp = mcp.ip,
    )
}

impl MultiHost {
    fn up(workers: usize) -> MultiHost {
        let mut net = Topology::new();
        let lead = net.node("lead");
        let mcp = net.node("mcp-host");
        let sandboxes = vec![net.node("sandbox-0"), net.node("sandbox-1")];
        let dir = net.dir.path().to_path_buf();
        std::fs::write(dir.join("config.yaml"), config(&net, &sandboxes, &mcp)).unwrap();
        let everything = mcp_support::npm_bin("mcp-server-everything");
        std::fs::write(
            dir.join("extensions_config.json"),
            serde_json::to_vec(&json!({"mcpServers": {"everything": {
                "type": "stdio", "command": everything.display().to_string(), "args": ["stdio"]}}}))
            .unwrap(),
        )
        .unwrap();
        let config = dir.join("config.yaml").display().to_string();
        let hb = ["--heartbeat-ms".to_string(), "300".to_string()];

        let mut args = net.host_args(&mcp, "mcp-host", 7102);
        args.extend(hb.clone());
        args.extend([
            "--extensions".into(),
            dir.join("extensions_config.json").display().to_string(),
            "--config".into(),
            config.clone(),
        ]);
        net.spawn(&mcp, &bin("antler-mcp-host"), &args, &[]);
        for (i, node) in sandboxes.iter().enumerate() {
            let mut args = net.host_args(node, "sandbox-host", 7103);
            args.extend(hb.clone());
            args.extend([
                "--index".into(),
                i.to_string(),
                "--config".into(),
                config.clone(),
                "--base-dir".into(),
                dir.join(format!("sandbox-{i}")).display().to_string(),
            ]);
            net.spawn(node, &bin("antler-sandbox-host"), &args, &[]);
        }
        let mut this = MultiHost {
            net,
            lead,
            sandboxes,
            workers: Vec::new(),
        };
        for _ in 0..workers {
            this.add_worker();
        }
        this.publish_workers();
        let token = std::fs::read_to_string(this.net.certs().join("token")).unwrap();
        let lead_args: Vec<String> = vec![
            "--runtime-dir".into(),
            this.runtime().display().to_string(),
            "up".into(),
            "--config".into(),
            config,
        ];
        let lead = this.lead.clone();
        this.net.spawn(
            &lead,
            &bin("antler"),
            &lead_args,
            &[
                ("ANTLER_CLUSTER_TOKEN", token.trim().to_owned()),
                // The gateway on the loopback of the lead's own namespace.
                ("ANTLER_GATEWAY_ADDR", "127.0.0.1:8001".into()),
                ("ANTLER_GATEWAY_TOKEN", GATEWAY_TOKEN.into()),
                (
                    "ANTLER_EXTENSIONS_CONFIG_PATH",
                    dir.join("extensions_config.json").display().to_string(),
                ),
            ],
        );
        let expected = 4 + workers;
        let healthy = wait_for(Duration::from_secs(60), || {
            let list = this.status()?;
            (list.len() == expected && list.iter().all(|p| p["healthy"] == true)).then_some(())
        });
        assert!(
            healthy.is_some(),
            "the cluster did not come up: {:#?}\nlead log:\n{}",
            this.status(),
            this.net.log("lead")
        );
        this
    }

    /// Starts one more worker in a namespace of its own (not yet in the name).
    fn add_worker(&mut self) -> Node {
        let node = self.net.node(&format!("worker-{}", self.workers.len()));
        let mut args = self.net.host_args(&node, "subagent", 7104);
        args.extend([
            "--heartbeat-ms".into(),
            "300".into(),
            "--capacity".into(),
            "1".into(),
        ]);
        self.net.spawn(&node, &bin("antler-subagent"), &args, &[]);
        self.workers.push(node.clone());
        node
    }

    /// Makes the workers' name resolve to `self.workers` in the lead's namespace.
    fn publish_workers(&self) {
        let lines: Vec<(String, &str)> = self
            .workers
            .iter()
            .map(|w| (w.ip.clone(), WORKERS_NAME))
            .collect();
        self.net.hosts_file(&self.lead, &lines);
    }

    fn runtime(&self) -> PathBuf {
        self.net.dir.path().join("run")
    }

    fn status(&self) -> Option<Vec<Value>> {
        let out = antler(&self.runtime(), &["status", "--json"]);
        serde_json::from_slice::<Value>(&out.stdout)
            .ok()?
            .as_array()
            .cloned()
    }

    /// `antler run` against the lead (through its control socket), with `--json --trace`.
    fn run_command(&self, playbook: &str, extra: &[&str]) -> Command {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = self.net.dir.path().join(format!("playbook-{n}.yaml"));
        std::fs::write(&path, playbook).unwrap();
        let mut cmd = Command::new(bin("antler"));
        cmd.arg("--runtime-dir")
            .arg(self.runtime())
            .args(["run", "Do the work", "--json", "--trace", "--playbook"])
            .arg(path)
            .args(extra)
            .env("RUST_LOG", "error");
        cmd
    }

    fn run(&self, playbook: &str, extra: &[&str]) -> Run {
        let out = self.run_command(playbook, extra).output().unwrap();
        Run::parse(
            &String::from_utf8_lossy(&out.stdout),
            &String::from_utf8_lossy(&out.stderr),
        )
    }

    /// The thread's outputs directory on sandbox-host replica `i`.
    fn outputs(&self, i: usize, thread: &str) -> PathBuf {
        self.net.dir.path().join(format!(
            "sandbox-{i}/users/default/threads/{thread}/user-data/outputs"
        ))
    }

    /// `GET path` on the gateway, from inside the lead's namespace.
    fn gateway_get(&self, path: &str) -> Value {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.lead.ns, "curl", "-sf", "-H"])
            .arg(format!("Authorization: Bearer {GATEWAY_TOKEN}"))
            .arg(format!("http://127.0.0.1:8001{path}"))
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{path}: {e}: {}", String::from_utf8_lossy(&out.stderr)))
    }

    /// The replica a thread of the default user is pinned to.
    fn replica_of(&self, thread: &str) -> usize {
        let names: Vec<String> = self
            .sandboxes
            .iter()
            .map(|n| format!("tcp:{}:7103", n.ip))
            .collect();
        placement::rendezvous(
            &placement::sandbox_id("default", thread),
            names.iter().map(String::as_str),
        )
        .unwrap()
    }

    /// The content of the tool message answering call `id` in the run's last state.
    fn tool_message(&self, run_id: &str, id: &str) -> String {
        let out = Command::new("python3")
            .arg("-c")
            .arg("import sqlite3,sys;c=sqlite3.connect(sys.argv[1]);print(c.execute('select state from checkpoints where run_id=? order by step desc limit 1',(sys.argv[2],)).fetchone()[0])")
            .arg(self.runtime().join("runs.sqlite"))
            .arg(run_id)
            .output()
            .unwrap();
        let state: Value = serde_json::from_slice(&out.stdout).unwrap();
        state["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == "tool" && m["tool_call_id"] == id)
            .and_then(|m| m["content"].as_str())
            .unwrap_or_else(|| panic!("no tool message for {id}: {state:#}"))
            .to_owned()
    }
}

/// The workers the tasks of calls `ids` started on.
fn workers_of(run: &Run, ids: &[&str]) -> std::collections::BTreeSet<String> {
    ids.iter()
        .map(|id| {
            run.task_event(id, "task_started")["worker"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

const TWO_TASKS: &str = r##"
turns:
  - tool_calls:
      - {id: t-a, name: task, args: {description: write a, prompt: "Write a", subagent_type: general-purpose}}
      - {id: t-b, name: task, args: {description: write b, prompt: "Write b", subagent_type: general-purpose}}
  - tool_calls:
      - {id: present, name: present_files, args: {filepaths: [/mnt/user-data/outputs/a.md, /mnt/user-data/outputs/b.md]}}
  - content: Both notes are ready.
subagents:
  write a:
    turns:
      - delay_ms: 1500
        tool_calls:
          - {name: write_file, args: {description: a, path: /mnt/user-data/outputs/a.md, content: "note a\n"}}
      - content: wrote a
  write b:
    turns:
      - delay_ms: 1500
        tool_calls:
          - {name: write_file, args: {description: b, path: /mnt/user-data/outputs/b.md, content: "note b\n"}}
      - content: wrote b
"##;

const WRITE_IN_THREAD: &str = r##"
turns:
  - tool_calls:
      - {id: w, name: write_file, args: {description: keep, path: /mnt/user-data/workspace/kept.md, content: "kept across runs\n"}}
  - content: written
"##;

const READ_IN_THREAD: &str = r##"
turns:
  - tool_calls:
      - {id: r, name: read_file, args: {description: find it, path: /mnt/user-data/workspace/kept.md}}
  - content: read
"##;

#[test]
fn runs_cross_hosts_over_tls_and_a_thread_stays_on_its_replica() {
    let mh = MultiHost::up(2);

    // The bundled example, across the namespaces.
    let example = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/report/playbook.yaml"),
    )
    .unwrap();
    let run = mh.run(&example, &[]);
    assert_eq!(
        run.view["status"], "success",
        "{:#}\n{}",
        run.view, run.stderr
    );
    assert_eq!(run.view["delivery"]["satisfied"], true, "{:#}", run.view);
    let thread = run.run_id();
    let home = mh.replica_of(&thread);
    assert!(
        mh.outputs(home, &thread).join("report.md").exists(),
        "the report is not on replica {home}"
    );
    assert!(!mh.outputs(1 - home, &thread).join("report.md").exists());

    // Two tasks at once: one slot per worker, so one task on each.
    let run = mh.run(TWO_TASKS, &["--subagents"]);
    assert_eq!(
        run.view["status"], "success",
        "{:#}\n{}",
        run.view, run.stderr
    );
    assert_eq!(run.view["delivery"]["satisfied"], true, "{:#}", run.view);
    let on = workers_of(&run, &["t-a", "t-b"]);
    assert_eq!(
        on,
        ["worker-0".to_owned(), "worker-1".to_owned()].into(),
        "{:#?}",
        run.events
    );
    let thread = run.run_id();
    let home = mh.replica_of(&thread);
    for (file, text) in [("a.md", "note a\n"), ("b.md", "note b\n")] {
        assert_eq!(
            std::fs::read_to_string(mh.outputs(home, &thread).join(file)).unwrap(),
            text
        );
    }

    // A thread's second run comes back to the replica with its files.
    let mut seen = std::collections::BTreeSet::new();
    for thread in ["kept-1", "kept-2", "kept-3", "kept-4"] {
        let run = mh.run(WRITE_IN_THREAD, &["--thread", thread]);
        assert_eq!(run.view["status"], "success", "{:#}", run.view);
        let run = mh.run(READ_IN_THREAD, &["--thread", thread]);
        assert_eq!(run.view["status"], "success", "{:#}", run.view);
        let read = mh.tool_message(&run.run_id(), "r");
        assert!(read.contains("kept across runs"), "{read}");
        let home = mh.replica_of(thread);
        let workspace = |i: usize| mh.outputs(i, thread).with_file_name("workspace");
        assert!(workspace(home).join("kept.md").exists());
        assert!(!workspace(1 - home).join("kept.md").exists());
        seen.insert(home);
    }
    assert_eq!(seen.len(), 2, "four threads all hashed to one replica");

    // The cluster view lists the sandboxes of both replicas, each with its replica.
    let view = mh.gateway_get("/api/cluster");
    let sandboxes = view["sandboxes"]["sandboxes"].as_array().unwrap();
    for thread in ["kept-1", "kept-2", "kept-3", "kept-4"] {
        let replica = format!("tcp:{}:7103", mh.sandboxes[mh.replica_of(thread)].ip);
        assert!(
            sandboxes
                .iter()
                .any(|s| s["thread_id"] == thread && s["replica"] == replica.as_str()),
            "{thread} not on {replica}: {sandboxes:#?}"
        );
    }
    assert_eq!(view["errors"], serde_json::json!([]), "{view:#}");
}

const DOOMED_THEN_NEXT: &str = r##"
turns:
  - tool_calls:
      - {id: doomed, name: task, args: {description: doomed, prompt: "Take long", subagent_type: general-purpose}}
  - tool_calls:
      - {id: next, name: task, args: {description: next, prompt: "Be quick", subagent_type: general-purpose}}
  - content: done
subagents:
  doomed:
    turns:
      - delay_ms: 30000
        content: never
  next:
    turns:
      - content: quick work
"##;

#[test]
fn a_worker_cut_off_fails_its_task_and_workers_follow_the_name() {
    let mut mh = MultiHost::up(2);
    let mut child = mh
        .run_command(DOOMED_THEN_NEXT, &["--subagents"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut follow = Follow::stderr(&mut child);
    let started = follow.until(Duration::from_secs(60), |l| l.contains("\"task_started\""));
    let doomed_on = started
        .and_then(|line| serde_json::from_str::<Value>(&line).ok())
        .and_then(|v| v["event"]["worker"].as_str().map(str::to_owned));
    let doomed_on =
        doomed_on.unwrap_or_else(|| panic!("the task never started: {:#?}", follow.seen));
    let cut = mh
        .workers
        .iter()
        .find(|w| w.name == doomed_on)
        .unwrap()
        .clone();
    mh.net.set_link(&cut, false);
    let stderr = follow.rest(|_| {});
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
    assert!(
        child.wait().unwrap().success(),
        "{stdout}\n{stderr}\nthe lead:\n{}",
        mh.net.log("lead")
    );
    let run = Run::parse(&stdout, &stderr);
    assert_eq!(run.view["status"], "success", "{:#}", run.view);
    let lost = mh.tool_message(&run.run_id(), "doomed");
    assert!(
        lost.starts_with(&format!(
            "Task failed. Error: the subagent worker {doomed_on} was lost mid-task"
        )),
        "{lost}"
    );
    let next_on = run.task_event("next", "task_started")["worker"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(next_on, doomed_on, "the next task went to the cut worker");
    assert_eq!(
        mh.tool_message(&run.run_id(), "next"),
        "Task Succeeded. Result: quick work"
    );
    let cut_address = format!("tcp:{}:7104", cut.ip);
    let listed = |list: &[Value], address: &str| {
        list.iter()
            .find(|p| p["role"] == "subagent" && p["address"] == address)
            .cloned()
    };
    assert_eq!(
        listed(&mh.status().unwrap(), &cut_address).map(|p| p["healthy"].clone()),
        Some(Value::Bool(false)),
        "{:#?}",
        mh.status()
    );

    // A new worker joins the name: the lead finds and uses it.
    let added = mh.add_worker();
    mh.publish_workers();
    let added_address = format!("tcp:{}:7104", added.ip);
    let found = wait_for(Duration::from_secs(30), || {
        listed(&mh.status()?, &added_address).filter(|p| p["healthy"] == true)
    });
    assert!(found.is_some(), "{:#?}", mh.status());

    // The cut worker leaves the name: the lead drops it; the two left take the tasks.
    mh.workers.retain(|w| w.name != cut.name);
    mh.publish_workers();
    let dropped = wait_for(Duration::from_secs(30), || {
        listed(&mh.status()?, &cut_address).is_none().then_some(())
    });
    assert!(dropped.is_some(), "{:#?}", mh.status());
    // Two tasks at once go to the two workers the name has now.
    let run = mh.run(TWO_TASKS, &["--subagents"]);
    assert_eq!(run.view["status"], "success", "{:#}", run.view);
    let ran_on = workers_of(&run, &["t-a", "t-b"]);
    let expected: std::collections::BTreeSet<String> =
        mh.workers.iter().map(|w| w.name.clone()).collect();
    assert_eq!(ran_on, expected, "{:#?}", run.events);
}
