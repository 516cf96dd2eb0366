//! Shared by the suites that load, stop or kill the lead of a running cluster
//! (`run_overload`, `sandbox_lease_reclaim`, `run_resume_once`): `antler up` with a
//! config.yaml and a base directory in a private temporary directory, the gateway's
//! address, raw HTTP with the reply's headers, runs submitted with `antler run --detach`,
//! and the sandbox pool read through the lead or straight from sandbox-host (for when the
//! lead is stopped).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    io::{Read, Write},
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use antler_protocol::{calls::SandboxCalls, messages::PoolStatus, Role};
use antler_tests::{antler, bin, signal, wait_for};
use serde_json::Value;

/// A cluster whose lead this test may stop or kill; every process goes with it.
pub struct LeadCluster {
    pub dir: tempfile::TempDir,
    pub lead: Option<Child>,
    env: Vec<(String, String)>,
    workers: u32,
}

impl LeadCluster {
    /// Starts `antler up --workers 0` with `config` as its config.yaml and waits until
    /// it is healthy. `env` goes to the lead (and its children).
    pub fn up(config: &str, env: &[(&str, &str)]) -> LeadCluster {
        Self::up_with_files(config, &[], env)
    }

    /// [`LeadCluster::up`] with `files` (name, content) written beside config.yaml first.
    pub fn up_with_files(
        config: &str,
        files: &[(&str, &str)],
        env: &[(&str, &str)],
    ) -> LeadCluster {
        Self::up_with_workers(config, files, env, 0)
    }

