//! Uploads in cluster mode: a lead with no share of sandbox-host's volume (it reaches
//! thread files through the replica that owns the thread) and two sandbox-host replicas on loopback TCP with mutual TLS, each
//! with a base directory of its own. An upload (a text file and a DOCX made with
//! python-docx, converted by MarkItDown inside the thread's sandbox) lands on the replica
//! the thread hashes to and nowhere else; the listing shows both files and the twin;
//! another member cannot list them (404); the model's next request carries the
//! `<current_uploads>` block with the DOCX's outline; the per-user total counts the
//! user's uploads on both replicas (a thread on the other replica is refused past it);
//! deleting an upload and then the thread removes the files from the replica that held
//! them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::lead_support::http_full;
use crate::mcp_support::free_port;
use crate::model_support::{recording_server, Reply};
use antler_protocol::placement;
use antler_tests::{bin, wait_for};
use serde_json::{json, Value};

const ALICE: &str = "alice-token-000000000001";
const BOB: &str = "bob-token-00000000000002";
/// The user's limit across threads: the first upload fits, a second one elsewhere not.
const USER_LIMIT: u64 = 60_000;

/// Writes notes.docx (headings "Meeting Notes" and "Action Items") into the directory.
const MAKE_DOCX: &str = r#"
import sys, docx
d = docx.Document()
d.add_heading("Meeting Notes", level=1)
d.add_paragraph("We agreed on the budget.")
d.add_heading("Action Items", level=2)
d.add_paragraph("Ship the release.")
d.save(f"{sys.argv[1]}/notes.docx")
"#;

/// A process of the test, stopped (SIGTERM, then SIGKILL) when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        antler_tests::signal(self.0.id(), libc::SIGTERM);
        let stopped = wait_for(Duration::from_secs(15), || {
            self.0.try_wait().ok().flatten().map(|_| ())
        });
        if stopped.is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// The cluster: two sandbox-host replicas and the lead, under `work`.
struct Cluster {
    work: PathBuf,
    /// The replicas' addresses as the config names them (their placement identities).
    addresses: Vec<String>,
    gateway: String,
    // Dropped last: the lead before the hosts it links to.
    _lead: Proc,
    _hosts: Vec<Proc>,
}

