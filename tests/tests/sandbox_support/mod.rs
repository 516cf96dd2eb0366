//! Shared by the `sandbox_*` suites: a real `antler-sandbox-host` started on a private
//! socket with a config.yaml and a base directory in a temporary directory, a client that
//! speaks the real protocol to it, and helpers to call tools and read the pool.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use antler_protocol::{
    link::dial,
    messages::{
        Acquired, PoolStatus, Principal, Reply, Request, SandboxError, SandboxReply,
        SandboxRequest, ToolCall, ToolResult,
    },
    Address, Connection, ConnectionConfig, Identity, Role, TraceContext,
};
use antler_tests::{bin, wait_for};

/// A config that selects the bwrap provider with a short bash timeout.
pub const BWRAP_CONFIG: &str = "sandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n  bash_command_timeout: 20\n";

/// A config that selects DeerFlow's local provider with host bash allowed.
pub const LOCAL_CONFIG: &str =
    "sandbox:\n  use: deerflow.sandbox.local:LocalSandboxProvider\n  allow_host_bash: true\n  bash_command_timeout: 20\n";

/// One sandbox-host process with its directories.
pub struct SandboxHost {
    pub dir: tempfile::TempDir,
    pub child: Child,
    pub env: Vec<(String, String)>,
}

impl SandboxHost {
    /// Starts sandbox-host with `config` as its config.yaml and waits for its socket.
    pub fn start(config: &str) -> SandboxHost {
        Self::start_with(config, &[])
    }

    /// Starts sandbox-host logging at info into `host.log` in its directory (see
    /// [`SandboxHost::log`]).
    pub fn start_logged(config: &str) -> SandboxHost {
        Self::start_with(config, &[("ANTLER_TEST_LOG_FILE", "host.log")])
    }

    /// What a host started with [`SandboxHost::start_logged`] has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("host.log")).unwrap_or_default()
    }

    pub fn start_with(config: &str, env: &[(&str, &str)]) -> SandboxHost {
        let dir = tempfile::Builder::new()
            .prefix("antler-sb")
            .tempdir_in("/tmp")
            .expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        std::fs::write(dir.path().join("token"), "sandbox-test-token").expect("token");
        std::fs::write(dir.path().join("config.yaml"), config).expect("config");
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let child = spawn(dir.path(), &env);
        let host = SandboxHost { dir, child, env };
        host.wait_listening();
        host
    }

    /// Waits until the host accepts a connection: the socket's file exists from its
    /// `bind`, a moment before its `listen`, so a connect in between is refused.
    fn wait_listening(&self) {
        let sock = self.socket();
        let up = wait_for(Duration::from_secs(30), || {
            std::os::unix::net::UnixStream::connect(&sock)
                .ok()
                .map(drop)
        });
        assert!(up.is_some(), "sandbox-host did not listen");
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("host.sock")
    }

    /// Where thread directories live.
    pub fn base(&self) -> PathBuf {
        self.dir.path().join("base")
    }

    /// The host directory of a thread's virtual path under /mnt/user-data.
    pub fn user_data(&self, user: &str, thread: &str) -> PathBuf {
        self.base()
            .join("users")
            .join(user)
            .join("threads")
            .join(thread)
            .join("user-data")
    }

    /// `kill -9` the host and start it again over the same directories.
    pub fn kill_and_restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(self.socket());
        self.child = spawn(self.dir.path(), &self.env);
        self.wait_listening();
    }

    /// The sandbox-host's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `sig` to sandbox-host and waits (up to 30 s) for it to exit.
    pub fn stop_with(&mut self, sig: i32) {
        antler_tests::signal(self.child.id(), sig);
        let exited = wait_for(Duration::from_secs(30), || {
            self.child.try_wait().ok().flatten()
        });
        assert!(
            exited.is_some(),
            "sandbox-host did not exit after signal {sig}"
        );
    }

    /// A connection to the host.
    pub async fn connect(&self) -> Client {
        let identity = Identity::new(
            Role::Lead,
            "test-lead",
            Some("sandbox-test-token".to_string()),
        );
        let conn = dial(
            &Address::Unix(self.socket()),
            &identity,
            ConnectionConfig::default(),
            None,
        )
        .await
        .expect("connect");
        Client { conn }
    }
}

fn spawn(dir: &Path, env: &[(String, String)]) -> Child {
    let mut cmd = Command::new(bin("antler-sandbox-host"));
    cmd.arg("--listen")
        .arg(format!("unix:{}", dir.join("host.sock").display()))
        .arg("--token-file")
        .arg(dir.join("token"))
        .arg("--config")
        .arg(dir.join("config.yaml"))
        .arg("--base-dir")
        .arg(dir.join("base"))
        .env(
            "RUST_LOG",
            std::env::var("ANTLER_TEST_HOST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    for (k, v) in env {
        if k == "ANTLER_TEST_LOG_FILE" {
            // The host's log into a file of the test's (read by `SandboxHost::log`).
            let file = std::fs::File::create(dir.join(v)).expect("log file");
            cmd.stderr(file).env("RUST_LOG", "info");
        } else {
            cmd.env(k, v);
        }
    }
    cmd.spawn().expect("start sandbox-host")
}

impl Drop for SandboxHost {
    /// SIGTERM first, so the host removes its sandboxes' cgroups and unmounts what it
    /// mounted; SIGKILL when it has not exited within ten seconds. What a host killed
    /// with SIGKILL (here or by the test) left is removed after it.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            antler_tests::signal(self.child.id(), libc::SIGTERM);
            let exited = wait_for(Duration::from_secs(10), || {
                self.child.try_wait().ok().flatten()
            });
            if exited.is_none() {
                let _ = self.child.kill();
            }
        }
        let _ = self.child.wait();
        remove_leftovers(&self.base());
    }
}