    /// [`LeadCluster::up_with_files`] with `workers` subagent workers.
    pub fn up_with_workers(
        config: &str,
        files: &[(&str, &str)],
        env: &[(&str, &str)],
        workers: u32,
    ) -> LeadCluster {
        let dir = tempfile::Builder::new()
            .prefix("antler-ld")
            .tempdir_in("/tmp")
            .expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        std::fs::write(dir.path().join("config.yaml"), config).expect("config");
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).expect("file");
        }
        let mut c = LeadCluster {
            dir,
            lead: None,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            workers,
        };
        c.start();
        c
    }

    /// Starts the lead again (after it was killed) and waits until the cluster is healthy.
    pub fn start(&mut self) {
        let mut cmd = Command::new(bin("antler"));
        cmd.arg("--runtime-dir")
            .arg(self.runtime())
            .args(["up", "--workers", &self.workers.to_string(), "--config"])
            .arg(self.dir.path().join("config.yaml"))
            .env("ANTLER_SANDBOX_BASE_DIR", self.base())
            .env("RUST_LOG", "warn")
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if !self.env.iter().any(|(k, _)| k == "ANTLER_GATEWAY_ADDR") {
            cmd.env("ANTLER_GATEWAY_ADDR", "off");
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        self.lead = Some(cmd.spawn().expect("start antler up"));
        let healthy = wait_for(Duration::from_secs(60), || {
            let list = self.status()?;
            (list.len() == 3 + self.workers as usize && list.iter().all(|p| p["healthy"] == true))
                .then_some(())
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

    pub fn lead_pid(&self) -> u32 {
        self.lead.as_ref().expect("a lead").id()
    }

    /// `antler status --json`.
    pub fn status(&self) -> Option<Vec<Value>> {
        let out = antler(&self.runtime(), &["status", "--json"]);
        serde_json::from_slice::<Value>(&out.stdout)
            .ok()?
            .as_array()
            .cloned()
    }

    /// The pids of the children (everything but the lead).
    pub fn child_pids(&self) -> Vec<u32> {
        self.status()
            .unwrap_or_default()
            .iter()
            .filter(|p| p["role"] != "lead")
            .filter_map(|p| p["pid"].as_u64().map(|x| x as u32))
            .collect()
    }

    /// The lead started next goes without `key` in its environment (a fault injected
    /// into the first lead only).
    pub fn unset_env(&mut self, key: &str) {
        self.env.retain(|(k, _)| k != key);
    }

    /// `kill -9` of the lead, reaped.
    pub fn kill_lead(&mut self) {
        if let Some(mut lead) = self.lead.take() {
            signal(lead.id(), libc::SIGKILL);
            let _ = lead.wait();
        }
    }

    /// The bearer token the loopback gateway wrote to `gateway.token`.
    pub fn gateway_token(&self) -> String {
        wait_for(Duration::from_secs(10), || {
            std::fs::read_to_string(self.runtime().join("gateway.token")).ok()
        })
        .expect("gateway.token")
        .trim()
        .to_owned()
    }

    /// The gateway's `host:port` on loopback.
    pub fn gateway(&self) -> String {
        let addr = wait_for(Duration::from_secs(10), || {
            std::fs::read_to_string(self.runtime().join("gateway.addr")).ok()
        })
        .expect("the gateway listens");
        let port = addr
            .trim()
            .rsplit_once(':')
            .expect("host:port")
            .1
            .to_owned();
        format!("127.0.0.1:{port}")
    }

    /// Writes a file in the test's directory; its path.
    pub fn write(&self, name: &str, text: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    /// Submits a run with `antler run --detach --json`; its id.
    pub fn submit(&self, task: &str, playbook: &str, extra: &[&str]) -> String {
        let mut args = vec!["run", task, "--detach", "--json", "--playbook", playbook];
        args.extend_from_slice(extra);
        let out = antler(&self.runtime(), &args);
        let submitted: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
        });
        submitted["run_id"].as_str().unwrap().to_owned()
    }

    /// A run's status in the checkpoint store (`running`, `success`, ...).
    pub fn run_status(&self, run_id: &str) -> String {
        let rows = sql(
            &self.runtime().join("runs.sqlite"),
            "select status from runs where run_id = ?",
            run_id,
        );
        serde_json::from_str::<Value>(&rows)
            .ok()
            .and_then(|v| v[0][0].as_str().map(str::to_owned))
            .unwrap_or_default()
    }

    /// The run's last checkpointed state.
    pub fn run_state(&self, run_id: &str) -> Value {
        let rows = sql(
            &self.runtime().join("runs.sqlite"),
            "select state from checkpoints where run_id = ? order by step desc limit 1",
            run_id,
        );
        let rows: Value = serde_json::from_str(&rows).unwrap();
        serde_json::from_str(rows[0][0].as_str().unwrap()).unwrap()
    }

    /// `antler sandbox status --json` (through the lead).
    pub fn sandboxes(&self) -> Option<Vec<Value>> {
        let out = antler(&self.runtime(), &["sandbox", "status", "--json"]);
        serde_json::from_slice::<Value>(&out.stdout)
            .ok()?
            .get("sandboxes")?
            .as_array()
            .cloned()
    }

    /// The pool straight from sandbox-host (the lead may be stopped).
    pub fn pool_from_host(&self) -> Option<PoolStatus> {
        antler_tests::host_call(&self.runtime(), Role::SandboxHost, 0, async |c| {
            c.sandbox_status(Duration::from_secs(10)).await
        })
    }
}

impl Drop for LeadCluster {
    fn drop(&mut self) {
        if let Some(mut lead) = self.lead.take() {
            signal(lead.id(), libc::SIGCONT);
            signal(lead.id(), libc::SIGTERM);
            let gone = wait_for(Duration::from_secs(15), || {
                matches!(lead.try_wait(), Ok(Some(_))).then_some(())
            });
            if gone.is_none() {
                let _ = lead.kill();
                let _ = lead.wait();
            }
        }
    }
}

/// The sandboxes of a pool that are active.
pub fn active(pool: &PoolStatus) -> usize {
    pool.sandboxes
        .iter()
        .filter(|s| s.state == "active")
        .count()
}

/// One query on the checkpoint store, as JSON rows.
pub fn sql(store: &Path, query: &str, arg: &str) -> String {
    let out = Command::new("python3")
        .arg("-c")
        .arg("import sqlite3,sys,json;c=sqlite3.connect(sys.argv[1]);print(json.dumps(c.execute(sys.argv[2],(sys.argv[3],)).fetchall()))")
        .arg(store)
        .arg(query)
        .arg(arg)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// One HTTP/1.1 request with `Connection: close`: the status, the header block (lower
/// case) and the body.
pub fn http_full(
    addr: &str,
    token: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> (u16, String, String) {
    let mut stream = match std::net::TcpStream::connect(addr) {
        Ok(s) => s,
        Err(e) => return (0, String::new(), format!("connect: {e}")),
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(120)));
    let body = body.unwrap_or("");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    if let Err(e) = stream.write_all(request.as_bytes()) {
        return (0, String::new(), format!("send: {e}"));
    }
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_ascii_lowercase(), rest.to_owned())
}