impl Cluster {
    fn up(work: &Path, model_url: &str) -> Cluster {
        let out = Command::new(bin("antler"))
            .args(["cluster", "init"])
            .arg(work.join("secret"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let secret = work.join("secret");
        let token = std::fs::read_to_string(secret.join("token")).unwrap();
        let ports = [free_port(), free_port()];
        let mcp_port = free_port();
        let extensions = work.join("extensions_config.json");
        std::fs::write(&extensions, r#"{"mcpServers": {}}"#).unwrap();
        let addresses: Vec<String> = ports.iter().map(|p| format!("tcp:127.0.0.1:{p}")).collect();
        let config = work.join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "models:\n  - name: rec\n    use: langchain_openai:ChatOpenAI\n    model: recorded\n    base_url: {model_url}\n    api_key: sk-test-key\n\
sandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n  bash_command_timeout: 300\n\
uploads:\n  auto_convert_documents: true\n  max_user_total_size: {USER_LIMIT}\n  conversion_timeout_s: 240\n\
antler:\n  cluster_token: {token}\n  tls: {{ca: secret/ca.crt, cert: secret/lead.crt, key: secret/lead.key}}\n  cluster:\n    sandbox_hosts: {addresses:?}\n    mcp_hosts: [\"tcp:127.0.0.1:{mcp_port}\"]\n  gateway:\n    tokens:\n      - {{token: {ALICE}, user: alice, role: member}}\n      - {{token: {BOB}, user: bob, role: member}}\n",
                token = token.trim(),
            ),
        )
        .unwrap();
        let log = |name: &str| std::fs::File::create(work.join(format!("{name}.log"))).unwrap();
        let mcp = Command::new(bin("antler-mcp-host"))
            .args(["--listen", &format!("tcp:127.0.0.1:{mcp_port}")])
            .args(["--node-id", "mcp-0"])
            .arg("--token-file")
            .arg(secret.join("token"))
            .arg("--tls-ca")
            .arg(secret.join("ca.crt"))
            .arg("--tls-cert")
            .arg(secret.join("mcp-host.crt"))
            .arg("--tls-key")
            .arg(secret.join("mcp-host.key"))
            .arg("--oauth-key-file")
            .arg(secret.join("mcp-oauth.key"))
            .arg("--data-dir")
            .arg(work.join("mcp"))
            .arg("--extensions")
            .arg(&extensions)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log("mcp-0"))
            .spawn()
            .unwrap();
        let mut hosts: Vec<Proc> = ports
            .iter()
            .enumerate()
            .map(|(i, port)| {
                let child = Command::new(bin("antler-sandbox-host"))
                    .args(["--listen", &format!("tcp:127.0.0.1:{port}")])
                    .args(["--node-id", &format!("sandbox-{i}")])
                    .args(["--index", &i.to_string()])
                    .arg("--token-file")
                    .arg(secret.join("token"))
                    .arg("--tls-ca")
                    .arg(secret.join("ca.crt"))
                    .arg("--tls-cert")
                    .arg(secret.join("sandbox-host.crt"))
                    .arg("--tls-key")
                    .arg(secret.join("sandbox-host.key"))
                    .arg("--config")
                    .arg(&config)
                    .arg("--base-dir")
                    .arg(work.join(format!("sandbox-{i}")))
                    .env("RUST_LOG", "info")
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(log(&format!("sandbox-{i}")))
                    .spawn()
                    .unwrap();
                Proc(child)
            })
            .collect();
        hosts.push(Proc(mcp));
        let run_dir = work.join("run");
        let lead = Proc(
            Command::new(bin("antler"))
                .arg("--runtime-dir")
                .arg(&run_dir)
                .args(["up", "--config"])
                .arg(&config)
                .env("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")
                .env("ANTLER_EXTENSIONS_CONFIG_PATH", &extensions)
                .env("RUST_LOG", "info")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log("lead"))
                .spawn()
                .unwrap(),
        );
        let linked = wait_for(Duration::from_secs(60), || {
            let out = antler_tests::antler(&run_dir, &["status", "--json"]);
            let list: Vec<Value> = serde_json::from_slice(&out.stdout).ok()?;
            let healthy = list
                .iter()
                .filter(|p| p["role"] == "sandbox-host" && p["healthy"] == true)
                .count();
            (healthy == 2).then_some(())
        });
        assert!(
            linked.is_some(),
            "the lead did not link both replicas: {}\n{}",
            std::fs::read_to_string(work.join("lead.log")).unwrap_or_default(),
            std::fs::read_to_string(work.join("sandbox-0.log")).unwrap_or_default()
        );
        let addr = wait_for(Duration::from_secs(10), || {
            std::fs::read_to_string(run_dir.join("gateway.addr")).ok()
        })
        .expect("the gateway listens");
        let port = addr.trim().rsplit_once(':').unwrap().1.to_owned();
        Cluster {
            work: work.to_path_buf(),
            addresses,
            gateway: format!("127.0.0.1:{port}"),
            _lead: lead,
            _hosts: hosts,
        }
    }

    /// The replica (its index) that `user`'s `thread` hashes to.
    fn owner(&self, user: &str, thread: &str) -> usize {
        placement::rendezvous(
            &placement::sandbox_id(user, thread),
            self.addresses.iter().map(String::as_str),
        )
        .unwrap()
    }

    /// The directory of `user`'s `thread` on replica `i`.
    fn thread_dir(&self, i: usize, user: &str, thread: &str) -> PathBuf {
        self.work
            .join(format!("sandbox-{i}"))
            .join("users")
            .join(user)
            .join("threads")
            .join(thread)
    }

    fn call(&self, token: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let body = body.map(Value::to_string);
        let (code, _, text) = http_full(&self.gateway, token, method, path, body.as_deref());
        (
            code,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// `POST /api/threads/{thread}/uploads` with one `files` part per (name, bytes).
    fn upload(&self, token: &str, thread: &str, files: &[(&str, Vec<u8>)]) -> (u16, Value) {
        let boundary = "antler-cluster-boundary-42";
        let mut body = Vec::new();
        for (name, bytes) in files {
            body.extend_from_slice(
                format!(
                    "--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
                )
                .as_bytes(),
            );
            body.extend_from_slice(bytes);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
        let mut stream = std::net::TcpStream::connect(&self.gateway).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(300)))
            .unwrap();
        let head = format!(
            "POST /api/threads/{thread}/uploads HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nAuthorization: Bearer {token}\r\nContent-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {}\r\n\r\n",
            self.gateway,
            body.len()
        );
        stream.write_all(head.as_bytes()).unwrap();
        // A refused upload may be answered before the whole body is sent.
        let _ = stream.write_all(&body);
        let mut raw = Vec::new();
        let _ = stream.read_to_end(&mut raw);
        let text = String::from_utf8_lossy(&raw).into_owned();
        let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        (
            status,
            serde_json::from_str(rest).unwrap_or(Value::String(rest.to_owned())),
        )
    }
}