/// The cgroup subtree a sandbox-host over `base` makes (sandbox-host's `cgroup` module:
/// `antler-` and the first 12 hex characters of sha256 of the base directory), in every
/// hierarchy this process is in (the host's children inherit them).
pub fn cgroup_subtrees(base: &Path) -> Vec<PathBuf> {
    use sha2::Digest;
    let name = format!(
        "antler-{}",
        &hex::encode(sha2::Sha256::digest(base.as_os_str().as_encoded_bytes()))[..12]
    );
    let text = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let root = Path::new("/sys/fs/cgroup");
    let mut found = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let path = path.trim_start_matches('/');
        let mut mounts: Vec<PathBuf> = vec![root.join(controllers)];
        mounts.extend(controllers.split(',').map(|c| root.join(c)));
        if controllers.is_empty() {
            mounts = vec![root.join("unified"), root.to_path_buf()];
        }
        for m in mounts {
            let dir = m.join(path).join(&name);
            if dir.is_dir() && !found.contains(&dir) {
                found.push(dir);
            }
        }
    }
    found
}

fn remove_cgroup_tree(dir: &Path) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            remove_cgroup_tree(&e.path());
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Unmounts what is mounted under `base` (the users' disk-quota filesystems) and removes
/// the host's cgroups, once its sandboxes' processes are gone (up to five seconds).
fn remove_leftovers(base: &Path) {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let base_text = base.to_string_lossy().to_string();
    for line in info.lines() {
        if let Some(point) = line.split(' ').nth(4) {
            if point.starts_with(&format!("{base_text}/")) {
                let _ = Command::new("umount").arg("-l").arg(point).status();
            }
        }
    }
    let subtrees = cgroup_subtrees(base);
    let _ = wait_for(Duration::from_secs(5), || {
        for dir in &subtrees {
            remove_cgroup_tree(dir);
        }
        subtrees.iter().all(|d| !d.exists()).then_some(())
    });
}

/// A principal with no roles.
pub fn who(user: &str, thread: &str) -> Principal {
    Principal {
        user_id: user.into(),
        thread_id: thread.into(),
        roles: vec![],
    }
}

/// A client of one sandbox-host.
#[derive(Clone)]
pub struct Client {
    pub conn: Connection,
}

impl Client {
    pub async fn request(&self, r: SandboxRequest) -> SandboxReply {
        match self
            .conn
            .request(
                Request::Sandbox(r),
                TraceContext::new_root(),
                Duration::from_secs(60),
            )
            .await
            .expect("reply")
        {
            Reply::Sandbox(r) => r,
            other => panic!("unexpected reply {other:?}"),
        }
    }

    pub async fn acquire(&self, user: &str, thread: &str) -> Result<Acquired, SandboxError> {
        self.acquire_known(user, thread, None).await
    }

    pub async fn acquire_known(
        &self,
        user: &str,
        thread: &str,
        known_id: Option<&str>,
    ) -> Result<Acquired, SandboxError> {
        match self
            .request(SandboxRequest::Acquire {
                principal: who(user, thread),
                known_id: known_id.map(str::to_string),
                owner: None,
            })
            .await
        {
            SandboxReply::Acquired(r) => r,
            other => panic!("unexpected reply {other:?}"),
        }
    }

    pub async fn release(&self, id: &str) -> Result<(), SandboxError> {
        match self
            .request(SandboxRequest::Release {
                sandbox_id: id.into(),
                owner: None,
            })
            .await
        {
            SandboxReply::Released(r) => r,
            other => panic!("unexpected reply {other:?}"),
        }
    }

    /// Runs a tool in an acquired sandbox.
    pub async fn call(
        &self,
        id: &str,
        tool: &str,
        args: serde_json::Value,
    ) -> Result<ToolResult, SandboxError> {
        let call = ToolCall {
            tool: tool.into(),
            args: args.into(),
            secrets: vec![],
            clearance: None,
        };
        match self
            .request(SandboxRequest::Call {
                sandbox_id: id.into(),
                call,
                owner: None,
                call_id: None,
            })
            .await
        {
            SandboxReply::ToolResult(r) => r,
            other => panic!("unexpected reply {other:?}"),
        }
    }

    /// The text of a tool call in an acquired sandbox (panics on a SandboxError).
    pub async fn text(&self, id: &str, tool: &str, args: serde_json::Value) -> String {
        self.call(id, tool, args)
            .await
            .expect("tool result")
            .content
    }

    /// `bash` in an acquired sandbox.
    pub async fn bash(&self, id: &str, command: &str) -> String {
        self.text(
            id,
            "bash",
            serde_json::json!({"description": "test", "command": command}),
        )
        .await
    }

    pub async fn status(&self) -> PoolStatus {
        match self.request(SandboxRequest::Status).await {
            SandboxReply::Status(s) => s,
            other => panic!("unexpected reply {other:?}"),
        }
    }
}

/// (pid, start time) of a process, the pair that names it across pid reuse.
pub type ProcessId = (u32, u64);

fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// `root` and every process below it now, with their start times.
pub fn process_tree(root: u32) -> Vec<ProcessId> {
    let mut all: Vec<(u32, u32, u64)> = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Some(f) = stat_fields(pid) else { continue };
        let ppid = f.get(1).and_then(|x| x.parse().ok()).unwrap_or(0);
        let start = f.get(19).and_then(|x| x.parse().ok()).unwrap_or(0);
        all.push((pid, ppid, start));
    }
    let mut found: Vec<ProcessId> = all
        .iter()
        .filter(|(p, _, _)| *p == root)
        .map(|(p, _, s)| (*p, *s))
        .collect();
    let mut i = 0;
    while i < found.len() {
        let parent = found[i].0;
        found.extend(
            all.iter()
                .filter(|(_, pp, _)| *pp == parent)
                .map(|(p, _, s)| (*p, *s)),
        );
        i += 1;
    }
    found
}

