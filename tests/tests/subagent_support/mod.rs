//! Shared by the subagent suites (`subagent_tasks`, `subagent_faults`): a cluster started
//! with `antler up --workers N` in a private directory with its own config.yaml, an
//! extensions file with the real `everything` MCP server, and a bubblewrap sandbox; runs
//! driven with `antler run --json --trace --subagents` (the outcome, and every event in
//! order); a run's last checkpointed state read from runs.sqlite; the pids of the workers.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use antler_tests::{antler, bin, signal, wait_for};
use serde_json::{json, Value};

/// A cluster with subagent workers; every process goes with it.
pub struct SubagentCluster {
    pub dir: tempfile::TempDir,
    pub lead: Option<Child>,
    pub workers: u32,
}

impl SubagentCluster {
    /// `antler up --workers N` with `config` as config.yaml and the `everything` server.
    pub fn up(config: &str, workers: u32) -> SubagentCluster {
        let dir = tempfile::Builder::new()
            .prefix("antler-sa")
            .tempdir_in("/tmp")
            .expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(dir.path().join("config.yaml"), config).unwrap();
        let everything = crate::mcp_support::npm_bin("mcp-server-everything");
        std::fs::write(
            dir.path().join("extensions_config.json"),
            serde_json::to_vec(&json!({"mcpServers": {"everything": {
                "type": "stdio", "command": everything.display().to_string(), "args": ["stdio"]}}}))
            .unwrap(),
        )
        .unwrap();
        let mut cluster = SubagentCluster {
            dir,
            lead: None,
            workers,
        };
        cluster.start();
        cluster
    }

    /// Starts the lead (again) and waits until every process is healthy.
    pub fn start(&mut self) {
        let lead = Command::new(bin("antler"))
            .arg("--runtime-dir")
            .arg(self.runtime())
            .args(["up", "--workers", &self.workers.to_string(), "--config"])
            .arg(self.dir.path().join("config.yaml"))
            .env(
                "ANTLER_EXTENSIONS_CONFIG_PATH",
                self.dir.path().join("extensions_config.json"),
            )
            .env("ANTLER_SANDBOX_BASE_DIR", self.base())
            .env("ANTLER_GATEWAY_ADDR", "off")
            .env("RUST_LOG", "info")
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("antler up");
        self.lead = Some(lead);
        let expected = 3 + self.workers as usize;
        let healthy = wait_for(Duration::from_secs(60), || {
            let list = self.status()?;
            (list.len() == expected && list.iter().all(|p| p["healthy"] == true)).then_some(())
        });
        assert!(
            healthy.is_some(),
            "the cluster did not come up: {:?}",
            self.status()
        );
    }

    pub fn runtime(&self) -> PathBuf {
        self.dir.path().join("run")
    }

    pub fn base(&self) -> PathBuf {
        self.dir.path().join("base")
    }

    /// `antler status --json`.
    pub fn status(&self) -> Option<Vec<Value>> {
        let out = antler(&self.runtime(), &["status", "--json"]);
        serde_json::from_slice::<Value>(&out.stdout)
            .ok()?
            .as_array()
            .cloned()
    }

    /// The pid of worker `index`.
    pub fn worker_pid(&self, index: u64) -> Option<u32> {
        self.status()?
            .into_iter()
            .find(|p| p["role"] == "subagent" && p["index"].as_u64() == Some(index))?["pid"]
            .as_u64()
            .map(|p| p as u32)
    }

    /// Writes a file in the test's directory; its path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// The command of a run of `playbook` with subagents: `--json --trace`.
    pub fn run_command(&self, playbook: &str, extra: &[&str]) -> Command {
        let path = self.write(&format!("playbook-{}.yaml", fastrand_name()), playbook);
        let mut cmd = Command::new(bin("antler"));
        cmd.arg("--runtime-dir")
            .arg(self.runtime())
            .args([
                "run",
                "Delegate the work",
                "--json",
                "--trace",
                "--subagents",
                "--playbook",
            ])
            .arg(path)
            .args(extra)
            .current_dir(self.dir.path())
            .env("RUST_LOG", "error");
        cmd
    }