/// The names in a directory (none when it does not exist), sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// A thread of `user` named `{prefix}-{n}` that hashes to replica `i`.
fn thread_on(cluster: &Cluster, user: &str, prefix: &str, i: usize) -> String {
    (0..1000)
        .map(|n| format!("{prefix}-{n}"))
        .find(|t| cluster.owner(user, t) == i)
        .unwrap()
}

#[test]
fn uploads_live_on_the_replica_that_owns_the_thread_and_go_with_it() {
    let server = recording_server(vec![Reply::text("Done.")]);
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path();
    let cluster = Cluster::up(work, &server.base_url);
    let docs = work.join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    let made = Command::new("python3")
        .args(["-c", MAKE_DOCX])
        .arg(&docs)
        .status()
        .expect("python3");
    assert!(made.success(), "python-docx could not make the DOCX");
    let docx = std::fs::read(docs.join("notes.docx")).unwrap();

    let owner = cluster.owner("alice", "t1");
    let other = 1 - owner;
    let uploads = cluster
        .thread_dir(owner, "alice", "t1")
        .join("user-data/uploads");

    // The upload lands on the replica the thread hashes to, with the DOCX's twin.
    let text = b"hello from the cluster\n".to_vec();
    let (code, reply) = cluster.upload(
        ALICE,
        "t1",
        &[("hello.txt", text.clone()), ("notes.docx", docx.clone())],
    );
    assert_eq!(code, 200, "{reply}");
    assert_eq!(
        reply["message"], "Successfully uploaded 2 file(s)",
        "{reply}"
    );
    let docx_entry = reply["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["filename"] == "notes.docx")
        .cloned()
        .unwrap();
    assert_eq!(docx_entry["markdown_file"], "notes.md", "{docx_entry}");
    assert_eq!(names(&uploads), ["hello.txt", "notes.docx", "notes.md"]);
    assert_eq!(std::fs::read(uploads.join("hello.txt")).unwrap(), text);
    assert_eq!(std::fs::read(uploads.join("notes.docx")).unwrap(), docx);
    let markdown = std::fs::read_to_string(uploads.join("notes.md")).unwrap();
    assert!(markdown.contains("# Meeting Notes"), "{markdown}");
    assert!(!cluster.thread_dir(other, "alice", "t1").exists());
    assert!(!reply.to_string().contains(&*work.to_string_lossy()));

    // The listing, through the replica; another member's view of the thread is 404.
    let (code, list) = cluster.call(ALICE, "GET", "/api/threads/t1/uploads/list", None);
    assert_eq!(code, 200, "{list}");
    let listed: Vec<&str> = list["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["filename"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["hello.txt", "notes.docx", "notes.md"]);
    assert_eq!(list["files"][1]["markdown_file"], "notes.md", "{list}");
    assert_eq!(list["files"][0]["size"], text.len());
    let (code, refused) = cluster.call(BOB, "GET", "/api/threads/t1/uploads/list", None);
    assert_eq!(code, 404, "{refused}");
    assert!(!refused.to_string().contains("hello.txt"));

    // The model's next request lists the uploads, the DOCX with its outline.
    let (code, submitted) = cluster.call(
        ALICE,
        "POST",
        "/api/runs",
        Some(&json!({
            "task": "Summarise the uploads",
            "thread": "t1",
            "files": ["hello.txt", "notes.docx"],
        })),
    );
    assert_eq!(code, 201, "{submitted}");
    let run_id = submitted["run_id"].as_str().unwrap().to_owned();
    let view = wait_for(Duration::from_secs(120), || {
        let (code, view) = cluster.call(ALICE, "GET", &format!("/api/runs/{run_id}"), None);
        (code == 200 && view["status"] != "running").then_some(view)
    })
    .expect("the run ended");
    assert_eq!(view["status"], "success", "{view}");
    let first = server.requests.lock().unwrap()[0].clone();
    let user_turn = first["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap()
        .to_owned();
    for needle in [
        "<current_uploads>\nThe following files were uploaded in this message:\n\n",
        "- hello.txt (0.0 KB)\n  Path: /mnt/user-data/uploads/hello.txt\n",
        "- notes.docx (",
        ": Meeting Notes\n",
        ": Action Items\n",
        "</current_uploads>",
    ] {
        assert!(
            user_turn.contains(needle),
            "{needle:?} missing in:\n{user_turn}"
        );
    }

    // The per-user total counts both replicas: alice's thread on the other replica may
    // not take what would pass it, and what was refused left nothing there.
    let elsewhere = thread_on(&cluster, "alice", "t2", other);
    let used = text.len() + docx.len() + markdown.len();
    let too_much = vec![b'x'; USER_LIMIT as usize - used + 1];
    let (code, reply) = cluster.upload(ALICE, &elsewhere, &[("big.bin", too_much)]);
    assert_eq!(code, 413, "{reply}");
    assert!(
        reply.to_string().contains("Upload quota exceeded"),
        "{reply}"
    );
    let elsewhere_uploads = cluster
        .thread_dir(other, "alice", &elsewhere)
        .join("user-data/uploads");
    assert_eq!(names(&elsewhere_uploads), Vec::<String>::new());
    let fits = vec![b'y'; 100];
    let (code, reply) = cluster.upload(ALICE, &elsewhere, &[("small.bin", fits)]);
    assert_eq!(code, 200, "{reply}");
    assert_eq!(names(&elsewhere_uploads), ["small.bin"]);

    // Deleting the DOCX takes its twin, on the replica.
    let (code, deleted) = cluster.call(ALICE, "DELETE", "/api/threads/t1/uploads/notes.docx", None);
    assert_eq!(code, 200, "{deleted}");
    assert_eq!(deleted["message"], "Deleted notes.docx");
    assert_eq!(names(&uploads), ["hello.txt"]);
    let (code, _) = cluster.call(BOB, "DELETE", "/api/threads/t1/uploads/hello.txt", None);
    assert_eq!(code, 404);
    assert_eq!(names(&uploads), ["hello.txt"]);

    // Deleting the thread removes its directory from the replica that held it.
    let (code, gone) = cluster.call(ALICE, "DELETE", "/api/threads/t1", None);
    assert_eq!(code, 204, "{gone}");
    assert!(
        !cluster.thread_dir(owner, "alice", "t1").exists(),
        "{:?}",
        names(&cluster.thread_dir(owner, "alice", "t1"))
    );
    assert!(cluster.thread_dir(other, "alice", &elsewhere).exists());
    let (code, _) = cluster.call(ALICE, "GET", "/api/threads/t1/uploads/list", None);
    assert_eq!(code, 404);
}
