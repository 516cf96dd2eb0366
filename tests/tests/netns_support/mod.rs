//! Shared by the multi-host suites: a cluster laid out the way it runs on several
//! machines, on this one. Each process gets a network namespace of its own, joined to
//! the others over a veth pair to a bridge in a hub namespace; every address is inside
//! namespaces the test creates (10.77.0.0/24), none in the machine's own. Links can be
//! cut and restored (a machine off the network), and each namespace's `/etc/hosts`
//! (`/etc/netns/NS/hosts`, which `ip netns exec` binds over `/etc/hosts`) stands in for
//! the cluster DNS. The certificates and token come from `antler cluster init`.
//! Everything goes with the value: processes killed, namespaces and their files removed;
//! namespaces a killed test left behind are removed by the next one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use antler_tests::{alive, bin, signal};

/// The prefix of every namespace these suites create; the pid of the test process follows.
const PREFIX: &str = "antler-mh";

/// One host of the layout: its namespace, address and the interface that joins it.
#[derive(Debug, Clone)]
pub struct Node {
    pub name: String,
    pub ns: String,
    pub ip: String,
    /// Its end of the veth pair on the hub's bridge.
    hub_if: String,
}

/// Namespaces, a bridge, processes and the cluster's certificates.
pub struct Topology {
    pub dir: tempfile::TempDir,
    hub: String,
    nodes: Vec<Node>,
    children: Vec<(String, Child)>,
    tag: String,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Removes the namespaces of test processes that are gone.
fn sweep_stale() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        let Some(rest) = name.strip_prefix(&format!("{PREFIX}-")) else {
            continue;
        };
        let pid: u32 = rest
            .split('-')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        if pid != 0 && !alive(pid) {
            let _ = Command::new("ip").args(["netns", "del", name]).status();
            let _ = std::fs::remove_dir_all(Path::new("/etc/netns").join(name));
        }
    }
}

impl Topology {
    /// A hub with its bridge, and certificates for every role.
    pub fn new() -> Topology {
        sweep_stale();
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tag = format!("{PREFIX}-{}-{n}", std::process::id());
        let dir = tempfile::Builder::new()
            .prefix("antler-mh")
            .tempdir_in("/tmp")
            .expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let hub = format!("{tag}-hub");
        ip(&["netns", "add", &hub]);
        ip(&["-n", &hub, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &hub, "link", "set", "br0", "up"]);
        let out = Command::new(bin("antler"))
            .args(["cluster", "init"])
            .arg(dir.path().join("certs"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "antler cluster init: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Topology {
            dir,
            hub,
            nodes: Vec::new(),
            children: Vec::new(),
            tag,
        }
    }

    /// A new host on the bridge, at 10.77.0.(10 + its number).
    pub fn node(&mut self, name: &str) -> Node {
        let i = self.nodes.len();
        let ns = format!("{}-{i}", self.tag);
        let hub_if = format!("h{i}");
        let address = format!("10.77.0.{}", 10 + i);
        ip(&["netns", "add", &ns]);
        ip(&[
            "-n", &ns, "link", "add", "eth0", "type", "veth", "peer", "name", &hub_if, "netns",
            &self.hub,
        ]);
        ip(&["-n", &self.hub, "link", "set", &hub_if, "master", "br0"]);
        ip(&["-n", &self.hub, "link", "set", &hub_if, "up"]);
        ip(&[
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{address}/24"),
            "dev",
            "eth0",
        ]);
        ip(&["-n", &ns, "link", "set", "eth0", "up"]);
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        let node = Node {
            name: name.to_owned(),
            ns,
            ip: address,
            hub_if,
        };
        self.nodes.push(node.clone());
        node
    }

    /// Takes the node off the network (its link to the bridge down) or back on.
    pub fn set_link(&self, node: &Node, up: bool) {
        ip(&[
            "-n",
            &self.hub,
            "link",
            "set",
            &node.hub_if,
            if up { "up" } else { "down" },
        ]);
    }

    /// Writes the node's `/etc/hosts`, read by the processes in its namespace (in place,
    /// so a running process's bind mount sees the change).
    pub fn hosts_file(&self, node: &Node, lines: &[(String, &str)]) {
        let dir = Path::new("/etc/netns").join(&node.ns);
        std::fs::create_dir_all(&dir).unwrap();
        let mut text = String::from("127.0.0.1 localhost\n");
        for (ip, name) in lines {
            text.push_str(&format!("{ip} {name}\n"));
        }
        let path = dir.join("hosts");
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(path)
            .unwrap();
        std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
    }

    /// The directory of the cluster's certificates and token.
    pub fn certs(&self) -> PathBuf {
        self.dir.path().join("certs")
    }

    /// A host binary's command line in cluster mode: listening on the node's address,
    /// with its role's certificate and the token.
    pub fn host_args(&self, node: &Node, role: &str, port: u16) -> Vec<String> {
        let certs = self.certs();
        let c = |f: &str| certs.join(f).display().to_string();
        vec![
            "--listen".into(),
            format!("tcp:{}:{port}", node.ip),
            "--token-file".into(),
            c("token"),
            "--tls-ca".into(),
            c("ca.crt"),
            "--tls-cert".into(),
            c(&format!("{role}.crt")),
            "--tls-key".into(),
            c(&format!("{role}.key")),
            "--node-id".into(),
            node.name.clone(),
        ]
    }

    /// Starts `program` inside the node's namespace; its output goes to `<name>.log`.
    pub fn spawn(
        &mut self,
        node: &Node,
        program: &Path,
        args: &[String],
        env: &[(&str, String)],
    ) -> u32 {
        let log = std::fs::File::create(self.log_path(&node.name)).unwrap();
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &node.ns])
            .arg(program)
            .args(args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .env("RUST_LOG", "info");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("ip netns exec");
        let pid = child.id();
        self.children.push((node.name.clone(), child));
        pid
    }

    /// Where the node's process logs.
    pub fn log_path(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.log"))
    }

    /// The node's log so far.
    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.log_path(name)).unwrap_or_default()
    }
}

fn stop_child(child: &mut Child, grace: Duration) {
    signal(child.id(), libc::SIGTERM);
    let until = Instant::now() + grace;
    while Instant::now() < until {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

impl Drop for Topology {
    fn drop(&mut self) {
        // The lead first (it was started first), so it does not watch the hosts go.
        for (_, child) in self.children.iter_mut() {
            stop_child(child, Duration::from_secs(10));
        }
        for node in &self.nodes {
            let _ = Command::new("ip").args(["netns", "del", &node.ns]).status();
            let _ = std::fs::remove_dir_all(Path::new("/etc/netns").join(&node.ns));
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.hub])
            .status();
    }
}