/// The processes of `ids` that still run (same pid and start time, not a zombie).
pub fn still_running(ids: &[ProcessId]) -> Vec<(u32, String)> {
    ids.iter()
        .filter(|(pid, start)| {
            stat_fields(*pid).is_some_and(|f| {
                f.first().map(String::as_str) != Some("Z")
                    && f.get(19).and_then(|x| x.parse::<u64>().ok()) == Some(*start)
            })
        })
        .map(|(pid, _)| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            (*pid, String::from_utf8_lossy(&cmd).replace('\0', " "))
        })
        .collect()
}

/// Processes whose command line contains `marker`, this test process excluded.
pub fn processes_naming(marker: &str) -> Vec<(u32, String)> {
    let me = std::process::id();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == me || stat_fields(pid).is_some_and(|f| f.first().map(String::as_str) == Some("Z"))
        {
            continue;
        }
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(marker) {
            out.push((pid, cmd));
        }
    }
    out
}

/// A run's hosts that send every request straight to one sandbox-host over the real
/// protocol (a lead without the volume, reaching the replica that owns the thread).
pub struct DirectHosts(pub antler_protocol::Connection);

impl antler_engine::ToolHosts for DirectHosts {
    fn request(
        &self,
        role: antler_protocol::Role,
        request: antler_protocol::messages::Request,
        timeout: Duration,
    ) -> futures::future::BoxFuture<
        '_,
        Result<antler_protocol::messages::Reply, antler_engine::HostError>,
    > {
        Box::pin(async move {
            self.0
                .request(request, antler_protocol::TraceContext::new_root(), timeout)
                .await
                .map_err(|e| antler_engine::HostError::from_rpc(role, e))
        })
    }
}

/// A lead side without sandbox-host's volume, for thread `u1`/`t1`: a real sandbox-host
/// ([`LOCAL_CONFIG`]), a client of it, and the thread's files reached through it
/// ([`ThreadFilesMode::SandboxHost`](antler_engine::ThreadFilesMode)) from a lead data
/// root of its own, an empty temporary directory.
pub struct RemoteThread {
    pub host: SandboxHost,
    pub client: Client,
    pub lead_root: tempfile::TempDir,
    pub paths: antler_engine::ThreadPaths,
    pub files: std::sync::Arc<dyn antler_engine::ThreadFiles>,
}

impl RemoteThread {
    pub async fn start() -> RemoteThread {
        let host = SandboxHost::start(LOCAL_CONFIG);
        let client = host.connect().await;
        let hosts: std::sync::Arc<dyn antler_engine::ToolHosts> =
            std::sync::Arc::new(DirectHosts(client.conn.clone()));
        let lead_root = tempfile::tempdir().unwrap();
        let paths = antler_engine::ThreadPaths::new(lead_root.path(), "u1", "t1");
        let files =
            antler_engine::ThreadFilesMode::SandboxHost.for_thread(&paths, hosts, "u1", "t1");
        RemoteThread {
            host,
            client,
            lead_root,
            paths,
            files,
        }
    }

    /// Run `run-1`'s context on the thread (no clarification, the lead root's agent).
    pub fn context(&self) -> antler_engine::RunContext {
        antler_engine::RunContext {
            run_id: "run-1".into(),
            user_id: "u1".into(),
            thread_id: "t1".into(),
            paths: self.paths.clone(),
            files: std::sync::Arc::clone(&self.files),
            clarification_enabled: false,
            agent: antler_engine::AgentContext::new(self.lead_root.path()),
            epoch: None,
        }
    }
}
