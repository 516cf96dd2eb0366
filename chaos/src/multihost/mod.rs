//! `antler chaos --mode multi-host`: the cluster laid out as it runs on Kubernetes, on one
//! machine. Every host runs in a network namespace of its own (mcp-host, two sandbox-host
//! replicas, the workers), joined by veth to a bridge in a hub namespace, at 10.78.0.0/24
//! inside those namespaces only; this process moves into the lead's namespace before it
//! starts a thread, so the lead, its gateway and this command's HTTP client share it.
//! Everything talks TCP with mutual TLS on certificates from `antler cluster init`. The
//! lead reaches each host (and the workers reach mcp-host and sandbox-host) through a TCP
//! fault proxy of its own (PyPI `faulty`), listening at the lead's address, so a network
//! fault is a proxy restarted with delay, drop, throttle or corruption, and a cut is the
//! host's veth set down. This command is the hosts' orchestrator, as Kubernetes is: a host
//! that exits is started again; the lead never restarts a remote host.

mod netns;

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use netns::ip;

/// The namespaces' subnet (inside them only).
const SUBNET: &str = "10.78.0";
/// Where the proxies listen, at the lead's address: 7200 + the node's number.
const PROXY_BASE: u16 = 7200;

/// One host of the layout.
#[derive(Debug, Clone)]
pub struct Node {
    /// `mcp-host`, `sandbox-0`, `worker-1`, ...
    pub name: String,
    /// The role as `antler status` shows it.
    pub role: &'static str,
    /// The replica's index (sandbox-host replicas and workers), 0 otherwise.
    pub index: u32,
    /// Its number in the layout (1..): its address is 10.78.0.(10 + number).
    number: u32,
    port: u16,
    program: &'static str,
    args: Vec<String>,
}

impl Node {
    fn namespace(&self, tag: &str) -> String {
        format!("{tag}-{}", self.number)
    }

    fn address(&self) -> String {
        format!("{SUBNET}.{}:{}", 10 + self.number, self.port)
    }

    /// Where the lead and the workers reach it: its proxy.
    pub fn proxied(&self) -> String {
        format!("tcp:{}:{}", lead_ip(), PROXY_BASE + self.number as u16)
    }

    /// The hub's end of its veth: set down, the host is cut off.
    fn hub_link(&self) -> String {
        format!("h{}", self.number)
    }
}

fn lead_ip() -> String {
    format!("{SUBNET}.10")
}

/// The layout and its processes.
pub struct MultiHost {
    tag: String,
    dir: PathBuf,
    bin: PathBuf,
    pub nodes: Vec<Node>,
    hosts: Mutex<Vec<Option<Child>>>,
    proxies: Mutex<Vec<Option<Child>>>,
    /// Times each host was started again by this command.
    pub restarts: Mutex<Vec<u32>>,
}

fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// What the multi-host mode needs before it touches anything: root (namespaces), `ip`,
/// `faulty`, the host binaries beside this one.
pub fn preflight(bin: &Path) -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        anyhow::bail!(
            "--mode multi-host needs root (it creates network namespaces): run it with sudo"
        );
    }
    on_path("ip").context("--mode multi-host needs `ip` (iproute2) on PATH")?;
    on_path("faulty").context(
        "--mode multi-host needs the TCP fault proxy `faulty` on PATH (PyPI faulty==0.2.1; scripts/chaos.sh installs it)",
    )?;
    for program in ["antler-mcp-host", "antler-sandbox-host", "antler-subagent"] {
        if !bin.join(program).is_file() {
            anyhow::bail!(
                "--mode multi-host needs {program} beside antler ({})",
                bin.display()
            );
        }
    }
    Ok(())
}