    /// Runs `playbook` to its end: the outcome and the run's events in order.
    pub fn run(&self, playbook: &str, extra: &[&str]) -> Run {
        let out = self
            .run_command(playbook, extra)
            .output()
            .expect("antler run");
        Run::parse(
            &String::from_utf8_lossy(&out.stdout),
            &String::from_utf8_lossy(&out.stderr),
        )
    }

    /// The run's last checkpointed state.
    pub fn state(&self, run_id: &str) -> Value {
        let out = Command::new("python3")
            .arg("-c")
            .arg("import sqlite3,sys;c=sqlite3.connect(sys.argv[1]);print(c.execute('select state from checkpoints where run_id=? order by step desc limit 1',(sys.argv[2],)).fetchone()[0])")
            .arg(self.runtime().join("runs.sqlite"))
            .arg(run_id)
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "no state for {run_id} ({e}): {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }

    /// The task message of call `id` in the run's state.
    pub fn task_message(&self, run_id: &str, id: &str) -> Value {
        let state = self.state(run_id);
        state["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == "tool" && m["tool_call_id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no tool message for {id}: {state:#}"))
    }
}

impl Drop for SubagentCluster {
    fn drop(&mut self) {
        if let Some(mut lead) = self.lead.take() {
            signal(lead.id(), libc::SIGTERM);
            let until = Instant::now() + Duration::from_secs(20);
            while Instant::now() < until {
                if let Ok(Some(_)) = lead.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = lead.kill();
            let _ = lead.wait();
        }
    }
}

/// A running `antler run`'s stderr, line by line, as it comes: wait for a line, then
/// read the rest once the run ends.
pub struct Follow {
    lines: std::sync::mpsc::Receiver<String>,
    reader: Option<std::thread::JoinHandle<()>>,
    /// Every line read so far.
    pub seen: Vec<String>,
}

impl Follow {
    /// Starts reading `child`'s piped stderr.
    pub fn stderr(child: &mut Child) -> Follow {
        let stderr = child.stderr.take().expect("stderr piped");
        let (tx, lines) = std::sync::mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                let _ = tx.send(line);
            }
        });
        Follow {
            lines,
            reader: Some(reader),
            seen: Vec::new(),
        }
    }

    /// The first line for which `f` is true, within `within`.
    pub fn until(&mut self, within: Duration, f: impl Fn(&str) -> bool) -> Option<String> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) else {
                continue;
            };
            let hit = f(&line);
            self.seen.push(line.clone());
            if hit {
                return Some(line);
            }
        }
        None
    }

    /// Every line to the end of the stream, each passed to `f` as it comes.
    pub fn rest(&mut self, mut f: impl FnMut(&str)) -> String {
        for line in self.lines.iter() {
            f(&line);
            self.seen.push(line);
        }
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.seen.join("\n")
    }
}

fn fastrand_name() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        .to_string()
}

/// A finished `antler run --json --trace`.
#[derive(Debug)]
pub struct Run {
    pub view: Value,
    /// The run's events, in order.
    pub events: Vec<Value>,
    pub stderr: String,
}

impl Run {
    pub fn parse(stdout: &str, stderr: &str) -> Run {
        let view = serde_json::from_str(stdout.trim())
            .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}): {stdout}\n{stderr}"));
        let events = stderr
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|v| v.get("event").cloned())
            .collect();
        Run {
            view,
            events,
            stderr: stderr.to_owned(),
        }
    }

    pub fn run_id(&self) -> String {
        self.view["run_id"].as_str().unwrap().to_owned()
    }

    /// The `task` events of call `id`, by type, in order.
    pub fn task_events(&self, id: &str) -> Vec<String> {
        self.events
            .iter()
            .filter(|e| e["event"] == "task" && e["tool_call_id"] == id)
            .map(|e| e["type"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// The event of type `kind` of call `id`.
    pub fn task_event(&self, id: &str, kind: &str) -> Value {
        self.events
            .iter()
            .find(|e| e["event"] == "task" && e["tool_call_id"] == id && e["type"] == kind)
            .cloned()
            .unwrap_or_else(|| panic!("no {kind} event for {id}: {:#?}", self.events))
    }

    /// Where the events of `a` (a predicate) sit in the stream.
    pub fn position(&self, f: impl Fn(&Value) -> bool) -> Option<usize> {
        self.events.iter().position(f)
    }
}