/// The cluster's CA, per-role certificates and token in `certs` (`antler cluster init`).
fn cluster_init(exe: &Path, certs: &Path) -> anyhow::Result<()> {
    let out = Command::new(exe)
        .args(["cluster", "init"])
        .arg(certs)
        .stdout(Stdio::null())
        .output()
        .context("cannot run `antler cluster init`")?;
    if !out.status.success() {
        anyhow::bail!(
            "`antler cluster init` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// The hosts of the layout, numbered from 1: mcp-host, two sandbox-host replicas (their
/// bases in `dir`), `workers` workers; each listening over TLS on the certificates in
/// `certs`.
fn nodes(dir: &Path, certs: &Path, workers: u32) -> Vec<Node> {
    let c = |f: &str| certs.join(f).display().to_string();
    let config = dir.join("config.yaml").display().to_string();
    let extensions = dir.join("extensions_config.json").display().to_string();
    let tls = |role: &str, name: &str, addr: String| -> Vec<String> {
        vec![
            "--listen".into(),
            format!("tcp:{addr}"),
            "--token-file".into(),
            c("token"),
            "--tls-ca".into(),
            c("ca.crt"),
            "--tls-cert".into(),
            c(&format!("{role}.crt")),
            "--tls-key".into(),
            c(&format!("{role}.key")),
            "--node-id".into(),
            name.into(),
        ]
    };
    let mut nodes = Vec::new();
    let mut add =
        |name: String, role: &'static str, index: u32, port: u16, program, extra: Vec<String>| {
            let number = nodes.len() as u32 + 1;
            let mut args = tls(role, &name, format!("{SUBNET}.{}:{port}", 10 + number));
            args.extend(extra);
            nodes.push(Node {
                name,
                role,
                index,
                number,
                port,
                program,
                args,
            });
        };
    add(
        "mcp-host".into(),
        "mcp-host",
        0,
        7102,
        "antler-mcp-host",
        vec![
            "--extensions".into(),
            extensions.clone(),
            "--config".into(),
            config.clone(),
        ],
    );
    for i in 0..2u32 {
        add(
            format!("sandbox-{i}"),
            "sandbox-host",
            i,
            7103,
            "antler-sandbox-host",
            vec![
                "--index".into(),
                i.to_string(),
                "--config".into(),
                config.clone(),
                "--extensions".into(),
                extensions.clone(),
                "--base-dir".into(),
                dir.join(format!("sandbox-{i}")).display().to_string(),
            ],
        );
    }
    for i in 0..workers {
        add(
            format!("worker-{i}"),
            "subagent",
            i,
            7104,
            "antler-subagent",
            vec!["--capacity".into(), "3".into()],
        );
    }
    nodes
}

impl MultiHost {
    /// Creates the namespaces and the certificates and moves this process into the lead's
    /// namespace. Must run before any thread starts (a namespace is per thread, and the
    /// threads started afterwards inherit it).
    pub fn create(dir: &Path, exe: &Path, workers: u32) -> anyhow::Result<MultiHost> {
        let bin = exe
            .parent()
            .context("the antler binary has no directory")?
            .to_path_buf();
        preflight(&bin)?;
        let tag = format!("antler-chaos-{}", std::process::id());
        let certs = dir.join("certs");
        cluster_init(exe, &certs)?;
        let nodes = nodes(dir, &certs, workers);
        let layout = MultiHost {
            tag: tag.clone(),
            dir: dir.to_path_buf(),
            bin,
            hosts: Mutex::new(nodes.iter().map(|_| None).collect()),
            proxies: Mutex::new(nodes.iter().map(|_| None).collect()),
            restarts: Mutex::new(vec![0; nodes.len()]),
            nodes,
        };
        std::fs::create_dir_all(dir.join("nodes"))?;
        // Torn down by `stop` (also when a step here fails: the caller stops the layout).
        netns::connect(&tag, &layout.nodes)?;
        netns::enter(&format!("{tag}-0"))?;
        Ok(layout)
    }

    /// The lines of `antler:` that make the lead dial this layout.
    pub fn antler_config(&self) -> String {
        let c = |f: &str| self.dir.join("certs").join(f).display().to_string();
        let list = |role: &str| {
            self.nodes
                .iter()
                .filter(|n| n.role == role)
                .map(|n| format!("\"{}\"", n.proxied()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "  tls: {{ca: {}, cert: {}, key: {}}}\n  cluster:\n    sandbox_hosts: [{}]\n    mcp_hosts: [{}]\n    workers: [{}]\n    resolve_interval_s: 2\n",
            c("ca.crt"),
            c("lead.crt"),
            c("lead.key"),
            list("sandbox-host"),
            list("mcp-host"),
            list("subagent")
        )
    }

    /// The cluster token the lead presents.
    pub fn token(&self) -> anyhow::Result<String> {
        Ok(std::fs::read_to_string(self.dir.join("certs/token"))?
            .trim()
            .to_owned())
    }

    /// The sandbox-host replicas' base directories.
    pub fn bases(&self) -> Vec<PathBuf> {
        self.nodes
            .iter()
            .filter(|n| n.role == "sandbox-host")
            .map(|n| self.dir.join(format!("sandbox-{}", n.index)))
            .collect()
    }

    pub fn log(&self, node: usize) -> PathBuf {
        self.dir
            .join("nodes")
            .join(format!("{}.log", self.nodes[node].name))
    }

    /// The node of `role` and replica `index`.
    pub fn node(&self, role: &str, index: u32) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| n.role == role && n.index == index)
    }

    /// Replicas of `role`.
    pub fn replicas(&self, role: &str) -> u32 {
        self.nodes.iter().filter(|n| n.role == role).count() as u32
    }

    /// Starts every host and its proxy.
    pub fn start(&self) -> anyhow::Result<()> {
        for i in 0..self.nodes.len() {
            self.spawn_host(i)?;
            self.spawn_proxy(i, &[])?;
        }
        Ok(())
    }

    fn spawn_host(&self, i: usize) -> anyhow::Result<()> {
        let child = self.spawn_child(i)?;
        self.hosts.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(child);
        Ok(())
    }

    fn spawn_child(&self, i: usize) -> anyhow::Result<std::process::Child> {
        let node = &self.nodes[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log(i))?;
        let child = Command::new("ip")
            .args(["netns", "exec", &node.namespace(&self.tag)])
            .arg(self.bin.join(node.program))
            .args(&node.args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("cannot start {}", node.name))?;
        Ok(child)
    }

    /// (Re)starts node `i`'s proxy with `faults` (faulty's flags), and waits until it
    /// listens.
    pub fn spawn_proxy(&self, i: usize, faults: &[&str]) -> anyhow::Result<()> {
        let node = &self.nodes[i];
        let listen: SocketAddr =
            format!("{}:{}", lead_ip(), PROXY_BASE + node.number as u16).parse()?;
        {
            let mut proxies = self.proxies.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(mut old) = proxies[i].take() {
                let _ = old.kill();
                let _ = old.wait();
            }
            let child = Command::new("faulty")
                .arg(listen.to_string())
                .arg(node.address())
                .args(faults)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("cannot start faulty")?;
            proxies[i] = Some(child);
        }
        let until = Instant::now() + Duration::from_secs(15);
        while Instant::now() < until {
            if TcpStream::connect_timeout(&listen, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        anyhow::bail!("the proxy of {} did not listen at {listen}", node.name)
    }

    /// Node `i`'s host pid, while it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        let mut hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
        let child = hosts.get_mut(i)?.as_mut()?;
        matches!(child.try_wait(), Ok(None)).then(|| child.id())
    }

    /// Every host's pid that runs.
    pub fn pids(&self) -> Vec<u32> {
        (0..self.nodes.len()).filter_map(|i| self.pid(i)).collect()
    }

    /// Waits for node `i`'s host `pid` to exit (it was signalled: SIGKILL after 30 s),
    /// then starts it again, as Kubernetes restarts a container.
    pub async fn restart_host(&self, i: usize, pid: u32) {
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let gone = {
                let mut hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
                match hosts[i].as_mut() {
                    Some(c) if c.id() == pid => !matches!(c.try_wait(), Ok(None)),
                    _ => true,
                }
            };
            if gone {
                break;
            }
            if Instant::now() >= until {
                let mut hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(c) = hosts[i].as_mut() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Two faults that hit the same process at once both wait for it: only the first
        // starts its successor (a second would be an orphan beside it).
        let mut hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
        if hosts[i].as_ref().is_some_and(|c| c.id() != pid) {
            return;
        }
        match self.spawn_child(i) {
            Ok(child) => {
                hosts[i] = Some(child);
                self.restarts.lock().unwrap_or_else(|e| e.into_inner())[i] += 1;
            }
            Err(e) => eprintln!("antler chaos: {e:#}"),
        }
    }

    /// Cuts node `i` off the network (`down`) or restores it.
    pub fn link(&self, i: usize, up: bool) -> anyhow::Result<()> {
        let hub = format!("{}-hub", self.tag);
        ip(&[
            "-n",
            &hub,
            "link",
            "set",
            &self.nodes[i].hub_link(),
            if up { "up" } else { "down" },
        ])
    }

    /// Stops every host (SIGTERM, SIGKILL after 20 s) and proxy, and deletes the
    /// namespaces.
    pub fn stop(&self) {
        let mut hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
        for c in hosts.iter_mut().flatten() {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe {
                libc::kill(c.id() as libc::pid_t, libc::SIGCONT);
                libc::kill(c.id() as libc::pid_t, libc::SIGTERM);
            }
        }
        let until = Instant::now() + Duration::from_secs(20);
        for c in hosts.iter_mut().flatten() {
            while Instant::now() < until && matches!(c.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        hosts.iter_mut().for_each(|h| *h = None);
        drop(hosts);
        let mut proxies = self.proxies.lock().unwrap_or_else(|e| e.into_inner());
        for c in proxies.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
        proxies.iter_mut().for_each(|p| *p = None);
        drop(proxies);
        self.delete_namespaces();
    }

    fn delete_namespaces(&self) {
        let _ = ip(&["netns", "del", &format!("{}-hub", self.tag)]);
        let _ = ip(&["netns", "del", &format!("{}-0", self.tag)]);
        for n in &self.nodes {
            let _ = ip(&["netns", "del", &n.namespace(&self.tag)]);
        }
    }
}

impl Drop for MultiHost {
    fn drop(&mut self) {
        self.stop();
    }
}
